// WorkerService.ExecuteStream end to end in one process: GrpcWorkerClient's
// small calls (ExecuteCall::small, server/coordinator/grpc/execute_link.h)
// against a real worker server (server/worker/grpc/execute_stream.h) on loopback.
// Many calls at once each get their own answer; a call's error stays its
// own; a call that outlives its timeout fails alone with DEADLINE_EXCEEDED;
// a stream that ends fails the calls waiting on it with UNAVAILABLE, and the
// next call opens a new stream.
#include <atomic>
#include <cstring>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "common/base/thread_pool.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "proto/worker_service.grpc.pb.h"
#include "server/coordinator/grpc/grpc_worker_client.h"
#include "server/worker/grpc/grpc_peer_transport.h"
#include "server/worker/grpc/worker_service.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

constexpr char kModel[] = R"({"name": "m", "mesh": {"x": 2}, "dtype": "float32",
  "inputs": {"x": {"shape": [4, 8], "sharding": [null, "x"]}}, "params": {},
  "layers": [{"name": "y", "op": "relu", "input": "x"}], "outputs": ["y"]})";

void SetBox(int64_t rows, int64_t cols, BoxProto* box) {
  box->add_begin(0);
  box->add_end(rows);
  box->add_begin(0);
  box->add_end(cols);
}

class ExecuteStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerEngine::Options options;
    options.worker_id = 0;
    options.default_deadline = absl::Seconds(20);
    worker_ = std::make_unique<WorkerEngine>(options, &transport_);
    service_ = std::make_unique<WorkerServiceImpl>(worker_.get(), &pool_);
    ASSERT_OK_AND_ASSIGN(server_, StartWorkerServer(service_.get(), "127.0.0.1", 0));
    address_ = absl::StrCat("127.0.0.1:", server_.port);
    service_->set_address(address_);
    ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel(address_));
    stub_ = WorkerService::NewStub(channel);
    LoadModelRequest load;
    load.set_model("m");
    load.set_generation(1);
    load.set_model_json(kModel);
    auto* axis = load.mutable_mesh()->add_axes();
    axis->set_name("x");
    axis->set_size(2);
    load.add_devices(0);
    load.add_device_workers(0);
    load.add_device_workers(1);
    (*load.mutable_worker_addresses())[0] = address_;
    (*load.mutable_worker_addresses())[1] = "127.0.0.1:1";  // never up
    grpc::ClientContext context;
    LoadModelResponse loaded;
    ASSERT_OK(FromGrpcStatus(stub_->LoadModel(&context, load, &loaded)));
    // "echo" returns its input x (device 0's [4, 4]) as y; "stuck" waits
    // for a slice from worker 1, which never sends it.
    Program echo;
    echo.set_program_id("echo");
    echo.set_model("m");
    echo.set_generation(1);
    echo.set_worker(0);
    Program stuck = echo;
    stuck.set_program_id("stuck");
    auto* out = echo.add_steps()->mutable_output();
    out->set_buffer("in/x");
    SetBox(4, 4, out->mutable_box());
    out->set_output("y");
    out->set_device(0);
    auto* recv = stuck.add_steps()->mutable_recv();
    recv->set_buffer("got");
    SetBox(4, 4, recv->mutable_box());
    SetBox(4, 4, recv->mutable_buffer_box());
    recv->set_tag("never");
    recv->set_dtype(FLOAT32);
    recv->set_src_worker(1);
    recv->set_device(0);
    for (const Program& p : {echo, stuck}) {
      InstallProgramRequest install;
      *install.mutable_program() = p;
      grpc::ClientContext c;
      InstallProgramResponse installed;
      ASSERT_OK(FromGrpcStatus(stub_->InstallProgram(&c, install, &installed)));
    }
    ASSERT_OK_AND_ASSIGN(client_, CreateGrpcWorkerClient(address_));
  }
  void TearDown() override {
    client_.reset();
    if (server_.server) server_.server->Shutdown();
  }

  static ExecuteCall Call(const std::string& program, const std::string& id, float seed) {
    ExecuteCall call;
    call.program_id = program;
    call.request_id = id;
    call.deadline_ms = program == "stuck" ? 1500 : 10000;
    call.small = true;
    SliceIr x;
    x.name = "x";
    x.device = 0;
    x.box = BoxIr{{0, 0}, {4, 4}};
    x.dtype = DType::kFloat32;
    std::vector<float> v(16);
    for (int i = 0; i < 16; ++i) v[i] = seed + i;
    x.data.assign(reinterpret_cast<const char*>(v.data()), 64);
    call.inputs.push_back(std::move(x));
    return call;
  }
  // A call started and its answer once it came.
  struct Pending {
    absl::Notification done;
    absl::StatusOr<ExecuteResult> result;
  };
  void Start(ExecuteCall call, absl::Duration timeout, Pending* pending) {
    client_->ExecuteAsync(std::move(call), timeout, [pending](absl::StatusOr<ExecuteResult> r) {
      pending->result = std::move(r);
      pending->done.Notify();
    });
  }
  // ExecuteAsync, waited for.
  absl::StatusOr<ExecuteResult> Run(ExecuteCall call, absl::Duration timeout) {
    Pending pending;
    Start(std::move(call), timeout, &pending);
    pending.done.WaitForNotification();
    return std::move(pending.result);
  }

  GrpcPeerTransport transport_;
  ThreadPool pool_;
  std::unique_ptr<WorkerEngine> worker_;
  std::unique_ptr<WorkerServiceImpl> service_;
  WorkerServer server_;
  std::string address_;
  std::unique_ptr<WorkerService::Stub> stub_;
  std::shared_ptr<WorkerClient> client_;
};

TEST_F(ExecuteStreamTest, ManyCallsAtOnceEachGetTheirOwnAnswer) {
  constexpr int kCalls = 64;
  std::vector<absl::StatusOr<ExecuteResult>> results(kCalls);
  absl::BlockingCounter left(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client_->ExecuteAsync(Call("echo", absl::StrCat("r", i), 100.0f * i), absl::Seconds(10),
                          [&, i](absl::StatusOr<ExecuteResult> r) {
                            results[i] = std::move(r);
                            left.DecrementCount();
                          });
  }
  left.Wait();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_OK(results[i].status()) << i;
    ASSERT_EQ(results[i]->outputs.size(), 1u);
    EXPECT_EQ(results[i]->outputs[0].name, "y");
    EXPECT_EQ(results[i]->outputs[0].data, Call("echo", "", 100.0f * i).inputs[0].data) << i;
  }
}

TEST_F(ExecuteStreamTest, ACallsErrorIsItsOwnAndTheStreamGoesOn) {
  EXPECT_THAT(Run(Call("nope", "bad", 1), absl::Seconds(10)).status(),
              StatusIs(absl::StatusCode::kNotFound, "nope"));
  ASSERT_OK(Run(Call("echo", "once", 1), absl::Seconds(10)).status());
  // The worker remembers the ids of requests it ran: a second run is refused.
  EXPECT_FALSE(Run(Call("echo", "once", 1), absl::Seconds(10)).ok());
  ASSERT_OK_AND_ASSIGN(ExecuteResult good, Run(Call("echo", "good", 2), absl::Seconds(10)));
  EXPECT_EQ(good.outputs[0].data, Call("echo", "", 2).inputs[0].data);
}

TEST_F(ExecuteStreamTest, ACallPastItsTimeoutFailsAloneWithDeadlineExceeded) {
  Pending stuck;
  Start(Call("stuck", "s1", 0), absl::Milliseconds(300), &stuck);
  // Calls after it are answered while it waits.
  ASSERT_OK(Run(Call("echo", "e1", 3), absl::Seconds(10)).status());
  stuck.done.WaitForNotification();
  // The link's own timer (a unary call's deadline would not name the request).
  EXPECT_THAT(stuck.result.status(), StatusIs(absl::StatusCode::kDeadlineExceeded, "s1"));
  ASSERT_OK(Run(Call("echo", "e2", 4), absl::Seconds(10)).status());
}

TEST_F(ExecuteStreamTest, AnEndedStreamFailsItsWaitingCallsWithUnavailable) {
  ASSERT_OK(Run(Call("echo", "e1", 1), absl::Seconds(10)).status());  // the stream is up
  Pending stuck;
  Start(Call("stuck", "s1", 0), absl::Seconds(30), &stuck);
  absl::SleepFor(absl::Milliseconds(100));
  // The worker's server goes (its calls cancelled at once, the stuck run ends
  // at its deadline later).
  server_.server->Shutdown(std::chrono::system_clock::now());
  stuck.done.WaitForNotification();
  EXPECT_THAT(stuck.result.status(), StatusIs(absl::StatusCode::kUnavailable, "stream"));
  // A call now gets a new stream, which cannot connect: UNAVAILABLE too.
  EXPECT_THAT(Run(Call("echo", "e2", 2), absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(ExecuteStreamTest, CallsSentWhileTheStreamEndsEachCompleteOnce) {
  ASSERT_OK(Run(Call("echo", "warm", 1), absl::Seconds(10)).status());
  constexpr int kThreads = 4, kPerThread = 100;
  std::atomic<int> answered{0}, ok{0}, unavailable{0}, other{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        client_->ExecuteAsync(Call("echo", absl::StrCat("t", t, "-", i), i), absl::Seconds(10),
                              [&](absl::StatusOr<ExecuteResult> r) {
                                (r.ok() ? ok : absl::IsUnavailable(r.status()) ? unavailable
                                                                               : other)++;
                                ++answered;
                              });
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(2));
  server_.server->Shutdown(std::chrono::system_clock::now());
  for (std::thread& t : senders) t.join();
  for (int i = 0; i < 1000 && answered < kThreads * kPerThread; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  // Every call answered exactly once: by the worker, or UNAVAILABLE (the
  // stream ended, or a new one could not connect).
  EXPECT_EQ(answered, kThreads * kPerThread);
  EXPECT_EQ(ok + unavailable, kThreads * kPerThread) << other << " other errors";
}

}  // namespace
}  // namespace meshserve
