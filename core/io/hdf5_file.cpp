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
namespace {

struct RootDatasets {
  std::vector<std::string> names;
};

herr_t collect_dataset(hid_t loc, const char* name, const H5L_info_t*, void* data) {
  H5O_info_t info;
  if (H5Oget_info_by_name(loc, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET)
    static_cast<RootDatasets*>(data)->names.push_back(name);
  return 0;
}

std::string read_string_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return "";
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(a);
  std::string out;
  if (H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type)) {
    // Fixed length, any padding (h5py writes NULLPAD): read with the file's own type, then strip
    // the padding.
    const size_t n = H5Tget_size(type);
    std::vector<char> buf(n + 1, '\0');
    hid_t mem = H5Tcopy(type);
    if (H5Aread(a, mem, buf.data()) >= 0) out.assign(buf.data(), n);
    H5Tclose(mem);
    while (!out.empty() && (out.back() == '\0' || out.back() == ' ')) out.pop_back();
    out = out.c_str();
  } else if (H5Tget_class(type) == H5T_STRING) {
    // Variable length (h5py's default for str attributes), ASCII or UTF-8.
    char* value = nullptr;
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    if (H5Aread(a, mem, &value) >= 0 && value) {
      out = value;
      H5free_memory(value);
    }
    H5Tclose(mem);
  }
  H5Tclose(type);
  H5Aclose(a);
  return out;
}

}  // namespace

std::vector<std::string> hdf5_dataset_names(const std::string& path) {
  if (!std::filesystem::exists(path)) fail("{}: no such file", path);
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("{}: not an HDF5 file", path);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) fail("{}: cannot open HDF5 file (truncated or damaged?)", path);
  RootDatasets found;
  H5Literate(file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_dataset, &found);
  H5Fclose(file);
  std::sort(found.names.begin(), found.names.end());
  return found.names;
}

bool hdf5_has_dataset(const std::string& path, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || H5Fis_hdf5(path.c_str()) <= 0) return false;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return false;
  bool found = true;
  // Each group on the way must exist before H5Lexists may look one level deeper.
  for (size_t at = name.find('/'); found; at = name.find('/', at + 1)) {
    const std::string part = name.substr(0, at);
    found = !part.empty() && H5Lexists(file, part.c_str(), H5P_DEFAULT) > 0;
    if (at == std::string::npos) break;
  }
  if (found) {
    H5O_info_t info;
    found = H5Oget_info_by_name(file, name.c_str(), &info, H5P_DEFAULT) >= 0 &&
            info.type == H5O_TYPE_DATASET;
  }
  H5Fclose(file);
  return found;
}

FloatArray read_hdf5_array(const std::string& path, const std::string& wanted,
                           const ShapeCheck& check) {
  if (!std::filesystem::exists(path)) fail("{}: no such file", path);
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("{}: not an HDF5 file", path);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) fail("{}: cannot open HDF5 file (truncated or damaged?)", path);
  struct Closer {
    hid_t f;
    ~Closer() { H5Fclose(f); }
  } closer{file};

  std::string name = wanted;
  if (name.empty()) {
    RootDatasets found;
    H5Literate(file, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_dataset, &found);
    bool has_state = false;
    for (const auto& n : found.names) has_state = has_state || n == "state";
    if (has_state)
      name = "state";
    else if (found.names.size() == 1)
      name = found.names[0];
    else if (found.names.empty())
      fail("{}: no dataset at the root (expected one named 'state')", path);
    else {
      std::string list;
      for (const auto& n : found.names) list += (list.empty() ? "" : ", ") + n;
      fail("{}: several root datasets ({}) and none named 'state'", path, list);
    }
  }
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) fail("{}: no dataset '{}'", path, name);
  hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (ds < 0) fail("{}: '{}' is not a readable dataset", path, name);
  hid_t space = H5Dget_space(ds);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  FloatArray out;
  out.name = name;
  out.shape.assign(dims.begin(), dims.end());
  hid_t type = H5Dget_type(ds);
  const size_t elem = type >= 0 ? H5Tget_size(type) : 0;
  const H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
  auto close_all = [&] {
    if (type >= 0) H5Tclose(type);
    H5Sclose(space);
    H5Dclose(ds);
  };
  // The bytes the dataset declares, bounded before anything is allocated: at most
  // kHdf5MaxReadBytes (the product is checked without overflow).
  uint64_t n = 1;
  const uint64_t cap_elems = kHdf5MaxReadBytes / std::max<uint64_t>(elem, 4);
  for (auto d : dims) {
    if (d != 0 && n > cap_elems / d) {
      close_all();
      fail(
          "{}: dataset '{}' declares more than {} bytes of data (the read limit): not a state "
          "file this tool can hold",
          path, name, kHdf5MaxReadBytes);
    }
    n *= d;
  }
  if (check) {
    try {
      check(name, out.shape);
    } catch (...) {
      close_all();
      throw;
    }
  }
  const hid_t dcpl = H5Dget_create_plist(ds);
  const int filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
  auto refuse = [&](const std::string& why) {
    if (dcpl >= 0) H5Pclose(dcpl);
    close_all();
    fail("{}: dataset '{}' {}", path, name, why);
  };
  if (type < 0 || elem == 0) refuse("has a datatype that cannot be read");
  // Data in external files (which could be anything, a FIFO included) are not read; nor are
  // virtual datasets, whose missing sources read as fill values.
  if (dcpl >= 0 && H5Pget_external_count(dcpl) > 0)
    refuse("keeps its data in external files; store them in the HDF5 file");
  const H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
  if (layout == H5D_VIRTUAL)
    refuse("is a virtual dataset (its data live in other files); store the data in the file");
  if (layout != H5D_COMPACT && layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
    refuse("has a storage layout that cannot be read (expected compact, contiguous or chunked)");
  // What the stored bytes must be, by layout (HDF5 file format specification, "Data Layout
  // Message"), checked here because libhdf5 trusts them: a compact dataset whose stored size is
  // smaller than its dataspace makes H5Dread copy past the message (a crash), a contiguous one
  // whose extent runs past the end of the file reads what is not there, and chunk records that
  // point outside the file or claim more bytes than a chunk holds make it allocate or read
  // without bound.
  const uint64_t declared = n * elem;  // <= kHdf5MaxReadBytes by the loop above
  const uint64_t file_size = std::filesystem::file_size(path);
  // Declared but never written: reading would return fill values. A chunked dataset must hold
  // every one of its chunks (a compressed one is "partly allocated" by its storage size even when
  // complete, so the chunks are counted); another one must be allocated in full.
  if (n > 0 && layout == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(dims.size());
    hsize_t stored = 0, expected = 1;
    if (rank < 1 || H5Pget_chunk(dcpl, rank, chunk.data()) != rank ||
        H5Dget_num_chunks(ds, space, &stored) < 0)
      refuse("has a chunk layout that cannot be read");
    uint64_t chunk_bytes = elem;
    for (int d = 0; d < rank; ++d) {
      if (chunk[d] == 0) refuse("has a chunk dimension of 0");
      expected *= (dims[d] + chunk[d] - 1) / chunk[d];
      if (chunk[d] > kHdf5MaxReadBytes / chunk_bytes)
        refuse(fmt::format("declares chunks larger than the read limit of {} bytes",
                           kHdf5MaxReadBytes));
      chunk_bytes *= chunk[d];
    }
    if (stored != expected)
      refuse(fmt::format("declares {} elements in {} chunks, of which only {} are stored", n,
                         expected, stored));
    // Every chunk record: inside the file, and (unfiltered) exactly one chunk's bytes; filtered
    // chunks decompress to at most one chunk each, and deflate, the filter HDF5 ships, expands at
    // most 1032:1 (zlib technical notes), so the declared bytes must be within that of the file.
    if (filters > 0 && declared / 1032 > file_size)
      refuse(
          fmt::format("declares {} bytes, more than 1032 times the file's {} bytes (deflate's "
                      "largest ratio)",
                      declared, file_size));
    if (filters == 0 && expected > file_size / std::max<uint64_t>(chunk_bytes, 1))
      refuse(fmt::format("declares {} chunks of {} bytes, more than the file's {} bytes", expected,
                         chunk_bytes, file_size));
    // (libhdf5 1.10 finds chunk record c by walking the index from its start, so the records
    // are checked one by one only up to 4096 chunks; beyond, the process limit of
    // hdf5_isolated.h bounds what a lying record can cost.)
    std::vector<hsize_t> origin(dims.size());
    for (hsize_t c = 0; c < std::min<hsize_t>(stored, 4096); ++c) {
      unsigned mask = 0;
      haddr_t at = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(ds, space, c, origin.data(), &mask, &at, &size) < 0)
        refuse(fmt::format("has a chunk record {} that cannot be read", c));
      if (at == HADDR_UNDEF || at > file_size || size > file_size - at)
        refuse(fmt::format("has chunk {} of {} bytes at {} past the end of the file ({} bytes)", c,
                           size, at, file_size));
      if (filters == 0 && size != chunk_bytes)
        refuse(fmt::format("has chunk {} of {} bytes; an unfiltered chunk holds {}", c, size,
                           chunk_bytes));
    }
  } else if (n > 0) {
    H5D_space_status_t allocated = H5D_SPACE_STATUS_ERROR;
    if (H5Dget_space_status(ds, &allocated) < 0 || allocated != H5D_SPACE_STATUS_ALLOCATED)
      refuse(fmt::format("declares {} elements but its data were {} written", n,
                         allocated == H5D_SPACE_STATUS_PART_ALLOCATED ? "only partly" : "never"));
  }
  if (n > 0 && (layout == H5D_COMPACT || layout == H5D_CONTIGUOUS)) {
    if (filters > 0) refuse("is not chunked but declares compression filters");
    const uint64_t stored = H5Dget_storage_size(ds);
    if (stored != declared)
      refuse(fmt::format("declares {} elements of {} bytes ({} bytes) but stores {} bytes", n, elem,
                         declared, stored));
    if (stored > file_size)
      refuse(fmt::format("stores {} bytes, more than the file's {} bytes", stored, file_size));
    if (layout == H5D_CONTIGUOUS) {
      const haddr_t at = H5Dget_offset(ds);
      if (at == HADDR_UNDEF || at > file_size || stored > file_size - at)
        refuse(fmt::format("has its {} bytes of data past the end of the file ({} bytes)", stored,
                           file_size));
    }
  }
  // A compression filter this HDF5 build lacks: say so instead of a failed read.
  for (int f = 0; f < filters; ++f) {
    unsigned flags = 0, info = 0;
    size_t nelem = 0;
    char fname[64] = {0};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(f), &flags, &nelem, nullptr,
                                           sizeof(fname), fname, &info);
    if (id >= 0 && H5Zfilter_avail(id) <= 0)
      refuse(fmt::format("needs HDF5 filter {} ('{}'), which this build cannot decode",
                         static_cast<int>(id), fname));
  }
  // A dtype attribute must agree with the stored type (the safetensors reader refuses the same
  // mislabel): "bf16" names 16-bit integers holding bf16 bits, "f32"/"float32" and
  // "f64"/"float64" name floats of that size.
  const std::string label = read_string_attr(ds, "dtype");
  std::string lower;
  for (char c : label) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool is_bf16 = lower == "bf16" || lower == "bfloat16";
  if (!label.empty()) {
    const bool is_f32 = lower == "f32" || lower == "float32";
    const bool is_f64 = lower == "f64" || lower == "float64";
    const std::string stored_as = cls == H5T_FLOAT     ? fmt::format("float{}", 8 * elem)
                                  : cls == H5T_INTEGER ? fmt::format("int{}", 8 * elem)
                                                       : "another type";
    const bool agrees = (is_bf16 && cls == H5T_INTEGER && elem == 2) ||
                        (is_f32 && cls == H5T_FLOAT && elem == 4) ||
                        (is_f64 && cls == H5T_FLOAT && elem == 8);
    if (!agrees)
      refuse(fmt::format("is labelled dtype=\"{}\" but stored as {}: mislabelled", printable(label),
                         stored_as));
  }
  if (dcpl >= 0) H5Pclose(dcpl);
  const size_t size = elem;
  herr_t status = -1;
  std::vector<double> f64;
  if (cls == H5T_FLOAT && size == 4) {
    out.dtype = "F32";
    out.data.resize(n);
    status = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data());
  } else if (cls == H5T_FLOAT && size == 8) {
    // Read as doubles: HDF5's own conversion would turn values beyond the fp32 range into inf.
    // (converted below, once the handles are closed).
    out.dtype = "F64";
    f64.resize(n);
    status = H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, f64.data());
  } else if (cls == H5T_INTEGER && size == 2 && is_bf16) {
    // The bits as stored, signed or not (torch's bf16 viewed as int16 is signed): a memory type
    // of the same signedness keeps them (HDF5 would clamp negative int16 to 0 as uint16).
    out.dtype = "BF16";
    std::vector<uint16_t> bits(n);
    const hid_t mem = H5Tget_sign(type) == H5T_SGN_2 ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
    status = H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data());
    out.data.resize(n);
    for (size_t i = 0; i < n; ++i) out.data[i] = float_from_bf16_bits(bits[i]);
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(ds);
  if (out.dtype.empty())
    fail(
        "{}: dataset '{}' has an unsupported type (expected float32, float64, or 16-bit integers "
        "with attribute dtype=\"bf16\")",
        path, name);
  if (status < 0) fail("{}: reading dataset '{}' failed (truncated file?)", path, name);
  if (!f64.empty()) {
    out.data.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(f64[i]) && std::fabs(f64[i]) > std::numeric_limits<float>::max())
        fail("{}: dataset '{}': F64 value {} at flat index {} is outside the fp32 range", path,
             name, f64[i], i);
      out.data[i] = static_cast<float>(f64[i]);
    }
  }
  return out;
}

namespace {

struct RootAttributes {
  std::map<std::string, std::string> values;
};

herr_t collect_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto& out = static_cast<RootAttributes*>(data)->values;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return 0;
  hid_t space = H5Aget_space(a), type = H5Aget_type(a);
  const bool scalar = H5Sget_simple_extent_npoints(space) == 1;
  const H5T_class_t cls = H5Tget_class(type);
  if (scalar && cls == H5T_STRING) {
    H5Tclose(type);
    H5Sclose(space);
    H5Aclose(a);
    out[name] = read_string_attr(obj, name);
    return 0;
  }
  if (scalar && cls == H5T_INTEGER) {
    long long v = 0;
    if (H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0) out[name] = std::to_string(v);
  } else if (scalar && cls == H5T_FLOAT) {
    double v = 0;
    if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0) out[name] = fmt::format("{:.17g}", v);
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Aclose(a);
  return 0;
}

hid_t open_hdf5_for_reading(const std::string& path) {
  if (!std::filesystem::exists(path)) fail("{}: no such file", path);
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("{}: not an HDF5 file", path);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) fail("{}: cannot open HDF5 file (truncated or damaged?)", path);
  return file;
}

}  // namespace

std::map<std::string, std::string> hdf5_root_attributes(const std::string& path) {
  hid_t file = open_hdf5_for_reading(path);
  RootAttributes found;
  hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
  if (root >= 0) {
    H5Aiterate2(root, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attribute, &found);
    H5Gclose(root);
  }
  H5Fclose(file);
  return found.values;
}

std::vector<double> read_hdf5_doubles(const std::string& path, const std::string& dataset,
                                      std::vector<size_t>* shape) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) fail("{}: cannot open HDF5 file", path);
  hid_t ds = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  if (ds < 0) {
    H5Fclose(file);
    fail("{}: no dataset '{}'", path, dataset);
  }
  hid_t space = H5Dget_space(ds);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  size_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<double> out(n);
  const herr_t status = H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(file);
  if (status < 0) fail("{}: reading '{}' failed", path, dataset);
  if (shape) shape->assign(dims.begin(), dims.end());
  return out;
}

}  // namespace statecheck
