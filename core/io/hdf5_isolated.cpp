#include "core/io/hdf5_isolated.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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

[[noreturn]] void child(int fd, const std::string& path, const std::string& name,
                        const ShapeCheck& check, uint64_t limit) {
  forget_interrupt_cleanup();
  const uint64_t now = address_space_bytes();
  if (now > 0) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(now + limit);
    setrlimit(RLIMIT_AS, &rl);
  }
  uint8_t status = 1;
  std::string message;
  FloatArray a;
  try {
    a = read_hdf5_array(path, name, check);
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
  if (status == 1) {
    ok = ok && write_string(fd, message);
  } else {
    const uint64_t rank = a.shape.size(), count = a.data.size();
    ok = ok && write_string(fd, a.name) && write_string(fd, a.dtype) &&
         write_all(fd, &rank, sizeof rank);
    for (size_t d : a.shape) {
      const uint64_t v = d;
      ok = ok && write_all(fd, &v, sizeof v);
    }
    ok = ok && write_all(fd, &count, sizeof count) &&
         write_all(fd, a.data.data(), count * sizeof(float));
  }
  ::close(fd);
  _exit(ok ? 0 : 3);
}

}  // namespace

uint64_t hdf5_child_memory_limit(uint64_t file_size) {
  const uint64_t data = file_size > kHdf5MaxReadBytes / 1032 ? kHdf5MaxReadBytes : 1032 * file_size;
  return (uint64_t{512} << 20) + 3 * data;
}

FloatArray read_hdf5_array_isolated(const std::string& path, const std::string& name,
                                    const ShapeCheck& check) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot read the file size ({})", path, ec.message());
  const uint64_t limit = hdf5_child_memory_limit(file_size);
  int fds[2];
  if (::pipe(fds) != 0)
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
    child(fds[1], path, name, check, limit);
  }
  ::close(fds[1]);
  // Read everything the child sends, then reap it; a child that died sent less than a frame.
  uint8_t status = 2;
  std::string message;
  FloatArray a;
  bool complete = false;
  if (read_all(fds[0], &status, 1)) {
    if (status == 1) {
      complete = read_string(fds[0], message, 1 << 16);
    } else if (status == 0) {
      uint64_t rank = 0, count = 0;
      bool ok = read_string(fds[0], a.name, 1 << 16) && read_string(fds[0], a.dtype, 64) &&
                read_all(fds[0], &rank, sizeof rank) && rank <= 32;
      uint64_t product = 1;
      for (uint64_t d = 0; ok && d < rank; ++d) {
        uint64_t v = 0;
        ok = read_all(fds[0], &v, sizeof v);
        a.shape.push_back(v);
        product = v != 0 && product > kHdf5MaxReadBytes / v ? kHdf5MaxReadBytes + 1 : product * v;
      }
      ok = ok && read_all(fds[0], &count, sizeof count) && count == product &&
           count <= kHdf5MaxReadBytes / sizeof(float);
      if (ok) {
        a.data.resize(count);
        ok = read_all(fds[0], a.data.data(), count * sizeof(float));
      }
      complete = ok;
    }
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    if (sig == SIGKILL)
      fail(
          "{}: the HDF5 reader was killed (SIGKILL; out of memory?) reading this file: damaged "
          "or crafted",
          path);
    fail("{}: the HDF5 library crashed on this file (signal {}, {}): damaged or crafted", path, sig,
         strsignal(sig));
  }
  if (complete && status == 1) throw Error(message);
  if (!complete || status != 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    fail("{}: the HDF5 reader ended without a result (exit status {}): damaged or crafted file",
         path, WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  return a;
}

}  // namespace statecheck
