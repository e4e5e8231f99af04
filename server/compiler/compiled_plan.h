// How one request is routed over a compiled program: which box of each input
// each (worker, device) receives, and which (worker, device) returns which box
// of each output. Built by the compiler (compiler.h, CompiledModel) and handed
// unchanged to the runtime (program_builder.h, CompiledPlan).
//
// Thread-safety: plain values.
#ifndef MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_
#define MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_

#include <cstdint>
#include <string>

#include "common/sharding/box.h"

namespace meshserve {

// Device `device` (on `worker`) receives `box` of input `input` as buffer
// "in/<input>".
struct InputSlice {
  std::string input;
  int64_t worker = -1;
  int64_t device = -1;
  Box box;
};

// Device `device` (on `worker`) returns `box` of output `output`. The pieces of
// one output tile it exactly once (one replica per box).
struct OutputPiece {
  std::string output;
  int64_t worker = -1;
  int64_t device = -1;
  Box box;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_COMPILED_PLAN_H_
