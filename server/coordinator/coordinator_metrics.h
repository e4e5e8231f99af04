// The coordinator's Prometheus metrics (served at /metrics by
// server/coordinator/http/) and its list of recent requests (the status page).
//
// Per model (label model="NAME"):
//   meshserve_inference_requests_total            requests answered, ok or not
//   meshserve_inference_failures_total{code}      failed requests by status code
//   meshserve_inference_in_flight                 requests running now
//   meshserve_inference_request_duration_seconds  Infer, end to end
//   meshserve_inference_queue_duration_seconds    arrival until the workers are called
//                                                 (validation, program cache/compile, slicing)
//   meshserve_inference_compute_duration_seconds  the workers' Execute calls (fan-out)
//   meshserve_inference_batch_size                rows of the dynamic batch a batched
//                                                 request ran in (its queue time is in
//                                                 queue_duration; its compute is its batch's)
//   meshserve_transfer_bytes_total{direction}     input slices to / output slices from workers
//   meshserve_placement_events_total{result}      placements (reshard/scaling) loaded or failed
//   meshserve_placement_duration_seconds          loading one placement on its workers
//   meshserve_placement_bytes_total               param bytes made resident by placements
//   meshserve_param_cache_requests_total{mode}    requests whose param-only steps were kept
//                                                 (fill), skipped (use) or refused (run
//                                                 again as a fill; param_cache_state.h)
//   meshserve_inference_async_total{path}         ModelInfer requests answered by the last
//                                                 worker's callback or by a waiting thread
//                                                 (Coordinator::InferAsync)
// Per worker (worker="ID", address="HOST:PORT"), refreshed at each scrape:
//   meshserve_worker_up (1 alive, 0 dead), meshserve_worker_suspect,
//   meshserve_worker_draining.
//
// InferRecorder measures one Coordinator::Infer: it counts the request in
// flight from construction to Finish and records the compute phase, which
// coordinator_infer.cc marks with ComputeStarted / ComputeDone.
//
// Thread-safety: thread-safe (the registry's families and RecentRequests lock
// internally); an InferRecorder belongs to one request's thread.
#ifndef MESHSERVE_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define MESHSERVE_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/metric_registry.h"

namespace meshserve {

// One answered request, for the status page.
struct RecentRequest {
  absl::Time finished;
  std::string model;
  std::string id;
  double total_ms = 0;
  double compute_ms = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string error;  // first 200 characters of the message
};

// The last `capacity` requests, newest first.
class RecentRequests {
 public:
  explicit RecentRequests(size_t capacity) : capacity_(capacity) {}
  void Add(RecentRequest request);
  std::vector<RecentRequest> List() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<RecentRequest> requests_ ABSL_GUARDED_BY(mu_);
};

struct CoordinatorMetrics {
  CoordinatorMetrics();

  MetricRegistry registry;
  Counter& requests;
  Counter& failures;
  Gauge& in_flight;
  Histogram& request_seconds;
  Histogram& queue_seconds;
  Histogram& compute_seconds;
  Histogram& batch_size;
  Counter& transfer_bytes;
  Counter& placement_events;
  Histogram& placement_seconds;
  Counter& placement_bytes;
  Counter& param_cache_requests;
  Counter& async_paths;
  Gauge& worker_up;
  Gauge& worker_suspect;
  Gauge& worker_draining;
  RecentRequests recent{50};
};

class InferRecorder {
 public:
  InferRecorder(CoordinatorMetrics* metrics, std::string model, std::string id);
  InferRecorder(const InferRecorder&) = delete;
  InferRecorder& operator=(const InferRecorder&) = delete;

  void ComputeStarted();
  void ComputeDone(int64_t bytes_to_workers, int64_t bytes_from_workers);
  // The request ran in a dynamic batch of `rows` rows after `queue_us` in the
  // batcher's queue (batcher.h); its compute is its batch's `compute_us`.
  void Batched(int64_t rows, int64_t queue_us, int64_t compute_us);
  // Counts the request with its outcome; call once.
  void Finish(const absl::Status& status);

 private:
  CoordinatorMetrics* const metrics_;
  const std::string model_;
  const std::string id_;
  const absl::Time start_;
  absl::Time compute_start_ = absl::InfinitePast();
  absl::Duration compute_ = absl::ZeroDuration();
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
