// Transport security for every meshserve gRPC link, in one place: which
// credentials a channel or a server uses, and which peers a server accepts.
//
// Two identities, issued by one cluster CA (scripts/make-dev-certs.sh):
//   member  the coordinator and the workers: URI SAN spiffe://meshserve/member
//           (kMemberIdentity), CN=meshserve-member, DNS SAN meshserve-member;
//   client  clients: URI SAN spiffe://meshserve/client, CN=meshserve-client.
// A peer's identity is its certificate's URI SAN (gRPC's "peer_uri"
// property), else "CN=<common name>", else none (no certificate).
//
// With a TLS directory (`--tls_dir DIR`: DIR/ca.pem, DIR/member.pem,
// DIR/member.key):
//   - cluster channels (coordinator -> worker, worker -> worker, worker ->
//     coordinator) present the member certificate, trust only DIR/ca.pem and
//     verify the server's name as kMemberServerName (not the peer's address,
//     which may be a pod IP or a container address): a server must hold a
//     member certificate of the cluster's CA;
//   - a worker's port (MemberOnlyServerCredentials) requires a client
//     certificate of the CA and then a member identity on every call
//     (WorkerService, health and reflection alike): a client certificate of
//     the same CA gets PERMISSION_DENIED naming its identity;
//   - the coordinator's client port (ClientPortServerCredentials) serves the
//     member certificate; a client certificate is optional, verified when
//     given; MembershipService calls must come from a member (CheckMemberPeer).
// Without one, everything is plaintext and unauthenticated (the default):
// RpcSecurity::Describe says so for the start-up line.
//
// A bearer token (ReadTokenFile, CheckBearerToken; "authorization: Bearer T"
// metadata, ChannelOptions::bearer_token on the client) authenticates clients
// on the coordinator's client services.
//
// Thread-safety: RpcSecurity is an immutable value; the functions are pure
// and the processor is thread-safe.
#ifndef MESHSERVE_COMMON_RPC_GRPC_CREDENTIALS_H_
#define MESHSERVE_COMMON_RPC_GRPC_CREDENTIALS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/channel.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/string_ref.h"

namespace meshserve {

inline constexpr char kMemberIdentity[] = "spiffe://meshserve/member";
inline constexpr char kClientIdentity[] = "spiffe://meshserve/client";
// The DNS SAN cluster channels verify (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG).
inline constexpr char kMemberServerName[] = "meshserve-member";

// PEM contents of a trust root and an optional certificate chain and key.
struct TlsFiles {
  std::string ca_pem;
  std::string cert_pem;  // empty: no certificate to present
  std::string key_pem;
  std::string ca_path;   // for messages
};

// Reads `ca` and, when `cert` is non-empty, `cert` and `key` (both or
// neither). \error kInvalidArgument naming the file that cannot be read, is
// empty or is not PEM, or a cert without a key.
absl::StatusOr<TlsFiles> ReadTlsFiles(absl::string_view ca, absl::string_view cert,
                                      absl::string_view key);
// DIR/ca.pem, DIR/<name>.pem, DIR/<name>.key; with `cert_optional`, a DIR
// without <name>.pem reads the CA alone. \error as ReadTlsFiles.
absl::StatusOr<TlsFiles> ReadTlsDir(absl::string_view dir, absl::string_view name,
                                    bool cert_optional = false);

// The trimmed first line of `path`. \error kInvalidArgument naming the file
// when it cannot be read or holds no token.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view path);

class RpcSecurity {
 public:
  static RpcSecurity Insecure() { return RpcSecurity(); }
  static RpcSecurity Tls(TlsFiles files);

  bool tls() const { return tls_; }
  // For start-up lines: "insecure (plaintext, peers not authenticated)" or
  // "mutual TLS (CA /dir/ca.pem)".
  std::string Describe() const;

  // Client credentials: insecure, or TLS trusting the CA and presenting the
  // certificate when there is one.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // ChannelOptions for a cluster channel: these credentials and, with TLS,
  // the server name kMemberServerName.
  ChannelOptions MemberChannelOptions(ChannelOptions base = {}) const;
  // A worker's port: mutual TLS, member peers only (see the top of the file).
  std::shared_ptr<grpc::ServerCredentials> MemberOnlyServerCredentials() const;
  // The coordinator's client port: TLS, client certificates optional.
  std::shared_ptr<grpc::ServerCredentials> ClientPortServerCredentials() const;

 private:
  RpcSecurity() = default;
  bool tls_ = false;
  TlsFiles files_;
};

// The peer's identity (see the top of the file); "" without a certificate.
std::string PeerIdentity(const grpc::AuthContext& context);
// OK when the peer is a member. \error kUnauthenticated when it presented no
// certificate; kPermissionDenied naming its identity otherwise.
absl::Status CheckMemberPeer(const grpc::AuthContext& context);
// OK when `metadata` has "authorization: Bearer <expected>". \error
// kUnauthenticated saying whether the token is missing or wrong.
absl::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view expected);
// The same check on an "authorization" value (gRPC metadata or an HTTP
// header; nullopt: absent).
absl::Status CheckAuthorization(std::optional<absl::string_view> value,
                                absl::string_view expected);
// A client interceptor adding "authorization: Bearer <token>" to every call
// (CreateChannel uses it for ChannelOptions::bearer_token; it works on
// insecure channels too, unlike gRPC's call credentials).
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptorFactory(std::string token);
// Constant-time comparison of two secrets (length leaks).
bool SecretsEqual(absl::string_view a, absl::string_view b);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_GRPC_CREDENTIALS_H_
