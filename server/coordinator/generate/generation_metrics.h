// Token generation on the coordinator's /metrics (Prometheus):
//   meshserve_generation_time_to_first_token_seconds{model}   histogram
//   meshserve_generation_inter_token_seconds{model}           histogram
//   meshserve_generation_tokens_total{model}                  counter
//   meshserve_generation_prefill_tokens_total{model}          counter
//     (GenerationScheduler::Stats::prefill_tokens: tokens fed by prefill
//     spans; n choices sharing an L-token prompt add L - 1, not n * L)
//   meshserve_generation_sequences{model,state=running|waiting} gauge
//   meshserve_generation_kv_cache_bytes{model,state=used|capacity} gauge
//     (the scheduler's count of blocks, times the bytes a block takes on the
//     fullest device: what each of the model's devices holds at most)
//
// Snapshot(registry) reads those families back as numbers, per model (the
// status page's "text_generation"; server/coordinator/http/status_json.h), so
// the page and /metrics show the same figures.
//
// Thread-safety: thread-safe (the families are).
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metric_registry.h"
#include "server/coordinator/generate/scheduler.h"

namespace meshserve {

// One model's generation numbers, as the families hold them.
struct GenerationSnapshot {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t tokens_generated = 0;
  int64_t prefill_tokens = 0;
  HistogramSnapshot time_to_first_token;  // seconds
  HistogramSnapshot inter_token;          // seconds
  int64_t kv_cache_bytes_used = 0;
  int64_t kv_cache_bytes_capacity = 0;
};

class GenerationMetrics {
 public:
  // Each model's numbers in the families a GenerationMetrics registered in
  // `registry` (models in no series are absent; none registered: empty).
  static std::map<std::string, GenerationSnapshot> Snapshot(const MetricRegistry& registry);

  // Registers the families in `registry` (which must outlive this).
  explicit GenerationMetrics(MetricRegistry* registry);

  // `sink` wrapped: the time from now to the first token, between tokens,
  // and the tokens counted; `after` runs after each event (the gauges).
  SequenceSink Observe(const std::string& model, SequenceSink sink,
                       std::function<void()> after) const;
  // The gauges, and the prefill counter advanced to stats.prefill_tokens (a
  // model's new scheduler counts from 0 again: its count is added whole).
  void SetModelState(const std::string& model, const GenerationScheduler::Stats& stats,
                     int64_t block_bytes) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Histogram* ttft_;
  Histogram* itl_;
  Counter* tokens_;
  Counter* prefill_;
  Gauge* sequences_;
  Gauge* kv_bytes_;
  mutable absl::Mutex mu_;
  // By model: the scheduler's prefill_tokens the counter has counted.
  mutable std::map<std::string, int64_t> prefill_seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_
