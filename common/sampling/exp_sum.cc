// ExpSum: exact, grouping-independent sum of exp(x) (see exp_sum.h for the math).
#include "common/sampling/exp_sum.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace meshserve {
namespace {

// c = 32 ln 2: one bucket spans a factor 2^32.
constexpr double kBucketWidth = 32 * 0.69314718055994531;
constexpr double kInverseBucketWidth = 1 / kBucketWidth;

// f 2^64 as an integer, exactly, for f in [2^-11, 2^64) (a normal double with
// 53 significant bits: f 2^64 = mantissa 2^shift with shift >= 0), without
// the libgcc double-to-int128 call.
unsigned __int128 TimesTwoTo64(double f) {
  uint64_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const int biased_exponent = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t mantissa = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int shift = biased_exponent - 1023 - 52 + 64;
  return static_cast<unsigned __int128>(mantissa) << shift;
}

}  // namespace

void ExpSum::RaiseTop(int64_t bucket) {
  // Invariant: bucket > top_. Buckets that fall below bucket - (kNumBuckets - 1)
  // are dropped (see the header: the rule depends on the final top only).
  if (top_ == kEmpty || bucket - top_ >= kNumBuckets) {
    acc_.fill(0);
  } else {
    const int shift = static_cast<int>(bucket - top_);
    for (int j = kNumBuckets - 1; j >= 0; --j) {
      acc_[j] = j >= shift ? acc_[j - shift] : 0;
    }
  }
  top_ = bucket;
}

void ExpSum::Add(double x) {
  // floor(x / c) without a libm call: |x / c| < 2^53 by the precondition.
  const double t = x * kInverseBucketWidth;
  int64_t bucket = static_cast<int64_t>(t);
  if (static_cast<double>(bucket) > t) --bucket;
  if (top_ != kEmpty && bucket < top_ - (kNumBuckets - 1)) return;
  const double r = x - static_cast<double>(bucket) * kBucketWidth;
  const unsigned __int128 q = TimesTwoTo64(std::exp(r));
  if (top_ == kEmpty || bucket > top_) RaiseTop(bucket);
  acc_[top_ - bucket] += q;
}

void ExpSum::Merge(const ExpSum& other) {
  if (other.empty()) return;
  if (empty() || other.top_ > top_) RaiseTop(other.top_);
  for (int j = 0; j < kNumBuckets; ++j) {
    const int64_t bucket = other.top_ - j;
    if (bucket < top_ - (kNumBuckets - 1)) break;
    acc_[top_ - bucket] += other.acc_[j];
  }
}

double ExpSum::Log() const {
  if (empty()) return -std::numeric_limits<double>::infinity();
  double sum = 0;
  for (int j = kNumBuckets - 1; j >= 0; --j) {
    sum += std::ldexp(static_cast<double>(acc_[j]), -32 * j - 64);
  }
  return std::log(sum) + static_cast<double>(top_) * kBucketWidth;
}

std::string ExpSum::ToString() const {
  if (empty()) return "ExpSum{}";
  return absl::StrCat("ExpSum{log=", Log(), " top_bucket=", top_, "}");
}

}  // namespace meshserve
