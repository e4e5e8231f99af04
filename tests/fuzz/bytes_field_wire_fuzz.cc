// libFuzzer target: ReadParam's ParamChunks as a hostile peer sends them,
// split around their data without protobuf (common/rpc/zero_copy/bytes_field_wire.h).
// Input: the message's bytes, cut into slices of (size % 8) bytes (0: one
// slice), as a received message comes in slices of any sizes.
// Invariants: never crashes; an error is kInvalidArgument; a message it
// splits parses with protobuf, and its other fields parsed with the data set
// equal that parse; EncodeWithBytesField of the parts splits back to them;
// SplitRepeatedBytesField (which releases the slices as it reads) agrees:
// the same status, the same other fields, its last value the data.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "proto/worker_service.pb.h"

namespace {

constexpr int kData = meshserve::ParamChunk::kDataFieldNumber;

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

// `bytes` cut into slices of `step` bytes (the last shorter); step 0: one slice.
grpc::ByteBuffer Cut(const std::string& bytes, size_t step) {
  std::vector<grpc::Slice> slices;
  if (step == 0 || bytes.empty()) {
    slices.emplace_back(bytes.data(), bytes.size());
  } else {
    for (size_t at = 0; at < bytes.size(); at += step) {
      slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

bool SameChunk(const meshserve::ParamChunk& a, const meshserve::ParamChunk& b) {
  return a.total_bytes() == b.total_bytes() && a.offset() == b.offset() &&
         a.dtype() == b.dtype() && a.data() == b.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  meshserve::BytesFieldSplit split;
  const absl::Status status = meshserve::SplitBytesField(Cut(bytes, size % 8), kData, &split);
  grpc::ByteBuffer buffer = Cut(bytes, size % 5);
  std::string other_fields;
  std::vector<std::string> values;
  const absl::Status repeated =
      meshserve::SplitRepeatedBytesField(&buffer, kData, &other_fields, &values);
  if (repeated.code() != status.code() || buffer.Length() != 0) __builtin_trap();
  if (status.ok() && (other_fields != split.other_fields ||
                      (values.empty() ? !split.data.empty() : values.back() != Join(split.data)))) {
    __builtin_trap();
  }
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  meshserve::ParamChunk reference;
  if (!reference.ParseFromString(bytes)) __builtin_trap();  // accepted what protobuf refuses
  meshserve::ParamChunk rebuilt;
  if (!rebuilt.ParseFromString(split.other_fields)) __builtin_trap();
  if (!rebuilt.data().empty()) __builtin_trap();  // the data stayed out of the other fields
  const std::string joined = Join(split.data);
  rebuilt.set_data(joined);
  if (!SameChunk(rebuilt, reference)) __builtin_trap();

  auto owner = std::make_shared<std::string>(joined);
  meshserve::BytesFieldSplit again;
  if (!meshserve::SplitBytesField(
           meshserve::EncodeWithBytesField(split.other_fields, kData, *owner, owner), kData,
           &again)
           .ok() ||
      again.other_fields != split.other_fields || Join(again.data) != joined) {
    __builtin_trap();
  }
  return 0;
}
