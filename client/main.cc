// `meshserve`: one CLI for the sharding tools and the cluster client.
// Sub-commands live in cmd_*.cc; `meshserve help` lists them.
#include <cstdio>
#include <cstring>
#include <string>

#include "client/command.h"

namespace meshserve {

std::map<std::string, CommandInfo>& CommandRegistry() {
  static auto* registry = new std::map<std::string, CommandInfo>();
  return *registry;
}

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: meshserve COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& [name, info] : CommandRegistry()) {
    std::fprintf(out, "  %s\n", info.usage.c_str());
  }
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  using meshserve::CommandRegistry;
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 ||
      std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    meshserve::PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto it = CommandRegistry().find(argv[1]);
  if (it == CommandRegistry().end()) {
    std::fprintf(stderr, "meshserve: unknown command '%s'\n", argv[1]);
    meshserve::PrintUsage(stderr);
    return 2;
  }
  return it->second.run(argc - 1, argv + 1);
}
