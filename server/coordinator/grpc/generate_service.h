// meshserve.GenerateService (proto/generate.proto): the coordinator's
// server-streaming Generate RPC over the Generator (generate/generator.h).
//
// One call: the request is decoded (generate_proto.h: INVALID_ARGUMENT naming
// a bad field), started on the Generator (NOT_FOUND for an unknown model,
// INVALID_ARGUMENT for its refusals, RESOURCE_EXHAUSTED when the model's
// queue is full), and each SequenceEvent the generation loop hands over
// becomes one GenerateChunk; the last one (finish_reason "stop" / "length",
// usage) ends the call OK. A sequence that fails (kError) ends the call with
// its status; one ended by the server (kCancelled) with CANCELLED. The client
// cancelling the call, or a write failing, cancels the sequence
// (Generator::Cancel). Without a generator every call is answered
// FAILED_PRECONDITION "generation is not enabled".
//
// Callback API: the handler starts the sequence and returns; the chunks are
// written from the generation loop's thread and from gRPC's OnWriteDone, one
// write out at a time (common/rpc/write_queue.h). Nothing waits.
//
// This header names no generator.h type (generate_call.h says why).
//
// Thread-safety: thread-safe. `generator` (nullable), `gate` and `edge` must
// outlive the service and every call it started.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_SERVICE_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_SERVICE_H_

#include "common/rpc/call_gate.h"
#include "proto/generate.grpc.pb.h"
#include "server/coordinator/grpc/edge_auth.h"

namespace meshserve {

class Generator;

class GenerateServiceImpl final : public GenerateService::CallbackService {
 public:
  GenerateServiceImpl(Generator* generator, CallGate* gate,
                      const EdgeOptions* edge = &DefaultEdgeOptions())
      : generator_(generator), gate_(gate), edge_(*edge) {}

  grpc::ServerWriteReactor<GenerateChunk>* Generate(grpc::CallbackServerContext* context,
                                                    const meshserve::GenerateRequest* request)
      override;

 private:
  Generator* const generator_;
  CallGate* const gate_;
  const EdgeOptions& edge_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_GENERATE_SERVICE_H_
