#include "common/rpc/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace meshserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxGrpcStatusMessageBytes) {
    const size_t dropped = message.size() - kMaxGrpcStatusMessageBytes;
    message.resize(kMaxGrpcStatusMessageBytes);
    absl::StrAppend(&message, "... [truncated ", dropped, " bytes]");
  }
  // absl::StatusCode and grpc::StatusCode share google.rpc.Code's numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(
        absl::StrCat("grpc code ", code, ": ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace meshserve
