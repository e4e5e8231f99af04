// Internals of WorkerEngine shared by its .cc files (they include the core
// tensor types, which worker_engine.h keeps out of its API).
#ifndef MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_
#define MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/program/compute_step.h"
#include "common/program/program_ir.h"
#include "common/sharding/mesh.h"
#include "common/tensor/tensor.h"
#include "common/base/deadline_timer.h"
#include "server/worker/kv_store.h"
#include "server/worker/param_cache.h"
#include "server/worker/peer_transport.h"
#include "server/worker/rendezvous.h"

namespace meshserve {

// The held cells of one param: the distinct boxes of the model's devices and
// replica_devices (the boxes of one NamedSharding are identical or disjoint),
// ascending by box.
struct HeldParam {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<std::shared_ptr<const BoxTensor>> cells;

  // The index of the cell that contains `box` (same rank), or -1.
  int CellContaining(const Box& box) const;
  std::string CellsString() const;  // "[0:4, 0:6], [4:8, 0:6]"
};

// One (model, generation, version) resident on this worker. Immutable once
// built; versions share the buffers of params they did not change.
struct LoadedModel {
  std::string model;
  int64_t generation = 0;
  int64_t version = 1;
  Mesh mesh;
  std::vector<int64_t> devices;          // hosted here, ascending
  std::vector<int64_t> replica_devices;  // held for durability only, ascending
  std::vector<int64_t> device_workers;   // worker id of every mesh device
  int64_t worker_id = -1;                // this worker
  // device (of `devices`) -> param name -> its box, pointing into `held`.
  // Devices holding an identical box share the pointer.
  absl::flat_hash_map<int64_t,
                      absl::flat_hash_map<std::string, std::shared_ptr<const BoxTensor>>>
      params;
  absl::flat_hash_map<std::string, HeldParam> held;
  int64_t param_bytes = 0;  // distinct held buffers only
  // What kFill runs of this version kept, by program (param_cache.h).
  KeptParamBuffers kept_params;

  bool HostsDevice(int64_t device) const { return params.contains(device); }
  std::string DevicesString() const;  // "[0, 1]"
  std::string Name() const;           // "model 'm' generation 1 version 2"
};

// The bytes of the distinct buffers of model.held.
int64_t DistinctHeldBytes(const LoadedModel& model);

// What BuildLoadedModel needs besides the request.
struct LoadContext {
  int64_t worker_id = -1;  // -1: not known yet (learnt from the devices)
  PeerTransport* transport = nullptr;  // remote pieces; may be null
  absl::Duration read_timeout = absl::Minutes(5);
  // This worker's resident (request.model, generation, version) (version 0:
  // the newest), for local pieces; null when nothing is resident.
  std::function<std::shared_ptr<const LoadedModel>(int64_t generation, int64_t version)>
      find_resident;
};

struct BuiltModel {
  std::shared_ptr<const LoadedModel> model;
  LoadModelResultIr result;
};

// Parses, validates and loads (see WorkerEngine::LoadModel).
absl::StatusOr<BuiltModel> BuildLoadedModel(const LoadModelIr& request,
                                            const LoadContext& context);

// ---- param_sources.cc ----
// A held cell whose values come from LoadModelRequest.sources.
struct SourcedCell {
  std::string param;
  DType dtype = DType::kFloat32;
  Box box;
  std::vector<const ParamPieceIr*> pieces;  // tile `box` (CheckTiling)
  std::shared_ptr<const BoxTensor> values;  // set by FillFromSources
};

// Fills every cell from its pieces: a local piece (src_worker == worker_id)
// from this worker's resident (model, src_generation, src_version) held cell
// containing it (sharing the buffer when the piece is the whole cell and that
// cell is identical), a remote one with ReadParam (peers in parallel).
// Counts bytes_fetched and bytes_local into `result`.
// \error kNotFound for a local source that is not resident or holds no cell
//   containing the piece; kUnavailable without a transport; FetchBoxInto's.
absl::Status FillFromSources(const std::string& model, int64_t worker_id,
                             const LoadContext& context, std::vector<SourcedCell>* cells,
                             LoadModelResultIr* result);

// Checks that the pieces meeting `cell` lie inside it and tile it exactly.
// \error kInvalidArgument naming the param, the cell and the piece.
absl::Status CheckTiling(absl::string_view param, const Box& cell,
                         const std::vector<const ParamPieceIr*>& pieces);

// Reads request.box from peer `worker` (PeerTransport::ReadParam) into `dst`
// (which holds a box containing it, of the param's dtype). Returns the bytes.
// \error kInvalidArgument for a dtype or byte count that differs from dst's,
//   chunks out of order; the transport's errors.
absl::StatusOr<int64_t> FetchBoxInto(PeerTransport* transport, int64_t worker,
                                     const ReadParamIr& request, absl::Time deadline,
                                     BoxTensor* dst);

// Runs `jobs` (peer worker -> its work): the jobs of one peer in order,
// different peers in parallel (a thread each), and `meanwhile` (when set) on
// the calling thread at the same time; returns when all have ended, with
// meanwhile's error first, then the first peer's.
absl::Status RunPerPeer(std::vector<std::pair<int64_t, std::function<absl::Status()>>> jobs,
                        const std::function<absl::Status()>& meanwhile = nullptr);

// The bytes of `box` of a held cell: a view into it when `box` is the whole
// cell, else a copy.
absl::StatusOr<ParamBytes> CellBytes(const std::shared_ptr<const BoxTensor>& cell,
                                     const Box& box);

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

#endif  // MESHSERVE_SERVER_WORKER_WORKER_ENGINE_INTERNAL_H_
