// What an interrupted or crashed run leaves behind: nothing it created. A result is written to
// NAME.partial (in folders created for it) and renamed into place on commit; if the process is
// stopped by SIGINT, SIGTERM or SIGHUP first, the handler installed here removes the registered
// partial files and then the registered folders that are empty, and the process dies of the same
// signal (exit status 128 + signal in a shell). A fault (SIGSEGV, SIGBUS, SIGABRT, SIGFPE,
// SIGILL) is cleaned up the same way, on an alternate stack (a stack overflow too), and then
// handed to the action installed before (the default, or a sanitizer's reporter). Results already
// committed, and earlier results at the final names, are never touched.
//
// Registration is for the thread that writes results (the main thread); the handler uses only
// async-signal-safe calls (unlink, rmdir, sigaction, raise). At most kInterruptCleanupSlots
// paths are registered at once and each must be shorter than 4096 bytes; a path that does not
// fit is simply not cleaned up (the run itself is unaffected).
#pragma once

#include <string>

namespace statecheck {

inline constexpr int kInterruptCleanupSlots = 256;

// Installs the handlers for SIGINT, SIGTERM, SIGHUP and the faults (idempotent). Called once by
// the command line before any work.
void install_interrupt_cleanup();

// Registers `path` (a file to unlink, or a folder to remove if empty) and returns its id, or -1
// when it cannot be registered. A folder created inside another is registered after it.
int register_interrupt_cleanup(const std::string& path, bool is_directory);

// Forgets registration `id` (no effect for -1): the file was committed or removed, the folder
// kept or removed.
void unregister_interrupt_cleanup(int id);

// One registration, forgotten when release() is called or the object is destroyed (whatever the
// run did with the path by then). Move-only.
class InterruptCleanup {
 public:
  InterruptCleanup() = default;
  InterruptCleanup(const std::string& path, bool is_directory)
      : id_(register_interrupt_cleanup(path, is_directory)) {}
  ~InterruptCleanup() { release(); }
  InterruptCleanup(InterruptCleanup&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  InterruptCleanup& operator=(InterruptCleanup&& o) noexcept {
    if (this != &o) {
      release();
      id_ = o.id_;
      o.id_ = -1;
    }
    return *this;
  }
  InterruptCleanup(const InterruptCleanup&) = delete;
  InterruptCleanup& operator=(const InterruptCleanup&) = delete;
  void release() {
    unregister_interrupt_cleanup(id_);
    id_ = -1;
  }

 private:
  int id_ = -1;
};

}  // namespace statecheck
