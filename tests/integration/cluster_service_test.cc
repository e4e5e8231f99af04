// Service-level tests over loopback: the coordinator's gRPC server in this
// process (real JaxModelCompiler and GrpcWorkerClients) and real
// meshserve-worker processes that register with it.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "common/rpc/channel.h"
#include "proto/cluster_service.grpc.pb.h"
#include "proto/inference.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "common/model/model_file.h"
#include "server/coordinator/grpc/cluster_service.h"
#include "server/coordinator/grpc/coordinator_server.h"
#include "server/coordinator/grpc/grpc_worker_client.h"
#include "server/compiler/jax_model_compiler.h"
#include "tests/testing/status_matchers.h"

extern char** environ;

namespace meshserve {
namespace {

using ::testing::HasSubstr;

// y = relu(x) + x, and a linear layer with an all-ones kernel (row sums).
constexpr char kAct[] = R"({
  "name": "act", "mesh": {"data": -1}, "dtype": "float32",
  "inputs": {"x": {"shape": [-1, 8], "sharding": ["data", null]}},
  "params": {},
  "layers": [{"name": "r", "op": "relu", "input": "x"},
             {"name": "y", "op": "add", "inputs": ["r", "x"]}],
  "outputs": ["y"]
})";
constexpr char kLin[] = R"({
  "name": "lin", "mesh": {"data": 4}, "dtype": "float32",
  "inputs": {"x": {"shape": [-1, 8], "sharding": ["data", null]}},
  "params": {"kernel": {"shape": [8, 4], "sharding": [null, "data"], "init": "ones"}},
  "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "kernel",
              "out_sharding": ["data", null]}],
  "outputs": ["y"]
})";

// A one-block LM with grouped-query attention: 4 query heads over 2 kv heads
// of head_dim 2 (d = 8), heads on the model axis, a context of 16 positions.
// Per token and attention layer, its keys take 2 * 2 * 4 = 16 bytes over the
// mesh; sharded over model=2, each device holds 1 head: 8 bytes.
constexpr char kTinyLm[] = R"({
  "name": "tiny_lm", "mesh": {"model": 2}, "generation": {"context_length": 16},
  "inputs": {"ids": {"shape": [-1, -1], "dtype": "int32"}},
  "params": {"wte": {"shape": [32, 8]}, "wq": {"shape": [8, 8], "sharding": [null, "model"]},
             "wk": {"shape": [8, 4], "sharding": [null, "model"]},
             "wv": {"shape": [8, 4], "sharding": [null, "model"]}},
  "layers": [
    {"name": "tok", "op": "embed", "input": "ids", "table": "wte"},
    {"name": "q", "op": "einsum", "equation": "bsd,de->bse", "inputs": ["tok", "wq"]},
    {"name": "k", "op": "einsum", "equation": "bsd,de->bse", "inputs": ["tok", "wk"]},
    {"name": "v", "op": "einsum", "equation": "bsd,de->bse", "inputs": ["tok", "wv"]},
    {"name": "qh", "op": "reshape", "input": "q", "shape": [0, 0, 4, 2]},
    {"name": "kh", "op": "reshape", "input": "k", "shape": [0, 0, 2, 2]},
    {"name": "vh", "op": "reshape", "input": "v", "shape": [0, 0, 2, 2]},
    {"name": "attn", "op": "attention", "inputs": ["qh", "kh", "vh"], "scale": 0.5},
    {"name": "o2", "op": "reshape", "input": "attn", "shape": [0, 0, 8]},
    {"name": "h", "op": "add", "out_sharding": [null, null, null], "inputs": ["tok", "o2"]},
    {"name": "logits", "op": "einsum", "auto_axes": true, "out_sharding": [null, null, null],
     "equation": "bsd,vd->bsv", "inputs": ["h", "wte"]}],
  "outputs": ["logits"]
})";


TEST(KvCacheDescribeTest, EachAttentionLayerHasKeysAndValuesTypedOnTheMesh) {
  ASSERT_OK_AND_ASSIGN(ModelFile lm, ParseModelFile(kTinyLm, ""));
  // One worker hosting both devices: its bytes per token are both shards'.
  ASSERT_OK_AND_ASSIGN(Placement one, ComputePlacement(lm, {{7, "127.0.0.1:7"}}, 1));
  ASSERT_OK_AND_ASSIGN(std::vector<DescribeValue> values, KvCacheDescribeValues(lm, one));
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].name, "attn.k_cache");
  EXPECT_EQ(values[1].name, "attn.v_cache");
  for (const DescribeValue& v : values) {
    EXPECT_EQ(v.kind, "kv_cache");
    EXPECT_EQ(v.layer_op, "attention");
    // [context 16, kv_heads 2 on model, head_dim 2].
    EXPECT_EQ(v.type_str, "float32[16,2@model,2]");
    EXPECT_EQ(v.visualization, "bytes per token: worker 7 (devices 0,1): 16\n");
  }
  // Two workers: one kv head (8 bytes a token) each.
  ASSERT_OK_AND_ASSIGN(Placement two,
                       ComputePlacement(lm, {{3, "127.0.0.1:3"}, {5, "127.0.0.1:5"}}, 1));
  ASSERT_OK_AND_ASSIGN(values, KvCacheDescribeValues(lm, two));
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[1].visualization,
            "bytes per token: worker 3 (devices 0): 8\n"
            "bytes per token: worker 5 (devices 1): 8\n");
}

TEST(KvCacheDescribeTest, AModelThatDoesNotGenerateHasNone) {
  ASSERT_OK_AND_ASSIGN(ModelFile lin, ParseModelFile(kLin, ""));
  ASSERT_OK_AND_ASSIGN(Placement p, ComputePlacement(lin, {{1, "127.0.0.1:1"}}, 1));
  ASSERT_OK_AND_ASSIGN(std::vector<DescribeValue> values, KvCacheDescribeValues(lin, p));
  EXPECT_TRUE(values.empty());
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(MESHSERVE_WORKER_BIN)) {
      GTEST_SKIP() << "no worker binary at " << MESHSERVE_WORKER_BIN;
    }
    dir_ = absl::StrCat(::testing::TempDir(), "/coord_service_", getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/act.json") << kAct;
    std::ofstream(dir_ + "/lin.json") << kLin;
    std::ofstream(dir_ + "/tiny_lm.json") << kTinyLm;
    std::ofstream(dir_ + "/bad.json") << "[1, 2";
    CoordinatorOptions options;
    options.model_dir = dir_;
    options.min_workers = 2;
    options.heartbeat_interval = absl::Milliseconds(100);
    options.retry_wait = absl::Seconds(5);
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, GrpcWorkerClientFactory(),
                                             std::make_unique<JaxModelCompiler>()));
    ASSERT_OK_AND_ASSIGN(server_, CoordinatorServer::Start(coordinator_.get(), "127.0.0.1", 0));
    for (int i = 0; i < 2; ++i) SpawnWorker();
    ASSERT_TRUE(WaitFor([&] { return coordinator_->IsReady(); }, absl::Seconds(30)));
    ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel(server_->address()));
    inference_ = inference::GRPCInferenceService::NewStub(channel);
    cluster_ = ClusterService::NewStub(channel);
  }
  void TearDown() override {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (server_) server_->Shutdown();
  }
  void SpawnWorker() {
    std::string coordinator = absl::StrCat("--coordinator=", server_->address());
    std::vector<std::string> args = {MESHSERVE_WORKER_BIN, "--port=0", "--threads=1",
                                     coordinator};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids_.push_back(pid);
  }
  template <typename F>
  bool WaitFor(F done, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    while (absl::Now() < end) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return done();
  }
  inference::ModelInferRequest Request(const std::string& model, int rows,
                                       std::vector<float>* values) {
    inference::ModelInferRequest r;
    r.set_model_name(model);
    r.set_id("req-1");
    auto* in = r.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(rows);
    in->add_shape(8);
    values->resize(rows * 8);
    for (int i = 0; i < rows * 8; ++i) (*values)[i] = static_cast<float>((i * 7) % 11) - 5.0f;
    r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(values->data()),
                                         values->size() * sizeof(float)));
    return r;
  }
  static std::vector<float> Floats(const std::string& bytes) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }

  std::string dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
  std::vector<pid_t> pids_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
  std::unique_ptr<ClusterService::Stub> cluster_;
};

TEST_F(ClusterTest, InferOverGrpcMatchesReference) {
  std::vector<float> x;
  inference::ModelInferRequest request = Request("act", 6, &x);
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  grpc::Status status = inference_->ModelInfer(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "req-1");
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(response.outputs(0).parameters().at("type").string_param(), "float32[6@data,8]");
  std::vector<float> y = Floats(response.raw_output_contents(0));
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], std::max(x[i], 0.0f) + x[i]);

  // The linear model (4 devices on 2 workers), with and without out_sharding.
  for (const char* spec : {"", "P()", "P(None, 'data')"}) {
    inference::ModelInferRequest lin = Request("lin", 4, &x);
    if (*spec) {
      auto* out = lin.add_outputs();
      out->set_name("y");
      (*out->mutable_parameters())["out_sharding"].set_string_param(spec);
    }
    inference::ModelInferResponse lin_response;
    grpc::ClientContext lin_context;
    grpc::Status s = inference_->ModelInfer(&lin_context, lin, &lin_response);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.error_message();
    std::vector<float> out = Floats(lin_response.raw_output_contents(0));
    ASSERT_EQ(out.size(), 16u);
    for (int b = 0; b < 4; ++b) {
      float sum = 0;
      for (int k = 0; k < 8; ++k) sum += x[b * 8 + k];
      for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(out[b * 4 + j], sum) << spec;
    }
  }
}

TEST_F(ClusterTest, MetadataReadinessAndErrors) {
  {
    inference::ServerReadyResponse ready;
    grpc::ClientContext c;
    ASSERT_TRUE(inference_->ServerReady(&c, {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
  }
  {
    inference::ModelMetadataRequest req;
    req.set_name("lin");
    inference::ModelMetadataResponse meta;
    grpc::ClientContext c;
    ASSERT_TRUE(inference_->ModelMetadata(&c, req, &meta).ok());
    ASSERT_EQ(meta.inputs_size(), 1);
    EXPECT_EQ(meta.inputs(0).datatype(), "FP32");
    EXPECT_EQ(meta.inputs(0).shape(0), -1);
  }
  std::vector<float> x;
  inference::ModelInferRequest unknown = Request("nope", 4, &x);
  inference::ModelInferResponse response;
  grpc::ClientContext c1;
  EXPECT_EQ(inference_->ModelInfer(&c1, unknown, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  inference::ModelInferRequest bad = Request("act", 4, &x);
  bad.mutable_inputs(0)->set_shape(1, 7);
  grpc::ClientContext c2;
  grpc::Status s = inference_->ModelInfer(&c2, bad, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("dim 1 is 7, expected 8"));
  inference::ModelInferRequest broken = Request("bad", 4, &x);
  grpc::ClientContext c3;
  EXPECT_EQ(inference_->ModelInfer(&c3, broken, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  inference::ModelInferRequest bad_spec = Request("act", 4, &x);
  auto* out = bad_spec.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["out_sharding"].set_string_param("P('nope')");
  grpc::ClientContext c4;
  s = inference_->ModelInfer(&c4, bad_spec, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("nope"));
}

TEST_F(ClusterTest, StatusAndDescribe) {
  ClusterStatusResponse status;
  grpc::ClientContext c;
  ASSERT_TRUE(cluster_->Status(&c, {}, &status).ok());
  ASSERT_EQ(status.workers_size(), 2);
  for (const auto& w : status.workers()) {
    EXPECT_TRUE(w.healthy());
    EXPECT_FALSE(w.blas_core().empty());
  }
  bool saw_bad = false;
  for (const auto& m : status.models()) {
    if (m.name() == "lin") {
      EXPECT_EQ(m.mesh(), "mesh[data=4]");
    }
    if (m.name() == "bad") saw_bad = m.state().rfind("error", 0) == 0;
  }
  EXPECT_TRUE(saw_bad);
  DescribeRequest req;
  req.set_model("lin");
  (*req.mutable_input_shapes())["x"].add_dims(8);
  (*req.mutable_input_shapes())["x"].add_dims(8);
  DescribeResponse d;
  grpc::ClientContext c2;
  grpc::Status s = cluster_->Describe(&c2, req, &d);
  ASSERT_TRUE(s.ok()) << s.error_message();
  bool saw_kernel = false;
  for (const auto& v : d.values()) {
    if (v.name() == "kernel") {
      saw_kernel = true;
      EXPECT_EQ(v.type_str(), "float32[8,4@data]");
    }
  }
  EXPECT_TRUE(saw_kernel);
  for (const auto& v : d.values()) EXPECT_NE(v.kind(), "kv_cache") << v.name();

  // A model that generates: its KV cache, one head per worker.
  req.set_model("tiny_lm");
  req.clear_input_shapes();
  DescribeResponse lm;
  grpc::ClientContext c3;
  s = cluster_->Describe(&c3, req, &lm);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<std::string> kv;
  for (const auto& v : lm.values()) {
    if (v.kind() != "kv_cache") continue;
    kv.push_back(v.name());
    EXPECT_EQ(v.type_str(), "float32[16,2@model,2]");
    EXPECT_THAT(v.visualization(), HasSubstr("(devices 0): 8\n"));
    EXPECT_THAT(v.visualization(), HasSubstr("(devices 1): 8\n"));
  }
  EXPECT_THAT(kv, ::testing::ElementsAre("attn.k_cache", "attn.v_cache"));
}

TEST_F(ClusterTest, KilledWorkerThenServedOnNewGeneration) {
  const int64_t g1 = coordinator_->GetModelStatus("act")->generation;
  kill(pids_.back(), SIGKILL);
  waitpid(pids_.back(), nullptr, 0);
  pids_.pop_back();
  std::vector<float> x;
  bool served = false;
  for (int attempt = 0; attempt < 5 && !served; ++attempt) {
    inference::ModelInferRequest request = Request("act", 4, &x);
    inference::ModelInferResponse response;
    grpc::ClientContext context;
    grpc::Status s = inference_->ModelInfer(&context, request, &response);
    if (s.ok()) {
      served = true;
      EXPECT_GT(response.outputs(0).parameters().at("generation").int64_param(), g1);
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("worker"));
    }
  }
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace meshserve
