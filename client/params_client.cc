#include "client/params_client.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace meshserve {
namespace client {
double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::StatusOr<PushResult> PushParamsFromFile(InferenceClient& client, PushChunkReader& reader,
                                              absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  PushResult result;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<grpc::ClientWriter<PushParamsChunk>> stream =
      client.cluster_stub().PushParams(&context, &result.response);
  PushParamsChunk chunk;
  absl::Status read_status;
  while (true) {
    absl::StatusOr<bool> more = reader.Next(&chunk);
    if (!more.ok()) {
      read_status = more.status();
      context.TryCancel();  // a half-sent push must not commit
      break;
    }
    if (!*more) break;
    result.bytes_sent += static_cast<int64_t>(chunk.data().size());
    ++result.messages;
    // false: the server ended the call (Finish below returns its status).
    if (!stream->Write(chunk)) break;
  }
  if (read_status.ok()) stream->WritesDone();
  grpc::Status status = stream->Finish();
  result.seconds = SecondsSince(start);
  MS_RETURN_IF_ERROR(read_status);
  MS_RETURN_IF_ERROR(AnnotateStatus(FromGrpcStatus(status), "PushParams on ", client.target()));
  return result;
}

absl::StatusOr<PullResult> PullParamsToFile(InferenceClient& client, absl::string_view model,
                                            const std::vector<std::string>& params,
                                            PulledFileWriter& writer, absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  PullParamsRequest request;
  request.set_model(std::string(model));
  for (const std::string& p : params) request.add_params(p);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<grpc::ClientReader<PullParamsChunk>> stream =
      client.cluster_stub().PullParams(&context, request);
  PullParamsChunk chunk;
  absl::Status write_status;
  while (stream->Read(&chunk)) {
    write_status = writer.Add(chunk);
    if (!write_status.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = stream->Finish();
  MS_RETURN_IF_ERROR(write_status);
  MS_RETURN_IF_ERROR(AnnotateStatus(FromGrpcStatus(status), "PullParams on ", client.target()));
  const std::vector<std::string> got = writer.params();
  for (const std::string& p : params) {
    if (std::find(got.begin(), got.end(), p) == got.end()) {
      return Internal("PullParams on ", client.target(), ": param '", p,
                      "' was asked for but is not in the answer (", got.size(), " params)");
    }
  }
  MS_RETURN_IF_ERROR(writer.Finish());
  PullResult result;
  result.version = writer.version();
  result.bytes = writer.data_bytes();
  result.params = got;
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace client
}  // namespace meshserve
