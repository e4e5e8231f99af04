#include "server/coordinator/coordinator_metrics.h"

#include <utility>

#include "absl/time/clock.h"

namespace meshserve {

void RecentRequests::Add(RecentRequest request) {
  absl::MutexLock lock(&mu_);
  requests_.push_front(std::move(request));
  while (requests_.size() > capacity_) requests_.pop_back();
}

std::vector<RecentRequest> RecentRequests::List() const {
  absl::MutexLock lock(&mu_);
  return {requests_.begin(), requests_.end()};
}

CoordinatorMetrics::CoordinatorMetrics()
    : requests(registry.AddCounter("meshserve_inference_requests_total",
                                   "Inference requests answered (ok or failed).", {"model"})),
      failures(registry.AddCounter("meshserve_inference_failures_total",
                                   "Inference requests that failed, by status code.",
                                   {"model", "code"})),
      in_flight(registry.AddGauge("meshserve_inference_in_flight",
                                  "Inference requests running now.", {"model"})),
      request_seconds(registry.AddHistogram("meshserve_inference_request_duration_seconds",
                                            "Inference request latency, end to end.",
                                            {"model"})),
      queue_seconds(registry.AddHistogram(
          "meshserve_inference_queue_duration_seconds",
          "From arrival until the workers are called (validation, program, slicing).",
          {"model"})),
      compute_seconds(registry.AddHistogram("meshserve_inference_compute_duration_seconds",
                                            "The workers' Execute calls of a request.",
                                            {"model"})),
      batch_size(registry.AddHistogram(
          "meshserve_inference_batch_size",
          "Rows of the dynamic batch each batched request ran in (batcher.h).", {"model"},
          {1, 2, 4, 8, 16, 32, 64, 128, 256})),
      transfer_bytes(registry.AddCounter(
          "meshserve_transfer_bytes_total",
          "Tensor bytes sent to (input slices) and received from (outputs) workers.",
          {"model", "direction"})),
      placement_events(registry.AddCounter(
          "meshserve_placement_events_total",
          "Placements (initial, reshard on scaling, re-placement) by result.",
          {"model", "result"})),
      placement_seconds(registry.AddHistogram("meshserve_placement_duration_seconds",
                                              "Loading one placement on its workers.",
                                              {"model"})),
      placement_bytes(registry.AddCounter("meshserve_placement_bytes_total",
                                          "Param bytes made resident on workers by placements.",
                                          {"model"})),
      param_cache_requests(registry.AddCounter(
          "meshserve_param_cache_requests_total",
          "Requests whose param-only steps (e.g. a kernel's all-gather) were kept (mode=fill), "
          "skipped (use) or could not be skipped (refused: run again as a fill).",
          {"mode"})),
      async_paths(registry.AddCounter(
          "meshserve_inference_async_total",
          "ModelInfer requests by how they waited for their workers: answered by the last "
          "worker's callback (path=callback) or by a thread that waited (thread: a batched "
          "model, a plan still to compile, a failed call, calls longer than the watch period).",
          {"path"})),
      worker_up(registry.AddGauge("meshserve_worker_up", "1 while a worker is alive, else 0.",
                                  {"worker", "address"})),
      worker_suspect(registry.AddGauge("meshserve_worker_suspect",
                                       "1 while a request saw the worker fail (probing).",
                                       {"worker", "address"})),
      worker_draining(registry.AddGauge("meshserve_worker_draining",
                                        "1 while the worker is leaving.",
                                        {"worker", "address"})) {}

InferRecorder::InferRecorder(CoordinatorMetrics* metrics, std::string model, std::string id)
    : metrics_(metrics), model_(std::move(model)), id_(std::move(id)), start_(absl::Now()) {
  metrics_->in_flight.Add({model_}, 1);
}

void InferRecorder::ComputeStarted() {
  compute_start_ = absl::Now();
  metrics_->queue_seconds.Observe({model_}, absl::ToDoubleSeconds(compute_start_ - start_));
}

void InferRecorder::ComputeDone(int64_t bytes_to_workers, int64_t bytes_from_workers) {
  const absl::Duration d = absl::Now() - compute_start_;
  compute_ += d;
  metrics_->compute_seconds.Observe({model_}, absl::ToDoubleSeconds(d));
  metrics_->transfer_bytes.Increment({model_, "to_workers"}, bytes_to_workers);
  metrics_->transfer_bytes.Increment({model_, "from_workers"}, bytes_from_workers);
}

void InferRecorder::Batched(int64_t rows, int64_t queue_us, int64_t compute_us) {
  metrics_->batch_size.Observe({model_}, static_cast<double>(rows));
  metrics_->queue_seconds.Observe({model_}, static_cast<double>(queue_us) * 1e-6);
  compute_ += absl::Microseconds(compute_us);
  metrics_->compute_seconds.Observe({model_}, static_cast<double>(compute_us) * 1e-6);
}

void InferRecorder::Finish(const absl::Status& status) {
  const absl::Duration total = absl::Now() - start_;
  metrics_->in_flight.Add({model_}, -1);
  metrics_->requests.Increment({model_});
  if (!status.ok()) {
    metrics_->failures.Increment({model_, absl::StatusCodeToString(status.code())});
  }
  metrics_->request_seconds.Observe({model_}, absl::ToDoubleSeconds(total));
  RecentRequest r;
  r.finished = absl::Now();
  r.model = model_;
  r.id = id_;
  r.total_ms = absl::ToDoubleMilliseconds(total);
  r.compute_ms = absl::ToDoubleMilliseconds(compute_);
  r.code = status.code();
  r.error = std::string(status.message().substr(0, 200));
  metrics_->recent.Add(std::move(r));
}

}  // namespace meshserve
