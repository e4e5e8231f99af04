#include "client/npy_files.h"

#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/bfloat16.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace client {

absl::StatusOr<HostTensor> ReadNpyInput(const std::string& name, const std::string& path,
                                        std::optional<DType> want) {
  std::string file;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return NotFound("npy '", path, "': cannot open");
    file.resize(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    in.read(file.data(), static_cast<std::streamsize>(file.size()));
    if (!in) return NotFound("npy '", path, "': cannot read");
  }
  DType dtype;
  std::vector<int64_t> shape;
  size_t num_bytes = 0;
  {
    MS_ASSIGN_OR_RETURN(Tensor tensor, ParseNpy(file, path));
    dtype = tensor.dtype();
    shape = tensor.shape();
    num_bytes = static_cast<size_t>(tensor.NumBytes());
    if (want == DType::kBFloat16 && dtype == DType::kFloat32) {
      std::string bytes(tensor.NumElements() * 2, '\0');
      FloatToBFloat16(tensor.data<float>(), reinterpret_cast<uint16_t*>(bytes.data()),
                      tensor.NumElements());
      return HostTensor::Create(name, DType::kBFloat16, shape, std::move(bytes));
    }
  }  // the parsed copy is freed here; the file's tail holds the same bytes
  file.erase(0, file.size() - num_bytes);
  return HostTensor::Create(name, dtype, std::move(shape), std::move(file));
}

absl::Status WriteNpyOutput(const std::string& dir, HostTensor tensor) {
  const std::string path = absl::StrCat(dir, "/", tensor.name, ".npy");
  if (tensor.dtype == DType::kFloat32) {
    MS_ASSIGN_OR_RETURN(Tensor out, Tensor::FromBytes(DType::kFloat32, tensor.shape,
                                                      tensor.bytes));
    std::string().swap(tensor.bytes);
    return WriteNpy(path, out);
  }
  MS_ASSIGN_OR_RETURN(std::vector<float> values, tensor.ToFloat32());
  std::string().swap(tensor.bytes);
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::FromValues(DType::kFloat32, tensor.shape, values));
  return WriteNpy(path, out);
}

}  // namespace client
}  // namespace meshserve
