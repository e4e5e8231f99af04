// Pricing a stack of tied blocks from two short copies of it.
//
// A model whose params and layers are named "<prefix>.<i>.<rest>" for blocks
// i = 0..n-1 (one all-digit component, the same prefix everywhere) and whose
// blocks are tied by role (layout_space.h) costs, per request,
//   cost(n) = cost(1) + (n - 1) * (cost(2) - cost(1))
// for every additive figure (GEMM ms, bytes, rounds, param bytes): the blocks
// are typed and compiled alike, so each one adds the same. CutToBlocks(model,
// k) keeps blocks 0..k-1 and everything outside the stack; a reference to a
// dropped block's value (the final norm reading "layers.31.out") is redirected
// to the same value of block k-1. The search prices a 32-block model from
// 1- and 2-block copies, ~10x cheaper than compiling it whole.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_SUGGEST_BLOCK_STACK_H_
#define MESHSERVE_SERVER_SUGGEST_BLOCK_STACK_H_

#include <cstdint>

#include "common/model/model_file.h"
#include "server/suggest/cost_model.h"

namespace meshserve {

// n when the model is a stack of n >= 3 blocks as above (every index 0..n-1
// present, each block with the same names), else 0.
int64_t NumStackBlocks(const ModelFile& model);

// Precondition: NumStackBlocks(model) >= k >= 1.
ModelFile CutToBlocks(const ModelFile& model, int64_t k);

// one + (n - 1) * (two - one), field by field; types_key is two's.
Prediction ExtrapolateBlocks(const Prediction& one, const Prediction& two, int64_t n);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_SUGGEST_BLOCK_STACK_H_
