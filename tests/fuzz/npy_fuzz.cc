// libFuzzer target: .npy files. ParseNpy (common/tensor/npy.h) on arbitrary
// bytes, and the client's ReadNpyInput (client/npy_files.h) on the same bytes
// as a file, with and without a bfloat16 target dtype.
// Invariants: never crashes; a tensor that parses has exactly dtype size x
// product(shape) bytes, re-encodes (EncodeNpy) to bytes that parse back to the
// same shape and bytes, and ReadNpyInput agrees with ParseNpy (the same
// shape, dtype and bytes; a float32 file for a bfloat16 input rounded).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "client/npy_files.h"
#include "common/base/dtype.h"
#include "common/tensor/bfloat16.h"
#include "common/tensor/npy.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

void CheckParsed(const meshserve::Tensor& t) {
  if (static_cast<int64_t>(t.bytes().size()) !=
      t.NumElements() * meshserve::DTypeSize(t.dtype())) {
    __builtin_trap();
  }
  absl::StatusOr<meshserve::Tensor> again = meshserve::ParseNpy(meshserve::EncodeNpy(t));
  if (!again.ok() || again->shape() != t.shape()) __builtin_trap();
  if (t.dtype() != meshserve::DType::kBFloat16 && again->bytes() != t.bytes()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<meshserve::Tensor> parsed = meshserve::ParseNpy(bytes, "fuzz.npy");
  if (parsed.ok()) CheckParsed(*parsed);
  meshserve::fuzz::FuzzFile file(bytes);
  for (std::optional<meshserve::DType> want :
       {std::optional<meshserve::DType>(), std::optional<meshserve::DType>(meshserve::DType::kBFloat16)}) {
    auto input = meshserve::client::ReadNpyInput("x", file.path(), want);
    if (input.ok() != parsed.ok()) __builtin_trap();
    if (!input.ok()) continue;
    if (input->shape != parsed->shape()) __builtin_trap();
    if (want.has_value() && parsed->dtype() == meshserve::DType::kFloat32) {  // rounded
      std::string rounded(static_cast<size_t>(parsed->NumElements()) * 2, '\0');
      meshserve::FloatToBFloat16(parsed->data<float>(), reinterpret_cast<uint16_t*>(rounded.data()),
                                 parsed->NumElements());
      if (input->bytes != rounded) __builtin_trap();
    } else if (input->dtype != parsed->dtype() || input->bytes != parsed->bytes()) {
      __builtin_trap();
    }
  }
  return 0;
}
