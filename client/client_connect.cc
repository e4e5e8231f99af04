#include "client/client_connect.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/grpc_credentials.h"

namespace meshserve {
namespace client {
namespace {

absl::StatusOr<TlsFiles> TlsFilesFromArgs(const CliArgs& args) {
  if (args.Has("tls_dir")) {
    if (args.Has("ca") || args.Has("cert") || args.Has("key")) {
      return InvalidArgument("give --tls_dir or --ca/--cert/--key, not both");
    }
    MS_ASSIGN_OR_RETURN(TlsFiles files,
                        ReadTlsDir(args.Get("tls_dir"), "client", /*cert_optional=*/true),
                        "flag --tls_dir");
    return files;
  }
  MS_ASSIGN_OR_RETURN(TlsFiles files,
                      ReadTlsFiles(args.Get("ca"), args.Get("cert"), args.Get("key")),
                      "flags --ca/--cert/--key");
  return files;
}

}  // namespace

std::vector<FlagDef> WithConnectFlags(std::vector<FlagDef> flags) {
  for (const char* name : {"tls_dir", "ca", "cert", "key", "tls_server_name", "auth_token_file"}) {
    flags.push_back(FlagDef{name});
  }
  return flags;
}

absl::StatusOr<InferenceClient::Options> ClientOptionsFromArgs(const CliArgs& args) {
  InferenceClient::Options options;
  if (args.Has("tls_dir") || args.Has("ca")) {
    MS_ASSIGN_OR_RETURN(TlsFiles files, TlsFilesFromArgs(args));
    options.credentials = RpcSecurity::Tls(std::move(files)).ChannelCredentials();
    options.server_name_override = args.Get("tls_server_name");
  } else if (args.Has("cert") || args.Has("key") || args.Has("tls_server_name")) {
    return InvalidArgument("--cert, --key and --tls_server_name need --ca or --tls_dir");
  }
  if (args.Has("auth_token_file")) {
    MS_ASSIGN_OR_RETURN(options.bearer_token, ReadTokenFile(args.Get("auth_token_file")),
                        "flag --auth_token_file");
  }
  return options;
}

absl::StatusOr<std::unique_ptr<InferenceClient>> ConnectFromArgs(const CliArgs& args) {
  MS_ASSIGN_OR_RETURN(InferenceClient::Options options, ClientOptionsFromArgs(args));
  return InferenceClient::Create(args.Get("target"), options);
}

}  // namespace client
}  // namespace meshserve
