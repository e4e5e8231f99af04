// The ops a model file's layers may use, in one table (XLA's HLO_OPCODE_LIST
// style): the enum, the name written in the file, and the arity.
//
//   MESHSERVE_MODEL_OP_LIST(V)  V(enum, "name", arity, flags)
//     arity: kUnary ("input": one name), kBinary ("inputs": two names) or
//            kTernary ("inputs": three names).
//     flags: kTakesOutSharding when the op's own JAX function accepts
//            out_sharding (the rule applies it); otherwise an out_sharding is
//            applied by a reshard after the op. kDotLike for the contractions
//            (linear, einsum) the compiler lowers with its dot strategy.
//
// ModelOpFromName is the only place an op string is looked up; code that
// branches on an op switches on ModelOp (or asks a flag), and a message names
// an op with ModelOpName.
//
// Thread-safety: constants and pure functions.
#ifndef MESHSERVE_COMMON_MODEL_MODEL_OP_H_
#define MESHSERVE_COMMON_MODEL_MODEL_OP_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace meshserve {

enum class ModelOpArity { kUnary, kBinary, kTernary };

inline constexpr int kModelOpNoFlags = 0;
inline constexpr int kTakesOutSharding = 1;
inline constexpr int kDotLike = 2;

#define MESHSERVE_MODEL_OP_LIST(V)                                    \
  V(kLinear, "linear", kUnary, kTakesOutSharding | kDotLike)          \
  V(kEinsum, "einsum", kBinary, kTakesOutSharding | kDotLike)         \
  V(kEmbed, "embed", kUnary, kTakesOutSharding)                       \
  V(kRmsNorm, "rms_norm", kUnary, kModelOpNoFlags)                    \
  V(kLayerNorm, "layer_norm", kUnary, kModelOpNoFlags)                \
  V(kRelu, "relu", kUnary, kModelOpNoFlags)                           \
  V(kGelu, "gelu", kUnary, kModelOpNoFlags)                           \
  V(kSilu, "silu", kUnary, kModelOpNoFlags)                           \
  V(kTanh, "tanh", kUnary, kModelOpNoFlags)                           \
  V(kAdd, "add", kBinary, kModelOpNoFlags)                            \
  V(kMul, "mul", kBinary, kModelOpNoFlags)                            \
  V(kSoftmax, "softmax", kUnary, kModelOpNoFlags)                     \
  V(kReshape, "reshape", kUnary, kTakesOutSharding)                   \
  V(kTranspose, "transpose", kUnary, kModelOpNoFlags)                 \
  V(kReshard, "reshard", kUnary, kTakesOutSharding)                   \
  V(kPositions, "positions", kUnary, kModelOpNoFlags)                 \
  V(kRope, "rope", kUnary, kModelOpNoFlags)                           \
  V(kAttention, "attention", kTernary, kModelOpNoFlags)               \
  V(kSelectRows, "select_rows", kUnary, kModelOpNoFlags)              \
  V(kSample, "sample", kUnary, kModelOpNoFlags)

enum class ModelOp {
#define MESHSERVE_MODEL_OP_ENUM(e, name, arity, flags) e,
  MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_ENUM)
#undef MESHSERVE_MODEL_OP_ENUM
};

// The name written in model files ("rms_norm").
inline absl::string_view ModelOpName(ModelOp op) {
  switch (op) {
#define MESHSERVE_MODEL_OP_NAME(e, name, arity, flags) \
  case ModelOp::e:                                      \
    return name;
    MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_NAME)
#undef MESHSERVE_MODEL_OP_NAME
  }
  return "";
}

inline ModelOpArity ModelOpArityOf(ModelOp op) {
  switch (op) {
#define MESHSERVE_MODEL_OP_ARITY(e, name, arity, flags) \
  case ModelOp::e:                                       \
    return ModelOpArity::arity;
    MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_ARITY)
#undef MESHSERVE_MODEL_OP_ARITY
  }
  return ModelOpArity::kUnary;
}

// The op's flags column (kModelOpNoFlags, kTakesOutSharding, kDotLike).
inline int ModelOpFlags(ModelOp op) {
  switch (op) {
#define MESHSERVE_MODEL_OP_FLAGS(e, name, arity, flags) \
  case ModelOp::e:                                       \
    return (flags);
    MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_FLAGS)
#undef MESHSERVE_MODEL_OP_FLAGS
  }
  return kModelOpNoFlags;
}

// True when the op's rule takes out_sharding itself (see the file comment).
inline bool ModelOpTakesOutSharding(ModelOp op) {
  return (ModelOpFlags(op) & kTakesOutSharding) != 0;
}

// True for the contractions (linear, einsum): the compiler's dot strategy.
inline bool ModelOpIsDot(ModelOp op) { return (ModelOpFlags(op) & kDotLike) != 0; }

// nullopt for a name that is not a model op.
inline std::optional<ModelOp> ModelOpFromName(absl::string_view name) {
#define MESHSERVE_MODEL_OP_FIND(e, op_name, arity, flags) \
  if (name == op_name) return ModelOp::e;
  MESHSERVE_MODEL_OP_LIST(MESHSERVE_MODEL_OP_FIND)
#undef MESHSERVE_MODEL_OP_FIND
  return std::nullopt;
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_MODEL_MODEL_OP_H_
