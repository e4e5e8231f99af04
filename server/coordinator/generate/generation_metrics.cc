// GenerationMetrics (generation_metrics.h).
#include "server/coordinator/generate/generation_metrics.h"

#include <cmath>
#include <memory>
#include <utility>

#include "absl/time/clock.h"

namespace meshserve {
namespace {

// The families' names (the header's list), for adding and for finding them.
constexpr const char *kTtft = "meshserve_generation_time_to_first_token_seconds",
                     *kItl = "meshserve_generation_inter_token_seconds",
                     *kTokens = "meshserve_generation_tokens_total",
                     *kPrefill = "meshserve_generation_prefill_tokens_total",
                     *kSequences = "meshserve_generation_sequences",
                     *kKvBytes = "meshserve_generation_kv_cache_bytes";

int64_t Count(double value) { return static_cast<int64_t>(std::llround(value)); }

}  // namespace

GenerationMetrics::GenerationMetrics(MetricRegistry* registry)
    : ttft_(&registry->AddHistogram(kTtft, "Time from a sequence's start to its first token.",
                                    {"model"})),
      itl_(&registry->AddHistogram(kItl, "Time between a sequence's tokens.", {"model"})),
      tokens_(&registry->AddCounter(kTokens, "Tokens generated.", {"model"})),
      prefill_(&registry->AddCounter(
          kPrefill, "Tokens fed by prefill (prompts, caches rebuilt; a shared prompt once).",
          {"model"})),
      sequences_(&registry->AddGauge(kSequences,
                                     "Sequences running (decoded each step) or waiting.",
                                     {"model", "state"})),
      kv_bytes_(&registry->AddGauge(
          kKvBytes, "KV cache bytes per device of the model: used and capacity.",
          {"model", "state"})) {}

std::map<std::string, GenerationSnapshot> GenerationMetrics::Snapshot(
    const MetricRegistry& registry) {
  std::map<std::string, GenerationSnapshot> out;  // labels[0] is the model
  if (const Counter* tokens = registry.Find<Counter>(kTokens)) {
    for (const auto& [l, v] : tokens->Values()) out[l[0]].tokens_generated = Count(v);
  }
  if (const Counter* prefill = registry.Find<Counter>(kPrefill)) {
    for (const auto& [l, v] : prefill->Values()) out[l[0]].prefill_tokens = Count(v);
  }
  if (const Gauge* sequences = registry.Find<Gauge>(kSequences)) {
    for (const auto& [l, v] : sequences->Values()) {
      (l[1] == "running" ? out[l[0]].running : out[l[0]].waiting) = Count(v);
    }
  }
  if (const Gauge* kv = registry.Find<Gauge>(kKvBytes)) {
    for (const auto& [l, v] : kv->Values()) {
      (l[1] == "used" ? out[l[0]].kv_cache_bytes_used : out[l[0]].kv_cache_bytes_capacity) =
          Count(v);
    }
  }
  if (const Histogram* ttft = registry.Find<Histogram>(kTtft)) {
    for (auto& [l, h] : ttft->Snapshot()) out[l[0]].time_to_first_token = std::move(h);
  }
  if (const Histogram* itl = registry.Find<Histogram>(kItl)) {
    for (auto& [l, h] : itl->Snapshot()) out[l[0]].inter_token = std::move(h);
  }
  return out;
}

SequenceSink GenerationMetrics::Observe(const std::string& model, SequenceSink sink,
                                        std::function<void()> after) const {
  struct Clock {
    absl::Time last = absl::Now();
    bool first = true;
  };
  auto clock = std::make_shared<Clock>();  // one sequence's events come in order
  return [this, model, clock, sink = std::move(sink),
          after = std::move(after)](const SequenceEvent& e) {
    if (!e.token_ids.empty()) {
      const absl::Time now = absl::Now();
      (clock->first ? ttft_ : itl_)->Observe({model}, absl::ToDoubleSeconds(now - clock->last));
      clock->first = false;
      clock->last = now;
      tokens_->Increment({model}, static_cast<double>(e.token_ids.size()));
    }
    if (sink) sink(e);
    if (after) after();
  };
}

void GenerationMetrics::SetModelState(const std::string& model,
                                      const GenerationScheduler::Stats& stats,
                                      int64_t block_bytes) const {
  sequences_->Set({model, "running"}, static_cast<double>(stats.running));
  sequences_->Set({model, "waiting"}, static_cast<double>(stats.waiting));
  kv_bytes_->Set({model, "used"}, static_cast<double>(stats.blocks_used * block_bytes));
  kv_bytes_->Set({model, "capacity"}, static_cast<double>(stats.num_blocks * block_bytes));
  int64_t delta = 0;
  {
    absl::MutexLock lock(&mu_);
    int64_t& seen = prefill_seen_[model];
    delta = stats.prefill_tokens >= seen ? stats.prefill_tokens - seen : stats.prefill_tokens;
    seen = stats.prefill_tokens;
  }
  if (delta > 0) prefill_->Increment({model}, static_cast<double>(delta));
}

}  // namespace meshserve
