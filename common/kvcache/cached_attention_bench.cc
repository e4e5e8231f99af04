// CachedAttention speed on GPT-2 small's per-worker shape (2 workers: 6 of the
// 12 heads, head_dim 64, 16-token blocks), one layer.
//   BM_Decode/B/P      B sequences at context P, one new token each (one
//                      call): counter cache_GBps = K/V bytes read per second
//                      (2 * (P + 1) * 6 * 64 * 4 per sequence).
//   BM_StreamBaseline  the same bytes summed from one flat buffer (the
//                      read bandwidth the decode loop could reach).
//   BM_Prefill/N       one N-token prompt from position 0: GFLOPs counts the
//                      useful (causal) multiply-adds, 2 * 2 * Hq * D * N(N+1)/2.
// Ratios against the baseline, never timed assertions.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/base/logging.h"
#include "common/kvcache/cached_attention.h"
#include "common/kvcache/kv_cache.h"

namespace meshserve {
namespace {

constexpr int64_t kHeads = 6, kD = 64, kBlock = 16;

Tensor Random(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(DType::kFloat32, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

std::unique_ptr<KvCache> MakeCache(int64_t tokens) {
  const int64_t blocks = tokens / kBlock + 64;
  auto cache = KvCache::Create(KvBlockPoolOptions{kBlock, 1, kHeads, kD, DType::kFloat32,
                                                  blocks * 2 * kBlock * kHeads * kD * 4});
  MS_CHECK(cache.ok()) << cache.status();
  return *std::move(cache);
}

// Fills sequences 0 .. b-1 to `context` positions with one prefill each.
void Prefill(KvCache& cache, int64_t b, int64_t context) {
  for (int64_t s = 0; s < b; ++s) {
    MS_CHECK(cache.Reserve(s, context + 1).ok());
    Tensor x = Random({context, kHeads, kD}, s);
    const KvSpan span{s, 0, 0, context};
    MS_CHECK(CachedAttention(cache, 0, x, x, x, {&span, 1}).ok());
  }
}

void BM_Decode(benchmark::State& state) {
  const int64_t b = state.range(0), context = state.range(1);
  std::unique_ptr<KvCache> cache = MakeCache(b * (context + 1));
  Prefill(*cache, b, context);
  Tensor q = Random({b, kHeads, kD}, 99), kv = Random({b, kHeads, kD}, 98);
  std::vector<KvSpan> spans;
  for (int64_t s = 0; s < b; ++s) spans.push_back({s, context, s, 1});
  Tensor out = Tensor::Zeros(DType::kFloat32, {b, kHeads, kD});
  for (auto _ : state) {
    MS_CHECK(CachedAttentionInto(*cache, 0, q, kv, kv, spans, {}, &out).ok());
    for (int64_t s = 0; s < b; ++s) MS_CHECK(cache->Truncate(s, context).ok());  // again
  }
  const double bytes = 2.0 * (context + 1) * kHeads * kD * 4 * b;
  state.counters["cache_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)->Args({1, 128})->Args({1, 1024})->Args({16, 128})->Args({16, 512});

void BM_StreamBaseline(benchmark::State& state) {
  const int64_t floats = 2 * state.range(0) * kHeads * kD * state.range(1);
  std::vector<float> data(static_cast<size_t>(floats), 1.0f);
  for (auto _ : state) {
    float acc[16] = {};
    for (int64_t i = 0; i + 16 <= floats; i += 16) {
      for (int j = 0; j < 16; ++j) acc[j] += data[i + j];
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["cache_GBps"] = benchmark::Counter(
      floats * 4.0 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StreamBaseline)->Args({1, 129})->Args({1, 1025})->Args({16, 129})->Args({16, 513});

void BM_Prefill(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::unique_ptr<KvCache> cache = MakeCache(n);
  MS_CHECK(cache->Reserve(0, n).ok());
  Tensor q = Random({n, kHeads, kD}, 1), kv = Random({n, kHeads, kD}, 2);
  Tensor out = Tensor::Zeros(DType::kFloat32, {n, kHeads, kD});
  const KvSpan span{0, 0, 0, n};
  for (auto _ : state) {
    MS_CHECK(CachedAttentionInto(*cache, 0, q, kv, kv, {&span, 1}, {}, &out).ok());
    MS_CHECK(cache->Truncate(0, 0).ok());
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * 2 * kHeads * kD * n * (n + 1) / 2 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Prefill)->Arg(16)->Arg(128)->Arg(512);

}  // namespace
}  // namespace meshserve

BENCHMARK_MAIN();
