// Client calls of a raw gRPC method: a method named by its path
// ("/meshserve.WorkerService/ReadParam") whose messages are grpc::ByteBuffers
// that the caller builds and reads itself (bytes_field_wire.h), instead of
// the generated stub's protobuf messages. See README.md for why.
//
// gRPC 1.51 has no public, synchronous API for such a call (GenericStub's
// streams are asynchronous or callback-based), so these wrap what the
// generated sync stubs call: grpc::internal::RpcMethod,
// ClientReaderFactory, ClientWriterFactory and BlockingUnaryCall. Those are
// gRPC internals: a gRPC upgrade may change them, and then this file is the
// one place to adapt. This is the only file of the tree that names
// grpc::internal.
//
// `method` must outlive the call's creation (a string literal): RpcMethod
// keeps the pointer, and the call copies the name when it is created.
//
// Thread-safety: free functions; each call is as thread-safe as gRPC's sync
// reader, writer and unary call.
#ifndef MESHSERVE_COMMON_RPC_ZERO_COPY_RAW_METHOD_H_
#define MESHSERVE_COMMON_RPC_ZERO_COPY_RAW_METHOD_H_

#include <memory>

#include "grpcpp/client_context.h"
#include "grpcpp/impl/channel_interface.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "grpcpp/support/sync_stream.h"

namespace meshserve {

// Starts a client-streaming call of `method`: the caller writes byte buffers;
// the reply is parsed into *response (a protobuf message, or a ByteBuffer
// taken as it came) when the call finishes.
template <typename Response>
std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> StartRawClientStream(
    grpc::ChannelInterface* channel, const char* method, grpc::ClientContext* context,
    Response* response) {
  const grpc::internal::RpcMethod rpc(method, grpc::internal::RpcMethod::CLIENT_STREAMING);
  return std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>>(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel, rpc, context,
                                                                    response));
}

// Starts a server-streaming call of `method` with `request` (a protobuf
// message, or a ByteBuffer sent as it is): the caller reads byte buffers.
template <typename Request>
std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawServerStream(
    grpc::ChannelInterface* channel, const char* method, grpc::ClientContext* context,
    const Request& request) {
  const grpc::internal::RpcMethod rpc(method, grpc::internal::RpcMethod::SERVER_STREAMING);
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel, rpc, context,
                                                                    request));
}

// A blocking unary call of `method`: sends `request`, receives *reply.
inline grpc::Status RawUnaryCall(grpc::ChannelInterface* channel, const char* method,
                                 grpc::ClientContext* context, const grpc::ByteBuffer& request,
                                 grpc::ByteBuffer* reply) {
  const grpc::internal::RpcMethod rpc(method, grpc::internal::RpcMethod::NORMAL_RPC);
  return grpc::internal::BlockingUnaryCall(channel, rpc, context, request, reply);
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_ZERO_COPY_RAW_METHOD_H_
