// `meshserve infer`'s .npy files: a request input read from one, an output
// written to one, with as few copies of the tensor bytes as the format allows
// (a 512 MiB input must not cost gigabytes of client memory).
//
// ReadNpyInput reads the file once into one buffer, checks it with
// ParseNpyLayout (common/tensor/npy.h: no copy of the data) and keeps the
// buffer's data part as the tensor's bytes (the data is the file's tail). A float32 file for a bfloat16 input is
// rounded to bfloat16 (NumPy has no bfloat16); no other conversion is made, so
// a wrong dtype reaches the server and is reported by it.
// WriteNpyOutput writes float32 (widening other dtypes), consuming the tensor;
// a float32 tensor's bytes are written as they are, after the header.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_CLIENT_NPY_FILES_H_
#define MESHSERVE_CLIENT_NPY_FILES_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/inference_client.h"
#include "common/base/dtype.h"

namespace meshserve {
namespace client {

// `want`: the model's dtype for the input, when known.
// \error kNotFound if the file cannot be read; ParseNpy's errors.
absl::StatusOr<NamedTensor> ReadNpyInput(const std::string& name, const std::string& path,
                                        std::optional<DType> want);
// Writes DIR/NAME.npy (float32); `tensor`'s bytes are released on the way.
absl::Status WriteNpyOutput(const std::string& dir, NamedTensor tensor);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_NPY_FILES_H_
