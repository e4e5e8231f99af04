// `meshserve rules [--human] CASES.json`: runs a sharding-rule case file
// (/work/shared/conformance/sharding-rules/README.md) through
// common/sharding/rules and prints one JSON line per case, or with --human,
// per case the inputs' and result's JAX type strings, the result's layout for
// rank <= 2 (as jax.debug.visualize_array_sharding), or the error.
// Exit 0 when the file could be processed (even if cases are errors); 1 with a
// message on stderr for an unreadable or broken file; 2 for bad usage.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client/command.h"
#include "common/base/file_io.h"
#include "common/conformance/rules_cases.h"
#include "common/sharding/visualize.h"

namespace meshserve {
namespace client {
namespace {

void PrintHuman(const RulesCaseOutcome& o) {
  std::printf("== %s (%s)\n", o.id.c_str(), o.op.c_str());
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    std::printf("  in[%zu]:  %s\n", i, o.inputs[i].ToString().c_str());
  }
  if (!o.result.ok()) {
    std::printf("  error:  %s\n\n", std::string(o.result.status().message()).c_str());
    return;
  }
  const ArrayType& t = *o.result;
  std::printf("  result: %s\n", t.ToString().c_str());
  if (t.rank() >= 1 && t.rank() <= 2 && !t.sharding.mesh().empty()) {
    absl::StatusOr<std::string> picture = VisualizeSharding(t.shape, t.sharding);
    if (picture.ok()) std::printf("%s", picture->c_str());
  }
  std::printf("\n");
}

int RunRules(int argc, char** argv) {
  bool human = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--human") {
      human = true;
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      std::fprintf(stderr, "meshserve rules: unknown flag '%s'\nusage: meshserve rules [--human] CASES.json\n",
                   arg.c_str());
      return 2;
    } else {
      path = arg;  // the case file is the last argument
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: meshserve rules [--human] CASES.json\n");
    return 2;
  }
  absl::StatusOr<std::string> text;
  if (path == "-") {
    std::stringstream in;
    in << std::cin.rdbuf();
    text = in.str();
  } else {
    text = ReadFileToString(path);
  }
  if (!text.ok()) {
    std::fprintf(stderr, "meshserve rules: case file: %s\n",
                 std::string(text.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::vector<RulesCaseOutcome>> outcomes = RunRulesCaseFile(*text);
  if (!outcomes.ok()) {
    std::fprintf(stderr, "meshserve rules: %s: %s\n", path.c_str(),
                 std::string(outcomes.status().message()).c_str());
    return 1;
  }
  for (const RulesCaseOutcome& o : *outcomes) {
    if (human) {
      PrintHuman(o);
    } else {
      std::string line =
          RulesOutcomeToJson(o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

MS_REGISTER_COMMAND(RawCommand{
    "rules", "rules [--human] CASES.json   run sharding-rule cases (JSON lines)",
    {{"human", FlagDef::kBool}}, RunRules});

}  // namespace
}  // namespace client
}  // namespace meshserve
