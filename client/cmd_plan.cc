// `meshserve plan [--human] REQUEST.json`: the reshard plan of one request
// (common/conformance/plan_request.h) as JSON, or as tables with --human.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "client/command.h"
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
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "meshserve plan: cannot read '%s'\n", path);
    return 1;
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<PlanRequest> request = ParsePlanRequest(text.str());
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
