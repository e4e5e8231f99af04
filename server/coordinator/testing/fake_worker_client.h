// An in-memory WorkerClient for tests of the coordinator core.
//
// Params are real state: LoadModel parses the model file and holds, per param,
// the distinct boxes ("cells", param_moves.h) of its devices and replica
// devices, each filled from LoadModelIr::sources (its own residents, or peers'
// ReadParam through the FakeCluster) or, for a cell no source meets, from
// FakeParamBytes (a deterministic stand-in for checkpoint/seed values).
// StageParams/CommitParams/AbortParams build new versions as the worker does
// (fills read from peers' staging; every held cell of a committed param must
// be covered exactly once), and ReadParam serves resident or staged boxes.
//
// Programs: it keeps the programs it is given (common/program/program_ir.h)
// until UninstallProgram or a Restart, and runs only their Output steps, over the input slices of the request: each
// Output step whose buffer is an input buffer InputBuffer(name) it was sent on
// that device returns that box of it (the programs of FakeModelCompiler,
// fake_model_compiler.h, are just such steps), plus, when the model has a
// param named "offset" of the output's dtype float32 and a held cell of it
// contains the box, that param's values of ExecuteCall::param_version (0: the
// newest), so tests see which version served (y = x + offset). Other steps
// are ignored.
//
// Generation: it records ReleaseSequences calls and each Execute's decode
// step (it keeps no KV cache and samples nothing).
//
// It records its calls and injects failures (a worker down, failing Executes,
// loads or commits, slow Executes, a restart that forgets everything).
//
// Thread-safety: thread-safe (one mutex, never held while calling a peer).
#ifndef MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// The bytes FakeWorkerClient materialises for `box` of `param` (row-major):
// element at global flat index i is the float32 (or int32) value
// (i % 997) + 1000 * (hash of the name % 7), other dtypes get its low bytes.
std::string FakeParamBytes(const ParamDef& param, const Box& box);

class FakeWorkerClient : public WorkerClient {
 public:
  using PeerLookup = std::function<std::shared_ptr<FakeWorkerClient>(int64_t worker_id)>;
  explicit FakeWorkerClient(int64_t worker_id, PeerLookup peers = nullptr)
      : worker_id_(worker_id), peers_(std::move(peers)) {}

  absl::StatusOr<LoadModelResultIr> LoadModel(const LoadModelIr& call,
                                              absl::Duration timeout) override;
  absl::Status UnloadModel(const std::string& model, int64_t generation, int64_t version,
                           absl::Duration timeout) override;
  absl::StatusOr<std::string> ReadParam(const ReadParamIr& call,
                                        absl::Duration timeout) override;
  absl::StatusOr<std::unique_ptr<StageParamsWriter>> StageParams(
      absl::Duration timeout) override;
  absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& call,
                                              absl::Duration timeout) override;
  absl::Status AbortParams(const std::string& model, int64_t generation, int64_t version,
                           absl::Duration timeout) override;
  absl::Status InstallProgram(const ProgramIr& program, absl::Duration timeout) override;
  absl::Status UninstallProgram(const std::string& program_id, absl::Duration timeout) override;
  absl::StatusOr<ExecuteResult> Execute(ExecuteCall call,
                                        absl::Duration timeout) override;
  // Records the call (released()); unknown sequences are fine, as on a worker.
  absl::Status ReleaseSequences(const std::string& model, int64_t generation,
                                const std::vector<int64_t>& seqs,
                                absl::Duration timeout) override;
  absl::Status Cancel(const std::string& request_id, const std::string& reason,
                      absl::Duration timeout) override;
  absl::StatusOr<WorkerStatusIr> Status(absl::Duration timeout) override;

  // Failure injection: `down` makes every call UNAVAILABLE (a dead process);
  // FailExecute makes the next `times` Executes (every one when negative)
  // return `status` (OK clears it).
  void SetDown(bool down);
  // The next ConnectionDropped() returns true (a transport that closed).
  void DropConnection() { dropped_.store(true); }
  bool ConnectionDropped() override { return dropped_.exchange(false); }
  void FailExecute(absl::Status status, int times = -1);
  void SetExecuteDelay(absl::Duration delay);
  // LoadModel of `model` fails with `status` (e.g. a corrupt checkpoint).
  void FailLoad(const std::string& model, absl::Status status);
  // The next CommitParams fails with `status` (OK clears it).
  void FailCommit(absl::Status status);
  // A restarted process: forgets every resident, staging and program.
  void Restart();

  int execute_calls() const { return Locked(&FakeWorkerClient::execute_calls_); }
  // The param_cache mode of every Execute so far, in order (failed ones too).
  std::vector<ParamCacheMode> param_cache_modes() const {
    return Locked(&FakeWorkerClient::param_cache_modes_);
  }
  int install_calls() const { return Locked(&FakeWorkerClient::install_calls_); }
  // Program ids installed now, and the ids of every UninstallProgram so far.
  std::vector<std::string> programs() const;
  std::vector<std::string> uninstalled() const { return Locked(&FakeWorkerClient::uninstalled_); }
  std::vector<std::string> cancelled() const { return Locked(&FakeWorkerClient::cancelled_); }
  // Makes ReleaseSequences answer UNIMPLEMENTED (a worker without the RPC).
  void SetReleaseUnimplemented(bool on) {
    absl::MutexLock lock(&mu_);
    release_unimplemented_ = on;
  }
  // Every ReleaseSequences so far: (model, generation, seqs).
  struct ReleaseCall {
    std::string model;
    int64_t generation = 0;
    std::vector<int64_t> seqs;
  };
  std::vector<ReleaseCall> released() const { return Locked(&FakeWorkerClient::released_); }
  // The decode step of every Execute that carried one, in order.
  std::vector<DecodeStepIr> decode_steps() const {
    return Locked(&FakeWorkerClient::decode_steps_);
  }
  // (model, generation) pairs loaded now (any version); devices of each.
  std::map<std::pair<std::string, int64_t>, std::vector<int64_t>> loaded() const;
  // (model, generation) of every UnloadModel (version dropped).
  std::vector<std::pair<std::string, int64_t>> unloaded() const;
  // (model, generation, version) of every UnloadModel.
  std::vector<std::tuple<std::string, int64_t, int64_t>> unloaded_versions() const {
    return Locked(&FakeWorkerClient::unloaded_);
  }
  std::vector<LoadModelIr> load_calls() const { return Locked(&FakeWorkerClient::load_calls_); }
  // Data bytes received through StageParams.
  int64_t staged_bytes() const { return Locked(&FakeWorkerClient::staged_bytes_); }
  std::vector<CommitParamsIr> commit_calls() const {
    return Locked(&FakeWorkerClient::commit_calls_);
  }
  int abort_calls() const { return Locked(&FakeWorkerClient::abort_calls_); }
  // Resident versions of (model, generation), ascending.
  std::vector<int64_t> versions(const std::string& model, int64_t generation) const;
  int64_t max_concurrent_executes() const { return Locked(&FakeWorkerClient::max_running_); }

 private:
  friend class FakeStageWriter;
  using Cells = std::map<std::string, std::map<Box, std::shared_ptr<const std::string>>>;
  struct Resident {
    LoadModelIr load;  // model_json cleared
    std::shared_ptr<const ModelFile> model;
    Cells cells;
  };
  using Key = std::tuple<std::string, int64_t, int64_t>;  // model, generation, version
  // A staged box; the same box staged again (another rank's put of a
  // replicated param, a tied twin) is another copy, compared at commit.
  using StagedKey = std::tuple<std::string, Box, int>;  // (param, box, copy)
  struct Staging {
    std::map<StagedKey, std::string> boxes;  // -> bytes
    std::map<StagedKey, int64_t> received;
  };

  // A copy of the guarded member `field`, read under mu_ (the counters'
  // and call logs' getters).
  template <typename T>
  T Locked(T FakeWorkerClient::*field) const {
    absl::MutexLock lock(&mu_);
    return this->*field;
  }
  absl::Status CheckUp() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<FakeWorkerClient>> Peer(int64_t worker_id) const;
  // ReadParam of `piece` from its source worker.
  absl::StatusOr<std::string> ReadPeer(const std::string& model,
                                       const ParamPieceIr& piece) const;
  // A resident of (model, generation) (any version), or null.
  const Resident* AnyResident(const std::string& model, int64_t generation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> Stage(StageChunkIr chunk);
  // The bytes of `pieces` (which tile `cell` of `param`) assembled.
  absl::StatusOr<std::string> Assemble(const ParamDef& param, const Box& cell,
                                       const std::vector<std::pair<Box, std::string>>& pieces);
  static int64_t ResidentBytes(const Resident& r);
  // The bytes of `box`, which must lie inside one of r's cells of `param`.
  static absl::StatusOr<std::string> ReadCells(const Resident& r, const std::string& param,
                                               const Box& box);

  const int64_t worker_id_;
  const PeerLookup peers_;
  mutable absl::Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> dropped_{false};
  absl::Status execute_failure_ ABSL_GUARDED_BY(mu_);
  int execute_failures_left_ ABSL_GUARDED_BY(mu_) = -1;  // negative: no limit
  absl::Duration execute_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, absl::Status> load_failures_ ABSL_GUARDED_BY(mu_);
  absl::Status commit_failure_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Resident> residents_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Staging> staging_ ABSL_GUARDED_BY(mu_);
  std::vector<Key> unloaded_ ABSL_GUARDED_BY(mu_);
  std::vector<LoadModelIr> load_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<CommitParamsIr> commit_calls_ ABSL_GUARDED_BY(mu_);
  int abort_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, ProgramIr> programs_ ABSL_GUARDED_BY(mu_);  // by program_id
  std::vector<std::string> cancelled_ ABSL_GUARDED_BY(mu_);
  std::vector<ReleaseCall> released_ ABSL_GUARDED_BY(mu_);
  bool release_unimplemented_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<DecodeStepIr> decode_steps_ ABSL_GUARDED_BY(mu_);
  int execute_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ParamCacheMode> param_cache_modes_ ABSL_GUARDED_BY(mu_);
  int install_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> uninstalled_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
