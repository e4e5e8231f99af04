#include "common/rpc/zero_copy/param_chunk_reader.h"

#include <memory>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"

namespace meshserve {
namespace {

// A raw method (raw_method.h): its chunks are byte buffers.
constexpr char kReadParamMethod[] = "/meshserve.WorkerService/ReadParam";

absl::Status DeliverChunk(const grpc::ByteBuffer& buffer, BytesFieldSplit* split,
                          absl::FunctionRef<absl::Status(const ParamChunkPiece&)> on_piece) {
  MS_RETURN_IF_ERROR(SplitBytesField(buffer, ParamChunk::kDataFieldNumber, split),
                     "a ParamChunk");
  ParamChunk header;
  if (!header.ParseFromString(split->other_fields)) {
    return InvalidArgument("a ParamChunk's fields do not parse");
  }
  ParamChunkPiece piece{header.total_bytes(), header.offset(), std::nullopt, {}};
  MS_ASSIGN_OR_RETURN(piece.dtype, OptionalDTypeFromProto(header.dtype()), "a ParamChunk");
  if (split->data.empty()) return on_piece(piece);
  for (absl::string_view data : split->data) {
    piece.data = data;
    MS_RETURN_IF_ERROR(on_piece(piece));
    piece.offset += static_cast<int64_t>(data.size());
  }
  return absl::OkStatus();
}

}  // namespace

ParamReadOutcome ReadParamChunks(grpc::ChannelInterface* channel, grpc::ClientContext* context,
                                 const ReadParamRequest& request,
                                 absl::FunctionRef<absl::Status(const ParamChunkPiece&)> on_piece) {
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader =
      StartRawServerStream(channel, kReadParamMethod, context, request);
  ParamReadOutcome out;
  grpc::ByteBuffer buffer;
  BytesFieldSplit split;
  while (reader->Read(&buffer)) {
    out.any_chunk = true;
    out.chunks = DeliverChunk(buffer, &split, on_piece);
    if (!out.chunks.ok()) {
      context->TryCancel();
      while (reader->Read(&buffer)) {
      }
      break;
    }
  }
  out.call = FromGrpcStatus(reader->Finish());
  return out;
}

}  // namespace meshserve
