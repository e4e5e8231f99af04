// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
// Layout: 8-byte little-endian uint64 N, then N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v", ...},            (optional, string values)
//    "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// then the data region; offsets are relative to its start, row-major,
// little-endian. dtypes: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL.
//
// Open validates everything before any tensor is read: N <= file size - 8,
// the JSON parses and is an object, every entry has a known dtype, a shape of
// non-negative ints and data_offsets [begin, end] with begin <= end <= data
// size and end - begin == product(shape) * dtype size, entries do not overlap
// (the safetensors format also requires them to cover the data region
// contiguously; we only require no overlap). Errors: kNotFound if the file
// cannot be opened; kDataLoss for a file shorter than its header says;
// kInvalidArgument for anything malformed. Messages name the file and, where
// one is at fault, the tensor.
//
// ReadBox reads only the bytes of the requested box: one pread per contiguous
// run (runs merged across dims where the box spans whole rows), so peak memory
// is the box, not the file. A short read (file truncated after Open) is
// kDataLoss.
//
// Thread-safety: a SafetensorsFile is immutable after Open; ReadBox may be
// called concurrently (pread has no shared file offset).
#ifndef MESHSERVE_COMMON_TENSOR_SAFETENSORS_H_
#define MESHSERVE_COMMON_TENSOR_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// "F32", "BF16", ... for a dtype (every DType has one).
absl::string_view SafetensorsDTypeName(DType dtype);
// \error kInvalidArgument naming `text` for an unknown or unsupported dtype.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view text);

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    int64_t begin = 0;  // data_offsets, relative to the data region
    int64_t end = 0;
  };

  static absl::StatusOr<SafetensorsFile> Open(absl::string_view path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // closes the file

  const std::string& path() const { return path_; }
  // Where the data region starts in the file (8 + the header's length);
  // Entry offsets are relative to it.
  int64_t data_start() const { return data_start_; }
  // Entries sorted by name.
  const std::vector<Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const Entry* Find(absl::string_view name) const;

  // The elements of `box` of tensor `name`, in `out_dtype` (default: the
  // file's dtype; conversions as ConvertDType).
  // \error kNotFound for an unknown name; kInvalidArgument for a rank
  //   mismatch; kOutOfRange when box is not inside the tensor's shape;
  //   kDataLoss on a short read.
  absl::StatusOr<Tensor> ReadBox(absl::string_view name, const Box& box,
                                 std::optional<DType> out_dtype = std::nullopt) const;
  // The whole tensor.
  absl::StatusOr<Tensor> Read(absl::string_view name,
                              std::optional<DType> out_dtype = std::nullopt) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;  // 8 + N
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (name -> tensor, stored in name order, contiguous) and
// optional string metadata. \error kInvalidArgument for an empty name or
// "__metadata__"; kUnavailable/kInternal naming the path on I/O failure.
absl::Status WriteSafetensors(absl::string_view path,
                              const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_SAFETENSORS_H_
