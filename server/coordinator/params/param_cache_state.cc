#include "server/coordinator/params/param_cache_state.h"

namespace meshserve {

ParamCacheMode ParamCacheState::ModeFor(const CompiledPlan& plan, int64_t version,
                                        bool refill) {
  if (version <= 0 || plan.kept_param_bytes <= 0 || plan.programs.empty()) {
    return ParamCacheMode::kOff;
  }
  absl::MutexLock lock(&mu_);
  auto it = plans_.find(plan.program_id);
  if (it != plans_.end()) {
    return it->second.kept_version == version && !refill ? ParamCacheMode::kUse
                                                         : ParamCacheMode::kFill;
  }
  if (plans_.size() >= kMaxPlans || counted_ + plan.kept_param_bytes > max_kept_bytes_) {
    return ParamCacheMode::kOff;
  }
  // Counted from the first kFill: a worker may keep the buffers even if
  // another fails the request.
  plans_[plan.program_id] = Plan{plan.programs.begin()->second.model, plan.generation,
                                 plan.kept_param_bytes, 0};
  counted_ += plan.kept_param_bytes;
  return ParamCacheMode::kFill;
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
  auto it = plans_.find(plan.program_id);
  if (it == plans_.end()) return false;  // its generation was retired meanwhile
  if (mode == ParamCacheMode::kFill && status.ok()) {
    it->second.kept_version = version;
    return false;
  }
  if (refused) {
    if (it->second.kept_version == version) it->second.kept_version = 0;
    return true;
  }
  return false;
}

void ParamCacheState::EraseGeneration(const std::string& model, int64_t generation) {
  absl::MutexLock lock(&mu_);
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (it->second.model == model && it->second.generation == generation) {
      counted_ -= it->second.bytes;
      plans_.erase(it++);
    } else {
      ++it;
    }
  }
}

int64_t ParamCacheState::counted_bytes() const {
  absl::MutexLock lock(&mu_);
  return counted_;
}

}  // namespace meshserve
