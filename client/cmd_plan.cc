// `meshserve plan [--human] REQUEST.json`: the reshard plan of one request
// (common/conformance/plan_request.h) as JSON, or as tables with --human.
#include <cstdio>
#include <cstring>
#include <string>

#include "client/command.h"
#include "common/base/file_io.h"
#include "common/conformance/plan_request.h"

namespace meshserve {
namespace client {
namespace {

int RunPlan(int argc, char** argv) {
  bool human = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--human") == 0) {
      human = true;
    } else if (path == nullptr && argv[i][0] != '-') {
      path = argv[i];
    } else {
      std::fprintf(stderr, "meshserve plan: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (path == nullptr) {
    std::fprintf(stderr, "usage: meshserve plan [--human] REQUEST.json\n");
    return 2;
  }
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    std::fprintf(stderr, "meshserve plan: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<PlanRequest> request = ParsePlanRequest(*text);
  if (!request.ok()) {
    std::fprintf(stderr, "meshserve plan: %s: %s\n", path,
                 request.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<ReshardPlan> plan = PlanForRequest(*request);
  if (!plan.ok()) {
    std::fprintf(stderr, "meshserve plan: %s: %s\n", path,
                 plan.status().ToString().c_str());
    return 1;
  }
  const std::string out = human ? DescribePlanRequest(*request, *plan)
                                : PlanToJson(*plan, request->dtype).dump() + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

MS_REGISTER_COMMAND(RawCommand{
    "plan", "plan [--human] REQUEST.json   reshard plan of one request",
    {{"human", FlagDef::kBool}}, RunPlan});

}  // namespace
}  // namespace client
}  // namespace meshserve
