#include "client/npy_files.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/bfloat16.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace client {

absl::StatusOr<NamedTensor> ReadNpyInput(const std::string& name, const std::string& path,
                                        std::optional<DType> want) {
  MS_ASSIGN_OR_RETURN(std::string file, ReadFileToString(path), "npy");
  MS_ASSIGN_OR_RETURN(NpyLayout layout, ParseNpyLayout(file, path));
  const absl::string_view data = absl::string_view(file).substr(layout.data_offset);
  if (want == DType::kBFloat16 && layout.dtype == DType::kFloat32) {
    const int64_t n = static_cast<int64_t>(data.size() / sizeof(float));
    std::string bytes(static_cast<size_t>(n) * 2, '\0');
    std::vector<float> row(static_cast<size_t>(std::min<int64_t>(n, 4096)));
    for (int64_t at = 0; at < n; at += static_cast<int64_t>(row.size())) {  // unaligned source
      const int64_t k = std::min<int64_t>(static_cast<int64_t>(row.size()), n - at);
      std::memcpy(row.data(), data.data() + at * sizeof(float), static_cast<size_t>(k) * sizeof(float));
      FloatToBFloat16(row.data(), reinterpret_cast<uint16_t*>(bytes.data()) + at, k);
    }
    return NamedTensor::Create(name, DType::kBFloat16, std::move(layout.shape), std::move(bytes));
  }
  file.erase(0, layout.data_offset);  // in place: the data is the file's tail
  return NamedTensor::Create(name, layout.dtype, std::move(layout.shape), std::move(file));
}

absl::Status WriteNpyOutput(const std::string& dir, NamedTensor tensor) {
  const std::string path = absl::StrCat(dir, "/", tensor.name, ".npy");
  if (tensor.dtype == DType::kFloat32) {  // the bytes as they are, after the header
    return WriteNpyBytes(path, DType::kFloat32, tensor.shape, tensor.bytes);
  }
  MS_ASSIGN_OR_RETURN(std::vector<float> values, tensor.ToFloat32());
  std::string().swap(tensor.bytes);
  return WriteNpyBytes(path, DType::kFloat32, tensor.shape,
                       absl::string_view(reinterpret_cast<const char*>(values.data()),
                                         values.size() * sizeof(float)));
}

}  // namespace client
}  // namespace meshserve
