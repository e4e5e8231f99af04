// proto <-> IR conversions for the worker (see worker_ir.h for why the IR
// exists). This header includes the generated messages and must not be
// included together with common/sharding/box.h or common/base/dtype.h.
//
// The functions never name the proto Box / DType types (only their fields), so
// they keep compiling if tensor.proto renames those messages.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_WORKER_WORKER_IR_PROTO_H_
#define MESHSERVE_SERVER_WORKER_WORKER_IR_PROTO_H_

#include "proto/program.pb.h"
#include "proto/worker_service.pb.h"
#include "server/worker/worker_ir.h"

namespace meshserve {

ProgramIr ProgramToIr(const Program& program);
void ProgramFromIr(const ProgramIr& ir, Program* program);

LoadModelIr LoadModelToIr(const LoadModelRequest& request);

// Moves the slice's bytes out of `slice`.
SliceIr SliceToIr(TensorSlice* slice);
// Moves the IR's bytes into `slice`.
void SliceFromIr(SliceIr* ir, TensorSlice* slice);

void WorkerStatusToProto(const WorkerStatusIr& status, WorkerStatusResponse* response);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_WORKER_IR_PROTO_H_
