// libFuzzer target: safetensors headers and offsets (common/tensor/safetensors.h).
// The input is a whole file: SafetensorsFile::Open, then every entry read
// whole, read into float32, and read by a sub-box (the second half of each
// dim), as the worker's model loader reads a checkpoint.
// Invariants: never crashes; Open fails with kInvalidArgument or kDataLoss;
// an entry that Open accepted lies inside the data region and reads back with
// product(shape) elements, its sub-box equals the same elements of the whole
// read, and no two non-empty entries overlap.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/sharding/box.h"
#include "common/tensor/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

using meshserve::Box;
using meshserve::Interval;
using meshserve::SafetensorsFile;

void CheckEntry(const SafetensorsFile& file, const SafetensorsFile::Entry& e, size_t file_size) {
  if (e.begin < 0 || e.end < e.begin || static_cast<uint64_t>(e.end) > file_size) __builtin_trap();
  absl::StatusOr<meshserve::Tensor> whole = file.Read(e.name);
  if (!whole.ok()) __builtin_trap();  // the file does not change after Open
  if (whole->shape() != e.shape) __builtin_trap();
  if (!file.Read(e.name, meshserve::DType::kFloat32).ok()) __builtin_trap();
  std::vector<Interval> dims;
  for (int64_t d : e.shape) dims.push_back(Interval{d / 2, d});
  absl::StatusOr<meshserve::Tensor> part = file.ReadBox(e.name, Box(dims));
  if (!part.ok()) __builtin_trap();
  // The sub-box's first element is the whole tensor's element at (d/2, ...).
  if (part->NumElements() > 0) {
    int64_t flat = 0;
    for (size_t i = 0; i < e.shape.size(); ++i) flat = flat * e.shape[i] + e.shape[i] / 2;
    const int64_t size = meshserve::DTypeSize(e.dtype);
    if (whole->bytes().substr(flat * size, size) != part->bytes().substr(0, size)) {
      __builtin_trap();
    }
  }
  std::vector<Interval> outside = dims;
  if (!outside.empty() && outside[0].end < INT64_MAX) {
    outside[0].end += 1;
    if (file.ReadBox(e.name, Box(outside)).status().code() != absl::StatusCode::kOutOfRange) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  meshserve::fuzz::FuzzFile path(bytes);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path.path());
  if (!file.ok()) {
    const absl::StatusCode code = file.status().code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kDataLoss) {
      __builtin_trap();
    }
    return 0;
  }
  const auto& entries = file->entries();
  for (const SafetensorsFile::Entry& e : entries) CheckEntry(*file, e, size);
  for (size_t i = 0; i < entries.size(); ++i) {  // no two non-empty entries share a byte
    for (size_t j = i + 1; j < entries.size() && j < i + 64; ++j) {
      const auto& a = entries[i];
      const auto& b = entries[j];
      if (a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end) {
        __builtin_trap();
      }
    }
  }
  if (file->Find("__metadata__") != nullptr) __builtin_trap();
  return 0;
}
