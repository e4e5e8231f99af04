// `meshserve`: one CLI for the sharding tools and the cluster client.
// Sub-commands live in cmd_*.cc; `meshserve help` lists them and
// `meshserve COMMAND --help` shows one.
//
// Environment, read here and passed to the libraries: MESHSERVE_LOG_LEVEL
// (warning|error raise the log level), MESHSERVE_TENSOR_POOL_MIB (free tensor
// memory kept for reuse, default 2048; a bad value exits 2 naming it) and
// MESHSERVE_GEMM_ISA (caps the small-M kernel, common/tensor/gemm_small_m.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/command.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/tensor/buffer_pool.h"
#include "common/tensor/gemm_small_m.h"

namespace meshserve {
namespace client {
namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: meshserve COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& [name, info] : CommandRegistry()) {
    std::fprintf(out, "  %s\n", info.usage.c_str());
  }
}

bool IsHelpFlag(const char* arg) {
  return std::strcmp(arg, "help") == 0 || std::strcmp(arg, "--help") == 0 ||
         std::strcmp(arg, "-h") == 0;
}

// `--help` anywhere, or `-h` first, among a command's arguments.
bool WantsCommandHelp(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "-h") == 0) return true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

// The libraries' settings from the environment (see the file comment); the
// tensor pool as the servers have it, malloc tuned for it.
absl::Status ConfigureFromEnvironment() {
  SetMinLogSeverityByName(std::getenv("MESHSERVE_LOG_LEVEL"));
  const char* gemm_isa = std::getenv("MESHSERVE_GEMM_ISA");
  SetSmallMIsaCap(gemm_isa == nullptr ? "" : gemm_isa);
  BufferPoolOptions pool;
  MS_ASSIGN_OR_RETURN(pool.cap_bytes, ParseBufferPoolMib(std::getenv("MESHSERVE_TENSOR_POOL_MIB"),
                                                         "MESHSERVE_TENSOR_POOL_MIB"));
  pool.tune_malloc = true;
  return ConfigureBufferPool(pool);
}

int Main(int argc, char** argv) {
  if (absl::Status s = ConfigureFromEnvironment(); !s.ok()) {
    std::fprintf(stderr, "meshserve: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  if (argc < 2 || IsHelpFlag(argv[1])) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : 0;
  }
  auto it = CommandRegistry().find(argv[1]);
  if (it == CommandRegistry().end()) {
    std::fprintf(stderr, "meshserve: unknown command '%s'\n", argv[1]);
    PrintUsage(stderr);
    return kExitUsage;
  }
  if (WantsCommandHelp(argc - 1, argv + 1)) {
    PrintCommandHelp(it->second, stdout);
    return 0;
  }
  return it->second.run(argc - 1, argv + 1);
}

}  // namespace
}  // namespace client
}  // namespace meshserve

int main(int argc, char** argv) { return meshserve::client::Main(argc, argv); }
