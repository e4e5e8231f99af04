// The worker's model store: the resident versions of each (model,
// generation) and the push staging that builds new ones (param_store.h),
// with the param reads peers and clients make of them.
//
// State:
//   - resident models: (model, generation, version) -> the LoadedModel
//     (loaded_model.h). Requests hold a reference, so unloading a version
//     while a request runs on it frees its params when that request ends.
//   - the push staging (ParamStore): values of a version being pushed, with
//     the epoch of each abort (StageParams' stream check).
//   - this worker's id (learnt from the first Load when not given).
//
// Load builds a version (model_loader.h) and makes it resident, replacing
// the same (model, generation, version). ReadParam serves a box inside one
// held cell of a resident version (or of a version being staged here);
// StageParams/CommitParams build a new version from staged chunks;
// AbortParams drops one. The errors are WorkerEngine's (worker_engine.h).
//
// Thread-safety: thread-safe. `mu_` guards the table; a version is
// immutable, so the heavy work (loading, fetching, reading) runs on
// shared_ptr snapshots without it. Lock order: stage_mu_, mu_, the
// ParamStore's.
#ifndef MESHSERVE_SERVER_WORKER_MODEL_STORE_H_
#define MESHSERVE_SERVER_WORKER_MODEL_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/program/program_ir.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

// loaded_model.h / param_store.h: they need the core tensor types, which
// stay out of this header (worker_engine.h includes it).
struct LoadedModel;
class ParamStore;

class ModelStore {
 public:
  struct Options {
    int64_t worker_id = -1;  // -1: learn it from the first Load
    // Budget of the ReadParam calls of one Load or CommitParams.
    absl::Duration param_read_timeout = absl::Minutes(5);
  };

  // `transport` (not owned, may be null) reads remote sources and fills.
  ModelStore(Options options, PeerTransport* transport);
  ~ModelStore();
  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

  // WorkerEngine::LoadModel.
  absl::StatusOr<LoadModelResultIr> Load(const LoadModelIr& request);
  // Drops the matching versions and stagings (generation -1: every
  // generation; version 0: every version). Returns the generations whose last
  // version went (their programs go too). \error kNotFound when nothing matched.
  absl::StatusOr<std::vector<int64_t>> Unload(absl::string_view model, int64_t generation,
                                              int64_t version);

  // Resident (model, generation, version) (version 0: the newest), or null.
  std::shared_ptr<const LoadedModel> Find(absl::string_view model, int64_t generation,
                                          int64_t version) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets what the install `cache_key` kept in every resident version of
  // (model, generation) (param_cache.h; the install was replaced).
  void ForgetKept(absl::string_view model, int64_t generation,
                  const std::string& cache_key) const ABSL_LOCKS_EXCLUDED(mu_);
  // One entry per resident version (WorkerEngine::Status).
  std::vector<HostedModelIr> Hosted() const ABSL_LOCKS_EXCLUDED(mu_);

  // WorkerEngine's ReadParam, StageParams, StagingEpoch, CommitParams,
  // AbortParams.
  absl::StatusOr<ParamBytes> ReadParam(const ReadParamIr& request) const;
  absl::StatusOr<int64_t> StageParams(const StageChunkIr& chunk, int64_t stream_epoch);
  int64_t StagingEpoch() const;
  absl::StatusOr<CommitResultIr> CommitParams(const CommitParamsIr& request);
  absl::Status AbortParams(absl::string_view model, int64_t generation, int64_t version);

  int64_t worker_id() const { return worker_id_.load(); }
  void set_worker_id(int64_t id) { worker_id_.store(id); }

 private:
  using ModelKey = std::pair<std::string, int64_t>;
  // version -> the resident version.
  using Versions = std::map<int64_t, std::shared_ptr<const LoadedModel>>;

  std::shared_ptr<const LoadedModel> FindLocked(absl::string_view model, int64_t generation,
                                                int64_t version) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops the abort epochs of `model`'s gone generations.
  void ForgetAborts(absl::string_view model, const std::vector<int64_t>& generations)
      ABSL_LOCKS_EXCLUDED(stage_mu_);

  const Options options_;
  PeerTransport* const transport_;
  std::atomic<int64_t> worker_id_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ModelKey, Versions> models_ ABSL_GUARDED_BY(mu_);
  // Staging vs AbortParams: chunks stage under a reader lock, an abort drops
  // the staging under the writer lock and records its epoch for the key.
  mutable absl::Mutex stage_mu_;
  int64_t staging_epoch_ ABSL_GUARDED_BY(stage_mu_) = 0;
  // (model, generation, version) -> the epoch of its last abort; one entry
  // per aborted version, dropped with its generation (Unload).
  absl::flat_hash_map<std::tuple<std::string, int64_t, int64_t>, int64_t> aborted_at_
      ABSL_GUARDED_BY(stage_mu_);
  const std::unique_ptr<ParamStore> staging_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_MODEL_STORE_H_
