// RpcSecurity over real TLS handshakes on loopback, with certificates from
// scripts/make-dev-certs.sh: who gets through a worker's port and the
// coordinator's client port, and the identity and token checks.
#include "common/rpc/grpc_credentials.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc/grpc_status.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/cluster_service.grpc.pb.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

// Heartbeat answers with the check the test picks, on the call's peer.
class Probe final : public MembershipService::Service {
 public:
  enum class Check { kNone, kMember, kToken };
  Check check = Check::kNone;
  std::string last_identity;
  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest*,
                         HeartbeatResponse* response) override {
    last_identity = PeerIdentity(*context->auth_context());
    response->set_known(true);
    switch (check) {
      case Check::kNone: return grpc::Status::OK;
      case Check::kMember: return ToGrpcStatus(CheckMemberPeer(*context->auth_context()));
      case Check::kToken:
        return ToGrpcStatus(CheckBearerToken(context->client_metadata(), "s3cret"));
    }
    return grpc::Status::OK;
  }
};

// A path of this process under the test temp dir (/tmp/ when TEST_TMPDIR is
// unset): two builds' tests running at once must not share certificates.
std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/grpc_credentials_", getpid(), "_", name);
}

std::string MakeCerts(const std::string& name) {
  const std::string dir = TempPath(name);
  const std::string command = absl::StrCat("sh '", MESHSERVE_SOURCE_DIR,
                                           "/scripts/make-dev-certs.sh' '", dir, "' >/dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

class GrpcCredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeCerts("certs"));
    other_dir_ = new std::string(MakeCerts("other_ca"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    std::filesystem::remove_all(*other_dir_);
  }
  static RpcSecurity Security(const std::string& dir, const std::string& name) {
    absl::StatusOr<TlsFiles> files = ReadTlsDir(dir, name, /*cert_optional=*/true);
    EXPECT_OK(files.status());
    return RpcSecurity::Tls(*files);
  }
  void Serve(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(&probe_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  // One Heartbeat from a client with `options` (server name: localhost).
  absl::Status Call(ChannelOptions options) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        CreateChannel(absl::StrCat("localhost:", port_), options);
    if (!channel.ok()) return channel.status();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HeartbeatResponse response;
    return FromGrpcStatus(
        MembershipService::NewStub(*channel)->Heartbeat(&context, HeartbeatRequest(), &response));
  }
  ChannelOptions Member(const std::string& dir) {
    return Security(dir, "member").MemberChannelOptions();
  }
  ChannelOptions Client(const std::string& name) {
    ChannelOptions o;
    o.credentials = Security(*dir_, name).ChannelCredentials();
    return o;
  }

  static std::string* dir_;
  static std::string* other_dir_;
  Probe probe_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};
std::string* GrpcCredentialsTest::dir_ = nullptr;
std::string* GrpcCredentialsTest::other_dir_ = nullptr;

TEST_F(GrpcCredentialsTest, WorkerPortAdmitsMembersOnly) {
  Serve(Security(*dir_, "member").MemberOnlyServerCredentials());
  EXPECT_OK(Call(Member(*dir_)));
  EXPECT_EQ(probe_.last_identity, kMemberIdentity);
  // A client certificate of the same CA: refused on every call, naming it.
  EXPECT_THAT(Call(Client("client")),
              StatusIs(absl::StatusCode::kPermissionDenied, "spiffe://meshserve/client"));
  // No certificate, a member of another CA, plaintext: no handshake.
  EXPECT_THAT(Call(Client("nobody")), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Call(Member(*other_dir_)), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Call(ChannelOptions()), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(GrpcCredentialsTest, ClientPortServesTlsWithOptionalClientCertificates) {
  Serve(Security(*dir_, "member").ClientPortServerCredentials());
  EXPECT_OK(Call(Client("nobody")));  // trusts the CA, presents nothing
  EXPECT_EQ(probe_.last_identity, "");
  EXPECT_OK(Call(Client("client")));
  EXPECT_EQ(probe_.last_identity, kClientIdentity);
  EXPECT_THAT(Call(ChannelOptions()), StatusIs(absl::StatusCode::kUnavailable));
  ChannelOptions wrong_ca;
  wrong_ca.credentials = Security(*other_dir_, "client").ChannelCredentials();
  EXPECT_THAT(Call(wrong_ca), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(GrpcCredentialsTest, CheckMemberPeerNamesTheRefusedIdentity) {
  Serve(Security(*dir_, "member").ClientPortServerCredentials());
  probe_.check = Probe::Check::kMember;
  EXPECT_OK(Call(Member(*dir_)));
  EXPECT_THAT(Call(Client("client")),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       "peer 'spiffe://meshserve/client' is not a cluster member"));
  EXPECT_THAT(Call(Client("nobody")),
              StatusIs(absl::StatusCode::kUnauthenticated, "no certificate"));
}

TEST_F(GrpcCredentialsTest, BearerTokenOnInsecureChannels) {
  Serve(RpcSecurity::Insecure().ClientPortServerCredentials());
  probe_.check = Probe::Check::kToken;
  ChannelOptions options;
  EXPECT_THAT(Call(options), StatusIs(absl::StatusCode::kUnauthenticated, "missing"));
  options.bearer_token = "wrong";
  EXPECT_THAT(Call(options), StatusIs(absl::StatusCode::kUnauthenticated, "wrong"));
  options.bearer_token = "s3cret";
  EXPECT_OK(Call(options));
  EXPECT_EQ(probe_.last_identity, "");
}

TEST_F(GrpcCredentialsTest, ReadErrorsNameTheFile) {
  EXPECT_THAT(ReadTlsDir("/nonexistent", "member"),
              StatusIs(absl::StatusCode::kInvalidArgument, "/nonexistent/ca.pem"));
  EXPECT_THAT(ReadTlsFiles(*dir_ + "/ca.pem", *dir_ + "/member.pem", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "both or neither"));
  EXPECT_THAT(ReadTlsFiles(*dir_ + "/ca.pem", *dir_ + "/member.pem", "/nonexistent.key"),
              StatusIs(absl::StatusCode::kInvalidArgument, "/nonexistent.key"));
  const std::string junk = TempPath("junk.pem");
  std::ofstream(junk) << "not a certificate\n";
  EXPECT_THAT(ReadTlsFiles(junk, "", ""), StatusIs(absl::StatusCode::kInvalidArgument, "not PEM"));
  std::filesystem::remove(junk);
  EXPECT_THAT(ReadTlsDir(*dir_, "nobody"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   "nobody.pem"));
  ASSERT_OK_AND_ASSIGN(TlsFiles ca_only, ReadTlsDir(*dir_, "nobody", /*cert_optional=*/true));
  EXPECT_TRUE(ca_only.cert_pem.empty());
}

TEST(TokenTest, ReadTokenFileTakesTheTrimmedFirstLine) {
  const std::string path = TempPath("token");
  std::ofstream(path) << "  abc123 \nsecond line\n";
  ASSERT_OK_AND_ASSIGN(std::string token, ReadTokenFile(path));
  EXPECT_EQ(token, "abc123");
  std::ofstream(path) << "\n\n";
  EXPECT_THAT(ReadTokenFile(path), StatusIs(absl::StatusCode::kInvalidArgument, "no token"));
  std::filesystem::remove(path);
  EXPECT_THAT(ReadTokenFile("/nonexistent/token"),
              StatusIs(absl::StatusCode::kInvalidArgument, "/nonexistent/token"));
}

TEST(TokenTest, SecretsEqual) {
  EXPECT_TRUE(SecretsEqual("abc", "abc"));
  EXPECT_FALSE(SecretsEqual("abc", "abd"));
  EXPECT_FALSE(SecretsEqual("abc", "ab"));
  EXPECT_TRUE(SecretsEqual("", ""));
}

TEST(RpcSecurityTest, DescribeSaysInsecure) {
  EXPECT_THAT(RpcSecurity::Insecure().Describe(), ::testing::HasSubstr("insecure"));
  EXPECT_FALSE(RpcSecurity::Insecure().tls());
  TlsFiles files;
  files.ca_path = "/x/ca.pem";
  EXPECT_THAT(RpcSecurity::Tls(files).Describe(),
              ::testing::HasSubstr("mutual TLS (CA /x/ca.pem)"));
}

}  // namespace
}  // namespace meshserve
