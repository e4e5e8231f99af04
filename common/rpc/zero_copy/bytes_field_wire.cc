#include "common/rpc/zero_copy/bytes_field_wire.h"

#include <algorithm>
#include <utility>

#include "absl/functional/function_ref.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

// protobuf reads a varint field as up to 10 bytes, a tag or a length as up
// to 5 (a 32-bit varint), and refuses lengths this close to INT32_MAX.
constexpr int kMaxVarintBytes = 10;
constexpr int kMaxVarint32Bytes = 5;
constexpr uint64_t kMaxLength = 0x7FFFFFFF - 16;
constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void ReleaseKeepAlive(void* user_data) {
  delete static_cast<std::shared_ptr<const void>*>(user_data);
}

// Reads a list of slices in order, across slice boundaries.
class SliceReader {
 public:
  // `release`: each slice is dropped (its memory freed unless shared) once
  // read past, so that what a caller copies out replaces it.
  SliceReader(std::vector<grpc::Slice>& slices, bool release)
      : slices_(slices), release_(release) {
    for (const grpc::Slice& slice : slices_) total_ += static_cast<int64_t>(slice.size());
    SkipEmpty();
  }

  bool done() const { return index_ == slices_.size(); }
  int64_t position() const { return position_; }
  int64_t remaining() const { return total_ - position_; }

  // protobuf's varint: at most max_bytes bytes, the bits past 64 dropped.
  absl::Status ReadVarint(uint64_t* value, const char* what, int max_bytes) {
    const int64_t start = position_;
    uint64_t result = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (done()) return InvalidArgument(what, " at byte ", start, " is truncated");
      const uint8_t byte = slices_[index_].begin()[at_];
      Advance(1);
      result |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
      if ((byte & 0x80) == 0) {
        *value = result;
        return absl::OkStatus();
      }
    }
    return InvalidArgument(what, " at byte ", start, " is over ", max_bytes, " bytes");
  }

  // The next n bytes: appended to *pieces as views into the slices when
  // pieces is not null, else to *copy when that is not null; false when fewer
  // than n are left.
  bool Take(uint64_t n, std::vector<absl::string_view>* pieces, std::string* copy) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& slice = slices_[index_];
      const size_t here = static_cast<size_t>(std::min<uint64_t>(n, slice.size() - at_));
      const char* begin = reinterpret_cast<const char*>(slice.begin()) + at_;
      if (pieces != nullptr) {
        pieces->emplace_back(begin, here);
      } else if (copy != nullptr) {
        copy->append(begin, here);
      }
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    at_ += n;
    position_ += static_cast<int64_t>(n);
    if (at_ == slices_[index_].size()) {
      if (release_) slices_[index_] = grpc::Slice();
      ++index_;
      at_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }

  std::vector<grpc::Slice>& slices_;
  const bool release_;
  int64_t total_ = 0;  // bytes in all the slices
  size_t index_ = 0;  // the slice being read
  size_t at_ = 0;     // within it
  int64_t position_ = 0;
};

}  // namespace

int64_t BytesFieldSplit::data_bytes() const {
  int64_t n = 0;
  for (absl::string_view piece : data) n += static_cast<int64_t>(piece.size());
  return n;
}

grpc::ByteBuffer EncodeWithBytesField(std::string other_fields, int field_number,
                                      absl::string_view data,
                                      std::shared_ptr<const void> keep_alive) {
  // proto3 writes no empty bytes field: then the buffer is the other fields.
  return EncodeWithBytesFields(
      std::move(other_fields), field_number,
      data.empty() ? absl::Span<const absl::string_view>() : absl::MakeConstSpan(&data, 1),
      std::move(keep_alive));
}

grpc::ByteBuffer EncodeWithBytesFields(std::string other_fields, int field_number,
                                       absl::Span<const absl::string_view> values,
                                       std::shared_ptr<const void> keep_alive) {
  std::vector<grpc::Slice> slices;
  std::string head = std::move(other_fields);  // what goes before the next value
  for (absl::string_view value : values) {
    PutVarint((static_cast<uint64_t>(field_number) << 3) | kLengthDelimited, &head);
    PutVarint(value.size(), &head);
    slices.emplace_back(head);
    head.clear();
    if (!value.empty()) {
      slices.emplace_back(const_cast<char*>(value.data()), value.size(), &ReleaseKeepAlive,
                          new std::shared_ptr<const void>(keep_alive));
    }
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

namespace {

// Walks the message: every field but `field_number` is appended to
// *other_fields as it came; each occurrence of that field is handed to
// take_ours(length), which must read exactly `length` bytes from `in` (at
// least that many are left).
absl::Status WalkFields(SliceReader& in, int field_number, std::string* other_fields,
                        absl::FunctionRef<void(uint64_t length)> take_ours) {
  while (!in.done()) {
    const int64_t start = in.position();
    uint64_t tag = 0;
    MS_RETURN_IF_ERROR(in.ReadVarint(&tag, "a field tag", kMaxVarint32Bytes));
    const uint64_t number = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (number == 0 || number > kMaxFieldNumber) {
      return InvalidArgument("field number ", number, " at byte ", start);
    }
    const bool ours = number == static_cast<uint64_t>(field_number);
    if (ours && wire_type != kLengthDelimited) {
      return InvalidArgument("field ", number, " at byte ", start, " has wire type ", wire_type,
                             ", expected ", static_cast<int>(kLengthDelimited));
    }
    // Every field but ours is copied as it came (ours has wire type 2 here).
    std::string* copy = ours ? nullptr : other_fields;
    if (copy != nullptr) PutVarint(tag, copy);
    switch (wire_type) {
      case kVarint: {
        uint64_t value = 0;
        MS_RETURN_IF_ERROR(in.ReadVarint(&value, "a varint field", kMaxVarintBytes));
        PutVarint(value, copy);
        break;
      }
      case kFixed64:
      case kFixed32:
        if (!in.Take(wire_type == kFixed64 ? 8 : 4, nullptr, copy)) {
          return InvalidArgument("field ", number, " at byte ", start, " is truncated");
        }
        break;
      case kLengthDelimited: {
        uint64_t length = 0;
        MS_RETURN_IF_ERROR(in.ReadVarint(&length, "a length", kMaxVarint32Bytes));
        if (length > kMaxLength) {
          return InvalidArgument("field ", number, " at byte ", start, " has length ", length);
        }
        if (static_cast<int64_t>(length) > in.remaining()) {
          return InvalidArgument("field ", number, " at byte ", start, " has length ", length,
                                 " past the end of the message");
        }
        if (ours) {
          take_ours(length);
        } else {
          PutVarint(length, copy);
          in.Take(length, nullptr, copy);
        }
        break;
      }
      default:
        return InvalidArgument("field ", number, " at byte ", start, " has wire type ",
                               wire_type);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitBytesField(const grpc::ByteBuffer& buffer, int field_number,
                             BytesFieldSplit* out) {
  *out = BytesFieldSplit();
  grpc::Status dumped = buffer.Dump(&out->slices);
  if (!dumped.ok()) return InvalidArgument("unreadable message: ", dumped.error_message());
  SliceReader in(out->slices, /*release=*/false);
  return WalkFields(in, field_number, &out->other_fields, [&](uint64_t length) {
    std::vector<absl::string_view> pieces;
    in.Take(length, &pieces, nullptr);
    out->data = std::move(pieces);  // the last one wins
  });
}

absl::Status SplitRepeatedBytesField(grpc::ByteBuffer* buffer, int field_number,
                                     std::string* other_fields,
                                     std::vector<std::string>* values) {
  other_fields->clear();
  values->clear();
  std::vector<grpc::Slice> slices;
  grpc::Status dumped = buffer->Dump(&slices);
  buffer->Clear();  // `slices` holds the only references now
  if (!dumped.ok()) return InvalidArgument("unreadable message: ", dumped.error_message());
  SliceReader in(slices, /*release=*/true);
  return WalkFields(in, field_number, other_fields, [&](uint64_t length) {
    std::string& value = values->emplace_back();
    value.reserve(static_cast<size_t>(length));  // at most what is left: checked
    in.Take(length, nullptr, &value);
  });
}

}  // namespace meshserve
