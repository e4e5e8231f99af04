// Conversions between the program IR (program_ir.h: plain vectors) and the
// core types (Box, DType, Mesh, BoxTensor), for the
// coordinator and the worker alike. Parsing validates and names the offending
// value; encoding cannot fail.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_PROGRAM_IR_CONV_H_
#define MESHSERVE_COMMON_PROGRAM_IR_CONV_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/dtype.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "common/tensor/tensor.h"
#include "common/program/program_ir.h"

namespace meshserve {

// "[0:4, 2:8]"-style text of a possibly malformed IR box (for messages).
std::string BoxIrToString(const BoxIr& box);

// \error kInvalidArgument when begin and end differ in length, or some
//   end < begin or begin < 0 (naming the box).
absl::StatusOr<Box> BoxFromIr(const BoxIr& box);
BoxIr BoxToIr(const Box& box);
// The unchecked twin of BoxFromIr, for boxes this process built itself (the
// compiler's). Precondition (DCHECK): begin and end have the same length and
// 0 <= begin[i] <= end[i].
Box UncheckedBoxFromIr(const BoxIr& box);

// tensor.proto's DTypeProto numbers, for the wire's edges (program_proto.cc,
// the params' streams): the one table of them.
// \error kInvalidArgument for DTYPE_INVALID (0) or an unknown number.
absl::StatusOr<DType> DTypeFromProto(int dtype);
int DTypeToProto(DType dtype);
// A dtype field that may be unset: DTYPE_INVALID (0) is nullopt.
// \error kInvalidArgument naming an unknown number.
absl::StatusOr<std::optional<DType>> OptionalDTypeFromProto(int dtype);
int OptionalDTypeToProto(std::optional<DType> dtype);  // nullopt: 0

// Runs Mesh::Create; an empty axis type is Explicit.
// \error kInvalidArgument from Mesh::Create or for an unknown axis type.
absl::StatusOr<Mesh> MeshFromIr(const std::vector<MeshAxisIr>& axes);
std::vector<MeshAxisIr> MeshToIr(const Mesh& mesh);

// The slice's bytes as a BoxTensor (one copy, into the aligned buffer).
// \error kInvalidArgument for a bad box or an unset dtype, or a byte length that is not
//   box elements * dtype size (naming the slice and both counts).
absl::StatusOr<BoxTensor> BoxTensorFromSlice(const SliceIr& slice);

// The half of compute_step.h's ParamSliceOf rule that `copy` alone decides
// (all but the source's dtype, rank and box): `copy.box` when the copy takes
// a rank-2 box of a "param/" buffer whole onto the same device, unchanged
// (no accumulate, dtype unset or float32, box == dst_box), else nullopt.
// What a plan without the params' tensors can tell (the compiler's
// server/compiler/param_only.h); bad boxes are nullopt.
std::optional<Box> ParamSliceBoxOf(const CopyStepIr& copy);

// Whether `step` may read input `index` as such a slice in place
// (compute_step.h rhs_in_place) instead of a buffer: the rhs (input 1) of a
// dot_general of two inputs. The one rule for the worker, which passes a
// slice it holds for such an input (server/worker/program_run.cc), and the
// compiler, which leaves unmade a slice read only this way
// (server/compiler/param_only.cc).
bool ReadsInPlace(const ComputeStepIr& step, size_t index);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_IR_CONV_H_
