// The worker's program runner: the installed programs and their runs for
// requests, generation steps included.
//
// State:
//   - installed programs: program_id -> InstalledProgram (program_run.h),
//     validated and in the send schedule;
//   - the rendezvous (rendezvous.h) where peers' slices arrive, and the
//     deadline timer that ends the runs' waits;
//   - the KV caches of generation steps (kv_store.h), when configured.
//
// A run reads its version from the model store (model_store.h) and holds it
// until it ends. Execute semantics and errors: WorkerEngine (worker_engine.h).
//
// Thread-safety: thread-safe. `mu_` guards the program table and counter; the
// runs happen without it, on shared_ptr snapshots. It takes no model store
// lock while it holds `mu_` except through ModelStore::ForgetKept (order:
// mu_, then the store's).
#ifndef MESHSERVE_SERVER_WORKER_PROGRAM_RUNNER_H_
#define MESHSERVE_SERVER_WORKER_PROGRAM_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/deadline_timer.h"
#include "common/program/decode_step.h"
#include "common/program/program_ir.h"
#include "server/worker/model_store.h"
#include "server/worker/peer_transport.h"
#include "server/worker/rendezvous.h"

namespace meshserve {

// program_run.h / kv_store.h (core tensor types, kept out of this header).
struct InstalledProgram;
class KvCacheStore;

class ProgramRunner {
 public:
  using Done = std::function<void(absl::StatusOr<std::vector<SliceIr>>)>;
  struct Options {
    // Budget of a request whose call has no deadline.
    absl::Duration default_deadline = absl::Seconds(60);
    Rendezvous::Options rendezvous;
    // Runs a long request off the calling thread (WorkerEngine::Options).
    std::function<void(std::function<void()>)> executor;
    int64_t kv_cache_bytes = 0;  // per model for generation steps; 0: none
  };

  // `transport` (may be null) and `models` must outlive the runner.
  ProgramRunner(Options options, PeerTransport* transport, const ModelStore* models);
  // Fails the runs waiting on a peer (their done callbacks run here).
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  // WorkerEngine::InstallProgram.
  absl::Status Install(ProgramIr program) ABSL_LOCKS_EXCLUDED(mu_);
  // WorkerEngine::UninstallProgram.
  absl::Status Uninstall(absl::string_view program_id) ABSL_LOCKS_EXCLUDED(mu_);
  // WorkerEngine::Execute / ExecuteAsync.
  absl::StatusOr<std::vector<SliceIr>> Execute(absl::string_view program_id,
                                               absl::string_view request_id,
                                               std::vector<SliceIr> inputs,
                                               absl::Duration timeout, int64_t param_version,
                                               ParamCacheMode param_cache);
  void ExecuteAsync(absl::string_view program_id, std::string request_id,
                    std::vector<SliceIr> inputs, absl::Duration timeout, int64_t param_version,
                    ParamCacheMode param_cache, Done done,
                    std::shared_ptr<const DecodeStepIr> decode) ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the programs of `model`'s `generations` (their last version went).
  void DropPrograms(absl::string_view model, const std::vector<int64_t>& generations)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the KV caches of (model, generation) (-1: every generation).
  void DropKvCaches(absl::string_view model, int64_t generation);
  // Frees the KV cache blocks of `seqs` of (model, generation) (unknown ones
  // skipped): the ReleaseSequences RPC, no program run.
  void ReleaseKvSequences(absl::string_view model, int64_t generation,
                          const std::vector<int64_t>& seqs);

  int64_t num_programs() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t requests_served() const ABSL_LOCKS_EXCLUDED(mu_);
  Rendezvous& rendezvous() { return rendezvous_; }

 private:
  // The program and the version a request runs on, or the error to answer.
  absl::Status Resolve(absl::string_view program_id, int64_t param_version,
                       std::shared_ptr<const InstalledProgram>* program,
                       std::shared_ptr<const LoadedModel>* model) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  PeerTransport* const transport_;
  const ModelStore* const models_;
  Rendezvous rendezvous_;
  DeadlineTimer timer_;  // ends runs' waits at their deadlines
  const std::unique_ptr<KvCacheStore> kv_;  // null without kv_cache_bytes

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const InstalledProgram>> programs_
      ABSL_GUARDED_BY(mu_);
  int64_t requests_served_ ABSL_GUARDED_BY(mu_) = 0;
};

// The default bound on a worker's in-flight slice bytes
// (Rendezvous::Options::max_inflight_slice_bytes, flag
// --max_inflight_slice_bytes): a quarter of the host's memory divided among
// the workers it runs (as `meshserve local`'s --kv_cache_bytes default), at
// least 64 MiB and at most 4 GiB (the former fixed bound):
//   clamp(mem_total_bytes / 4 / max(host_workers, 1), 64 MiB, 4 GiB)
// e.g. a 24 GiB host with 4 workers: 1.5 GiB each; a 4 GiB host with one: 1 GiB.
int64_t DefaultMaxInflightSliceBytes(int64_t mem_total_bytes, int64_t host_workers);


}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PROGRAM_RUNNER_H_
