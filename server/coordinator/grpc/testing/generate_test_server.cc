// generate_test_server: meshserve.GenerateService over the fake generation
// backend (fake_generation.h: model "lm", vocabulary 50, version 7), for the
// tests of the CLI and the Python client (tests/integration/
// test_generate_clients.py). Listens on 127.0.0.1:0, prints "port N" on
// stdout, and serves until its stdin closes.
//
//   generate_test_server [STEP_DELAY_MS [text]]   each step sleeps this long
//       (default 0); "text": the model has the one-character-per-id tokenizer
//       (FakeTokenText), so text prompts and stop strings work
//
// Thread-safety: single-threaded main; the server's threads serve the calls.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/rpc/call_gate.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/coordinator/grpc/generate_service.h"
#include "server/coordinator/grpc/testing/fake_generation.h"

int main(int argc, char** argv) {
  meshserve::testing::FakeGenerationOptions options;
  if (argc > 1) options.step_delay = absl::Milliseconds(std::atoi(argv[1]));
  if (argc > 2 && std::string(argv[2]) == "text") options.with_tokenizer = true;
  meshserve::testing::FakeGeneration generation(options);
  meshserve::CallGate gate("generate_test_server");
  meshserve::GenerateServiceImpl service(generation.generator(), &gate);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "generate_test_server: cannot listen on 127.0.0.1:0\n");
    return 1;
  }
  std::printf("port %d\n", port);
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  server->Shutdown();
  return 0;
}
