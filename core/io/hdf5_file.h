// Result files in HDF5 (C API, HDF5 >= 1.10), readable by h5py and h5dump without project code.
//
// Layout contract (docs/experiments.md, "Result files"): root attributes tool_version,
// git_commit, command_line, seed, model, created_utc; one group per experiment; every dataset
// carries string attributes `units` and `description`; arrays keep their natural shape,
// outermost dimension first (row-major).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/io/interrupt_cleanup.h"
#include "core/io/paths.h"

namespace statecheck {

class H5Writer {
 public:
  // Starts a result file for `path`; missing parent directories are created (and removed again,
  // if still empty, when the file is not committed). The data go to
  // `path.partial` and replace `path` only on commit(): a run that fails (or is killed) leaves an
  // earlier result at `path` untouched, and the destructor (or, on SIGINT, SIGTERM or SIGHUP,
  // core/io/interrupt_cleanup.h) removes the partial file. Throws
  // statecheck::Error when the file cannot be created, when `path` is a directory or an
  // existing non-regular file, or when `path.partial` exists (check_output_file; a file there is
  // never replaced, the partial file is created exclusively).
  explicit H5Writer(const std::string& path);
  ~H5Writer();
  // Closes the partial file, leaving it uncommitted (the suite closes each experiment's file and
  // commits them all once every experiment has succeeded). Nothing may be written after it.
  // Throws statecheck::Error on failure.
  void close();
  // Closes the file (if still open) and moves it to `path`. Throws statecheck::Error on failure.
  void commit();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  const std::string& path() const { return path_; }

  // Creates a group (and its parents) if absent, e.g. "codec/int8".
  void group(const std::string& name);

  // Datasets; `dataset` is a path like "codec/int8/state_relerr_layer_head"; missing groups are
  // created. `shape` empty means a scalar; otherwise its product must equal data.size().
  void write(const std::string& dataset, const std::vector<double>& data,
             const std::vector<size_t>& shape, const std::string& units,
             const std::string& description);
  void write(const std::string& dataset, const std::vector<int64_t>& data,
             const std::vector<size_t>& shape, const std::string& units,
             const std::string& description);
  void write_scalar(const std::string& dataset, double value, const std::string& units,
                    const std::string& description);
  void write_strings(const std::string& dataset, const std::vector<std::string>& values,
                     const std::string& description);

  // String / number attributes on an object ("/" is the root, or a group or dataset path).
  void attr(const std::string& object, const std::string& name, const std::string& value);
  void attr(const std::string& object, const std::string& name, double value);
  void attr(const std::string& object, const std::string& name, int64_t value);

 private:
  int64_t file_ = -1;  // hid_t
  std::string path_;
  std::string partial_;
  bool committed_ = false;
  std::unique_ptr<CreatedDirectories> created_dirs_;  // removed (if empty) when not committed
  InterruptCleanup on_interrupt_;  // removes partial_ on SIGINT / SIGTERM / SIGHUP until committed
};

// An n-dimensional float array read from a file.
struct FloatArray {
  std::vector<size_t> shape;
  std::vector<float> data;
  std::string dtype;  // as stored: "F32", "F64", "BF16"
  std::string name;   // dataset / tensor name
};

// Called with a dataset's (tensor's) name and declared shape before its data are read, so that a
// caller can refuse a shape it cannot use before paying for the read; throws to refuse.
using ShapeCheck = std::function<void(const std::string& name, const std::vector<size_t>& shape)>;

// The most bytes of stored data one dataset read may ask for: 8 GiB (2^31 fp32 values, 4096
// times the largest state of a shipped model), so that a read and its fp32 copy fit a 24 GiB
// machine. A real states file is far below it.
inline constexpr uint64_t kHdf5MaxReadBytes = uint64_t{8} << 30;

// Reads one floating-point dataset from an HDF5 file: `name` if given, else "state" if present,
// else the only dataset at the root. fp32 and fp64 datasets are read as fp32 (fp64 values beyond
// the fp32 range are an error); 16-bit integer datasets (signed or not) with attribute
// dtype="bf16" (or "bfloat16") as bf16 bits. Before any data are read the dataset's storage is
// checked against its dataspace and datatype, since libhdf5 trusts it: declared bytes at most
// kHdf5MaxReadBytes; compact and contiguous: stored size == elements x element size, inside the
// file; chunked: every chunk stored, chunk records inside the file and (unfiltered) one chunk's
// bytes each, filtered data at most 1032 times the file size (deflate's largest ratio). Throws
// statecheck::Error naming the file and dataset (unreadable file, no such dataset, several
// candidates, unsupported type, a dtype attribute that disagrees with the stored type, data never
// written, a storage check above failing, data in external files, a virtual dataset, a
// compression filter this build lacks), or whatever `check` throws. A damaged file can still make
// libhdf5 itself crash or allocate without bound while parsing its metadata: untrusted files go
// through read_hdf5_array_isolated (core/io/hdf5_isolated.h).
FloatArray read_hdf5_array(const std::string& path, const std::string& name = "",
                           const ShapeCheck& check = nullptr);

// Names of the datasets at the root of an HDF5 file, sorted. Throws statecheck::Error naming the
// file when it is missing or not HDF5.
std::vector<std::string> hdf5_dataset_names(const std::string& path);

// Whether `name` (a path such as "layers/3/ssm_state") is a dataset of the HDF5 file `path`; false
// for a missing file, a non-HDF5 file or a missing group on the way.
bool hdf5_has_dataset(const std::string& path, const std::string& name);

// The scalar attributes of the root group of an HDF5 file as text: strings (fixed or variable
// length) as they are, integers in decimal, floats with 17 significant digits (they read back
// exactly); attributes of other types or shapes are left out. Throws statecheck::Error naming
// the file when it is not a readable HDF5 file.
std::map<std::string, std::string> hdf5_root_attributes(const std::string& path);

// Reads a numeric dataset of an HDF5 file as doubles (shape returned too). For tests and tools.
std::vector<double> read_hdf5_doubles(const std::string& path, const std::string& dataset,
                                      std::vector<size_t>* shape = nullptr);

}  // namespace statecheck
