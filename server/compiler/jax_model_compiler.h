// The production ModelCompiler: types the model with JAX's rules
// (common/model/typed_model.h) and compiles it (compiler.h).
//
// Describe types the model at the given input shapes (an input left out takes
// its model shape with each -1 set to NominalDimSize) and compiles it on the
// placement to report each layer's collectives and bytes.
//
// Thread-safety: stateless; concurrent calls are fine.
#ifndef MESHSERVE_SERVER_COMPILER_JAX_MODEL_COMPILER_H_
#define MESHSERVE_SERVER_COMPILER_JAX_MODEL_COMPILER_H_

#include "server/compiler/model_compiler.h"

namespace meshserve {

class JaxModelCompiler : public ModelCompiler {
 public:
  absl::Status ValidateModel(const ModelFile& model) override;
  absl::StatusOr<CompiledPlan> Compile(const CompileRequest& request) override;
  absl::StatusOr<DescribeResult> Describe(const ModelFile& model,
                                          const DeviceAssignment& devices,
                                          const InputShapes& input_shapes) override;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_JAX_MODEL_COMPILER_H_
