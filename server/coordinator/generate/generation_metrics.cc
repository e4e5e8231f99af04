// GenerationMetrics (generation_metrics.h).
#include "server/coordinator/generate/generation_metrics.h"

#include <memory>
#include <utility>

#include "absl/time/clock.h"

namespace meshserve {

GenerationMetrics::GenerationMetrics(MetricRegistry* registry)
    : ttft_(&registry->AddHistogram("meshserve_generation_time_to_first_token_seconds",
                                    "Time from a sequence's start to its first token.",
                                    {"model"})),
      itl_(&registry->AddHistogram("meshserve_generation_inter_token_seconds",
                                   "Time between a sequence's tokens.", {"model"})),
      tokens_(&registry->AddCounter("meshserve_generation_tokens_total", "Tokens generated.",
                                    {"model"})),
      sequences_(&registry->AddGauge("meshserve_generation_sequences",
                                     "Sequences running (decoded each step) or waiting.",
                                     {"model", "state"})),
      kv_bytes_(&registry->AddGauge(
          "meshserve_generation_kv_cache_bytes",
          "KV cache bytes per device of the model: used and capacity.", {"model", "state"})) {}

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
}

}  // namespace meshserve
