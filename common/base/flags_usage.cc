// ParseFlags and FlagsHelpText (flags_usage.h).
#include "common/base/flags_usage.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/logging.h"

namespace meshserve {
namespace {

bool IsMainFile(absl::string_view file) { return absl::EndsWith(file, "_main.cc"); }

}  // namespace

std::string FlagsHelpText(absl::string_view usage) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsMainFile(flag->Filename())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string text = absl::StrCat(usage, "\n\nFlags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(&text, "  --", flag->Name(), "  ", flag->Help(), " (default: \"",
                    flag->DefaultValue(), "\")\n");
  }
  return text;
}

void ParseFlags(int argc, char** argv, absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsMainFile;
  config.contains_help_flags = IsMainFile;
  config.version_string = [] { return std::string("meshserve 0.1\n"); };
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::cout << FlagsHelpText(usage);
      std::exit(0);
    }
  }
  absl::ParseCommandLine(argc, argv);
}

void StartServerMain(int argc, char** argv, absl::string_view usage, const char* log_level) {
  SetMinLogSeverityByName(log_level);
  ParseFlags(argc, argv, usage);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace meshserve
