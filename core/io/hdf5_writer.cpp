// H5Writer (declared in hdf5_file.h): writes a result file to <path>.partial and renames it on
// commit().

#include "core/io/hdf5_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include <hdf5.h>

#include "core/dtype/bf16.h"
#include "core/io/hdf5_errors.h"
#include "core/io/paths.h"
#include "core/util/error.h"

namespace statecheck {

using hdf5_detail::check;
using hdf5_detail::check_id;

namespace {

std::string parent_of(const std::string& p) {
  const auto pos = p.rfind('/');
  return pos == std::string::npos ? "" : p.substr(0, pos);
}

// A scalar variable-length UTF-8 string attribute: h5py reads it back as `str` (a fixed-length
// one comes back as `bytes`), h5dump prints it as text.
void write_string_attr(hid_t obj, const std::string& name, const std::string& value,
                       const std::string& path) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  hid_t space = H5Screate(H5S_SCALAR);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  hid_t attr = check_id(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                        "creating attribute " + name, path);
  const char* text = value.c_str();  // a variable-length string is written as its char*
  check(H5Awrite(attr, type, &text), "writing attribute " + name, path);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

}  // namespace

H5Writer::H5Writer(const std::string& path) : path_(path), partial_(path + ".partial") {
  check_output_file("result file", path, {});
  // The directories this writer creates: removed again (if empty) when the run fails.
  created_dirs_ =
      std::make_unique<CreatedDirectories>(path, std::filesystem::path(path).parent_path());
  // Exclusive: a file that appeared at the partial name since the check is not replaced either,
  // and only a file this writer created is registered for removal on a signal.
  file_ = H5Fcreate(partial_.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0)
    fail("{}: cannot create HDF5 file (it exists, or the directory is not writable)", partial_);
  on_interrupt_ = InterruptCleanup(partial_, false);
}

H5Writer::~H5Writer() {
  if (file_ >= 0) H5Fclose(file_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(partial_, ec);  // a failed run leaves any earlier result untouched
  }
  on_interrupt_.release();
  created_dirs_.reset();  // after the partial file: removes the directories if they are empty
}

void H5Writer::close() {
  if (file_ < 0) return;
  const int64_t f = file_;
  file_ = -1;
  if (H5Fclose(f) < 0) fail("{}: closing the HDF5 file failed", partial_);
}

void H5Writer::commit() {
  if (committed_) return;
  close();
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) fail("{}: cannot move the finished result into place ({})", path_, ec.message());
  committed_ = true;
  on_interrupt_.release();
  created_dirs_->keep();
}

void H5Writer::group(const std::string& name) {
  std::string partial;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = name.find('/', start);
    const std::string part =
        name.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) {
      partial += (partial.empty() ? "" : "/") + part;
      if (H5Lexists(file_, partial.c_str(), H5P_DEFAULT) <= 0) {
        hid_t g =
            check_id(H5Gcreate2(file_, partial.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "creating group " + partial, path_);
        H5Gclose(g);
      }
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

namespace {
template <typename T>
void write_numeric(int64_t file, const std::string& path, const std::string& dataset,
                   const std::vector<T>& data, const std::vector<size_t>& shape, hid_t mem_type,
                   hid_t file_type) {
  const size_t n =
      std::accumulate(shape.begin(), shape.end(), size_t{1}, std::multiplies<size_t>());
  if (n != data.size())
    fail("{}: dataset {} has {} values but shape product {}", path, dataset, data.size(), n);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t space = shape.empty()
                    ? H5Screate(H5S_SCALAR)
                    : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  if (H5Lexists(file, dataset.c_str(), H5P_DEFAULT) > 0)
    H5Ldelete(file, dataset.c_str(), H5P_DEFAULT);
  hid_t ds = check_id(
      H5Dcreate2(file, dataset.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "creating dataset " + dataset, path);
  if (n > 0)
    check(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "writing " + dataset,
          path);
  H5Dclose(ds);
  H5Sclose(space);
}
}  // namespace

void H5Writer::write(const std::string& dataset, const std::vector<double>& data,
                     const std::vector<size_t>& shape, const std::string& units,
                     const std::string& description) {
  group(parent_of(dataset));
  write_numeric(file_, path_, dataset, data, shape, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE);
  attr(dataset, "units", units);
  attr(dataset, "description", description);
}

void H5Writer::write(const std::string& dataset, const std::vector<int64_t>& data,
                     const std::vector<size_t>& shape, const std::string& units,
                     const std::string& description) {
  group(parent_of(dataset));
  write_numeric(file_, path_, dataset, data, shape, H5T_NATIVE_INT64, H5T_STD_I64LE);
  attr(dataset, "units", units);
  attr(dataset, "description", description);
}

void H5Writer::write_scalar(const std::string& dataset, double value, const std::string& units,
                            const std::string& description) {
  write(dataset, std::vector<double>{value}, {}, units, description);
}

void H5Writer::write_strings(const std::string& dataset, const std::vector<std::string>& values,
                             const std::string& description) {
  group(parent_of(dataset));
  size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size() + 1);
  std::vector<char> buf(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), buf.begin() + i * width);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, width);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  hsize_t dims[1] = {values.size()};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  if (H5Lexists(file_, dataset.c_str(), H5P_DEFAULT) > 0)
    H5Ldelete(file_, dataset.c_str(), H5P_DEFAULT);
  hid_t ds = check_id(
      H5Dcreate2(file_, dataset.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "creating dataset " + dataset, path_);
  if (!values.empty())
    check(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "writing " + dataset,
          path_);
  H5Dclose(ds);
  H5Sclose(space);
  H5Tclose(type);
  attr(dataset, "units", std::string("1"));
  attr(dataset, "description", description);
}

namespace {
// A scalar attribute `name` on `object` of `file` (replacing one of that name), stored as
// file_type from *value in memory_type; errors name `path`.
void write_scalar_attr(hid_t file, const std::string& path, const std::string& object,
                       const std::string& name, hid_t file_type, hid_t memory_type,
                       const void* value) {
  hid_t obj = check_id(H5Oopen(file, object.empty() ? "/" : object.c_str(), H5P_DEFAULT),
                       "opening " + object, path);
  hid_t space = H5Screate(H5S_SCALAR);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  hid_t a = check_id(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                     "attribute " + name, path);
  check(H5Awrite(a, memory_type, value), "writing attribute " + name, path);
  H5Aclose(a);
  H5Sclose(space);
  H5Oclose(obj);
}
}  // namespace

void H5Writer::attr(const std::string& object, const std::string& name, const std::string& value) {
  hid_t obj = check_id(H5Oopen(file_, object.empty() ? "/" : object.c_str(), H5P_DEFAULT),
                       "opening " + object, path_);
  write_string_attr(obj, name, value, path_);
  H5Oclose(obj);
}

void H5Writer::attr(const std::string& object, const std::string& name, double value) {
  write_scalar_attr(file_, path_, object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void H5Writer::attr(const std::string& object, const std::string& name, int64_t value) {
  write_scalar_attr(file_, path_, object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

}  // namespace statecheck
