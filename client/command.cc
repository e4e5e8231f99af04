#include "client/command.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace meshserve {
namespace client {

std::map<std::string, CommandInfo>& CommandRegistry() {
  static auto* registry = new std::map<std::string, CommandInfo>();
  return *registry;
}

void PrintCommandHelp(const CommandInfo& info, std::FILE* out) {
  std::fprintf(out, "usage: meshserve %s\n", info.usage.c_str());
  if (info.flags.empty()) return;
  std::fprintf(out, "\nflags:\n");
  for (const FlagDef& flag : info.flags) {
    const char* kind = flag.kind == FlagDef::kBool       ? ""
                       : flag.kind == FlagDef::kRepeated ? " VALUE (repeated)"
                                                         : " VALUE";
    std::fprintf(out, "  --%s%s%s\n", flag.name.c_str(), kind,
                 flag.required ? " (required)" : "");
  }
}

int UsageError(absl::string_view name, absl::string_view usage, const absl::Status& status) {
  std::fprintf(stderr, "meshserve %s: %s\nusage: meshserve %s\n", std::string(name).c_str(),
               std::string(status.message()).c_str(), std::string(usage).c_str());
  return kExitUsage;
}

int Fail(absl::string_view name, const absl::Status& status) {
  std::fprintf(stderr, "meshserve %s: %s\n", std::string(name).c_str(),
               status.ToString().c_str());
  return kExitError;
}

CommandRegistrar::CommandRegistrar(FlagCommand command) {
  CommandInfo& info = CommandRegistry()[command.name];
  info.usage = command.usage;
  info.flags = command.flags;
  info.run = [command = std::move(command)](int argc, char** argv) {
    absl::StatusOr<CliArgs> args = CliArgs::Parse(argc, argv, command.flags);
    if (!args.ok()) return UsageError(command.name, command.usage, args.status());
    if (command.rejects_positional && !args->positional().empty()) {
      return UsageError(command.name, command.usage,
                        absl::InvalidArgumentError(absl::StrCat(
                            "unexpected argument '", args->positional()[0], "'")));
    }
    return command.run(*args);
  };
}

CommandRegistrar::CommandRegistrar(RawCommand command) {
  CommandRegistry()[command.name] =
      CommandInfo{std::move(command.usage), std::move(command.flags), std::move(command.run)};
}

}  // namespace client
}  // namespace meshserve
