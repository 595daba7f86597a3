#include "core/io/hdf5_isolated.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>

#include "core/io/interrupt_cleanup.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

// Pipe framing: a status byte (0 array, 1 error), then length-prefixed fields in host byte
// order (both ends are the same binary): error: message; array: name, dtype, rank, dims,
// element count, fp32 values.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
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
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_string(int fd, const std::string& s) {
  const uint64_t n = s.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, s.data(), s.size());
}

bool read_string(int fd, std::string& s, uint64_t limit) {
  uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > limit) return false;
  s.resize(n);
  return read_all(fd, s.data(), n);
}

// The process's address space now, bytes (/proc/self/statm, first field in pages); 0 if unknown.
uint64_t address_space_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  in >> pages;
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
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

[[noreturn]] void child(int fd, const std::string& path, const std::function<std::string()>& work,
                        uint64_t limit, unsigned seconds) {
  forget_interrupt_cleanup();
  // SIGALRM's default action ends the child: a read that loops or deadlocks becomes an error.
  // The forking thread may block SIGALRM; the child unblocks it, or the alarm never arrives.
  signal(SIGALRM, SIG_DFL);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &alarm_only, nullptr);
  alarm(seconds);
  const uint64_t now = address_space_bytes();
  if (now > 0) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(now + limit);
    setrlimit(RLIMIT_AS, &rl);
  }
  uint8_t status = 1;
  std::string message, payload;
  try {
    payload = work();
    status = 0;
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::bad_alloc&) {
    message = fmt::format(
        "{}: reading it needs more than the {} MiB this file may use (damaged or crafted "
        "metadata)",
        path, limit >> 20);
  } catch (const std::exception& e) {
    message = fmt::format("{}: reading the HDF5 file failed ({})", path, e.what());
  }
  bool ok = write_all(fd, &status, 1);
  ok = ok && write_string(fd, status == 1 ? message : payload);
  ::close(fd);
  _exit(ok ? 0 : 3);
}

// Runs `work` (libhdf5 calls on `path`) in a forked child with a limited address space and
// returns the bytes it produced; the failures of read_hdf5_array_isolated (header) as one line.
std::string run_isolated(const std::string& path, const std::function<std::string()>& work) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot read the file size ({})", path, ec.message());
  const uint64_t limit = hdf5_child_memory_limit(file_size);
  const unsigned seconds = hdf5_child_time_limit_s(file_size);
  int fds[2];
  // Close-on-exec: a program another thread starts meanwhile does not inherit the write end.
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail("{}: cannot create a pipe for the HDF5 reader ({})", path, std::strerror(errno));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    fail("{}: cannot start the HDF5 reader process ({})", path, std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], path, work, limit, seconds);
  }
  ::close(fds[1]);
  // Read everything the child sends, then reap it; a child that died sent less than a frame.
  uint8_t status = 2;
  std::string text;
  bool complete = false;
  try {
    complete = read_all(fds[0], &status, 1) && status <= 1 &&
               read_string(fds[0], text, status == 1 ? (1 << 16) : kHdf5MaxReadBytes + (1 << 20));
  } catch (const std::exception&) {  // the result's buffer could not be allocated
    ::close(fds[0]);
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    fail("{}: the HDF5 reader's result does not fit in this process's memory", path);
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    if (sig == SIGALRM)
      fail("{}: the HDF5 reader did not finish within {} s reading this file: damaged or crafted",
           path, seconds);
    if (sig == SIGKILL)
      fail(
          "{}: the HDF5 reader was killed (SIGKILL; out of memory?) reading this file: damaged "
          "or crafted",
          path);
    fail("{}: the HDF5 library crashed on this file (signal {}, {}): damaged or crafted", path, sig,
         strsignal(sig));
  }
  if (complete && status == 1) throw Error(text);
  if (!complete || status != 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
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
  const std::string bytes = run_isolated(path, [&] {
    const FloatArray a = read_hdf5_array(path, name, check);
    std::string out;
    put_string(out, a.name);
    put_string(out, a.dtype);
    put(out, static_cast<uint64_t>(a.shape.size()));
    for (size_t d : a.shape) put(out, static_cast<uint64_t>(d));
    put(out, static_cast<uint64_t>(a.data.size()));
    out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size() * sizeof(float));
    return out;
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
  std::memcpy(a.data.data(), bytes.data() + c.at, count * sizeof(float));
  return a;
}

std::vector<std::string> hdf5_dataset_names_isolated(const std::string& path) {
  const std::string bytes = run_isolated(path, [&] {
    std::string out;
    for (const std::string& n : hdf5_dataset_names(path)) put_string(out, n);
    return out;
  });
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
  const std::string bytes = run_isolated(path, [&] {
    std::string out;
    for (const auto& [k, v] : hdf5_root_attributes(path)) {
      put_string(out, k);
      put_string(out, v);
    }
    return out;
  });
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
  struct Shape {
    std::vector<size_t> dims;
  };
  const std::string bytes = run_isolated(path, [&] {
    std::string out;
    try {
      read_hdf5_array(path, name,
                      [](const std::string&, const std::vector<size_t>& s) { throw Shape{s}; });
    } catch (const Shape& shape) {
      for (size_t d : shape.dims) put(out, static_cast<uint64_t>(d));
      return out;
    }
    fail("{}: dataset '{}' could not be inspected", path, name);
  });
  std::vector<size_t> dims;
  Cursor c{bytes};
  while (c.at < bytes.size()) {
    uint64_t d = 0;
    if (!c.get(d)) fail("{}: the HDF5 reader returned a damaged result", path);
    dims.push_back(static_cast<size_t>(d));
  }
  return dims;
}

bool hdf5_has_dataset_isolated(const std::string& path, const std::string& name) {
  return run_isolated(path,
                      [&] { return std::string(hdf5_has_dataset(path, name) ? "1" : "0"); }) == "1";
}

}  // namespace statecheck
