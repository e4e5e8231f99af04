// InferenceClient against an in-process fake coordinator on loopback, NamedTensor,
// DecodeOutputTensor and ParseDims (inference_client.h).
#include "client/inference_client.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/cli_format.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Doubles every FP32 input ("x" -> output "y"), remembers the last request.
class FakeInference final : public inference::GRPCInferenceService::Service {
 public:
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    response->set_ready(ready);
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    response->set_ready(request->name() == "double");
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*,
                             const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    if (request->name() != "double") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "model '" + request->name() + "'");
    }
    response->set_name("double");
    auto* in = response->add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    response->add_outputs()->set_name("y");
    response->add_outputs()->set_name("z");
    return grpc::Status::OK;
  }
  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    {
      absl::MutexLock lock(&mu);
      last = *request;
    }
    if (request->model_name() != "double") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "model '" + request->model_name() + "' not found");
    }
    if (request->raw_input_contents_size() != 1 || request->inputs_size() != 1) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "want one raw input");
    }
    std::string bytes = request->raw_input_contents(0);
    std::vector<float> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    for (float& v : values) v *= 2;
    response->set_model_name("double");
    response->set_id(request->id());
    auto* out = response->add_outputs();
    out->set_name("y");
    out->set_datatype("FP32");
    *out->mutable_shape() = request->inputs(0).shape();
    (*out->mutable_parameters())["type_str"].set_string_param("float32[2,2@data]");
    response->add_raw_output_contents(FloatBytes(values));
    return grpc::Status::OK;
  }

  bool ready = true;
  absl::Mutex mu;
  inference::ModelInferRequest last ABSL_GUARDED_BY(mu);
};

class FakeCluster final : public ClusterService::Service {
 public:
  grpc::Status Describe(grpc::ServerContext*, const DescribeRequest* request,
                        DescribeResponse* response) override {
    response->set_model(request->model());
    response->set_mesh("mesh[data=2]");
    auto* v = response->add_values();
    v->set_name("x");
    v->set_kind("input");
    auto it = request->input_shapes().find("x");
    v->set_type_str(it == request->input_shapes().end()
                        ? "?"
                        : "float32[" + std::to_string(it->second.dims(0)) + "@data]");
    return grpc::Status::OK;
  }
  grpc::Status Status(grpc::ServerContext*, const ClusterStatusRequest*,
                      ClusterStatusResponse*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no workers");
  }
};

class InferenceClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&inference_);
    builder.RegisterService(&cluster_);
    server_ = builder.BuildAndStart();
    ASSERT_GT(port_, 0);
    ASSERT_OK_AND_ASSIGN(client_,
                         InferenceClient::Create("127.0.0.1:" + std::to_string(port_)));
  }
  void TearDown() override { server_->Shutdown(); }

  absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

  FakeInference inference_;
  FakeCluster cluster_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<InferenceClient> client_;
};

TEST_F(InferenceClientTest, InferSendsRawBytesAndDecodesRawOutputs) {
  ASSERT_OK_AND_ASSIGN(NamedTensor x, NamedTensor::Create("x", DType::kFloat32, {2, 2},
                                                        FloatBytes({1, 2, 3, 4})));
  ASSERT_OK_AND_ASSIGN(InferResult result, client_->Infer("double", {x}, {}, Deadline()));
  ASSERT_EQ(result.outputs.size(), 1u);
  const NamedTensor& y = result.outputs[0].tensor;
  EXPECT_EQ(y.name, "y");
  EXPECT_THAT(y.shape, ElementsAre(2, 2));
  ASSERT_OK_AND_ASSIGN(std::vector<float> values, y.ToFloat32());
  EXPECT_THAT(values, ElementsAre(2, 4, 6, 8));
  EXPECT_EQ(result.outputs[0].parameters.at("type_str"), "float32[2,2@data]");
  absl::MutexLock lock(&inference_.mu);
  EXPECT_EQ(inference_.last.inputs(0).datatype(), "FP32");
  EXPECT_EQ(inference_.last.raw_input_contents(0), FloatBytes({1, 2, 3, 4}));
  EXPECT_EQ(inference_.last.outputs_size(), 0);  // none requested: all returned
  EXPECT_EQ(result.id, inference_.last.id());
}

TEST_F(InferenceClientTest, OutShardingRequestsEveryOutputWithItsParameter) {
  ASSERT_OK_AND_ASSIGN(NamedTensor x, NamedTensor::Create("x", DType::kFloat32, {2},
                                                        FloatBytes({1, 2})));
  ASSERT_OK(client_->Infer("double", {x}, {{"y", "P('data')"}}, Deadline()).status());
  absl::MutexLock lock(&inference_.mu);
  ASSERT_EQ(inference_.last.outputs_size(), 2);
  EXPECT_EQ(inference_.last.outputs(0).name(), "y");
  EXPECT_EQ(inference_.last.outputs(0).parameters().at("out_sharding").string_param(),
            "P('data')");
  EXPECT_EQ(inference_.last.outputs(1).name(), "z");
  EXPECT_EQ(inference_.last.outputs(1).parameters().count("out_sharding"), 0u);
}

TEST_F(InferenceClientTest, ServerErrorsKeepTheirCode) {
  ASSERT_OK_AND_ASSIGN(NamedTensor x, NamedTensor::Create("x", DType::kFloat32, {1},
                                                        FloatBytes({1})));
  EXPECT_THAT(client_->Infer("nope", {x}, {}, Deadline()),
              StatusIs(absl::StatusCode::kNotFound, "model 'nope' not found"));
  EXPECT_THAT(client_->Status(Deadline()),
              StatusIs(absl::StatusCode::kUnavailable, "no workers"));
}

TEST_F(InferenceClientTest, InferRejectsBytesThatDoNotMatchTheShape) {
  NamedTensor bad{"x", DType::kFloat32, {2, 2}, std::string(3, '\0')};
  EXPECT_THAT(client_->Infer("double", {bad}, {}, Deadline()),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 16 bytes, got 3"));
}

TEST_F(InferenceClientTest, DescribeSendsInputShapes) {
  ASSERT_OK_AND_ASSIGN(DescribeResponse response,
                       client_->Describe("m", {{"x", {8, 4}}}, Deadline()));
  EXPECT_EQ(response.values(0).type_str(), "float32[8@data]");
  std::string text = FormatDescribe(response);
  EXPECT_THAT(text, HasSubstr("\nx  float32[8@data]\n"));
}

TEST_F(InferenceClientTest, WaitReadyForModelAndTimeout) {
  EXPECT_OK(client_->WaitReady(Deadline(), "double"));
  inference_.ready = false;
  EXPECT_THAT(client_->WaitReady(absl::Now() + absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "not ready"));
}

TEST(InferenceClientCreateTest, RejectsTargetWithoutPort) {
  EXPECT_THAT(InferenceClient::Create("localhost"),
              StatusIs(absl::StatusCode::kInvalidArgument, "localhost"));
}

TEST(InferenceClientCreateTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there.
  ASSERT_OK_AND_ASSIGN(auto client, InferenceClient::Create("127.0.0.1:1"));
  EXPECT_THAT(client->Status(absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(DecodeOutputTensorTest, TypedContentsAndLengthMismatch) {
  inference::ModelInferResponse::InferOutputTensor out;
  out.set_name("y");
  out.set_datatype("FP32");
  out.add_shape(2);
  out.mutable_contents()->add_fp32_contents(1.5f);
  out.mutable_contents()->add_fp32_contents(-1.0f);
  ASSERT_OK_AND_ASSIGN(NamedTensor t, DecodeOutputTensor(out, nullptr));
  EXPECT_EQ(t.bytes, FloatBytes({1.5f, -1.0f}));
  std::string raw(5, '\0');
  EXPECT_THAT(DecodeOutputTensor(out, &raw), StatusIs(absl::StatusCode::kInternal, "'y'"));
  out.set_datatype("NOPE");
  EXPECT_THAT(DecodeOutputTensor(out, nullptr),
              StatusIs(absl::StatusCode::kInternal, "NOPE"));
}

TEST(ParseDimsTest, FormsAndErrors) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDims("8,4096,2048"));
  EXPECT_THAT(dims, ElementsAre(8, 4096, 2048));
  ASSERT_OK_AND_ASSIGN(dims, ParseDims("[2, 3]"));
  EXPECT_THAT(dims, ElementsAre(2, 3));
  ASSERT_OK_AND_ASSIGN(dims, ParseDims("4x5"));
  EXPECT_THAT(dims, ElementsAre(4, 5));
  EXPECT_THAT(ParseDims("8,,2"), StatusIs(absl::StatusCode::kInvalidArgument, "8,,2"));
  EXPECT_THAT(ParseDims("8,-1"), StatusIs(absl::StatusCode::kInvalidArgument, "-1"));
  EXPECT_THAT(ParseDims(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace client
}  // namespace meshserve
