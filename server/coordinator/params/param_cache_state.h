// The coordinator's side of the param cache (worker_service.proto
// ExecuteRequest.param_cache): which mode each request of a plan runs in.
//
// A plan whose programs mark param-only steps (the compiler's
// MarkParamOnlySteps, e.g. the all-gather of a sharded kernel) runs its first
// request on a param version with kFill on every worker; once such a run has
// succeeded, later requests on that version run with kUse and skip those
// steps. A kUse that a worker refuses (FAILED_PRECONDITION: it kept nothing,
// e.g. its version was loaded again) forgets the version, and the request
// runs again with kFill. Every worker of a request gets the same mode.
// The budget bounds what any one worker keeps over all plans: a plan is
// counted (its kept_param_bytes, the most any worker keeps for it) from its
// first kFill until its generation is retired; plans that would exceed the
// budget run kOff, on every request.
//
// Thread-safety: thread-safe.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_CACHE_STATE_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_CACHE_STATE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_registry.h"
#include "common/program/program_ir.h"
#include "server/compiler/compiled_plan.h"

namespace meshserve {

class ParamCacheState {
 public:
  // `max_kept_bytes`: the most bytes any worker may keep over all plans; 0
  // turns the cache off. `requests` (may be null; must outlive this) counts
  // the runs by mode: "fill", "use", "refused".
  explicit ParamCacheState(int64_t max_kept_bytes, Counter* requests = nullptr)
      : max_kept_bytes_(max_kept_bytes), requests_(requests) {}

  // The mode of the next request of `plan` on param version `version`. The
  // first kFill of a plan counts its bytes against the budget. `refill`: the
  // request's kUse was refused (Ran returned true): kFill for a counted plan,
  // never kUse, so that a request is refused at most once.
  ParamCacheMode ModeFor(const CompiledPlan& plan, int64_t version, bool refill = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A request ran in `mode` and ended with `status`. Returns true when it
  // should run again (a kUse refused as above; the next mode is kFill).
  bool Ran(const CompiledPlan& plan, int64_t version, ParamCacheMode mode,
           const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // The workers dropped `generation` of `model` and its plans: their bytes
  // leave the budget.
  void EraseGeneration(const std::string& model, int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes counted against the budget now.
  int64_t counted_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Plan {
    std::string model;
    int64_t generation = 0;
    int64_t bytes = 0;         // the plan's kept_param_bytes
    int64_t kept_version = 0;  // 0: no kFill has succeeded on the current version
  };
  // Bounds the table (each plan costs a few bytes here even when it keeps
  // little on the workers); plans beyond it run kOff.
  static constexpr size_t kMaxPlans = 4096;

  const int64_t max_kept_bytes_;
  Counter* const requests_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Plan> plans_ ABSL_GUARDED_BY(mu_);  // by program id
  int64_t counted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_CACHE_STATE_H_
