// RunOnInProcessWorkers (compiler_workers.h): the IR straight to the
// in-process workers.
#include "server/worker/testing/compiler_workers.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "server/worker/testing/in_process_workers.h"

namespace meshserve {

absl::StatusOr<std::vector<SliceIr>> RunOnInProcessWorkers(
    int num_workers, const LoadModelIr& load, const std::map<int64_t, ProgramIr>& programs,
    const std::vector<SliceIr>& inputs) {
  InProcessWorkers cluster(num_workers);
  MS_RETURN_IF_ERROR(cluster.LoadModel(load).status());
  std::vector<ProgramIr> installs;
  std::string program_id;
  for (const auto& [w, p] : programs) {
    installs.push_back(p);
    program_id = p.program_id;
  }
  MS_RETURN_IF_ERROR(cluster.InstallPrograms(installs));
  std::map<int64_t, std::vector<SliceIr>> by_worker;
  for (const auto& [w, p] : programs) by_worker[w];
  for (const SliceIr& s : inputs) by_worker[load.device_workers.at(s.device)].push_back(s);
  MS_ASSIGN_OR_RETURN(auto outputs, cluster.Execute(program_id, "r1", std::move(by_worker)));
  std::vector<SliceIr> out;
  for (auto& [w, slices] : outputs) {
    for (SliceIr& s : slices) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace meshserve
