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

// The signals that end the run: the interruptions, then the faults (the last two of which a
// library crash raises: SIGSEGV, SIGBUS, SIGABRT from abort(), SIGFPE, SIGILL).
constexpr int kInterrupts[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kFaults[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
// The action each fault had before ours (a sanitizer's reporter, or the default): restored and
// re-raised after the clean-up, so that its report or core dump still happens.
struct sigaction g_previous_fault[sizeof(kFaults) / sizeof(kFaults[0])];
// An alternate stack, so that the handler also runs after a stack overflow (SIGSEGV).
alignas(16) char g_alt_stack[64 * 1024];

void remove_registered() {
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
}

void on_signal(int sig) {
  remove_registered();
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

// A fault: clean up, then hand the signal to the action that was there before. For a fault
// raised by the faulting instruction, returning re-executes it under the restored action.
void on_fault(int sig) {
  remove_registered();
  for (size_t i = 0; i < sizeof(kFaults) / sizeof(kFaults[0]); ++i)
    if (kFaults[i] == sig) sigaction(sig, &g_previous_fault[i], nullptr);
  raise(sig);
}

}  // namespace

void install_interrupt_cleanup() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kInterrupts) sigaddset(&sa.sa_mask, sig);
  for (const int sig : kInterrupts) sigaction(sig, &sa, nullptr);
  static bool faults_installed = false;  // idempotent: keep the first previous actions
  if (faults_installed) return;
  faults_installed = true;
  stack_t alt;
  std::memset(&alt, 0, sizeof alt);
  alt.ss_sp = g_alt_stack;
  alt.ss_size = sizeof g_alt_stack;
  sigaltstack(&alt, nullptr);
  struct sigaction fa;
  std::memset(&fa, 0, sizeof fa);
  fa.sa_handler = on_fault;
  fa.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigemptyset(&fa.sa_mask);
  for (const int sig : kInterrupts) sigaddset(&fa.sa_mask, sig);
  for (size_t i = 0; i < sizeof(kFaults) / sizeof(kFaults[0]); ++i)
    sigaction(kFaults[i], &fa, &g_previous_fault[i]);
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
