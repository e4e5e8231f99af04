// Every attention-rows variant the CPU runs (AVX-512, AVX2+FMA, generic)
// against a float64 loop, for head dims that exercise each vector width and
// its scalar tail.
#include "common/kvcache/attention_rows.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace meshserve {
namespace kv_internal {
namespace {

TEST(AttentionRowsTest, EveryVariantMatchesAFloat64Loop) {
  const std::vector<AttentionRowsVariant> variants = SupportedAttentionRowsVariants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants.front().isa, AttentionRowsIsa());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const AttentionRowsVariant& v : variants) {
    for (int64_t d : {1, 7, 8, 15, 16, 24, 31, 32, 48, 64, 67, 128}) {
      for (int64_t rows : {1, 5, 16}) {
        SCOPED_TRACE(::testing::Message() << v.isa << " d " << d << " rows " << rows);
        std::vector<float> q(d), m(rows * d), w(rows), o(d), scores(rows);
        for (float& x : q) x = normal(rng);
        for (float& x : m) x = normal(rng);
        for (float& x : w) x = normal(rng);
        for (float& x : o) x = normal(rng);
        std::vector<double> want_o(o.begin(), o.end());
        v.score(q.data(), m.data(), rows, d, 0.5f, scores.data());
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += double{q[i]} * m[r * d + i];
          EXPECT_NEAR(scores[r], 0.5 * dot, 1e-5 * (1 + std::fabs(dot))) << "row " << r;
          for (int64_t i = 0; i < d; ++i) want_o[i] += double{w[r]} * m[r * d + i];
        }
        v.accumulate(w.data(), m.data(), rows, d, o.data());
        for (int64_t i = 0; i < d; ++i) {
          EXPECT_NEAR(o[i], want_o[i], 1e-5 * (1 + std::fabs(want_o[i]))) << "o[" << i << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace kv_internal
}  // namespace meshserve
