// Cost per row of the sampler (no assertions; prints a table): a GPT-2-wide
// row (50257 ids padded to 50264), Gaussian logits (sd 3), whole-row and
// split over 2 shards, for the common params.
//   build/bin/sampling_bench [iterations]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/sampling/sampler.h"

namespace meshserve {
namespace {

struct Case {
  const char* name;
  SamplingParams params;
};

int Run(int iterations) {
  const int64_t vocab = 50257, width = 50264;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> row(width);
  for (float& v : row) v = normal(rng);
  const Case cases[] = {
      {"greedy", {0.0f, 0, 1.0f, 1, -1}},
      {"T=1", {1.0f, 0, 1.0f, 1, -1}},
      {"T=1 logprobs=5", {1.0f, 0, 1.0f, 1, 5}},
      {"T=0.8 top_k=50", {0.8f, 50, 1.0f, 1, -1}},
      {"T=1 top_p=0.9", {1.0f, 0, 0.9f, 1, -1}},
      {"T=0.7 top_p=0.9", {0.7f, 0, 0.9f, 1, -1}},
      {"T=0.8 top_k=50 top_p=0.95 lp=5", {0.8f, 50, 0.95f, 1, 5}},
  };
  std::printf("%-32s %12s %14s %8s\n", "params", "whole ms/row", "2 shards ms/row",
              "retries");
  int64_t checksum = 0;
  for (const Case& c : cases) {
    absl::Time start = absl::Now();
    for (int i = 0; i < iterations; ++i) {
      absl::StatusOr<SampleResult> r = SampleRow(row, vocab, c.params, i);
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
      checksum += r->token_id;
    }
    const double whole = absl::ToDoubleMilliseconds(absl::Now() - start) / iterations;
    // Two shards, one after the other (a worker runs its own only), with the
    // retry for more candidates when the top_p nucleus needs it.
    int retries = 0;
    start = absl::Now();
    for (int i = 0; i < iterations; ++i) {
      std::vector<ShardSummary> shards;
      const int64_t begins[2] = {0, width / 2};
      for (int64_t begin : begins) {
        const absl::Span<const float> part(row.data() + begin, width / 2);
        shards.push_back(*SummarizeShard(part, begin, vocab, c.params, i));
      }
      absl::StatusOr<MergeOutcome> m = MergeShardSummaries(shards, vocab, c.params, i);
      while (m.ok() && !m->complete) {
        ++retries;
        for (int s = 0; s < 2; ++s) {
          const absl::Span<const float> part(row.data() + begins[s], width / 2);
          RefillCandidates(part, vocab, m->retry_num_candidates, &shards[s]);
        }
        m = MergeShardSummaries(shards, vocab, c.params, i);
      }
      if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
      checksum += m->result.token_id;
    }
    const double sharded = absl::ToDoubleMilliseconds(absl::Now() - start) / iterations;
    std::printf("%-32s %12.3f %14.3f %8.2f\n", c.name, whole, sharded,
                static_cast<double>(retries) / iterations);
  }
  std::printf("(checksum %lld)\n", static_cast<long long>(checksum));
  return 0;
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  return meshserve::Run(argc > 1 ? std::atoi(argv[1]) : 200);
}
