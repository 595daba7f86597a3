#include "core/io/hdf5_isolated.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <system_error>
#include <thread>

#include <hdf5.h>

#include "core/util/error.h"

extern char** environ;

namespace statecheck {

namespace {

// The reader process is this same executable (/proc/self/exe), started with posix_spawn, never a
// bare fork: a fork of a multi-threaded process copies locks other threads hold (an allocator's,
// under AddressSanitizer, which has no fork handlers) and the copy can deadlock on them. The
// variable below makes the program's start-up (reader_entry) serve one request on the socket at
// descriptor kReaderFd instead of running main.
constexpr int kReaderFd = 3;
constexpr const char* kReaderVar = "STATECHECK_INTERNAL_HDF5_READER";
constexpr const char* kFaultVar = "STATECHECK_HDF5_READER_TEST_FAULT";

// AddressSanitizer in this build (g++ defines __SANITIZE_ADDRESS__, clang answers __has_feature).
// Its shadow memory is reserved in the address space, so an address-space limit makes its own
// mappings fail; under it the reader bounds its resident memory instead (rss_watch): the limit,
// plus an eighth of it for the shadow and kAsanRssAllowanceMiB for the quarantine and the
// allocator's metadata. Past it the reader ends with exit status kOutOfMemoryExit, which the
// caller reports as an allocation failing under the limit.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif
constexpr uint64_t kAsanRssAllowanceMiB = 512;
constexpr int kOutOfMemoryExit = 6;  // no other exit of the reader uses it

// Requests (parent to reader): op byte, path, dataset name, memory limit (u64 bytes), time limit
// (u32 s). Frames (reader to parent): a kind byte, then length-prefixed fields in host byte order
// (both ends are the same binary). kShape asks the parent whether to go on: it answers one byte,
// 1 to read the data, 0 to stop.
enum Op : uint8_t {
  kReadArray = 'a',
  kDatasetNames = 'n',
  kRootAttributes = 'r',
  kHasDataset = 'h'
};
enum FrameKind : uint8_t { kResult = 0, kError = 1, kShape = 2 };

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a peer that is gone is an error here, not a SIGPIPE that ends the process.
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0;  // end of file, not a stale error
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Appends the raw bytes of `v` to `out`.
template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put(out, static_cast<uint64_t>(s.size()));
  out += s;
}

// A length-prefixed field of at most `limit` bytes, the buffer grown as its bytes arrive, so a
// length the other end claims but never sends costs at most 1 MiB more than what came.
bool read_bounded(int fd, std::string& s, uint64_t limit) {
  uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n)) return false;
  if (n > limit) {
    errno = EBADMSG;  // a damaged frame, not the end of the stream nor a time-out
    return false;
  }
  s.clear();
  while (s.size() < n) {
    const size_t at = s.size(), chunk = static_cast<size_t>(std::min<uint64_t>(n - at, 1 << 20));
    s.resize(at + chunk);
    if (!read_all(fd, s.data() + at, chunk)) return false;
  }
  return true;
}

// Reads the fields put() wrote, in order; false when the payload is shorter than claimed.
struct Cursor {
  const std::string& in;
  size_t at = 0;
  template <typename T>
  bool get(T& v) {
    if (in.size() - at < sizeof v) return false;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return true;
  }
  bool get_string(std::string& s, uint64_t limit) {
    uint64_t n = 0;
    if (!get(n) || n > limit || in.size() - at < n) return false;
    s.assign(in, at, n);
    at += n;
    return true;
  }
};

// The process's address space now, bytes (/proc/self/statm, first field in pages); 0 if unknown.
uint64_t address_space_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  in >> pages;
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The error of a read that needs more memory than its limit (`limit` bytes) allows: an allocation
// failing in the reader, or (under AddressSanitizer) the reader's memory watch ending it.
std::string out_of_memory_message(const std::string& path, uint64_t limit) {
  return fmt::format(
      "{}: reading it needs more than the {} MiB this file may use (damaged or crafted metadata)",
      path, limit >> 20);
}

// ---- the reader process ----

// The most bytes this process has held resident (getrusage; no descriptor is opened, so a scan of
// the reader's descriptors never sees one of its own).
uint64_t peak_resident_bytes() {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? static_cast<uint64_t>(ru.ru_maxrss) << 10 : 0;
}

// Starts a thread that ends the reader with kOutOfMemoryExit once its resident memory passes
// `bytes` (checked every 20 ms): the memory limit of a build whose sanitizer rules out
// RLIMIT_AS. Without a thread (none can be started) the reader runs under its time limit alone.
void rss_watch(uint64_t bytes) {
  try {
    std::thread([bytes] {
      for (;;) {
        if (peak_resident_bytes() > bytes) _exit(kOutOfMemoryExit);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }).detach();
  } catch (const std::system_error&) {
  }
}

// Thrown inside the reader when the parent answers a shape with "stop".
struct Stopped {};

std::string serve(int fd, uint8_t op, const std::string& path, const std::string& name) {
  std::string out;
  switch (op) {
    case kReadArray: {
      const FloatArray a =
          read_hdf5_array(path, name, [&](const std::string& n, const std::vector<size_t>& dims) {
            std::string frame;
            put(frame, static_cast<uint8_t>(kShape));
            put_string(frame, n);
            put(frame, static_cast<uint64_t>(dims.size()));
            for (size_t d : dims) put(frame, static_cast<uint64_t>(d));
            uint8_t go = 0;
            if (!write_all(fd, frame.data(), frame.size()) || !read_all(fd, &go, 1) || go != 1)
              throw Stopped{};
          });
      put_string(out, a.name);
      put_string(out, a.dtype);
      put(out, static_cast<uint64_t>(a.shape.size()));
      for (size_t d : a.shape) put(out, static_cast<uint64_t>(d));
      put(out, static_cast<uint64_t>(a.data.size()));
      out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size() * sizeof(float));
      return out;
    }
    case kDatasetNames:
      for (const std::string& n : hdf5_dataset_names(path)) put_string(out, n);
      return out;
    case kRootAttributes:
      for (const auto& [k, v] : hdf5_root_attributes(path)) {
        put_string(out, k);
        put_string(out, v);
      }
      return out;
    case kHasDataset:
      return hdf5_has_dataset(path, name) ? "1" : "0";
    default:
      fail("{}: unknown request {} to the HDF5 reader", path, static_cast<int>(op));
  }
}

// A fault the tests of the isolation ask for (STATECHECK_HDF5_READER_TEST_FAULT), standing in
// for a libhdf5 that crashes, loops or allocates without bound: "segv", "hang" or "grow"; and
// "fds", an error listing the descriptors the reader holds.
void test_fault() {
  const char* fault = std::getenv(kFaultVar);
  if (!fault) return;
  if (std::strcmp(fault, "segv") == 0) raise(SIGSEGV);
  if (std::strcmp(fault, "hang") == 0)
    for (;;) pause();
  if (std::strcmp(fault, "fds") == 0) {  // the descriptors the reader holds, as its error
    std::string open = "descriptors";
    for (int fd = 0; fd < 1024; ++fd)
      if (fcntl(fd, F_GETFD) >= 0) open += " " + std::to_string(fd);
    throw Error(open);
  }
  if (std::strcmp(fault, "grow") == 0) {
    std::vector<std::unique_ptr<std::vector<char>>> blocks;
    for (int i = 0; i < 65536; ++i)
      blocks.push_back(std::make_unique<std::vector<char>>(size_t{1} << 20, 'x'));
  }
}

[[noreturn]] void reader_process(int fd) {
  // SIGALRM's default action ends the reader: a read that loops or deadlocks becomes an error.
  // The faults' too (a sanitizer's handler would turn them into SIGABRT): the caller then names
  // the signal libhdf5 died of.
  for (int sig : {SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, SIG_DFL);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  sigprocmask(SIG_UNBLOCK, &alarm_only, nullptr);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  uint8_t op = 0;
  std::string path, name;
  uint64_t limit = 0;
  uint32_t seconds = 0;
  if (!read_all(fd, &op, 1) || !read_bounded(fd, path, 1 << 20) ||
      !read_bounded(fd, name, 1 << 16) || !read_all(fd, &limit, sizeof limit) ||
      !read_all(fd, &seconds, sizeof seconds))
    _exit(4);
  alarm(seconds);
  if (kAsan) {
    rss_watch(limit + limit / 8 + (kAsanRssAllowanceMiB << 20));
  } else if (const uint64_t now = address_space_bytes(); now > 0) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(now + limit);
    setrlimit(RLIMIT_AS, &rl);
  }
  uint8_t kind = kError;
  std::string message, payload;
  try {
    test_fault();
    payload = serve(fd, op, path, name);
    kind = kResult;
  } catch (const Stopped&) {
    _exit(0);
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::bad_alloc&) {
    message = out_of_memory_message(path, limit);
  } catch (const std::exception& e) {
    message = fmt::format("{}: reading the HDF5 file failed ({})", path, e.what());
  }
  // An error line longer than the caller takes (a list of thousands of dataset names) is cut.
  if (message.size() > 60000) message = message.substr(0, 60000) + " ...";
  const std::string& body = kind == kResult ? payload : message;
  const uint64_t size = body.size();
  const bool ok = write_all(fd, &kind, 1) && write_all(fd, &size, sizeof size) &&
                  write_all(fd, body.data(), body.size());
  _exit(ok ? 0 : 3);
}

// Runs before main in every program that links this file, at the earliest priority a program
// may use (after the sanitizers' own start-up), so at the same place in every binary: in a reader
// process it serves the request and ends, so neither main nor any later initialiser runs there.
// The reader's path may therefore use no namespace-scope object that needs a constructor
// (function-local statics are fine).
__attribute__((constructor(101))) void reader_entry() {
  const char* v = std::getenv(kReaderVar);
  if (!v) return;
  // The value is the parent's process id (1 too: statecheck may be a container's first process).
  // The reader dies with the thread that started it (an orphan would hold the file open until its
  // alarm), and ends at once if that has happened already.
  char* end = nullptr;
  const long parent = std::strtol(v, &end, 10);
  struct stat st;
  if (end == v || *end != '\0' || parent < 1 || fstat(kReaderFd, &st) != 0 ||
      !S_ISSOCK(st.st_mode)) {
    std::fprintf(stderr, "statecheck: %s is set but this is not an HDF5 reader process; unset it\n",
                 kReaderVar);
    _exit(2);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(parent)) _exit(5);
  reader_process(kReaderFd);
}

// ---- the parent ----

// Ends the reader (if still running) and collects its exit status.
int reap(pid_t pid, bool kill_it) {
  if (kill_it) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return wstatus;
}

// Starts the reader process with its end of the socket at kReaderFd and no other descriptor of
// this process; returns its pid.
pid_t spawn_reader(const std::string& path, int child_end) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&actions) != 0)
    fail("{}: cannot start the HDF5 reader process (out of memory)", path);
  if (posix_spawnattr_init(&attr) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    fail("{}: cannot start the HDF5 reader process (out of memory)", path);
  }
  // A default disposition and an empty mask: the spawning thread may block SIGALRM.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGALRM, SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
  // dup2 onto another number clears close-on-exec; every descriptor above it is closed, so the
  // reader holds none of this process's files (an orphaned reader would keep result files and
  // the caller's pipes open).
  int rc = posix_spawn_file_actions_adddup2(&actions, child_end, kReaderFd);
  if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&actions, kReaderFd + 1);
  if (rc == 0) rc = posix_spawnattr_setsigmask(&attr, &none);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &defaults);
  if (rc == 0) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (rc == 0) {
    std::vector<std::string> env_strings;
    const std::string prefix = std::string(kReaderVar) + "=";
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env_strings.emplace_back(*e);
    // The value is this process's id: the reader ends at once if its parent is another.
    env_strings.push_back(prefix + std::to_string(getpid()));
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    char arg0[] = "statecheck-hdf5-reader";
    char* argv[] = {arg0, nullptr};
    rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv, envp.data());
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    fail("{}: cannot start the HDF5 reader process from /proc/self/exe ({})", path,
         std::strerror(rc));
  return pid;
}

// The most bytes the result of request `op` may take for a file of `file_size` bytes: an array's
// fp32 values (at most twice the declared bytes, bf16 widened, so 2 x min(kHdf5MaxReadBytes, 1032
// x file size)) plus its header; names and attributes, which the file stores, 16 x the file size;
// "has dataset" one byte. Each plus 1 MiB of framing.
uint64_t result_limit(uint8_t op, uint64_t file_size) {
  const uint64_t margin = uint64_t{1} << 20;
  switch (op) {
    case kReadArray:
      return std::min(kHdf5MaxReadBytes, 2 * std::min(kHdf5MaxReadBytes, 1032 * file_size)) +
             margin;
    case kHasDataset:
      return 16;
    default:
      return std::min(kHdf5MaxReadBytes, 16 * file_size) + margin;
  }
}

// Runs request `op` on `path` (and dataset `name`) in the reader process, whose memory is limited
// (its address space, or under AddressSanitizer its resident memory), and returns the bytes it
// produced. `on_shape` answers the reader's one shape frame of an array read: true to read the
// data, false to stop (the result is then empty); what it throws is rethrown as it is after the
// reader has been ended. The failures of read_hdf5_array_isolated (header) as one line.
std::string run_isolated(
    const std::string& path, uint8_t op, const std::string& name,
    const std::function<bool(const std::string&, const std::vector<size_t>&)>& on_shape) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot read the file size ({})", path, ec.message());
  const uint64_t limit = hdf5_child_memory_limit(file_size);
  const uint32_t seconds = hdf5_child_time_limit_s(file_size);
  std::string request;
  put(request, op);
  put_string(request, path);
  put_string(request, name);
  put(request, limit);
  put(request, seconds);
  int fds[2];
  // Close-on-exec: a program another thread starts meanwhile does not inherit either end.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail("{}: cannot create a socket for the HDF5 reader ({})", path, std::strerror(errno));
  if (fds[1] == kReaderFd) {  // dup2 onto itself would keep close-on-exec set
    const int moved = fcntl(fds[1], F_DUPFD_CLOEXEC, kReaderFd + 1);
    const int err = errno;
    ::close(fds[1]);
    fds[1] = moved;
    if (moved < 0) {
      ::close(fds[0]);
      fail("{}: cannot create a socket for the HDF5 reader ({})", path, std::strerror(err));
    }
  }
  // A reader stuck before its own alarm is armed still ends: the parent stops waiting a minute
  // after the reader's limit.
  struct timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds) + 60;
  tv.tv_usec = 0;
  setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  pid_t pid = -1;
  try {
    pid = spawn_reader(path, fds[1]);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  const int fd = fds[0];

  uint8_t kind = 255;
  std::string text;
  bool complete = false, stopped = false, timed_out = false, ended = false, shape_seen = false;
  std::exception_ptr refused;  // what on_shape threw
  // A failed read of the reader's frames: the end of the stream (the reader ended: `ended`), the
  // receive time-out (`timed_out`), or a damaged frame (neither).
  const auto got = [&](bool ok) {
    if (!ok) {
      timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
      ended = errno == 0;
    }
    return ok;
  };
  try {
    if (write_all(fd, request.data(), request.size())) {
      for (;;) {
        if (!got(read_all(fd, &kind, 1))) break;
        if (kind == kShape) {
          // One shape frame, of an array read only; another is a damaged reader.
          if (op != kReadArray || shape_seen) break;
          shape_seen = true;
          std::string dataset;
          uint64_t rank = 0;
          if (!got(read_bounded(fd, dataset, 1 << 16)) || !got(read_all(fd, &rank, sizeof rank)) ||
              rank > 32)
            break;
          std::vector<size_t> dims(rank);
          bool ok = true;
          for (uint64_t d = 0; d < rank && ok; ++d) {
            uint64_t v = 0;
            ok = got(read_all(fd, &v, sizeof v));
            dims[d] = static_cast<size_t>(v);
          }
          if (!ok) break;
          bool go = true;
          try {
            go = !on_shape || on_shape(dataset, dims);
          } catch (...) {
            refused = std::current_exception();
            go = false;
          }
          stopped = !go;
          const uint8_t answer = go ? 1 : 0;
          if (!write_all(fd, &answer, 1) || stopped) break;
          continue;
        }
        complete =
            kind <= kError &&
            got(read_bounded(fd, text, kind == kError ? (1 << 16) : result_limit(op, file_size)));
        break;
      }
    }
  } catch (const std::bad_alloc&) {  // the result's buffer could not be allocated
    ::close(fd);
    reap(pid, true);
    fail("{}: the HDF5 reader's result does not fit in this process's memory", path);
  }
  ::close(fd);
  // A reader that closed its end has ended or is ending: its own status tells how. One that
  // answered a stop, timed out or sent a damaged frame is ended here.
  const int wstatus = reap(pid, !complete && !ended);
  if (refused) std::rethrow_exception(refused);
  if (stopped) return std::string();
  if (timed_out)
    fail("{}: the HDF5 reader did not finish within {} s reading this file: damaged or crafted",
         path, seconds);
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    if (sig == SIGALRM)
      fail("{}: the HDF5 reader did not finish within {} s reading this file: damaged or crafted",
           path, seconds);
    if (sig == SIGKILL && ended)
      fail(
          "{}: the HDF5 reader was killed (SIGKILL; out of memory?) reading this file: damaged "
          "or crafted",
          path);
    if (sig != SIGKILL)
      fail("{}: the HDF5 library crashed on this file (signal {}, {}): damaged or crafted", path,
           sig, strsignal(sig));
  }
  if (kAsan && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kOutOfMemoryExit) {
    // The memory watch ended the reader; a whole result or error frame sent before it stands.
    if (complete && kind == kResult) return text;
    if (!(complete && kind == kError)) throw Error(out_of_memory_message(path, limit));
  }
  if (complete && kind == kError) throw Error(text);
  if (!complete || kind != kResult || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    fail("{}: the HDF5 reader ended without a result (exit status {}): damaged or crafted file",
         path, WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  return text;
}

}  // namespace

unsigned hdf5_child_time_limit_s(uint64_t file_size) {
  if (const char* env = std::getenv("STATECHECK_HDF5_READER_SECONDS")) {
    // Whole seconds, digits only (strtoul alone would take " 5", "+5" or "-1").
    const std::string v = env;
    const bool digits = !v.empty() && v.size() <= 5 && std::all_of(v.begin(), v.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    const unsigned long n = digits ? std::stoul(v) : 0;
    if (n < 1 || n > 86400)
      fail("STATECHECK_HDF5_READER_SECONDS={}: expected whole seconds from 1 to 86400", v);
    return static_cast<unsigned>(n);
  }
  // At most a day, however large the file (alarm(0) would mean no limit).
  return static_cast<unsigned>(std::min<uint64_t>(86400, 120 + file_size / (uint64_t{10} << 20)));
}

uint64_t hdf5_child_memory_limit(uint64_t file_size) {
  const uint64_t data = file_size > kHdf5MaxReadBytes / 1032 ? kHdf5MaxReadBytes : 1032 * file_size;
  return (uint64_t{512} << 20) + 3 * data;
}

FloatArray read_hdf5_array_isolated(const std::string& path, const std::string& name,
                                    const ShapeCheck& check) {
  const std::string bytes =
      run_isolated(path, kReadArray, name, [&](const std::string& n, const std::vector<size_t>& s) {
        if (check) check(n, s);
        return true;
      });
  FloatArray a;
  Cursor c{bytes};
  uint64_t rank = 0, count = 0, product = 1;
  bool ok = c.get_string(a.name, 1 << 16) && c.get_string(a.dtype, 64) && c.get(rank) && rank <= 32;
  for (uint64_t d = 0; ok && d < rank; ++d) {
    uint64_t v = 0;
    ok = c.get(v);
    a.shape.push_back(v);
    product = v != 0 && product > kHdf5MaxReadBytes / v ? kHdf5MaxReadBytes + 1 : product * v;
  }
  ok = ok && c.get(count) && count == product && count <= kHdf5MaxReadBytes / sizeof(float) &&
       bytes.size() - c.at == count * sizeof(float);
  if (!ok) fail("{}: the HDF5 reader returned a damaged result", path);
  a.data.resize(count);
  // An empty dataset has no buffer to copy into (memcpy's pointers must not be null).
  if (count > 0) std::memcpy(a.data.data(), bytes.data() + c.at, count * sizeof(float));
  return a;
}

std::vector<std::string> hdf5_dataset_names_isolated(const std::string& path) {
  const std::string bytes = run_isolated(path, kDatasetNames, "", nullptr);
  std::vector<std::string> names;
  Cursor c{bytes};
  while (c.at < bytes.size()) {
    std::string n;
    if (!c.get_string(n, 1 << 16)) fail("{}: the HDF5 reader returned a damaged result", path);
    names.push_back(std::move(n));
  }
  return names;
}

std::map<std::string, std::string> hdf5_root_attributes_isolated(const std::string& path) {
  const std::string bytes = run_isolated(path, kRootAttributes, "", nullptr);
  std::map<std::string, std::string> values;
  Cursor c{bytes};
  while (c.at < bytes.size()) {
    std::string k, v;
    if (!c.get_string(k, 1 << 16) || !c.get_string(v, 1 << 20))
      fail("{}: the HDF5 reader returned a damaged result", path);
    values[k] = v;
  }
  return values;
}

std::vector<size_t> hdf5_dataset_shape_isolated(const std::string& path, const std::string& name) {
  std::vector<size_t> dims;
  bool seen = false;
  run_isolated(path, kReadArray, name, [&](const std::string&, const std::vector<size_t>& s) {
    dims = s, seen = true;
    return false;
  });
  if (!seen) fail("{}: dataset '{}' could not be inspected", path, name);
  return dims;
}

bool hdf5_has_dataset_isolated(const std::string& path, const std::string& name) {
  return run_isolated(path, kHasDataset, name, nullptr) == "1";
}

}  // namespace statecheck
