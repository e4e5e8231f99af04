#include "server/coordinator/param_cache_state.h"

namespace meshserve {

ParamCacheMode ParamCacheState::ModeFor(const CompiledPlan& plan, int64_t version) const {
  if (version <= 0 || plan.kept_param_bytes <= 0 || plan.kept_param_bytes > max_kept_bytes_) {
    return ParamCacheMode::kOff;
  }
  absl::MutexLock lock(&mu_);
  auto it = kept_version_.find(plan.program_id);
  return it != kept_version_.end() && it->second == version ? ParamCacheMode::kUse
                                                            : ParamCacheMode::kFill;
}

bool ParamCacheState::Ran(const CompiledPlan& plan, int64_t version, ParamCacheMode mode,
                          const absl::Status& status) {
  if (mode == ParamCacheMode::kOff) return false;
  const bool refused = mode == ParamCacheMode::kUse && absl::IsFailedPrecondition(status);
  if (requests_ != nullptr && (status.ok() || refused)) {
    const char* label = refused ? "refused" : mode == ParamCacheMode::kFill ? "fill" : "use";
    requests_->Increment({label});
  }
  absl::MutexLock lock(&mu_);
  if (mode == ParamCacheMode::kFill && status.ok()) {
    if (kept_version_.size() >= kMaxPlans && !kept_version_.contains(plan.program_id)) {
      kept_version_.clear();
    }
    kept_version_[plan.program_id] = version;
    return false;
  }
  if (refused) {
    auto it = kept_version_.find(plan.program_id);
    if (it != kept_version_.end() && it->second == version) kept_version_.erase(it);
    return true;
  }
  return false;
}

}  // namespace meshserve
