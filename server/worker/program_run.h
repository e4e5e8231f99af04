// Running installed programs on this worker, apart from the tables of the
// program runner (program_runner.h) that calls it:
//   - program_validate.cc: ValidateProgram, InstallProgram's structural checks;
//   - program_steps.cc: PrepareProgram (validate, analyse the param-only
//     steps, put the steps in the send schedule), DescribeStep, DefersFlush,
//     ScheduleSends, and RunProgram (the waiting form of RunProgramAsync);
//   - decode_run.cc: PrepareDecode, a generation step's run state;
//   - program_run.cc: RunProgramAsync, one request's run of the steps.
//
// Thread-safety: free functions. An InstalledProgram is immutable once
// prepared (last_compute_ns is atomic); each run owns its buffers.
#ifndef MESHSERVE_SERVER_WORKER_PROGRAM_RUN_H_
#define MESHSERVE_SERVER_WORKER_PROGRAM_RUN_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/deadline_timer.h"
#include "common/program/compute_step.h"
#include "common/program/program_ir.h"
#include "server/worker/kv_store.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/params/param_cache.h"
#include "server/worker/peer_transport.h"
#include "server/worker/rendezvous.h"

namespace meshserve {

// Structural checks of a program (see WorkerEngine::InstallProgram).
absl::Status ValidateProgram(const ProgramIr& program);

struct RunContext {
  Rendezvous* rendezvous = nullptr;
  PeerTransport* transport = nullptr;  // may be null
  int64_t worker_id = -1;
  // Ends a run's waits at its deadline; RunProgram makes one when null.
  DeadlineTimer* timer = nullptr;
  // Where a run continues after a receive waited: null = on the thread that
  // delivered the slice (a gRPC thread; for programs whose steps are quick).
  std::function<void(std::function<void()>)> executor;
  // kUse runs skip the program's param-only steps and read `kept` instead.
  ParamCacheMode param_cache = ParamCacheMode::kOff;
  std::shared_ptr<const KeptBuffers> kept;  // kUse only
  // A generation step's layout and KV caches (compute_step.h); null otherwise.
  std::shared_ptr<const DecodeState> decode;
};

// A generation step's run state (decode_run.cc): frees step.release's caches
// of (model, generation), lays the step over the program's buckets (token
// slots from its [1, T] input, rows from its select_rows step) and gives the
// run the hosted devices' KV caches of `store`.
// \error kInvalidArgument: not a generation program, DecodeLayout::Create's;
//   kFailedPrecondition without a store.
absl::StatusOr<std::shared_ptr<const DecodeState>> PrepareDecode(
    const ProgramIr& program, const LoadedModel& model, const std::vector<SliceIr>& inputs,
    DecodeStepIr step, KvCacheStore* store);

// An installed program and what its runs measured.
struct InstalledProgram {
  ProgramIr ir;
  ParamOnlySteps param_only;  // by index into ir.steps (after ScheduleSends)
  // Names this install in KeptParamBuffers: a program installed again under
  // its id must not read what the old one kept.
  std::string cache_key;
  // Compute time of the last run (ns; -1 before the first). A program whose
  // steps take less than kInlineComputeLimit runs on the thread that starts
  // or resumes it; a longer one on the worker's pool.
  mutable std::atomic<int64_t> last_compute_ns{-1};
};
inline constexpr absl::Duration kInlineComputeLimit = absl::Microseconds(300);

// `program` validated (ValidateProgram, AnalyzeParamOnlySteps), its steps in
// the send schedule (ScheduleSends) with their param-only marks, and a fresh
// cache_key: what InstallProgram stores.
absl::StatusOr<std::shared_ptr<InstalledProgram>> PrepareProgram(ProgramIr program);

// For error messages: "compute 'add' -> 'y'", "send 'x' tag 't' to worker 1", ...
std::string DescribeStep(const StepIr& step);

// Steps that run while sends queue up: local and quick, and none waits for a
// peer. The compiler interleaves a collective's sends with its local copies
// (an all-gather over 4 devices on each of 2 workers: copy, copy, send, copy,
// ...); flushing at every send opened one stream per send.
bool DefersFlush(const StepIr& step);

// `steps` with every send moved before the receives it does not depend on:
// a send goes just before the earliest receive after the last step that
// writes its source buffer (device, name), or stays where it is. Sends that
// land before one receive keep their order. The compiler may order a
// worker's receives of a collective before its sends (an all-to-all over two
// workers: one receives first, the other sends first), and then each
// round trip waited for the other worker's whole run up to its sends.
// Values are unchanged: a send still reads what it read in program order.
std::vector<StepIr> ScheduleSends(std::vector<StepIr> steps);
// The same schedule as the old index of each step, in the new order.
std::vector<size_t> SendScheduleOrder(const std::vector<StepIr>& steps);

using RunDone = std::function<void(absl::StatusOr<std::vector<SliceIr>>)>;

// Runs the steps of `program` for one request (the request must have been
// started on the rendezvous) and calls `done` once with the output slices or
// the first error: inline when nothing waits, else on the thread that ends
// the last wait (context.executor when set). A receive that finds no
// complete slice leaves a waiter in the rendezvous and returns the thread;
// the request's deadline (context.timer) ends such a wait.
void RunProgramAsync(std::shared_ptr<const InstalledProgram> program,
                     std::shared_ptr<const LoadedModel> model, std::string request_id,
                     std::vector<SliceIr> inputs, absl::Time deadline, RunContext context,
                     RunDone done);

// RunProgramAsync, waiting for `done` (tests).
absl::StatusOr<std::vector<SliceIr>> RunProgram(const ProgramIr& program,
                                                const LoadedModel& model,
                                                absl::string_view request_id,
                                                std::vector<SliceIr> inputs,
                                                absl::Time deadline,
                                                const RunContext& context);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PROGRAM_RUN_H_
