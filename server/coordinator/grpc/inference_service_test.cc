#include "server/coordinator/grpc/inference_service.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

inference::ModelInferRequest Base() {
  inference::ModelInferRequest r;
  r.set_model_name("m");
  r.set_id("abc");
  auto* in = r.add_inputs();
  in->set_name("x");
  in->set_datatype("FP32");
  in->add_shape(2);
  return r;
}

TEST(InferenceProtoTest, RawContents) {
  inference::ModelInferRequest r = Base();
  r.add_raw_input_contents(std::string(8, '\1'));
  auto* out = r.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["out_sharding"].set_string_param("P('data')");
  ASSERT_OK_AND_ASSIGN(InferRequest core, InferRequestFromProto(&r));
  EXPECT_EQ(core.model, "m");
  EXPECT_EQ(core.id, "abc");
  ASSERT_EQ(core.inputs.size(), 1u);
  EXPECT_EQ(core.inputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(core.inputs[0].bytes, std::string(8, '\1'));
  EXPECT_EQ(core.out_shardings.at("y"), "P('data')");
  EXPECT_THAT(core.requested_outputs, ::testing::ElementsAre("y"));
}

TEST(InferenceProtoTest, TypedContents) {
  inference::ModelInferRequest r = Base();
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.5f);
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(-2.0f);
  ASSERT_OK_AND_ASSIGN(InferRequest core, InferRequestFromProto(&r));
  float v[2];
  ASSERT_EQ(core.inputs[0].bytes.size(), sizeof(v));
  std::memcpy(v, core.inputs[0].bytes.data(), sizeof(v));
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  r.mutable_inputs(0)->set_datatype("INT32");
  r.mutable_inputs(0)->mutable_contents()->Clear();
  r.mutable_inputs(0)->mutable_contents()->add_int_contents(7);
  ASSERT_OK_AND_ASSIGN(core, InferRequestFromProto(&r));
  int32_t i;
  std::memcpy(&i, core.inputs[0].bytes.data(), sizeof(i));
  EXPECT_EQ(i, 7);
}

TEST(InferenceProtoTest, Errors) {
  inference::ModelInferRequest r = Base();
  r.mutable_inputs(0)->set_datatype("FP99");
  EXPECT_THAT(InferRequestFromProto(&r), StatusIs(absl::StatusCode::kInvalidArgument, "FP99"));
  r = Base();
  r.add_raw_input_contents("12345678");
  r.add_raw_input_contents("12345678");
  EXPECT_THAT(InferRequestFromProto(&r),
              StatusIs(absl::StatusCode::kInvalidArgument, "2 entries for 1 inputs"));
  r = Base();
  r.add_raw_input_contents("12345678");
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  EXPECT_THAT(InferRequestFromProto(&r),
              StatusIs(absl::StatusCode::kInvalidArgument, "contents given with raw"));
  r = Base();
  r.mutable_inputs(0)->set_datatype("BF16");
  EXPECT_THAT(InferRequestFromProto(&r),
              StatusIs(absl::StatusCode::kInvalidArgument, "BF16 can only be sent as raw"));
  r = Base();
  r.add_raw_input_contents("12345678");
  auto* out = r.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["out_sharding"].set_int64_param(3);
  EXPECT_THAT(InferRequestFromProto(&r),
              StatusIs(absl::StatusCode::kInvalidArgument, "must be a string_param"));
}

TEST(InferenceProtoTest, ResponseCarriesRawBytesAndType) {
  InferResponse response;
  response.model = "m";
  response.id = "abc";
  response.generation = 7;
  response.outputs.push_back(
      {{"y", DType::kBFloat16, {2, 2}, std::string(8, '\2')}, "bfloat16[2@data,2]"});
  inference::ModelInferResponse proto;
  InferResponseToProto(response, &proto);
  ASSERT_EQ(proto.outputs_size(), 1);
  EXPECT_EQ(proto.outputs(0).datatype(), "BF16");
  EXPECT_EQ(proto.outputs(0).parameters().at("type").string_param(), "bfloat16[2@data,2]");
  EXPECT_EQ(proto.outputs(0).parameters().at("generation").int64_param(), 7);
  EXPECT_EQ(proto.raw_output_contents(0), std::string(8, '\2'));
  EXPECT_EQ(proto.id(), "abc");
}

}  // namespace
}  // namespace meshserve
