// The coordinator's HTTP server as the OpenAI routes' tests run it: a real
// CoordinatorHttpServer on 127.0.0.1 (a free port from the OS), over a
// Coordinator whose model directory holds one model file, "lm" (no workers
// join: the KServe routes are not exercised), and a Generator over
// FakeGenerationBackend (fake_generation.h), or no Generator.
//
//   ASSERT_OK_AND_ASSIGN(auto server, OpenAiTestServer::Start({}));
//   httplib::Client client("127.0.0.1", server->port());
//
// Thread-safety: Start and the destructor from one thread; the accessors'
// objects are thread-safe.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_OPENAI_TEST_SERVER_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_OPENAI_TEST_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/http/http_server.h"
#include "server/coordinator/http/testing/fake_generation.h"

namespace meshserve {
namespace testing {

struct OpenAiTestServerOptions {
  std::string scratch_dir = "/tmp";  // the model directory is made under it
  bool with_generator = true;
  std::string auth_token;  // non-empty: CoordinatorHttpOptions::auth_token
  Detokenizer detokenize;  // CoordinatorHttpOptions::detokenize
  FakeGenerationBackend::Options backend;
  GeneratorOptions generator;
};

class OpenAiTestServer {
 public:
  static absl::StatusOr<std::unique_ptr<OpenAiTestServer>> Start(OpenAiTestServerOptions options);
  // Stops the HTTP server first, then the generator.
  ~OpenAiTestServer();

  int port() const { return http_->port(); }
  Generator* generator() { return generator_.get(); }
  FakeGenerationBackend& backend() { return *backend_; }

 private:
  OpenAiTestServer() = default;

  std::string model_dir_;
  std::unique_ptr<FakeGenerationBackend> backend_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Generator> generator_;
  std::unique_ptr<CoordinatorHttpServer> http_;
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_TESTING_OPENAI_TEST_SERVER_H_
