// Prometheus metrics without prometheus-cpp: counters, gauges and histograms
// with labels, kept in a MetricRegistry that renders the text exposition
// format 0.0.4 (what /metrics serves and `promtool check metrics` accepts).
//
//   MetricRegistry registry;
//   Counter& requests = registry.AddCounter(
//       "meshserve_inference_requests_total", "Requests answered.", {"model"});
//   requests.Increment({"swiglu"});
//   registry.Exposition() ==
//     "# HELP meshserve_inference_requests_total Requests answered.\n"
//     "# TYPE meshserve_inference_requests_total counter\n"
//     "meshserve_inference_requests_total{model=\"swiglu\"} 1\n"
//
// A family is one metric name with fixed label names; each distinct tuple of
// label values is one series, created on first use. Label values are escaped
// (\\, \", \n) as the format asks; families appear in the order they were
// added, series in label-value order. A histogram series renders cumulative
// `_bucket{le="..."}` lines ending with le="+Inf", then `_sum` and `_count`.
//
// Reading back: ScalarFamily::Values and Histogram::Snapshot give every
// series as numbers (a histogram's buckets cumulative, as _bucket renders
// them), and MetricRegistry::Find<T>(name) a registered family, so a page
// shows the numbers /metrics serves without parsing the text.
//
// HistogramQuantile(q, h) is Prometheus' histogram_quantile over one series'
// cumulative buckets (upper bound le, count <= le), the last one +Inf: the
// rank r = q * total falls in the first bucket whose count >= r, and the
// value is interpolated linearly inside it, from the previous bound (0 for
// the first) to its le; in the +Inf bucket it is the last finite le; NaN
// without observations.
//
// Names are the code's own (not input): Add* DCHECKs that a name matches
// [a-zA-Z_:][a-zA-Z0-9_:]* and is not registered twice, and a call with the
// wrong number of label values is ignored (DCHECK in debug builds).
//
// Thread-safety: thread-safe. Families live as long as their registry and
// their references stay valid; each family has its own mutex, so updates to
// different families do not contend, and Exposition takes them one at a time.
#ifndef MESHSERVE_COMMON_METRICS_METRIC_REGISTRY_H_
#define MESHSERVE_COMMON_METRICS_METRIC_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace meshserve {

using LabelValues = std::vector<std::string>;

// What every family shares: name, help, type, label names, rendering.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::string type,
               std::vector<std::string> label_names);
  virtual ~MetricFamily() = default;
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  // Appends "# HELP", "# TYPE" and every series.
  void AppendTo(std::string* out) const;
  // Drops every series (e.g. before re-filling a per-worker gauge).
  virtual void Clear() = 0;

 protected:
  // `{a="x",b="y"}` for `values` (and `extra`, e.g. le="0.5"), or "" without labels.
  std::string LabelText(const LabelValues& values, absl::string_view extra = "") const;
  bool ValidLabels(absl::Span<const std::string> values) const;
  virtual void AppendSeries(std::string* out) const = 0;

 private:
  const std::string name_;
  const std::string help_;
  const std::string type_;
  const std::vector<std::string> label_names_;
};

// A counter or a gauge: one double per series.
class ScalarFamily : public MetricFamily {
 public:
  ScalarFamily(std::string name, std::string help, std::string type,
               std::vector<std::string> label_names)
      : MetricFamily(std::move(name), std::move(help), std::move(type),
                     std::move(label_names)) {}
  double Value(const LabelValues& labels) const;
  // Every series' value, by label values.
  std::map<LabelValues, double> Values() const;
  void Clear() override;

 protected:
  void AddTo(const LabelValues& labels, double delta);
  void SetTo(const LabelValues& labels, double value);
  void AppendSeries(std::string* out) const override;

 private:
  mutable absl::Mutex mu_;
  std::map<LabelValues, double> values_ ABSL_GUARDED_BY(mu_);
};

// Only goes up (a negative delta is ignored).
class Counter final : public ScalarFamily {
 public:
  using ScalarFamily::ScalarFamily;
  void Increment(const LabelValues& labels, double delta = 1);
};

class Gauge final : public ScalarFamily {
 public:
  using ScalarFamily::ScalarFamily;
  void Set(const LabelValues& labels, double value);
  void Add(const LabelValues& labels, double delta);
};

// One histogram series as numbers.
struct HistogramSnapshot {
  std::vector<double> bounds;       // the finite upper bounds (le), ascending
  std::vector<int64_t> cumulative;  // observations <= bounds[i]; last: +Inf (all)
  double sum = 0;
  int64_t count = 0;
};

// Prometheus' histogram_quantile of `h` (see the file comment).
double HistogramQuantile(double q, const HistogramSnapshot& h);

class Histogram final : public MetricFamily {
 public:
  // `bounds`: ascending upper bounds (le) of the buckets; +Inf is implied.
  Histogram(std::string name, std::string help, std::vector<std::string> label_names,
            std::vector<double> bounds);
  void Observe(const LabelValues& labels, double value);
  // Count and sum of one series (0, 0 when it does not exist).
  int64_t Count(const LabelValues& labels) const;
  double Sum(const LabelValues& labels) const;
  // Every series, by label values.
  std::map<LabelValues, HistogramSnapshot> Snapshot() const;
  void Clear() override;

 protected:
  void AppendSeries(std::string* out) const override;

 private:
  struct Series {
    std::vector<int64_t> buckets;  // per bound, not cumulative; last: above all
    double sum = 0;
    int64_t count = 0;
  };
  HistogramSnapshot SnapshotOf(const Series& s) const;
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<LabelValues, Series> series_ ABSL_GUARDED_BY(mu_);
};

// Bucket bounds for latencies in seconds: 0.5 ms .. 60 s.
std::vector<double> LatencyBucketsSeconds();

class MetricRegistry {
 public:
  MetricRegistry() = default;
  MetricRegistry(const MetricRegistry&) = delete;
  MetricRegistry& operator=(const MetricRegistry&) = delete;

  Counter& AddCounter(std::string name, std::string help,
                      std::vector<std::string> label_names = {});
  Gauge& AddGauge(std::string name, std::string help,
                  std::vector<std::string> label_names = {});
  Histogram& AddHistogram(std::string name, std::string help,
                          std::vector<std::string> label_names,
                          std::vector<double> bounds = LatencyBucketsSeconds());

  // The text exposition format 0.0.4 of every family.
  std::string Exposition() const;

  // The family registered as `name` when it is a T (Counter, Gauge,
  // ScalarFamily, Histogram), else null.
  template <typename T>
  const T* Find(absl::string_view name) const {
    return dynamic_cast<const T*>(FindFamily(name));
  }

 private:
  const MetricFamily* FindFamily(absl::string_view name) const;

  template <typename T, typename... Args>
  T& Add(Args&&... args);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<MetricFamily>> families_ ABSL_GUARDED_BY(mu_);
};

// The process's registry, for binaries with one core object per process (the
// worker); the coordinator owns its registry instead (coordinator_metrics.h).
MetricRegistry& GlobalMetricRegistry();

// Content-Type of Exposition().
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_METRICS_METRIC_REGISTRY_H_
