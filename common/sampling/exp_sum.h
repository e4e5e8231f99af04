// ExpSum: the sum of exp(x_i) over a set of values, accumulated exactly so that
// any grouping of the set (a vocabulary split into shards in any way, merged in
// any order) gives the same bits. The sampler's logsumexp (logprobs) and top_p
// normaliser come from it, which is what makes a sharded sample equal the
// whole-row sample bit for bit.
//
// Math. Let c = 32 ln 2. Each term is written from x alone as
//   b = floor(x / c)   (its bucket),   r = x - b c   (in [0, c), up to rounding),
//   q = exp(r) 2^64    (an integer: exp(r) >= ~1 has at most 53 significant bits),
// so exp(x) ~= q 2^-64 e^(b c) = q 2^(32 b - 64). Buckets are summed as unsigned
// 128-bit integers (q < 2^97; up to 2^30 terms fit), which is associative and
// commutative exactly. Only the kNumBuckets highest buckets below the largest
// bucket seen are kept: a term 4 buckets below the top is < 2^-96 of the top
// term, so dropping it changes the sum by < 2^-80 relative, and the drop rule
// depends only on the final top bucket, so it too is the same for any grouping.
//   Log() = log(sum_j acc_j 2^(-32 j) 2^-64) + top c,   j = top - bucket.
// Precondition of Add: x finite with |x| <= kMaxAbsExponent (callers check).
//
// Thread-safety: a plain value; const methods may run concurrently.
#ifndef MESHSERVE_COMMON_SAMPLING_EXP_SUM_H_
#define MESHSERVE_COMMON_SAMPLING_EXP_SUM_H_

#include <array>
#include <cstdint>
#include <limits>
#include <string>

namespace meshserve {

class ExpSum {
 public:
  static constexpr int kNumBuckets = 5;
  static constexpr double kMaxAbsExponent = 1e15;

  // Adds exp(x). O(1); costs one exp() unless x falls below the kept buckets.
  void Add(double x);
  // Adds every term of `other` (the result is as if all were Added here).
  void Merge(const ExpSum& other);

  bool empty() const { return top_ == kEmpty; }
  // log(sum of exp(x_i)); -infinity when empty.
  double Log() const;

  bool operator==(const ExpSum& other) const {
    return top_ == other.top_ && acc_ == other.acc_;
  }
  bool operator!=(const ExpSum& other) const { return !(*this == other); }
  std::string ToString() const;

 private:
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
  // Moves the top bucket up to `bucket` (> top_), dropping what falls off.
  void RaiseTop(int64_t bucket);

  int64_t top_ = kEmpty;
  // acc_[j]: the sum of q over the terms in bucket top_ - j.
  std::array<unsigned __int128, kNumBuckets> acc_{};
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_EXP_SUM_H_
