#include "common/metrics/metric_registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace meshserve {
namespace {

bool ValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (allow_colon && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// The format's escapes: \\ and \n in HELP, and \" too in label values.
std::string Escape(absl::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Go's strconv.FormatFloat(v, 'g', -1, 64) closely enough: integers without a
// fraction, +Inf/-Inf/NaN spelled the format's way.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);  // the short form when it round-trips
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

MetricFamily::MetricFamily(std::string name, std::string help, std::string type,
                           std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(std::move(type)),
      label_names_(std::move(label_names)) {
  MS_DCHECK(ValidName(name_, /*allow_colon=*/true));
  for (const std::string& label : label_names_) {
    MS_DCHECK(ValidName(label, /*allow_colon=*/false) && label != "le");
  }
}

void MetricFamily::AppendTo(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", Escape(help_, false), "\n", "# TYPE ", name_,
                  " ", type_, "\n");
  AppendSeries(out);
}

std::string MetricFamily::LabelText(const LabelValues& values, absl::string_view extra) const {
  if (label_names_.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < label_names_.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", label_names_[i], "=\"", Escape(values[i], true), "\"");
  }
  if (!extra.empty()) absl::StrAppend(&out, label_names_.empty() ? "" : ",", extra);
  return out + "}";
}

bool MetricFamily::ValidLabels(absl::Span<const std::string> values) const {
  const bool ok = values.size() == label_names_.size();
  MS_DCHECK(ok);
  return ok;
}

double ScalarFamily::Value(const LabelValues& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

std::map<LabelValues, double> ScalarFamily::Values() const {
  absl::MutexLock lock(&mu_);
  return values_;
}

void ScalarFamily::Clear() {
  absl::MutexLock lock(&mu_);
  values_.clear();
}

void ScalarFamily::AddTo(const LabelValues& labels, double delta) {
  if (!ValidLabels(labels)) return;
  absl::MutexLock lock(&mu_);
  values_[labels] += delta;
}

void ScalarFamily::SetTo(const LabelValues& labels, double value) {
  if (!ValidLabels(labels)) return;
  absl::MutexLock lock(&mu_);
  values_[labels] = value;
}

void ScalarFamily::AppendSeries(std::string* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [labels, value] : values_) {
    absl::StrAppend(out, name(), LabelText(labels), " ", FormatValue(value), "\n");
  }
}

void Counter::Increment(const LabelValues& labels, double delta) {
  if (delta >= 0) AddTo(labels, delta);
}

void Gauge::Set(const LabelValues& labels, double value) { SetTo(labels, value); }
void Gauge::Add(const LabelValues& labels, double delta) { AddTo(labels, delta); }

Histogram::Histogram(std::string name, std::string help, std::vector<std::string> label_names,
                     std::vector<double> bounds)
    : MetricFamily(std::move(name), std::move(help), "histogram", std::move(label_names)),
      bounds_(std::move(bounds)) {
  for (size_t i = 1; i < bounds_.size(); ++i) MS_DCHECK(bounds_[i - 1] < bounds_[i]);
}

void Histogram::Observe(const LabelValues& labels, double value) {
  if (!ValidLabels(labels)) return;
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  absl::MutexLock lock(&mu_);
  Series& s = series_[labels];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  ++s.buckets[bucket];
  s.sum += value;
  ++s.count;
}

int64_t Histogram::Count(const LabelValues& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

double Histogram::Sum(const LabelValues& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.sum;
}

HistogramSnapshot Histogram::SnapshotOf(const Series& s) const {
  HistogramSnapshot out{bounds_, {}, s.sum, s.count};
  int64_t cumulative = 0;
  for (int64_t n : s.buckets) out.cumulative.push_back(cumulative += n);
  return out;
}

std::map<LabelValues, HistogramSnapshot> Histogram::Snapshot() const {
  std::map<LabelValues, HistogramSnapshot> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [labels, s] : series_) out.emplace(labels, SnapshotOf(s));
  return out;
}

void Histogram::Clear() {
  absl::MutexLock lock(&mu_);
  series_.clear();
}

void Histogram::AppendSeries(std::string* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [labels, series] : series_) {
    const HistogramSnapshot s = SnapshotOf(series);
    for (size_t i = 0; i < s.cumulative.size(); ++i) {
      const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
      absl::StrAppend(out, name(), "_bucket", LabelText(labels, absl::StrCat("le=\"", le, "\"")),
                      " ", s.cumulative[i], "\n");
    }
    absl::StrAppend(out, name(), "_sum", LabelText(labels), " ", FormatValue(s.sum), "\n",
                    name(), "_count", LabelText(labels), " ", s.count, "\n");
  }
}

double HistogramQuantile(double q, const HistogramSnapshot& h) {
  if (h.cumulative.empty() || h.cumulative.back() <= 0) return std::nan("");
  const double rank = q * static_cast<double>(h.cumulative.back());
  double lower = 0, below = 0;
  for (size_t i = 0; i < h.cumulative.size(); ++i) {
    const double count = static_cast<double>(h.cumulative[i]);
    if (count >= rank) {
      if (i >= h.bounds.size()) return lower;  // +Inf: the last finite bound
      const double le = h.bounds[i];
      if (count == below) return le;
      return lower + (le - lower) * (rank - below) / (count - below);
    }
    if (i < h.bounds.size()) lower = h.bounds[i];
    below = count;
  }
  return lower;
}

std::vector<double> LatencyBucketsSeconds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,    60};
}

template <typename T, typename... Args>
T& MetricRegistry::Add(Args&&... args) {
  auto family = std::make_unique<T>(std::forward<Args>(args)...);
  T& ref = *family;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) MS_DCHECK(f->name() != ref.name());
  families_.push_back(std::move(family));
  return ref;
}

Counter& MetricRegistry::AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  return Add<Counter>(std::move(name), std::move(help), "counter", std::move(label_names));
}

Gauge& MetricRegistry::AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names) {
  return Add<Gauge>(std::move(name), std::move(help), "gauge", std::move(label_names));
}

Histogram& MetricRegistry::AddHistogram(std::string name, std::string help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  return Add<Histogram>(std::move(name), std::move(help), std::move(label_names),
                        std::move(bounds));
}

std::string MetricRegistry::Exposition() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) family->AppendTo(&out);
  return out;
}

const MetricFamily* MetricRegistry::FindFamily(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) {
    if (family->name() == name) return family.get();
  }
  return nullptr;
}

MetricRegistry& GlobalMetricRegistry() {
  static MetricRegistry* const registry = new MetricRegistry();
  return *registry;
}

}  // namespace meshserve
