#include "server/coordinator/http/rest_handlers.h"

#include <cstring>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(InferRequestFromJsonTest, ParsesInputsOutputsAndOutSharding) {
  auto r = InferRequestFromJson("linear", R"j({"id": "r1",
      "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
                  "data": [[1, 2], [3, 4.5]]}],
      "outputs": [{"name": "y", "parameters": {"out_sharding": "P('data', None)"}}]})j");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "linear");
  EXPECT_EQ(r->id, "r1");
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].name, "x");
  EXPECT_EQ(r->inputs[0].dtype, DType::kFloat32);
  EXPECT_THAT(r->inputs[0].shape, ElementsAre(2, 2));
  EXPECT_THAT(Floats(r->inputs[0].bytes), ElementsAre(1, 2, 3, 4.5));
  EXPECT_THAT(r->requested_outputs, ElementsAre("y"));
  EXPECT_EQ(r->out_shardings.at("y"), "P('data', None)");
}

TEST(InferRequestFromJsonTest, IntegerAndBoolDatatypes) {
  auto r = InferRequestFromJson("m", R"j({"inputs": [
      {"name": "a", "shape": [2], "datatype": "INT32", "data": [-1, 7]},
      {"name": "b", "shape": [2], "datatype": "BOOL", "data": [true, false]},
      {"name": "c", "shape": [1], "datatype": "UINT8", "data": [255]}]})j");
  ASSERT_TRUE(r.ok()) << r.status();
  int32_t a[2];
  std::memcpy(a, r->inputs[0].bytes.data(), 8);
  EXPECT_EQ(a[0], -1);
  EXPECT_EQ(a[1], 7);
  EXPECT_EQ(r->inputs[1].bytes, std::string("\x01\x00", 2));
  EXPECT_EQ(r->inputs[2].bytes, "\xff");
}

TEST(InferRequestFromJsonTest, RejectsBadRequests) {
  const std::pair<const char*, const char*> cases[] = {  // body, the error names
      {"{not json", "not a JSON object"},
      {R"j({"inputs": 3})j", "\"inputs\""},
      {R"j({"inputs": [{"name": "x", "shape": [1], "datatype": "NOPE", "data": [1]}]})j",
       "input 'x'"},
      {R"j({"inputs": [{"name": "x", "shape": [1], "datatype": "INT8", "data": [300]}]})j",
       "300 is out of range"},
      {R"j({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1.5]}]})j",
       "expected an integer"},
      {R"j({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ["a"]}]})j",
       "expected a number"},
      {R"j({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]})j", "no \"data\""},
      {R"j({"inputs": [], "outputs": [{"name": "y", "parameters": {"out_sharding": 3}}]})j",
       "must be a string"},
  };
  for (const auto& [body, error] : cases) {
    EXPECT_THAT(InferRequestFromJson("m", body),
                StatusIs(absl::StatusCode::kInvalidArgument, error))
        << body;
  }
}

TEST(InferResponseToJsonTest, FlatDataTypeAndGeneration) {
  InferResponse response;
  response.model = "linear";
  response.id = "r1";
  response.generation = 3;
  InferOutput out;
  out.tensor.name = "y";
  out.tensor.dtype = DType::kFloat32;
  out.tensor.shape = {1, 2};
  out.type_str = "float32[1,2]";
  const float values[2] = {0.5f, -2};
  out.tensor.bytes.assign(reinterpret_cast<const char*>(values), sizeof(values));
  response.outputs.push_back(out);
  const Json j = Json::parse(InferResponseToJson(response));
  EXPECT_EQ(j["model_name"], "linear");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "r1");
  const Json& y = j["outputs"][0];
  EXPECT_EQ(y["name"], "y");
  EXPECT_EQ(y["datatype"], "FP32");
  EXPECT_EQ(y["shape"], Json({1, 2}));
  EXPECT_EQ(y["data"], Json({0.5, -2.0}));
  EXPECT_EQ(y["parameters"]["type"], "float32[1,2]");
  EXPECT_EQ(y["parameters"]["generation"], 3);
}

TEST(RestHandlersTest, InferOverTheLimitsIs413NamingThem) {
  RequestLimits limits;
  limits.max_tensor_elements = 3;
  const RestHandlers rest(/*coordinator=*/nullptr, limits);  // refused before the core
  HttpReply reply = rest.Infer("linear", R"j({"inputs": [{"name": "x", "shape": [2, 2],
      "datatype": "FP32", "data": [1, 2, 3, 4]}]})j");
  EXPECT_EQ(reply.status, 413);
  EXPECT_THAT(reply.body, HasSubstr("4 elements (shape [2, 2]) exceed --max_tensor_elements=3"));
}

TEST(HttpStatusForTest, ProtocolCodes) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kFailedPrecondition), 412);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
}

TEST(ErrorReplyTest, ProtocolErrorShape) {
  const HttpReply reply = ErrorReply(absl::NotFoundError("model 'x' not found"));
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(Json::parse(reply.body), Json({{"error", "model 'x' not found"}}));
}

}  // namespace
}  // namespace meshserve
