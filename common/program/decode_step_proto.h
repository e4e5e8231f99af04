// DecodeStepIr (decode_step.h) <-> worker_service.proto DecodeStep, for the
// gRPC edges (GrpcWorkerClient, the worker's Execute handlers). Values are
// carried as they are; DecodeLayout::Create validates them on the worker.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_PROGRAM_DECODE_STEP_PROTO_H_
#define MESHSERVE_COMMON_PROGRAM_DECODE_STEP_PROTO_H_

#include "common/program/decode_step.h"
#include "proto/worker_service.pb.h"

namespace meshserve {

DecodeStepIr DecodeStepFromProto(const DecodeStep& proto);
void DecodeStepToProto(const DecodeStepIr& ir, DecodeStep* proto);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_DECODE_STEP_PROTO_H_
