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
// Keys are "<model>|<generation>|<ValidatedRequest::cache_key_suffix>". A
// generation's entries go when it is retired (EraseGeneration). Program ids are
// "<model>/g<generation>/p<n>", with n counted by this cache.
//
// Thread-safety: thread-safe. Locks, in acquisition order: an entry's own
// mutex (held while its plan compiles and installs, RPCs included) -> mu_
// (the key map; never held during an RPC). Install calls `clients` while it
// holds an entry's mutex.
#ifndef MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_
#define MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/compiler/model_compiler.h"
#include "server/coordinator/infer_request.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/worker_client.h"
#include "server/coordinator/worker_registry.h"

namespace meshserve {

class ProgramCache {
 public:
  // `clients` gets (or makes) the client of a worker; `compiler` and
  // `registry` must outlive the cache.
  ProgramCache(ModelCompiler* compiler, WorkerClientFactory clients, WorkerRegistry* registry,
               absl::Duration install_timeout);
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

  // Drops every plan of `model` at `generation` (its placement is retired).
  void EraseGeneration(const std::string& model, int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  // Number of cached (or compiling) keys.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct CacheEntry {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::shared_ptr<const CompiledPlan> plan ABSL_GUARDED_BY(mu);
  };

  absl::Status Install(const CompiledPlan& plan, const Placement& placement);

  ModelCompiler* const compiler_;
  const WorkerClientFactory clients_;
  WorkerRegistry* const registry_;
  const absl::Duration install_timeout_;
  std::atomic<int64_t> next_program_ = 0;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<CacheEntry>> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PROGRAM_CACHE_H_
