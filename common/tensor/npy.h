// NumPy .npy files, format versions 1.0, 2.0 and 3.0 (numpy.lib.format).
//
// Layout: "\x93NUMPY", major, minor, header length (uint16 LE for v1, uint32
// LE for v2/v3), a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and '\n' so the data starts at a multiple of 64, then the
// data, C order.
//
// Supported descr: '<f4' float32, '<f8' float64, '<f2' float16, '<i4' int32,
// '<i8' int64, '|i1' int8, '|u1' uint8, '|b1' bool ('=' and '|' are accepted
// as native little-endian where meaningful). Rejected with kInvalidArgument
// naming the file and the value: fortran_order True, big-endian ('>f4'),
// other dtypes, a malformed header, a data size that does not match the shape
// (kDataLoss when the file is shorter than the header says).
//
// WriteNpy writes version 1.0 (2.0 if the header does not fit); bfloat16 is
// widened to float32 ('<f4') since NumPy has no bfloat16.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_TENSOR_NPY_H_
#define MESHSERVE_COMMON_TENSOR_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// \error kNotFound if the file cannot be read; otherwise as ParseNpy.
absl::StatusOr<Tensor> ReadNpy(absl::string_view path);
// \error kUnavailable naming the path when it cannot be written.
absl::Status WriteNpy(absl::string_view path, const Tensor& tensor);

// Writes `data` (the row-major bytes of a `dtype` array of shape `dims`,
// not bfloat16) as a .npy file, after its header: no copy of the data.
// \error kInvalidArgument for bfloat16; kUnavailable naming the path when it
//   cannot be written.
absl::Status WriteNpyBytes(absl::string_view path, DType dtype, absl::Span<const int64_t> dims,
                           absl::string_view data);

// In-memory forms. `name` is used in error messages only.
absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, absl::string_view name = "<npy>");
std::string EncodeNpy(const Tensor& tensor);

// What ParseNpy checks, without copying the data: the array's dtype and shape,
// and where its data starts in `bytes` (it runs to the end). Errors as ParseNpy.
struct NpyLayout {
  DType dtype;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
};
absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view bytes,
                                         absl::string_view name = "<npy>");
// The bytes of a .npy file before the data of a `dtype` array of shape `dims`
// (bfloat16: the header of its float32 widening).
std::string EncodeNpyHeader(DType dtype, absl::Span<const int64_t> dims);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_NPY_H_
