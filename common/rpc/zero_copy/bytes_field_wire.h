// A protobuf message with one large `bytes` field, on the wire as gRPC byte
// buffers without protobuf's copies of that field (ReadParam's ParamChunk,
// StageParams' StageParamChunk: ~1 MiB of tensor bytes each; the client's
// ModelInferRequest, whose raw_input_contents repeat).
//
// Through the generated code such a message costs up to three copies of its
// data besides the kernel's: into the message (set_data), into gRPC's slices
// (serialisation) on the sender, into a std::string (parsing) on the
// receiver. Here:
//  - EncodeWithBytesField makes the buffer of the message's other fields
//    (serialised by the caller: a few bytes) followed by the bytes field's tag,
//    its length and one slice over the caller's memory, kept alive by the
//    caller's owner until gRPC (and every copy of the buffer) lets go of the
//    slice;
//  - SplitBytesField reads a received buffer into the other fields' bytes (a
//    small copy, for the caller to parse with protobuf) and the bytes field's
//    data as views into the received slices; SplitRepeatedBytesField copies
//    each value of a repeated bytes field out while it releases the slices.
// Fields may come in any order (protobuf's rule), so "other fields, then the
// bytes field" parses as the same message; a message with the bytes field
// twice takes the last, as protobuf does.
//
// SplitBytesField refuses (kInvalidArgument, naming the byte offset) what
// protobuf's parser refuses: truncated varints or fields, varints over 10
// bytes (tags and lengths over 5), field number 0, lengths past the end or
// over protobuf's limit. It is stricter in two places, where protobuf would
// keep the field as unknown: groups (wire types 3, 4), and the bytes field's
// number with another wire type; no peer of ours writes either. So the other
// fields it returns, parsed by protobuf, with the data set, equal what
// protobuf parses of the whole buffer (tests/fuzz/bytes_field_wire_fuzz.cc
// checks that on ParamChunk for any input).
//
// Thread-safety: free functions; a BytesFieldSplit is a value.
#ifndef MESHSERVE_COMMON_RPC_ZERO_COPY_BYTES_FIELD_WIRE_H_
#define MESHSERVE_COMMON_RPC_ZERO_COPY_BYTES_FIELD_WIRE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace meshserve {

// A received message split around its bytes field: `data` is that field's
// bytes, in order, as views into `slices` (valid while this value lives, and
// after a move; a copy's views still point into the original's slices).
struct BytesFieldSplit {
  std::string other_fields;  // the wire bytes of every other field
  std::vector<absl::string_view> data;
  std::vector<grpc::Slice> slices;

  int64_t data_bytes() const;
};

// The message whose other fields are the serialised `other_fields` (which
// must not hold field `field_number`) and whose bytes field `field_number`
// is `data`, as a byte buffer whose last slice is `data` itself (none when
// `data` is empty). `keep_alive` must own the memory of `data`; the slice
// holds a reference to it. Cannot fail.
grpc::ByteBuffer EncodeWithBytesField(std::string other_fields, int field_number,
                                      absl::string_view data,
                                      std::shared_ptr<const void> keep_alive);

// The same for a repeated bytes field: one occurrence per value, in order
// (an empty value too), each value's slice holding `keep_alive`.
grpc::ByteBuffer EncodeWithBytesFields(std::string other_fields, int field_number,
                                       absl::Span<const absl::string_view> values,
                                       std::shared_ptr<const void> keep_alive);

// Splits `buffer` (see the file comment) into *out, replacing its contents.
// \error kInvalidArgument naming the byte offset and what is wrong there.
absl::Status SplitBytesField(const grpc::ByteBuffer& buffer, int field_number,
                             BytesFieldSplit* out);

// For a received message whose repeated bytes field carries most of its
// bytes (the client's ModelInferResponse, raw_output_contents): every
// occurrence of field `field_number` is copied, in order, into its own string
// of exactly its length (*values), the other fields' wire bytes into
// *other_fields, and `buffer` is cleared: each received slice is released
// once read, so the values replace the message in memory instead of doubling
// it (unless another copy of the buffer shares its slices). Errors as
// SplitBytesField's; *values and *other_fields are then unspecified.
absl::Status SplitRepeatedBytesField(grpc::ByteBuffer* buffer, int field_number,
                                     std::string* other_fields,
                                     std::vector<std::string>* values);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_ZERO_COPY_BYTES_FIELD_WIRE_H_
