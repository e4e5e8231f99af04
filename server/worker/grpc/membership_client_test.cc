// MembershipClient against a fake coordinator MembershipService on loopback.
#include "server/worker/grpc/membership_client.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

// Refuses the first `refuse_registers` registrations (coordinator "not up"),
// then assigns id 7; answers known=false to heartbeat number `forget_at`.
class FakeMembership final : public MembershipService::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const RegisterRequest* request,
                        RegisterResponse* response) override {
    absl::MutexLock lock(&mu_);
    registers_.push_back(*request);
    if (static_cast<int>(registers_.size()) <= refuse_registers_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting");
    }
    response->set_worker_id(7);
    response->set_heartbeat_interval_ms(20);
    if (request->warms_up()) response->set_warm_bytes(warm_bytes_);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    heartbeats_.push_back(*request);
    response->set_known(static_cast<int>(heartbeats_.size()) != forget_at_);
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  int refuse_registers_ = 2;
  int forget_at_ = 3;
  int64_t warm_bytes_ = 0;  // answered to a registration that warms_up
  std::vector<RegisterRequest> registers_ ABSL_GUARDED_BY(mu_);
  std::vector<HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
};

TEST(MembershipClientTest, RegistersWithRetryHeartbeatsReRegistersAndDrains) {
  FakeMembership fake;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);

  absl::Mutex mu;
  std::vector<int64_t> registered;
  MembershipClient::Options options;
  options.coordinator = absl::StrCat("127.0.0.1:", port);
  options.address = "127.0.0.1:5555";
  options.cores = 3;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MembershipClient> client,
                       MembershipClient::Create(options, [&](int64_t id) {
                         absl::MutexLock lock(&mu);
                         registered.push_back(id);
                       }));
  client->Start();
  // Wait (bounded) for the re-registration after the forgotten heartbeat.
  for (int i = 0; i < 200; ++i) {
    {
      absl::MutexLock lock(&mu);
      if (registered.size() >= 2) break;
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
  client->Stop(/*draining=*/true);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(registered, (std::vector<int64_t>{7, 7}));
  }
  EXPECT_EQ(client->worker_id(), 7);
  absl::MutexLock lock(&fake.mu_);
  ASSERT_GE(fake.registers_.size(), 4u);  // 2 refused, 1 accepted, 1 after "unknown"
  EXPECT_EQ(fake.registers_[0].address(), "127.0.0.1:5555");
  EXPECT_EQ(fake.registers_[0].cores(), 3);
  EXPECT_EQ(fake.registers_[0].previous_worker_id(), -1);
  EXPECT_EQ(fake.registers_[3].previous_worker_id(), 7);  // keeps its id
  ASSERT_GE(fake.heartbeats_.size(), 4u);
  EXPECT_EQ(fake.heartbeats_[0].worker_id(), 7);
  EXPECT_FALSE(fake.heartbeats_[0].draining());
  EXPECT_TRUE(fake.heartbeats_.back().draining());
  server->Shutdown();
}

// Starts `fake` on loopback; returns the server and sets *target.
std::unique_ptr<grpc::Server> StartFake(FakeMembership* fake, std::string* target) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *target = absl::StrCat("127.0.0.1:", port);
  return server;
}

// Waits (bounded, 5 s) until `done(registers, heartbeats)` holds, called
// under fake->mu_ with the fake's lists.
template <typename Done>
bool WaitFor(FakeMembership* fake, Done done) {
  for (int i = 0; i < 200; ++i) {
    {
      absl::MutexLock lock(&fake->mu_);
      if (done(fake->registers_, fake->heartbeats_)) return true;
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
  return false;
}

TEST(MembershipClientTest, WarmsUpTheBytesTheCoordinatorNamesThenSaysWarm) {
  FakeMembership fake;
  fake.refuse_registers_ = 0;
  fake.forget_at_ = 8;  // one re-registration: it must not warm up again
  fake.warm_bytes_ = 12345;
  std::string target;
  std::unique_ptr<grpc::Server> server = StartFake(&fake, &target);
  absl::Mutex mu;
  std::vector<int64_t> asked;
  absl::Notification release;
  MembershipClient::Options options;
  options.coordinator = target;
  options.address = "127.0.0.1:5556";
  options.warm_up = [&](int64_t bytes) {
    {
      absl::MutexLock lock(&mu);
      asked.push_back(bytes);
    }
    release.WaitForNotification();
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MembershipClient> client,
                       MembershipClient::Create(options, nullptr));
  client->Start();
  // While warming: heartbeats say warm=false.
  ASSERT_TRUE(
      WaitFor(&fake, [](const auto&, const auto& heartbeats) { return heartbeats.size() >= 3; }));
  EXPECT_TRUE(client->warming());
  {
    absl::MutexLock lock(&fake.mu_);
    ASSERT_GE(fake.registers_.size(), 1u);
    EXPECT_TRUE(fake.registers_[0].warms_up());
    for (const HeartbeatRequest& h : fake.heartbeats_) EXPECT_FALSE(h.warm());
  }
  release.Notify();
  ASSERT_TRUE(
      WaitFor(&fake, [](const auto& registers, const auto&) { return registers.size() >= 2; }));
  ASSERT_TRUE(WaitFor(&fake, [](const auto&, const auto& heartbeats) {
    return !heartbeats.empty() && heartbeats.back().warm() && heartbeats.size() > 9;
  }));
  EXPECT_FALSE(client->warming());
  client->Stop(/*draining=*/false);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(asked, (std::vector<int64_t>{12345}));  // once, with the named bytes
  }
  absl::MutexLock lock(&fake.mu_);
  EXPECT_FALSE(fake.registers_[1].warms_up());  // a re-registration may hold shards
  server->Shutdown();
}

TEST(MembershipClientTest, NoWarmBytesNoWarmUpAndHeartbeatsSayWarm) {
  FakeMembership fake;
  fake.refuse_registers_ = 0;
  fake.forget_at_ = -1;
  std::string target;
  std::unique_ptr<grpc::Server> server = StartFake(&fake, &target);
  std::atomic<int> calls{0};
  MembershipClient::Options options;
  options.coordinator = target;
  options.address = "127.0.0.1:5557";
  options.warm_up = [&](int64_t) {
    ++calls;
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MembershipClient> client,
                       MembershipClient::Create(options, nullptr));
  client->Start();
  ASSERT_TRUE(
      WaitFor(&fake, [](const auto&, const auto& heartbeats) { return heartbeats.size() >= 2; }));
  client->Stop(/*draining=*/false);
  EXPECT_EQ(calls.load(), 0);
  absl::MutexLock lock(&fake.mu_);
  EXPECT_TRUE(fake.registers_[0].warms_up());
  for (const HeartbeatRequest& h : fake.heartbeats_) EXPECT_TRUE(h.warm());
  server->Shutdown();
}

TEST(MembershipClientTest, BadCoordinatorTargetIsInvalidArgument) {
  MembershipClient::Options options;
  options.coordinator = "no-port";
  EXPECT_THAT(MembershipClient::Create(options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace meshserve
