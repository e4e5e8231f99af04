#include "common/rpc/zero_copy/bytes_field_wire.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/inference.pb.h"
#include "proto/worker_service.pb.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;

constexpr int kParamChunkData = ParamChunk::kDataFieldNumber;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

// `bytes` as a byte buffer of slices cut at `cuts` (offsets, ascending).
grpc::ByteBuffer Cut(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + begin, cut - begin);  // copies
    begin = cut;
  }
  slices.emplace_back(bytes.data() + begin, bytes.size() - begin);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xFF);
  return s;
}

TEST(BytesFieldWireTest, EncodedParamChunksParseAsTheSameProtobuf) {
  struct Case {
    int64_t total, offset;
    int dtype;
    size_t n;
  };
  for (const Case& c : {Case{0, 0, 0, 0}, Case{1, 0, 1, 1}, Case{3 << 20, 1 << 20, 2, 1 << 20},
                        Case{-1, -5, 7, 3}, Case{int64_t{1} << 40, 0, -3, 200}}) {
    ParamChunk header;
    header.set_total_bytes(c.total);
    header.set_offset(c.offset);
    header.set_dtype(static_cast<DTypeProto>(c.dtype));
    auto owner = std::make_shared<std::string>(Pattern(c.n));
    grpc::ByteBuffer buffer =
        EncodeWithBytesField(header.SerializeAsString(), kParamChunkData, *owner, owner);
    ParamChunk parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer))) << c.total;
    EXPECT_EQ(parsed.total_bytes(), c.total);
    EXPECT_EQ(parsed.offset(), c.offset);
    EXPECT_EQ(static_cast<int>(parsed.dtype()), c.dtype);
    EXPECT_EQ(parsed.data(), *owner);

    BytesFieldSplit split;
    ASSERT_THAT(SplitBytesField(buffer, kParamChunkData, &split), IsOk());
    EXPECT_EQ(split.other_fields, header.SerializeAsString());
    EXPECT_EQ(Join(split.data), *owner);
    EXPECT_EQ(split.data_bytes(), static_cast<int64_t>(c.n));
  }
}

TEST(BytesFieldWireTest, EncodeSharesTheDataAndHoldsItsOwnerUntilTheLastSliceGoes) {
  auto owner = std::make_shared<std::string>(Pattern(4096));
  std::weak_ptr<std::string> watch = owner;
  const char* data = owner->data();
  {
    grpc::ByteBuffer buffer = EncodeWithBytesField("", kParamChunkData, *owner, owner);
    owner.reset();
    EXPECT_FALSE(watch.expired());  // the buffer's data slice holds it
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), data);  // not a copy
    grpc::ByteBuffer copy(buffer);
    buffer.Clear();
    slices.clear();
    EXPECT_FALSE(watch.expired());  // the copy still refers to it
    copy.Clear();
  }
  EXPECT_TRUE(watch.expired());
}

TEST(BytesFieldWireTest, EncodesARepeatedBytesFieldOneValueEachInOrder) {
  inference::ModelInferRequest header;
  header.set_model_name("linear");
  header.add_inputs()->set_name("a");
  header.add_inputs()->set_name("b");
  header.add_inputs()->set_name("c");
  auto owner = std::make_shared<std::vector<std::string>>(
      std::vector<std::string>{Pattern(5000), "", Pattern(3)});
  std::weak_ptr<std::vector<std::string>> watch = owner;
  const std::vector<absl::string_view> values(owner->begin(), owner->end());
  grpc::ByteBuffer buffer = EncodeWithBytesFields(
      header.SerializeAsString(),
      inference::ModelInferRequest::kRawInputContentsFieldNumber, values, owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  inference::ModelInferRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_EQ(parsed.model_name(), "linear");
  ASSERT_EQ(parsed.inputs_size(), 3);
  ASSERT_EQ(parsed.raw_input_contents_size(), 3);
  EXPECT_EQ(parsed.raw_input_contents(0), Pattern(5000));
  EXPECT_EQ(parsed.raw_input_contents(1), "");
  EXPECT_EQ(parsed.raw_input_contents(2), Pattern(3));
  buffer.Clear();
  EXPECT_TRUE(watch.expired());

  grpc::ByteBuffer none = EncodeWithBytesFields(
      header.SerializeAsString(), inference::ModelInferRequest::kRawInputContentsFieldNumber,
      {}, nullptr);
  ASSERT_TRUE(parsed.ParseFromString(Flatten(none)));
  EXPECT_EQ(parsed.raw_input_contents_size(), 0);
  EXPECT_EQ(parsed.inputs_size(), 3);
}

TEST(BytesFieldWireTest, SplitsProtobufsBytesCutAnywhereIntoViewsOfItsSlices) {
  StageParamChunk chunk;
  chunk.set_model("m");
  chunk.set_generation(3);
  chunk.set_version(9);
  chunk.set_param("w");
  chunk.mutable_box()->add_begin(2);
  chunk.mutable_box()->add_end(5);
  chunk.set_total_bytes(1000);
  chunk.set_offset(300);
  chunk.set_data(Pattern(100));
  const std::string bytes = chunk.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); a += 3) {
    for (size_t b = a; b <= bytes.size(); b += 17) {
      grpc::ByteBuffer buffer = Cut(bytes, {a, b});
      BytesFieldSplit split;
      ASSERT_THAT(SplitBytesField(buffer, StageParamChunk::kDataFieldNumber, &split), IsOk())
          << a << " " << b;
      StageParamChunk back;
      ASSERT_TRUE(back.ParseFromString(split.other_fields));
      EXPECT_EQ(back.data(), "");
      back.set_data(Join(split.data));
      EXPECT_EQ(back.SerializeAsString(), bytes) << a << " " << b;
      for (absl::string_view piece : split.data) {  // views into its own slices
        bool inside = false;
        for (const grpc::Slice& s : split.slices) {
          const char* begin = reinterpret_cast<const char*>(s.begin());
          inside |= piece.data() >= begin && piece.data() + piece.size() <= begin + s.size();
        }
        EXPECT_TRUE(inside);
      }
    }
  }
}

TEST(BytesFieldWireTest, KeepsUnknownFieldsAndTakesTheLastBytesField) {
  std::string bytes;
  bytes += std::string("\x08\x05", 2);         // total_bytes 5
  bytes += std::string("\x38\x96\x01", 3);     // field 7 varint (unknown)
  bytes += std::string("\x1A\x02" "ab", 4);    // data "ab"
  bytes += std::string("\x29" "12345678", 9);  // field 5 fixed64 (unknown)
  bytes += std::string("\x35" "1234", 5);      // field 6 fixed32 (unknown)
  bytes += std::string("\x42\x03" "xyz", 5);   // field 8 bytes (unknown)
  bytes += std::string("\x1A\x03" "cde", 5);   // data again: the last wins
  bytes += std::string("\x08\x87\x80\x00", 4); // total_bytes again, padded: 7
  ParamChunk reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  BytesFieldSplit split;
  ASSERT_THAT(SplitBytesField(Cut(bytes, {7, 8}), kParamChunkData, &split), IsOk());
  ParamChunk back;
  ASSERT_TRUE(back.ParseFromString(split.other_fields));
  back.set_data(Join(split.data));
  EXPECT_EQ(back.total_bytes(), 7);
  EXPECT_EQ(back.data(), "cde");
  EXPECT_EQ(back.SerializeAsString(), reference.SerializeAsString());
}

TEST(BytesFieldWireTest, CopiesEachValueOfARepeatedBytesFieldOutAndClearsTheBuffer) {
  inference::ModelInferResponse response;
  response.set_model_name("linear");
  response.set_id("r1");
  for (const char* name : {"a", "b", "c"}) {
    auto* out = response.add_outputs();
    out->set_name(name);
    out->set_datatype("FP32");
    out->add_shape(2);
  }
  const std::vector<std::string> values = {Pattern(5000), "", Pattern(3)};
  for (const std::string& v : values) response.add_raw_output_contents(v);
  (*response.mutable_parameters())["batch_size"].set_int64_param(4);
  const std::string bytes = response.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); a += 97) {
    for (size_t b = a; b <= bytes.size(); b += 1201) {
      grpc::ByteBuffer buffer = Cut(bytes, {a, b});
      std::string other_fields;
      std::vector<std::string> got;
      ASSERT_THAT(SplitRepeatedBytesField(
                      &buffer, inference::ModelInferResponse::kRawOutputContentsFieldNumber,
                      &other_fields, &got),
                  IsOk())
          << a << " " << b;
      EXPECT_EQ(buffer.Length(), 0u);  // the slices went as they were read
      EXPECT_EQ(got, values) << a << " " << b;
      inference::ModelInferResponse back;
      ASSERT_TRUE(back.ParseFromString(other_fields));
      EXPECT_EQ(back.raw_output_contents_size(), 0);
      for (const std::string& v : got) back.add_raw_output_contents(v);
      EXPECT_EQ(back.SerializeAsString(), bytes) << a << " " << b;
    }
  }
}

TEST(BytesFieldWireTest, RefusesMalformedBytesNamingWhere) {
  struct Case {
    std::string bytes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {std::string("\x08", 1), "varint field at byte 1 is truncated"},
      {std::string("\x08\x05\x1A\x05" "ab", 6), "field 3 at byte 2 has length 5 past the end"},
      {std::string("\x00\x01", 2), "field number 0 at byte 0"},
      {std::string("\x0B\x0C", 2), "field 1 at byte 0 has wire type 3"},
      {std::string("\x1B", 1), "field 3 at byte 0 has wire type 3, expected 2"},
      {std::string("\x1D" "1234", 5), "field 3 at byte 0 has wire type 5, expected 2"},
      {std::string("\x08\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 12),
       "varint field at byte 1 is over 10 bytes"},
      {std::string("\x88\x80\x80\x80\x80\x00", 6), "field tag at byte 0 is over 5 bytes"},
      {std::string("\x29" "1234", 5), "field 5 at byte 0 is truncated"},
      {std::string("\x42\xFF\xFF\xFF\xFF\x07", 6), "field 8 at byte 0 has length 2147483647"},
  };
  for (const Case& c : cases) {
    BytesFieldSplit split;
    EXPECT_THAT(SplitBytesField(Cut(c.bytes, {}), kParamChunkData, &split),
                StatusIs(absl::StatusCode::kInvalidArgument, c.message))
        << c.message;
    grpc::ByteBuffer buffer = Cut(c.bytes, {1});
    std::string other_fields;
    std::vector<std::string> values;
    EXPECT_THAT(SplitRepeatedBytesField(&buffer, kParamChunkData, &other_fields, &values),
                StatusIs(absl::StatusCode::kInvalidArgument, c.message))
        << c.message;
  }
}

}  // namespace
}  // namespace meshserve
