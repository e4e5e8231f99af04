// Sub-commands of the `meshserve` CLI, declared as data: a name, a usage
// line, the flags the command reads and the function that runs it. Each
// cmd_*.cc file registers its commands with MS_REGISTER_COMMAND;
// client/main.cc dispatches on argv[1]. Flags are parsed here, from each
// command's own table (libraries never read flags).
//
//   MS_REGISTER_COMMAND(FlagCommand{
//       "status", "status --target HOST:PORT",
//       {{"target", FlagDef::kValue, true}, {"timeout_s"}},
//       RunStatus});              // int RunStatus(const CliArgs& args)
//
// A FlagCommand's flags are parsed before `run` is called; a parse error (or
// a positional argument when `rejects_positional`) prints
//   meshserve NAME: <message>
//   usage: meshserve USAGE
// and exits 2. Commands that parse their own argv (rules, plan, demo)
// register a RawCommand and list their flags only for --help.
//
// Every command answers `meshserve NAME --help` (or -h as the first
// argument) with its usage and flags on stdout, exit 0 (main.cc).
//
// Exit codes: 0 success, 1 the request (or a file) failed, 2 bad usage.
//
// Thread-safety: the registry is filled by static initialisers and read by
// main() only.
#ifndef MESHSERVE_CLIENT_COMMAND_H_
#define MESHSERVE_CLIENT_COMMAND_H_

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cli_args.h"

namespace meshserve {
namespace client {

inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// argv[0] is the command name; returns the process exit code.
using CommandFn = std::function<int(int argc, char** argv)>;

struct CommandInfo {
  std::string usage;           // one line, after "meshserve ": "rules CASES.json"
  std::vector<FlagDef> flags;  // listed by --help
  CommandFn run;
};

std::map<std::string, CommandInfo>& CommandRegistry();

// A command whose flags are parsed from `flags` before `run` is called.
struct FlagCommand {
  std::string name;
  std::string usage;
  std::vector<FlagDef> flags;
  std::function<int(const CliArgs& args)> run;
  bool rejects_positional = false;  // "unexpected argument 'X'"
};

// A command that parses argv itself; `flags` are only listed by --help.
struct RawCommand {
  std::string name;
  std::string usage;
  std::vector<FlagDef> flags;
  CommandFn run;
};

// "usage: meshserve USAGE" and one line per flag.
void PrintCommandHelp(const CommandInfo& info, std::FILE* out);

// Prints "meshserve NAME: <message>\nusage: meshserve USAGE"; returns 2.
int UsageError(absl::string_view name, absl::string_view usage, const absl::Status& status);
// Prints "meshserve NAME: <CODE: message>"; returns 1.
int Fail(absl::string_view name, const absl::Status& status);

struct CommandRegistrar {
  explicit CommandRegistrar(FlagCommand command);
  explicit CommandRegistrar(RawCommand command);
};

}  // namespace client
}  // namespace meshserve

#define MS_REGISTER_COMMAND_CONCAT_(a, b) a##b
#define MS_REGISTER_COMMAND_NAME_(line) MS_REGISTER_COMMAND_CONCAT_(ms_command_, line)
#define MS_REGISTER_COMMAND(...) \
  static ::meshserve::client::CommandRegistrar MS_REGISTER_COMMAND_NAME_(__LINE__)(__VA_ARGS__)

#endif  // MESHSERVE_CLIENT_COMMAND_H_
