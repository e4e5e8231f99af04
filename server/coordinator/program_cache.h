// The compiled-program cache: one CompiledPlan per (model, generation, input
// shapes, out_shardings), compiled and installed on its workers once (cf.
// XLA's ReshardCache: a keyed cache of compiled artifacts).
//
// GetOrCompile finds the plan of a validated request on a placement. On a
// miss it compiles the plan (ModelCompiler::Compile), installs each worker's
// program on that worker (WorkerClient::InstallProgram, all workers in
// parallel, fan_out.h) and caches it. Concurrent requests for the same key
// wait for the one compile. A failed compile or install is not cached, so the
// next request tries again. An install that fails with a worker failure
// (IsWorkerFailure) marks the worker suspect in the registry and returns
// kUnavailable, which makes Coordinator::Infer retry.
//
// Bound. At most options.max_programs installed plans are kept; installing one
// more evicts the least recently used (a GetOrCompile or Find hit counts as a
// use). Plans still compiling are not counted and never evicted, so the map
// exceeds the bound by at most the compiles in flight. An evicted plan stays
// valid for the requests holding it; the next request of its key compiles and
// installs it again under the same program id, so on the workers the install
// replaces the old program instead of adding one. options.on_evict sees each
// evicted plan (the hook for releasing its programs on the workers).
//
// Keys are "<model>|<generation>|<ValidatedRequest::cache_key_suffix>". A
// generation's entries go when it is retired (EraseGeneration). Program ids are
// "<model>/g<generation>/p<16 hex digits of a hash of the key suffix>": the
// same key gets the same id after an eviction. Two live keys whose hashes
// collide get the second one a counted id "<model>/g<generation>/q<n>".
//
// Metrics (when options.metrics is set; one cache per registry):
//   meshserve_program_cache_programs         installed plans cached now
//   meshserve_program_cache_evictions_total  plans evicted by the bound
//   meshserve_program_cache_compiles_total   compiles started (misses)
//
// Thread-safety: thread-safe. Locks, in acquisition order: an entry's own
// mutex (held while its plan compiles and installs, RPCs included) -> mu_
// (the key map and the LRU order; never held during an RPC). Install calls
// `clients` while it holds an entry's mutex; on_evict runs with no lock held.
#ifndef MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_
#define MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/metric_registry.h"
#include "server/compiler/model_compiler.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

inline constexpr size_t kDefaultMaxCachedPrograms = 256;

struct ProgramCacheOptions {
  // The most installed plans kept (>= 1; 0 is taken as 1).
  size_t max_programs = kDefaultMaxCachedPrograms;
  // Where the cache's metrics go (may be null; must outlive the cache).
  MetricRegistry* metrics = nullptr;
  // Called with each plan the bound evicts, after the cache let go of it, on
  // the thread of the request whose install evicted it (so possibly on
  // several threads at once), with no lock of the cache held.
  std::function<void(std::shared_ptr<const CompiledPlan>)> on_evict;
};

class ProgramCache {
 public:
  // `clients` gets (or makes) the client of a worker; `compiler` and
  // `registry` must outlive the cache.
  ProgramCache(ModelCompiler* compiler, WorkerClientFactory clients, WorkerRegistry* registry,
               absl::Duration install_timeout, ProgramCacheOptions options = {});
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // \error the compiler's errors (kInvalidArgument for an out_sharding the
  //   mesh rejects); kUnavailable when a worker failed the install (it is
  //   marked suspect); other install errors annotated with the worker.
  absl::StatusOr<std::shared_ptr<const CompiledPlan>> GetOrCompile(
      const ValidatedRequest& request, const std::shared_ptr<const Placement>& placement)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The plan GetOrCompile would return, if it is compiled and installed
  // already; else null. Never waits (not for a plan being compiled either).
  std::shared_ptr<const CompiledPlan> Find(const ValidatedRequest& request,
                                           const Placement& placement) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops `plan` if it is still cached (a worker lost its program, e.g. an
  // uninstall of its evicted predecessor under the same id arrived after it
  // was installed again): the next request of its key installs it again.
  void Forget(const CompiledPlan& plan) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a cached (or compiling) plan has `program_id` now (then an
  // uninstall of an evicted plan of that id would remove its program).
  bool HasProgram(const std::string& program_id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Drops every plan of `model` at `generation` (its placement is retired).
  void EraseGeneration(const std::string& model, int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  // Number of cached (or compiling) keys.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Installed plans evicted by the bound so far.
  int64_t evictions() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct CacheEntry {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::shared_ptr<const CompiledPlan> plan ABSL_GUARDED_BY(mu);
  };
  struct Slot {
    std::shared_ptr<CacheEntry> entry;
    std::string program_id;
    // Set once installed (then the key is in lru_ at `lru`).
    std::shared_ptr<const CompiledPlan> plan;
    std::list<std::string>::iterator lru;
  };

  absl::Status Install(const CompiledPlan& plan, const Placement& placement);
  // The id for `key` (a new slot's), unique among the slots cached now.
  std::string ProgramIdFor(const Placement& placement, const std::string& suffix)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lists an installed plan as most recently used and evicts past the bound;
  // returns the evicted plans (for on_evict, outside mu_).
  std::vector<std::shared_ptr<const CompiledPlan>> Insert(
      const std::string& key, const std::shared_ptr<CacheEntry>& entry,
      std::shared_ptr<const CompiledPlan> plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases `it` from cache_ and lru_.
  void EraseSlot(std::map<std::string, Slot>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ModelCompiler* const compiler_;
  const WorkerClientFactory clients_;
  WorkerRegistry* const registry_;
  const absl::Duration install_timeout_;
  const ProgramCacheOptions options_;
  Gauge* const programs_gauge_;    // null without options.metrics
  Counter* const evictions_counter_;
  Counter* const compiles_counter_;

  mutable absl::Mutex mu_;
  std::map<std::string, Slot> cache_ ABSL_GUARDED_BY(mu_);
  // Keys of installed plans, most recently used first (Find moves them too).
  mutable std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> key_of_id_ ABSL_GUARDED_BY(mu_);  // program id -> key
  int64_t next_program_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_
