// Token generation on the coordinator's /metrics (Prometheus):
//   meshserve_generation_time_to_first_token_seconds{model}   histogram
//   meshserve_generation_inter_token_seconds{model}           histogram
//   meshserve_generation_tokens_total{model}                  counter
//   meshserve_generation_sequences{model,state=running|waiting} gauge
//   meshserve_generation_kv_cache_bytes{model,state=used|capacity} gauge
//     (the scheduler's count of blocks, times the bytes a block takes on the
//     fullest device: what each of the model's devices holds at most)
//
// Thread-safety: thread-safe (the families are).
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_

#include <functional>
#include <string>

#include "common/metrics/metric_registry.h"
#include "server/coordinator/generate/scheduler.h"

namespace meshserve {

class GenerationMetrics {
 public:
  // Registers the families in `registry` (which must outlive this).
  explicit GenerationMetrics(MetricRegistry* registry);

  // `sink` wrapped: the time from now to the first token, between tokens,
  // and the tokens counted; `after` runs after each event (the gauges).
  SequenceSink Observe(const std::string& model, SequenceSink sink,
                       std::function<void()> after) const;
  void SetModelState(const std::string& model, const GenerationScheduler::Stats& stats,
                     int64_t block_bytes) const;

 private:
  Histogram* ttft_;
  Histogram* itl_;
  Counter* tokens_;
  Gauge* sequences_;
  Gauge* kv_bytes_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_GENERATION_METRICS_H_
