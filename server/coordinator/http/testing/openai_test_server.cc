// OpenAiTestServer (openai_test_server.h).
#include "server/coordinator/http/testing/openai_test_server.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/coordinator/testing/fake_model_compiler.h"

namespace meshserve {
namespace testing {
namespace {

// A model file the coordinator loads (FakeModelCompiler accepts it); the
// fake backend generates for it under the same name.
constexpr char kLmModel[] =
    R"({"name": "lm", "mesh": {"data": -1}, "dtype": "float32", "params": {}, "outputs": ["y"],
        "inputs": {"x": {"shape": [-1, 4], "sharding": ["data", null]}},
        "layers": [{"name": "y", "op": "relu", "input": "x"}]})";

absl::StatusOr<std::string> MakeModelDir(const std::string& scratch_dir) {
  static std::atomic<int> counter{0};
  const std::string dir =
      absl::StrCat(scratch_dir, "/openai_models_", getpid(), "_", counter++);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::ofstream(dir + "/lm.json") << kLmModel;
  return dir;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiTestServer>> OpenAiTestServer::Start(
    OpenAiTestServerOptions options) {
  std::unique_ptr<OpenAiTestServer> s(new OpenAiTestServer());
  MS_ASSIGN_OR_RETURN(s->model_dir_, MakeModelDir(options.scratch_dir));
  CoordinatorOptions coordinator;
  coordinator.model_dir = s->model_dir_;
  coordinator.run_control_thread = false;
  WorkerClientFactory no_workers = [](int64_t id, const std::string& address)
      -> absl::StatusOr<std::shared_ptr<WorkerClient>> {
    return absl::UnavailableError(absl::StrCat("no worker ", id, " at ", address, " in tests"));
  };
  MS_ASSIGN_OR_RETURN(s->coordinator_,
                      Coordinator::Create(coordinator, std::move(no_workers),
                                          std::make_unique<FakeModelCompiler>()));
  s->backend_ = std::make_unique<FakeGenerationBackend>(options.backend);
  CoordinatorHttpOptions http;
  http.auth_token = options.auth_token;
  http.detokenize = options.detokenize;
  if (options.with_generator) {
    s->generator_ = std::make_unique<Generator>(s->backend_.get(), options.generator);
    http.generator = s->generator_.get();
  }
  MS_ASSIGN_OR_RETURN(s->http_,
                      CoordinatorHttpServer::Start(s->coordinator_.get(), "127.0.0.1", 0, http));
  return s;
}

OpenAiTestServer::~OpenAiTestServer() {
  if (http_ != nullptr) http_->Stop();
  http_.reset();
  generator_.reset();
  std::error_code ec;
  std::filesystem::remove_all(model_dir_, ec);
}

}  // namespace testing
}  // namespace meshserve
