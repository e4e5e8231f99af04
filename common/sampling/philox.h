// The sampler's randomness: Philox4x32-10, a counter-based generator, and the
// Gumbel noise drawn from it for one (seed, position, token id).
//
// Philox4x32-10 (J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011; the Random123 library) maps a
// 128-bit counter and a 64-bit key to 128 random bits by 10 rounds of
//   (c0, c1, c2, c3) -> (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0))
// with M0 = 0xD2511F53, M1 = 0xCD9E8D57 and the key bumped by the Weyl constants
// W0 = 0x9E3779B9, W1 = 0xBB67AE85 between rounds. It passes BigCrush, and it
// keeps no state: a draw is a pure function of (counter, key), so every worker
// computes the same draw for the same token whatever the batch or the mesh.
// The known-answer vectors of Random123's tests/kat_vectors are in the test.
//
// The sampler's draw for token `id` at sequence position `position`: one
// Philox call gives 128 bits, i.e. the 64 bits of two ids (an even id and the
// next one), which halves the cost of sampling a whole row:
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (position & 0xffffffff, position >> 32, pair & 0xffffffff,
//              pair >> 32), pair = id / 2
//   bits    = out[1] << 32 | out[0] for an even id, out[3] << 32 | out[2] odd
//   k = bits >> 12 (52 bits)
//   u = (k + 1/2) 2^-52 in (0, 1), never 0 or 1, and v = 1 - u, both exact
//   E = -log(u) (as -log1p(-v) when u >= 1/2, for precision); Gumbel = -log(E)
// (numpy: g = -np.log(-np.log(u))).
//
// GumbelUpperBound(bits) is a cheap bound g <= (54 - bitlen(w)) ln 2, where
// w = 2^53 - 2k - 1 is v's numerator (v = w 2^-53): since -log(u) >= 1 - u = v,
// g <= -log(v) <= (1 - e) ln 2 for v = m 2^e, m in [1/2, 1). The sampler uses it
// to skip the two logarithms for a token that cannot beat the current winner.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SAMPLING_PHILOX_H_
#define MESHSERVE_COMMON_SAMPLING_PHILOX_H_

#include <array>
#include <cmath>
#include <cstdint>

namespace meshserve {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Random123's philox4x32_R(10, counter, key).
inline PhiloxCounter Philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint64_t kM0 = 0xD2511F53u;
  constexpr uint64_t kM1 = 0xCD9E8D57u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = kM0 * c[0];
    const uint64_t p1 = kM1 * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// The 128 bits of ids 2 pair and 2 pair + 1 at `position` under `seed`.
inline PhiloxCounter TokenPairBits(uint64_t seed, int64_t position, int64_t pair) {
  const uint64_t pos = static_cast<uint64_t>(position);
  const uint64_t p = static_cast<uint64_t>(pair);
  return Philox4x32_10({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                        static_cast<uint32_t>(p), static_cast<uint32_t>(p >> 32)},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Token `id`'s 64 bits out of its pair's 128.
inline uint64_t TokenBitsFromPair(const PhiloxCounter& pair_bits, int64_t id) {
  const int half = (id & 1) ? 2 : 0;
  return (static_cast<uint64_t>(pair_bits[half + 1]) << 32) | pair_bits[half];
}

// 64 random bits for token `id` (>= 0) at `position` under `seed` (see above).
inline uint64_t TokenRandomBits(uint64_t seed, int64_t position, int64_t id) {
  return TokenBitsFromPair(TokenPairBits(seed, position, id >> 1), id);
}

// TokenRandomBits for ids visited in increasing order, one Philox call per
// pair: remembers the last pair.
class TokenBitsCache {
 public:
  TokenBitsCache(uint64_t seed, int64_t position) : seed_(seed), position_(position) {}
  uint64_t Bits(int64_t id) {
    if ((id >> 1) != pair_) {
      pair_ = id >> 1;
      bits_ = TokenPairBits(seed_, position_, pair_);
    }
    return TokenBitsFromPair(bits_, id);
  }

 private:
  uint64_t seed_;
  int64_t position_;
  int64_t pair_ = -1;
  PhiloxCounter bits_{};
};

// u = (k + 1/2) 2^-52 with k the top 52 of `bits`: uniform on (0, 1).
inline double UniformFromBits(uint64_t bits) {
  return (static_cast<double>(bits >> 12) + 0.5) * 0x1p-52;
}

// The standard Gumbel draw -log(-log(u)), u = UniformFromBits(bits).
inline double GumbelFromBits(uint64_t bits) {
  const double k = static_cast<double>(bits >> 12);
  const double u = (k + 0.5) * 0x1p-52;
  const double v = (0x1p52 - k - 0.5) * 0x1p-52;  // 1 - u, exact
  const double e = u < 0.5 ? -std::log(u) : -std::log1p(-v);
  return -std::log(e);
}

// An upper bound of GumbelFromBits(bits) that needs no logarithm (see above).
inline double GumbelUpperBound(uint64_t bits) {
  const uint64_t w = (uint64_t{1} << 53) - 2 * (bits >> 12) - 1;  // odd, >= 1
  const int bit_length = 64 - __builtin_clzll(w);
  return (54 - bit_length) * 0.69314718055994531;
}

// The largest GumbelUpperBound over all bits (w = 1): 53 ln 2.
inline constexpr double kMaxGumbel = 53 * 0.69314718055994531;

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_PHILOX_H_
