// Untrusted HDF5 read in a child process: a crash or a memory blow-up inside libhdf5 (a corrupt
// B-tree, a lying layout message) ends the child, not the run, and becomes one line naming the
// file. The parent keeps its partial result files registered and removes them on the error as
// on any other (core/io/interrupt_cleanup.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"

namespace statecheck {

// The address space the child may add to its parent's for a file of `file_size` bytes:
// 512 MiB for libhdf5's metadata and caches, plus three times the largest data a read of that
// file may produce, min(kHdf5MaxReadBytes, 1032 x file_size) (compressed data expand at most
// 1032:1; three copies: the stored bytes, a conversion buffer, the fp32 result). Bytes.
uint64_t hdf5_child_memory_limit(uint64_t file_size);

// The wall-clock time the child may take for a file of `file_size` bytes: 120 s plus 1 s per
// 10 MiB (a read runs at hundreds of MB/s; the margin covers a loaded machine), or the whole
// seconds in environment variable STATECHECK_HDF5_READER_SECONDS (1..86400) when set; at most
// 86400. Seconds. Throws statecheck::Error when the variable is set but not whole seconds in
// range.
unsigned hdf5_child_time_limit_s(uint64_t file_size);

// read_hdf5_array(path, name, check) run in a forked child whose address space is limited
// (setrlimit RLIMIT_AS) to its size at the fork plus hdf5_child_memory_limit(file size); the
// array comes back over a pipe. The child runs `check` too (its error comes back as is) and
// never touches the parent's files (it ends with _exit and forgets the clean-up registrations).
// Throws statecheck::Error, one line naming the file: any error of read_hdf5_array; "the HDF5
// library crashed (signal N ...)" when the child dies of a signal; "needs more than N MiB" when
// an allocation fails under the limit; "did not finish within N s" at the time limit; a failed
// fork or pipe.
FloatArray read_hdf5_array_isolated(const std::string& path, const std::string& name = "",
                                    const ShapeCheck& check = nullptr);

// hdf5_dataset_names(path), hdf5_root_attributes(path) and hdf5_has_dataset(path, name)
// (core/io/hdf5_file.h) run in a child process in the same way; the same errors.
std::vector<std::string> hdf5_dataset_names_isolated(const std::string& path);
std::map<std::string, std::string> hdf5_root_attributes_isolated(const std::string& path);
bool hdf5_has_dataset_isolated(const std::string& path, const std::string& name);
// The shape of dataset `name` as read_hdf5_array sees it, without reading its data; the same
// errors.
std::vector<size_t> hdf5_dataset_shape_isolated(const std::string& path, const std::string& name);

}  // namespace statecheck
