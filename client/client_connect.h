// How the CLI's cluster commands (infer, describe, status, bench, local)
// connect to a coordinator: the --target and security flags, one table and
// one function for all of them.
//
//   --tls_dir DIR          TLS trusting DIR/ca.pem; presents DIR/client.pem
//                          and DIR/client.key when they exist
//                          (scripts/make-dev-certs.sh)
//   --ca F [--cert F --key F]   the same from separate files
//   --tls_server_name N    the name the server's certificate must carry
//                          (default: the target's host)
//   --auth_token_file F    sends F's first line as "authorization: Bearer ..."
// Without --tls_dir/--ca the channel is insecure (plaintext).
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_CLIENT_CLIENT_CONNECT_H_
#define MESHSERVE_CLIENT_CLIENT_CONNECT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli_args.h"
#include "client/inference_client.h"

namespace meshserve {
namespace client {

// `flags` followed by the security flags above.
std::vector<FlagDef> WithConnectFlags(std::vector<FlagDef> flags);

// The client options the security flags ask for. \error kInvalidArgument
// naming the flag and the file that cannot be read, or --tls_dir with --ca.
absl::StatusOr<InferenceClient::Options> ClientOptionsFromArgs(const CliArgs& args);

// InferenceClient::Create(--target, ClientOptionsFromArgs(args)).
absl::StatusOr<std::unique_ptr<InferenceClient>> ConnectFromArgs(const CliArgs& args);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_CLIENT_CONNECT_H_
