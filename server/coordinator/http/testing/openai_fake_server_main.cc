// openai_fake_server: the coordinator's HTTP server with a Generator over
// fake workers (testing/openai_test_server.h), for clients' tests
// (tests/openai/run_openai_node_test.py drives the openai npm package at it).
// Serves model "lm" (vocabulary 50, context 64; its tokens are
// testing::Reference of server/coordinator/generate/testing/fake_steps.h) on
// 127.0.0.1, prints "port N" on stdout, and stops when stdin closes.
//
//   openai_fake_server < /dev/null     (starts, prints the port, stops at once)
#include <iostream>
#include <string>

#include "server/coordinator/http/testing/openai_test_server.h"

int main() {
  meshserve::testing::OpenAiTestServerOptions options;
  absl::StatusOr<std::unique_ptr<meshserve::testing::OpenAiTestServer>> server =
      meshserve::testing::OpenAiTestServer::Start(options);
  if (!server.ok()) {
    std::cerr << "openai_fake_server: " << server.status() << std::endl;
    return 1;
  }
  std::cout << "port " << (*server)->port() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
