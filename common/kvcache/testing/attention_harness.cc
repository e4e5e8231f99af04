// Test support for the KV cache tests (see attention_harness.h).
#include "common/kvcache/testing/attention_harness.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/npy.h"

namespace meshserve {
namespace kv_testing {

absl::StatusOr<std::vector<RefSequence>> NumpyReference(const ReferenceArgs& args) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                 "/kv_attention_ref.XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) return Internal("mkdtemp failed for ", dir);
  const std::string command = absl::StrCat(
      MESHSERVE_PYTHON3, " '", MESHSERVE_SOURCE_DIR,
      "/common/kvcache/testdata/attention_reference.py' --out '", dir, "' --seed ", args.seed,
      " --hq ", args.hq, " --hkv ", args.hkv, " --d ", args.d, " --lengths ",
      absl::StrJoin(args.lengths, ","), " --scale ", args.scale);
  const int rc = std::system(command.c_str());
  std::vector<RefSequence> out;
  absl::Status status = rc == 0 ? absl::OkStatus() : Internal("`", command, "` exited ", rc);
  for (size_t i = 0; status.ok() && i < args.lengths.size(); ++i) {
    RefSequence seq;
    Tensor* parts[] = {&seq.q, &seq.k, &seq.v, &seq.out};
    const char* names[] = {"q", "k", "v", "out"};
    for (int p = 0; p < 4 && status.ok(); ++p) {
      absl::StatusOr<Tensor> t = ReadNpy(absl::StrCat(dir, "/seq", i, "_", names[p], ".npy"));
      if (t.ok()) {
        *parts[p] = *std::move(t);
      } else {
        status = t.status();
      }
    }
    out.push_back(std::move(seq));
  }
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  MS_RETURN_IF_ERROR(status);
  return out;
}

RefSequence NaiveReference(uint64_t seed, int64_t length, int64_t hq, int64_t hkv, int64_t d) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  RefSequence r;
  r.q = Tensor::Zeros(DType::kFloat32, {length, hq, d});
  r.k = Tensor::Zeros(DType::kFloat32, {length, hkv, d});
  r.v = Tensor::Zeros(DType::kFloat32, {length, hkv, d});
  r.out = Tensor::Zeros(DType::kFloat64, {length, hq, d});
  for (Tensor* t : {&r.q, &r.k, &r.v}) {
    for (int64_t i = 0; i < t->NumElements(); ++i) t->data<float>()[i] = normal(rng);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t g = hq / hkv;
  const float *q = r.q.data<float>(), *k = r.k.data<float>(), *v = r.v.data<float>();
  std::vector<double> s(static_cast<size_t>(length));
  for (int64_t t = 0; t < length; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / g;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) {
          dot += double{q[(t * hq + h) * d + i]} * k[(j * hkv + kh) * d + i];
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
      double* o = r.out.data<double>() + (t * hq + h) * d;
      for (int64_t j = 0; j <= t; ++j) {
        for (int64_t i = 0; i < d; ++i) o[i] += s[j] / sum * v[(j * hkv + kh) * d + i];
      }
    }
  }
  return r;
}

double MaxRelativeError(const Tensor& got, const Tensor& want) {
  double worst = 0;
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    const double w = want.dtype() == DType::kFloat64 ? want.data<double>()[i] : want.GetFloat(i);
    const double err = std::fabs(double{got.GetFloat(i)} - w) / std::max(std::fabs(w), 1.0);
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
  }
  return worst;
}

Driver::Driver(KvCache* cache, std::vector<SequencePlan> plans, CachedAttentionOptions options)
    : cache_(cache), plans_(std::move(plans)), options_(std::move(options)) {
  done_.assign(plans_.size(), 0);
  for (const SequencePlan& p : plans_) {
    std::vector<Tensor> per_layer;
    for (const RefSequence* r : p.layers) {
      per_layer.push_back(Tensor::Zeros(DType::kFloat32, r->q.shape()));
    }
    got_.push_back(std::move(per_layer));
  }
}

absl::Status Driver::RunAll() {
  auto pending = [&] {
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (done_[i] < plans_[i].layers[0]->length()) return true;
    }
    return false;
  };
  while (pending()) MS_RETURN_IF_ERROR(Step(), "step ", steps_);
  return absl::OkStatus();
}

namespace {

// Copies rows [from, from + n) of `src` ([L, H, D]) to rows [to, to + n) of *dst.
void CopyRows(const Tensor& src, int64_t from, int64_t n, Tensor* dst, int64_t to) {
  const int64_t row = src.NumBytes() / src.dim(0);
  std::memcpy(dst->raw_data() + to * row, src.raw_data() + from * row, n * row);
}

}  // namespace

absl::Status Driver::Step() {
  std::vector<size_t> active;
  std::vector<KvSpan> spans;
  int64_t total = 0;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const SequencePlan& p = plans_[i];
    const int64_t length = p.layers[0]->length();
    if (p.start_step > steps_ || done_[i] >= length) continue;
    int64_t n = done_[i] < p.prompt_len ? std::min(p.chunk, p.prompt_len - done_[i]) : 1;
    n = std::min(n, length - done_[i]);
    MS_RETURN_IF_ERROR(cache_->Reserve(p.seq_id, done_[i] + n));
    active.push_back(i);
    spans.push_back({p.seq_id, done_[i], total, n});
    total += n;
  }
  max_tokens_per_call_ = std::max(max_tokens_per_call_, total);
  if (active.empty()) {  // every started sequence is done; later ones not yet in
    ++steps_;
    return absl::OkStatus();
  }
  const RefSequence& any = *plans_[active[0]].layers[0];
  const int64_t hq = any.q.dim(1), hkv = any.k.dim(1), d = any.q.dim(2);
  for (size_t layer = 0; layer < plans_[active[0]].layers.size(); ++layer) {
    Tensor q = Tensor::Zeros(DType::kFloat32, {total, hq, d});
    Tensor k = Tensor::Zeros(DType::kFloat32, {total, hkv, d});
    Tensor v = Tensor::Zeros(DType::kFloat32, {total, hkv, d});
    for (size_t a = 0; a < active.size(); ++a) {
      const RefSequence& r = *plans_[active[a]].layers[layer];
      const KvSpan& s = spans[a];
      CopyRows(r.q, s.past_len, s.num_tokens, &q, s.token_begin);
      CopyRows(r.k, s.past_len, s.num_tokens, &k, s.token_begin);
      CopyRows(r.v, s.past_len, s.num_tokens, &v, s.token_begin);
    }
    MS_ASSIGN_OR_RETURN(Tensor out,
                        CachedAttention(*cache_, static_cast<int64_t>(layer), q, k, v, spans,
                                        options_),
                        "layer ", layer);
    for (size_t a = 0; a < active.size(); ++a) {
      const KvSpan& s = spans[a];
      CopyRows(out, s.token_begin, s.num_tokens, &got_[active[a]][layer], s.past_len);
    }
  }
  for (size_t a = 0; a < active.size(); ++a) done_[active[a]] += spans[a].num_tokens;
  ++steps_;
  return absl::OkStatus();
}

}  // namespace kv_testing
}  // namespace meshserve
