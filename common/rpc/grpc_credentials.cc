#include "common/rpc/grpc_credentials.h"

#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/grpc_status.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace meshserve {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";

// A file named by a flag: a file that cannot be read is a bad flag value.
absl::StatusOr<std::string> ReadFile(absl::string_view path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return InvalidArgument(what, ": ", text.status().message());
  if (text->empty()) return InvalidArgument(what, " '", path, "' is empty");
  return text;
}

absl::StatusOr<std::string> ReadPem(absl::string_view path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadFile(path, what);
  if (text.ok() && !absl::StrContains(*text, "-----BEGIN ")) {
    return InvalidArgument(what, " '", path, "' is not PEM (no -----BEGIN line)");
  }
  return text;
}

// Rejects, on every call, a peer that is not a cluster member (worker ports).
class MemberOnlyProcessor final : public grpc::AuthMetadataProcessor {
 public:
  bool IsBlocking() const override { return false; }  // no I/O: run inline
  grpc::Status Process(const InputMetadata&, grpc::AuthContext* context, OutputMetadata*,
                       OutputMetadata*) override {
    return ToGrpcStatus(CheckMemberPeer(*context));
  }
};

class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // owned by the factory (the channel's)
};

class BearerTokenFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token)
      : header_(absl::StrCat(kBearerPrefix, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

absl::StatusOr<TlsFiles> ReadTlsFiles(absl::string_view ca, absl::string_view cert,
                                      absl::string_view key) {
  TlsFiles files;
  files.ca_path = std::string(ca);
  MS_ASSIGN_OR_RETURN(files.ca_pem, ReadPem(ca, "CA certificate"));
  if (cert.empty() != key.empty()) {
    return InvalidArgument("certificate '", cert, "' and key '", key,
                           "': give both or neither");
  }
  if (!cert.empty()) {
    MS_ASSIGN_OR_RETURN(files.cert_pem, ReadPem(cert, "certificate"));
    MS_ASSIGN_OR_RETURN(files.key_pem, ReadPem(key, "private key"));
  }
  return files;
}

absl::StatusOr<TlsFiles> ReadTlsDir(absl::string_view dir, absl::string_view name,
                                    bool cert_optional) {
  const std::string cert = absl::StrCat(dir, "/", name, ".pem");
  if (cert_optional && !std::ifstream(cert).good()) {
    return ReadTlsFiles(absl::StrCat(dir, "/ca.pem"), "", "");
  }
  return ReadTlsFiles(absl::StrCat(dir, "/ca.pem"), cert, absl::StrCat(dir, "/", name, ".key"));
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view path) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "token file"));
  std::string token(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
  if (token.empty()) return InvalidArgument("token file '", path, "' holds no token");
  return token;
}

RpcSecurity RpcSecurity::Tls(TlsFiles files) {
  RpcSecurity s;
  s.tls_ = true;
  s.files_ = std::move(files);
  return s;
}

std::string RpcSecurity::Describe() const {
  if (!tls_) return "insecure (plaintext, peers not authenticated)";
  return absl::StrCat("mutual TLS (CA ", files_.ca_path, ")");
}

std::shared_ptr<grpc::ChannelCredentials> RpcSecurity::ChannelCredentials() const {
  if (!tls_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = files_.ca_pem;
  options.pem_private_key = files_.key_pem;
  options.pem_cert_chain = files_.cert_pem;
  return grpc::SslCredentials(options);
}

ChannelOptions RpcSecurity::MemberChannelOptions(ChannelOptions base) const {
  base.credentials = ChannelCredentials();
  if (tls_) base.server_name_override = kMemberServerName;
  return base;
}

std::shared_ptr<grpc::ServerCredentials> RpcSecurity::MemberOnlyServerCredentials() const {
  if (!tls_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = files_.ca_pem;
  options.pem_key_cert_pairs.push_back({files_.key_pem, files_.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  credentials->SetAuthMetadataProcessor(std::make_shared<MemberOnlyProcessor>());
  return credentials;
}

std::shared_ptr<grpc::ServerCredentials> RpcSecurity::ClientPortServerCredentials() const {
  if (!tls_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = files_.ca_pem;
  options.pem_key_cert_pairs.push_back({files_.key_pem, files_.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::string PeerIdentity(const grpc::AuthContext& context) {
  for (const char* property : {GRPC_PEER_SPIFFE_ID_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> values = context.FindPropertyValues(property);
    if (!values.empty()) return std::string(values.front().data(), values.front().size());
  }
  std::vector<grpc::string_ref> cn = context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (cn.empty()) return "";
  return absl::StrCat("CN=", absl::string_view(cn.front().data(), cn.front().size()));
}

absl::Status CheckMemberPeer(const grpc::AuthContext& context) {
  for (const grpc::string_ref& uri : context.FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    if (absl::string_view(uri.data(), uri.size()) == kMemberIdentity) return absl::OkStatus();
  }
  const std::string identity = PeerIdentity(context);
  if (identity == kMemberIdentity) return absl::OkStatus();
  if (identity.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "peer presented no certificate; cluster members present ", kMemberIdentity));
  }
  return absl::PermissionDeniedError(absl::StrCat("peer '", identity,
                                                  "' is not a cluster member (want ",
                                                  kMemberIdentity, ")"));
}

absl::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view expected) {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return CheckAuthorization(std::nullopt, expected);
  return CheckAuthorization(absl::string_view(it->second.data(), it->second.size()), expected);
}

absl::Status CheckAuthorization(std::optional<absl::string_view> value,
                                absl::string_view expected) {
  if (!value.has_value()) {
    return absl::UnauthenticatedError(
        "missing bearer token ('authorization: Bearer <token>'; the client's "
        "--auth_token_file)");
  }
  if (!absl::StartsWith(*value, kBearerPrefix) ||
      !SecretsEqual(value->substr(kBearerPrefix.size()), expected)) {
    return absl::UnauthenticatedError("wrong bearer token");
  }
  return absl::OkStatus();
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptorFactory(std::string token) {
  return std::make_unique<BearerTokenFactory>(std::move(token));
}

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace meshserve
