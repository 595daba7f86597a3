// Untrusted HDF5 read in a reader process: a crash or a memory blow-up inside libhdf5 (a corrupt
// B-tree, a lying layout message) ends the reader, not the run, and becomes one line naming the
// file. The caller keeps its partial result files registered and removes them on the error as
// on any other (core/io/interrupt_cleanup.h).
//
// The reader is this same executable (/proc/self/exe) started with posix_spawn and an internal
// environment variable; its start-up (a constructor of priority 101, before the program's other
// initialisers) serves one request on a socket and ends with _exit, so main never runs there. A
// spawn rather than a fork: any thread may call these functions while others run, and a forked
// copy of a multi-threaded process can deadlock on locks the other threads held
// (AddressSanitizer's allocator has no fork handlers).
// The reader holds only its standard streams and the socket (every other descriptor is closed at
// the spawn), dies with the thread that started it (PR_SET_PDEATHSIG), and needs /proc/self/exe
// (a program started through ld.so or an emulator cannot read HDF5 files this way). The tests of
// the isolation stand in a faulty libhdf5 through STATECHECK_HDF5_READER_TEST_FAULT ("segv",
// "hang" or "grow": the reader crashes, loops or allocates without bound before reading; "fds":
// it reports its descriptors).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"

namespace statecheck {

// The address space the reader process may add to its size at start-up for a file of `file_size`
// bytes: 512 MiB for libhdf5's metadata and caches, plus three times the largest data a read of
// that file may produce, min(kHdf5MaxReadBytes, 1032 x file_size) (compressed data expand at most
// 1032:1; three copies: the stored bytes, a conversion buffer, the fp32 result). Bytes.
uint64_t hdf5_child_memory_limit(uint64_t file_size);

// The wall-clock time the reader process may take for a file of `file_size` bytes: 120 s plus 1 s
// per 10 MiB (a read runs at hundreds of MB/s; the margin covers a loaded machine), or the whole
// seconds in environment variable STATECHECK_HDF5_READER_SECONDS (1..86400) when set; at most
// 86400. Seconds. Throws statecheck::Error when the variable is set but not whole seconds in
// range.
unsigned hdf5_child_time_limit_s(uint64_t file_size);

// read_hdf5_array(path, name, check) run in the reader process, whose address space is limited
// (setrlimit RLIMIT_AS) to its size at start-up plus hdf5_child_memory_limit(file size) (in a
// build with AddressSanitizer, whose shadow fills the address space: its resident memory, to that
// limit plus an eighth plus 512 MiB) and whose wall-clock time to hdf5_child_time_limit_s(file
// size); the array comes back over the socket. `check` runs in the calling process on the name and
// shape the reader reports before it reads any data; what it throws ends the reader and is rethrown
// as is. Safe to call from several threads at once. Throws statecheck::Error, one line naming the
// file: any error of read_hdf5_array; "the HDF5 library crashed (signal N ...)" when the reader
// dies of a signal; "needs more than N MiB" when an allocation fails under the limit (or the
// resident memory passes it, under AddressSanitizer); "did not finish within N s" at the time
// limit; a failed spawn or socket.
FloatArray read_hdf5_array_isolated(const std::string& path, const std::string& name = "",
                                    const ShapeCheck& check = nullptr);

// hdf5_dataset_names(path), hdf5_root_attributes(path) and hdf5_has_dataset(path, name)
// (core/io/hdf5_file.h) run in the reader process in the same way; the same errors.
std::vector<std::string> hdf5_dataset_names_isolated(const std::string& path);
std::map<std::string, std::string> hdf5_root_attributes_isolated(const std::string& path);
bool hdf5_has_dataset_isolated(const std::string& path, const std::string& name);
// The shape of dataset `name` as read_hdf5_array sees it, without reading its data; the same
// errors.
std::vector<size_t> hdf5_dataset_shape_isolated(const std::string& path, const std::string& name);

}  // namespace statecheck
