// The client side of WorkerService.ReadParam without protobuf's copy of the
// chunks' data: each ParamChunk is read as a byte buffer and split around its
// data (bytes_field_wire.h), which reaches the caller as views into the
// received slices. One reader for both callers: a worker's peer transport
// (fills, scale steps, restores) and the coordinator's pull.
//
// Thread-safety: a function; the sink runs on the calling thread.
#ifndef MESHSERVE_COMMON_RPC_ZERO_COPY_PARAM_CHUNK_READER_H_
#define MESHSERVE_COMMON_RPC_ZERO_COPY_PARAM_CHUNK_READER_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/channel_interface.h"
#include "proto/worker_service.pb.h"

namespace meshserve {

// Bytes of the box at `offset`: a ParamChunk's data, or a piece of it (one
// per received slice, in order; a chunk without data is one empty piece).
// `data` is valid during the sink's call.
struct ParamChunkPiece {
  int64_t total_bytes = 0;
  int64_t offset = 0;
  std::optional<DType> dtype;  // nullopt: the chunk gives none (DTYPE_INVALID)
  absl::string_view data;
};

struct ParamReadOutcome {
  bool any_chunk = false;  // a chunk arrived
  // The first error of the sink or of a chunk that does not decode
  // (kInvalidArgument, e.g. a dtype number tensor.proto does not define); the
  // call was cancelled then.
  absl::Status chunks;
  absl::Status call;  // the call's status (FromGrpcStatus)
};

// Runs one ReadParam call on `channel` with `context` (its deadline and
// options set by the caller) and hands every piece to `on_piece`, stopping at
// its first error.
ParamReadOutcome ReadParamChunks(grpc::ChannelInterface* channel, grpc::ClientContext* context,
                                 const ReadParamRequest& request,
                                 absl::FunctionRef<absl::Status(const ParamChunkPiece&)> on_piece);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_ZERO_COPY_PARAM_CHUNK_READER_H_
