// Sub-commands of the `meshserve` CLI. Each cmd_*.cc file registers its
// commands with MS_REGISTER_COMMAND; client/main.cc dispatches on argv[1].
// Flags are parsed inside each command (libraries never read flags).
#ifndef MESHSERVE_CLIENT_COMMAND_H_
#define MESHSERVE_CLIENT_COMMAND_H_

#include <map>
#include <string>

namespace meshserve {

// argv[0] is the command name; returns the process exit code.
using CommandFn = int (*)(int argc, char** argv);

struct CommandInfo {
  std::string usage;  // one line: "rules CASES.json"
  CommandFn run = nullptr;
};

std::map<std::string, CommandInfo>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* usage, CommandFn run) {
    CommandRegistry()[name] = CommandInfo{usage, run};
  }
};

}  // namespace meshserve

#define MS_REGISTER_COMMAND_CONCAT_(a, b) a##b
#define MS_REGISTER_COMMAND_NAME_(line) MS_REGISTER_COMMAND_CONCAT_(ms_command_, line)
#define MS_REGISTER_COMMAND(name, usage, fn) \
  static ::meshserve::CommandRegistrar MS_REGISTER_COMMAND_NAME_(__LINE__)(name, usage, fn)

#endif  // MESHSERVE_CLIENT_COMMAND_H_
