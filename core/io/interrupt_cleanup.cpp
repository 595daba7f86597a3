#include "core/io/interrupt_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace statecheck {

namespace {

struct Slot {
  std::atomic<bool> used{false};
  bool is_directory = false;
  long order = 0;  // registration order: folders are removed deepest (latest) first
  char path[4096] = {0};
};

Slot g_slots[kInterruptCleanupSlots];
std::atomic<long> g_order{0};

void on_signal(int sig) {
  for (Slot& s : g_slots)
    if (s.used.load(std::memory_order_acquire) && !s.is_directory) ::unlink(s.path);
  // Folders, latest registered first (each nested folder is registered after its parent); rmdir
  // removes only empty ones.
  long below = g_order.load(std::memory_order_acquire) + 1;
  for (;;) {
    Slot* next = nullptr;
    for (Slot& s : g_slots)
      if (s.used.load(std::memory_order_acquire) && s.is_directory && s.order < below &&
          (!next || s.order > next->order))
        next = &s;
    if (!next) break;
    ::rmdir(next->path);
    below = next->order;
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

void install_interrupt_cleanup() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, sig);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int register_interrupt_cleanup(const std::string& path, bool is_directory) {
  if (path.empty() || path.size() >= sizeof(Slot::path)) return -1;
  for (int i = 0; i < kInterruptCleanupSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.used.load(std::memory_order_acquire)) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.is_directory = is_directory;
    s.order = g_order.fetch_add(1) + 1;
    s.used.store(true, std::memory_order_release);  // visible to the handler only when complete
    return i;
  }
  return -1;
}

void unregister_interrupt_cleanup(int id) {
  if (id >= 0 && id < kInterruptCleanupSlots)
    g_slots[id].used.store(false, std::memory_order_release);
}

}  // namespace statecheck
