// The one conversion between the program IR (program_ir.h) and the generated
// messages of proto/program.proto and proto/worker_service.proto, used only by
// the gRPC edges: the worker's ShardWorker and the coordinator's
// GrpcWorkerClient. The messages are forward-declared here; include the .pb.h
// files to build them. Decoding copies the wire values as they are (validation
// happens in ir_conv.h) except what the typed IR cannot hold unparsed: a
// step's kind, its compute op and its dtypes (DTYPE_INVALID is unset; a
// number tensor.proto lacks is refused, naming the step). A slice's unknown
// dtype number decodes as unset, which BoxTensorFromSlice refuses. Encoding
// cannot fail. ir_conv.h (DTypeFromProto / DTypeToProto, the dtype numbers'
// one table) comes with this header.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_PROGRAM_PROGRAM_PROTO_H_
#define MESHSERVE_COMMON_PROGRAM_PROGRAM_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/program/ir_conv.h"  // IWYU pragma: export (the dtype numbers)
#include "common/program/program_ir.h"

namespace meshserve {

class Program;
class LoadModelRequest;
class TensorSlice;
class WorkerStatusResponse;
class ParamPiece;
class ReadParamRequest;
class StageParamChunk;
class CommitParamsRequest;

// \error kInvalidArgument naming the step for a step without a kind, with an
//   unknown compute op (ParseComputeOp) or an unknown dtype number.
absl::StatusOr<ProgramIr> ProgramToIr(const Program& program);
void ProgramFromIr(const ProgramIr& ir, Program* program);
// The serialized meshserve.Program of `ir`.
std::string SerializeProgram(const ProgramIr& ir);

LoadModelIr LoadModelToIr(const LoadModelRequest& request);
void LoadModelFromIr(const LoadModelIr& ir, LoadModelRequest* request);

// Moves the slice's bytes out of `slice`.
SliceIr SliceToIr(TensorSlice* slice);
// Moves the IR's bytes into `slice`.
void SliceFromIr(SliceIr* ir, TensorSlice* slice);
// Copies the IR's bytes into `slice`.
void SliceFromIr(const SliceIr& ir, TensorSlice* slice);

ParamPieceIr ParamPieceToIr(const ParamPiece& piece);
void ParamPieceFromIr(const ParamPieceIr& ir, ParamPiece* piece);
ReadParamIr ReadParamToIr(const ReadParamRequest& request);
void ReadParamFromIr(const ReadParamIr& ir, ReadParamRequest* request);
// Moves the chunk's data.
StageChunkIr StageChunkToIr(StageParamChunk* chunk);
void StageChunkFromIr(const StageChunkIr& ir, StageParamChunk* chunk);
CommitParamsIr CommitParamsToIr(const CommitParamsRequest& request);
void CommitParamsFromIr(const CommitParamsIr& ir, CommitParamsRequest* request);

void WorkerStatusToProto(const WorkerStatusIr& status, WorkerStatusResponse* response);
WorkerStatusIr WorkerStatusFromProto(const WorkerStatusResponse& response);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_PROGRAM_PROTO_H_
