#include "common/tensor/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace {

using json = nlohmann::json;

// The safetensors reference implementation caps the header at 100 MB.
constexpr int64_t kMaxHeaderBytes = 100 << 20;

constexpr std::pair<DType, absl::string_view> kDTypeNames[] = {
    {DType::kFloat64, "F64"}, {DType::kFloat32, "F32"}, {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"}, {DType::kInt64, "I64"}, {DType::kInt32, "I32"},
    {DType::kInt8, "I8"}, {DType::kUInt8, "U8"}, {DType::kBool, "BOOL"}};

// dump() that cannot throw on odd strings.
std::string Dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

absl::StatusOr<int64_t> NonNegativeInt(const json& v, absl::string_view what) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return v.get<int64_t>();
  }
  return InvalidArgument(what, " must be a non-negative integer, got ", Dump(v));
}

absl::StatusOr<SafetensorsFile::Entry> ParseEntry(const std::string& name, const json& v,
                                                  int64_t data_size) {
  if (!v.is_object()) return InvalidArgument("entry is not an object: ", Dump(v));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) return InvalidArgument("missing '", key, "'");
  }
  SafetensorsFile::Entry e;
  e.name = name;
  if (!v["dtype"].is_string()) return InvalidArgument("dtype is not a string: ", Dump(v["dtype"]));
  MS_ASSIGN_OR_RETURN(e.dtype, ParseSafetensorsDType(v["dtype"].get<std::string>()));
  if (!v["shape"].is_array()) return InvalidArgument("shape is not a list: ", Dump(v["shape"]));
  for (const json& d : v["shape"]) {
    MS_ASSIGN_OR_RETURN(int64_t dim, NonNegativeInt(d, "shape dim"));
    e.shape.push_back(dim);
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    return InvalidArgument("data_offsets must be [begin, end], got ", Dump(off));
  }
  MS_ASSIGN_OR_RETURN(e.begin, NonNegativeInt(off[0], "data_offsets begin"));
  MS_ASSIGN_OR_RETURN(e.end, NonNegativeInt(off[1], "data_offsets end"));
  if (e.begin > e.end || e.end > data_size) {
    return InvalidArgument("data_offsets [", e.begin, ", ", e.end,
                           "] outside the data region of ", data_size, " bytes");
  }
  absl::StatusOr<int64_t> n = NumElementsOfShape(e.shape);
  int64_t bytes = 0;
  if (!n.ok() || !CheckedMul(*n, DTypeSize(e.dtype), &bytes)) {
    return InvalidArgument("shape ", ShapeToString(e.shape), " is too large");
  }
  if (bytes != e.end - e.begin) {
    return InvalidArgument("shape ", ShapeToString(e.shape), " of ", DTypeShortName(e.dtype),
                           " needs ", bytes, " bytes but data_offsets [", e.begin, ", ", e.end,
                           "] hold ", e.end - e.begin);
  }
  return e;
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view text) {
  for (const auto& [d, name] : kDTypeNames) {
    if (name == text) return d;
  }
  return InvalidArgument("unsupported safetensors dtype '", text,
                         "' (supported: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL)");
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(absl::string_view path) {
  SafetensorsFile file;
  file.path_ = std::string(path);
  file.fd_ = ::open(file.path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd_ < 0) {
    return NotFound("safetensors '", path, "': cannot open: ", std::strerror(errno));
  }
  struct stat st;
  if (::fstat(file.fd_, &st) != 0) {
    return NotFound("safetensors '", path, "': cannot stat: ", std::strerror(errno));
  }
  const int64_t file_size = st.st_size;
  if (file_size < 8) {
    return absl::DataLossError(absl::StrCat("safetensors '", path, "': file is ", file_size,
                                            " bytes, too short for the 8-byte header length"));
  }
  unsigned char len_bytes[8];
  MS_RETURN_IF_ERROR(PreadFully(file.fd_, reinterpret_cast<char*>(len_bytes), 8, 0),
                     "safetensors '", path, "'");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > static_cast<uint64_t>(kMaxHeaderBytes)) {
    return InvalidArgument("safetensors '", path, "': header length ", header_len,
                           " exceeds the 100 MB limit (not a safetensors file?)");
  }
  if (static_cast<int64_t>(header_len) > file_size - 8) {
    return absl::DataLossError(absl::StrCat("safetensors '", path, "': header length ",
                                            header_len, " but the file has only ",
                                            file_size - 8, " bytes after it (truncated?)"));
  }
  std::string header(header_len, '\0');
  MS_RETURN_IF_ERROR(PreadFully(file.fd_, header.data(), header_len, 8),
                     "safetensors '", path, "'");
  file.data_start_ = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = file_size - file.data_start_;
  const json root = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgument("safetensors '", path, "': header is not a JSON object");
  }
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) {
        return InvalidArgument("safetensors '", path, "': __metadata__ is not an object");
      }
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return InvalidArgument("safetensors '", path, "': __metadata__ value for '", k,
                                 "' is not a string");
        }
        file.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    MS_ASSIGN_OR_RETURN(Entry e, ParseEntry(name, value, data_size), "safetensors '", path,
                        "': tensor '", name, "'");
    file.entries_.push_back(std::move(e));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : file.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  // Each non-empty entry against the non-empty one reaching furthest before it
  // (comparing only neighbours missed an overlap across an empty entry).
  const Entry* furthest = nullptr;
  for (const Entry* e : by_offset) {
    const Entry& cur = *e;
    if (cur.begin == cur.end) continue;
    if (furthest != nullptr && cur.begin < furthest->end) {
      const Entry& prev = *furthest;
      return InvalidArgument("safetensors '", path, "': tensors '", prev.name, "' [", prev.begin,
                             ", ", prev.end, ") and '", cur.name, "' [", cur.begin, ", ",
                             cur.end, ") overlap");
    }
    if (furthest == nullptr || cur.end > furthest->end) furthest = &cur;
  }
  std::sort(file.entries_.begin(), file.entries_.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return file;
}

const SafetensorsFile::Entry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, absl::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<Tensor> SafetensorsFile::ReadBox(absl::string_view name, const Box& box,
                                                std::optional<DType> out_dtype) const {
  const Entry* e = Find(name);
  if (e == nullptr) return NotFound("safetensors '", path_, "': no tensor '", name, "'");
  const std::string where = absl::StrCat("safetensors '", path_, "': tensor '", name, "' ",
                                         DTypeShortName(e->dtype), ShapeToString(e->shape));
  if (box.rank() != static_cast<int>(e->shape.size())) {
    return InvalidArgument(where, ": box ", box.ToString(), " has rank ", box.rank());
  }
  for (const Interval& iv : box.dims()) {
    if (iv.end < iv.begin) return InvalidArgument(where, ": box ", box.ToString(), " has end < begin");
  }
  // Every dim's bounds, even of an empty box: [1:4, 0:0] of a [3, 0] tensor is outside it.
  for (int d = 0; d < box.rank(); ++d) {
    if (box[d].begin < 0 || box[d].end > e->shape[d]) {
      return OutOfRange(where, ": box ", box.ToString(), " is not inside the tensor");
    }
  }
  MS_ASSIGN_OR_RETURN(Tensor raw, Tensor::CreateUninitialized(e->dtype, box.shape()));
  if (raw.NumElements() > 0) {
    // Contiguous runs: merge inner dims the box covers entirely.
    const int rank = box.rank();
    const int64_t elem = DTypeSize(e->dtype);
    const std::vector<int64_t> strides = RowMajorStrides(e->shape);
    int64_t run = 1;
    int k = rank;
    while (k > 0) {
      run *= box[k - 1].size();
      --k;
      if (box[k].size() != e->shape[k]) break;
    }
    const int64_t num_runs = raw.NumElements() / run;
    char* dst = raw.raw_data();
    for (int64_t r = 0; r < num_runs; ++r) {
      int64_t rem = r, flat = 0;
      for (int d = rank - 1; d >= 0; --d) {
        if (d >= k) {
          flat += box[d].begin * strides[d];
        } else {
          flat += (box[d].begin + rem % box[d].size()) * strides[d];
          rem /= box[d].size();
        }
      }
      MS_RETURN_IF_ERROR(PreadFully(fd_, dst + r * run * elem, run * elem,
                                    data_start_ + e->begin + flat * elem),
                         "tensor '", name, "': safetensors '", path_, "'");
    }
  }
  if (!out_dtype.has_value() || *out_dtype == e->dtype) return raw;
  return ConvertDType(raw, *out_dtype);
}

absl::StatusOr<Tensor> SafetensorsFile::Read(absl::string_view name,
                                             std::optional<DType> out_dtype) const {
  const Entry* e = Find(name);
  if (e == nullptr) return NotFound("safetensors '", path_, "': no tensor '", name, "'");
  return ReadBox(name, Box::FromShape(e->shape), out_dtype);
}

absl::Status WriteSafetensors(absl::string_view path, const std::map<std::string, Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json root = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    root["__metadata__"] = meta;
  }
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") {
      return InvalidArgument("safetensors '", path, "': invalid tensor name '", name, "'");
    }
    root[name] = {{"dtype", std::string(SafetensorsDTypeName(t.dtype()))},
                  {"shape", t.shape()},
                  {"data_offsets", {offset, offset + t.NumBytes()}}};
    offset += t.NumBytes();
  }
  std::string header = root.dump(-1, ' ', false, json::error_handler_t::replace);
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(std::string(path), std::ios::binary | std::ios::trunc);
  if (!out) return Unavailable("safetensors '", path, "': cannot open for writing");
  char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out.write(len, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : tensors) {
    out.write(t.raw_data(), static_cast<std::streamsize>(t.NumBytes()));
  }
  out.close();
  if (!out) return Unavailable("safetensors '", path, "': write failed");
  return absl::OkStatus();
}

}  // namespace meshserve
