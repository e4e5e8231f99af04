// Two WorkerServices on loopback ports in one process, talking over real gRPC
// (GrpcPeerTransport): a >4 MiB cross-worker transfer (chunked), consecutive
// sends sharing one stream, a 2-worker
// dot_general with a reduce-scatter checked against a naive loop, a receive
// that never gets its data, bad peer chunks, Status, and params as state
// (LoadModel from a peer's cells, StageParams/CommitParams with fills,
// ReadParam of a >1 MiB cell in chunks, param versions on Execute).
//
// References are plain loops, and the checkpoint is written byte by byte.
#include "server/worker/grpc/worker_service.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "common/sharding/box.h"
#include "common/tensor/initializers.h"
#include "server/worker/grpc/grpc_peer_transport.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

constexpr int64_t kM = 4, kK = 8, kN = 6;
// Threads of each worker's ThreadPool (few, so that a test can fill it).
constexpr int kPoolThreads = 4;

// Writes a one-tensor float32 safetensors file by hand (8-byte LE header
// length, JSON header, raw bytes).
void WriteSafetensorsByHand(const std::string& path, const std::string& name,
                            std::vector<int64_t> shape, const std::vector<float>& values) {
  std::string header = absl::StrCat(R"({")", name, R"(":{"dtype":"F32","shape":[)");
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&header, i ? "," : "", shape[i]);
  absl::StrAppend(&header, R"(],"data_offsets":[0,)", values.size() * 4, "]}}");
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), header.size());
  out.write(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

std::string ModelJson(const std::string& checkpoint) {
  return absl::StrReplaceAll(
      R"({'name': 'mm', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 1, 'checkpoint': 'CKPT',
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, 'x']}},
  'params': {'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'zeros'}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': ['x', null]}],
  'outputs': ['y']})",
      {{"'", "\""}, {"CKPT", checkpoint}});
}

void SetBox(std::vector<std::pair<int64_t, int64_t>> dims, meshserve::TensorSlice* slice) {
  for (auto [b, e] : dims) {
    slice->mutable_box()->add_begin(b);
    slice->mutable_box()->add_end(e);
  }
}
template <typename M>
void SetBoxOf(std::vector<std::pair<int64_t, int64_t>> dims, M* box) {
  for (auto [b, e] : dims) {
    box->add_begin(b);
    box->add_end(e);
  }
}

std::vector<float> Values(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 29) % 13 - 6);
  return v;
}

struct Node {
  std::unique_ptr<GrpcPeerTransport> transport;
  std::unique_ptr<WorkerEngine> worker;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<WorkerServiceImpl> service;
  WorkerServer server;
  std::string address;
  std::unique_ptr<WorkerService::Stub> stub;
};

Program MatmulProgram(int64_t worker);

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      Node& n = nodes_[i];
      n.transport = std::make_unique<GrpcPeerTransport>();
      WorkerEngine::Options options;
      options.worker_id = i;
      options.default_deadline = absl::Seconds(20);
      n.worker = std::make_unique<WorkerEngine>(options, n.transport.get());
      n.pool = std::make_unique<ThreadPool>(kPoolThreads);
      n.service = std::make_unique<WorkerServiceImpl>(n.worker.get(), n.pool.get());
      ASSERT_OK_AND_ASSIGN(n.server, StartWorkerServer(n.service.get(), "127.0.0.1", 0));
      n.address = absl::StrCat("127.0.0.1:", n.server.port);
      n.service->set_address(n.address);
      ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel(n.address));
      n.stub = WorkerService::NewStub(channel);
    }
    ckpt_ = ::testing::TempDir() + "/worker_service_test_w.safetensors";
    w_ = Values(kK * kN, 0.5f);
    WriteSafetensorsByHand(ckpt_, "w", {kK, kN}, w_);
    for (int i = 0; i < 2; ++i) {
      LoadModelRequest load;
      load.set_model("mm");
      load.set_generation(1);
      load.set_model_json(ModelJson(ckpt_));
      auto* axis = load.mutable_mesh()->add_axes();
      axis->set_name("x");
      axis->set_size(2);
      load.add_devices(i);
      load.add_device_workers(0);
      load.add_device_workers(1);
      (*load.mutable_worker_addresses())[0] = nodes_[0].address;
      (*load.mutable_worker_addresses())[1] = nodes_[1].address;
      grpc::ClientContext context;
      LoadModelResponse response;
      ASSERT_OK(FromGrpcStatus(nodes_[i].stub->LoadModel(&context, load, &response)));
      EXPECT_EQ(response.param_bytes(), kK / 2 * kN * 4);
    }
  }
  void TearDown() override {
    // The transports first: their long-lived PeerStreams are calls the other
    // node's server would wait for in Shutdown.
    for (Node& n : nodes_) n.transport.reset();
    for (Node& n : nodes_) {
      if (n.server.server) n.server.server->Shutdown();
    }
    std::remove(ckpt_.c_str());
  }

  absl::Status Install(int worker, const Program& program) {
    InstallProgramRequest request;
    *request.mutable_program() = program;
    grpc::ClientContext context;
    InstallProgramResponse response;
    return FromGrpcStatus(nodes_[worker].stub->InstallProgram(&context, request, &response));
  }

  // Execute of `program_id` with no inputs on `worker`.
  absl::Status ExecuteNothing(int worker, const std::string& program_id) {
    grpc::ClientContext context;
    ExecuteRequest request;
    request.set_program_id(program_id);
    request.set_request_id("r");
    ExecuteResponse response;
    return FromGrpcStatus(nodes_[worker].stub->Execute(&context, request, &response));
  }

  // Executes `requests[w]` on both workers concurrently over gRPC.
  void ExecuteBoth(ExecuteRequest requests[2], absl::Status statuses[2],
                   ExecuteResponse responses[2]) {
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w]() {
        grpc::ClientContext context;
        SetDeadline(&context, absl::Seconds(30));
        statuses[w] = FromGrpcStatus(nodes_[w].stub->Execute(&context, requests[w], &responses[w]));
      });
    }
    for (auto& t : threads) t.join();
  }

  // Program `name`: worker 0 sends input `name` ([rows, cols] float32 on
  // device 0) to worker 1 in consecutive sends of `rows_per_send` rows, and
  // worker 1 outputs what it received. Runs it with `values`: the output must
  // be exactly those bytes.
  void ForwardRows(const std::string& name, int64_t rows, int64_t cols, int64_t rows_per_send,
                   const std::vector<float>& values);

  // Runs MatmulProgram(0) on worker 0 alone (its send to worker 1 cannot
  // reach it): kUnavailable naming worker 1.
  void ExpectWorker0SendIsUnavailable(const std::string& request_id) {
    ASSERT_OK(Install(0, MatmulProgram(0)));
    ExecuteRequest request;
    request.set_program_id("mm");
    request.set_request_id(request_id);
    request.set_deadline_ms(10000);
    TensorSlice* in = request.add_inputs();
    in->set_name("x");
    in->set_device(0);
    SetBox({{0, kM}, {0, kK / 2}}, in);
    in->set_dtype(FLOAT32);
    in->set_data(std::string(kM * kK / 2 * 4, '\0'));
    grpc::ClientContext context;
    ExecuteResponse response;
    EXPECT_THAT(FromGrpcStatus(nodes_[0].stub->Execute(&context, request, &response)),
                StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  }

  Node nodes_[2];
  std::string ckpt_;
  std::vector<float> w_;
};

Step* AddStep(Program* p) { return p->add_steps(); }

void WorkerServiceTest::ForwardRows(const std::string& name, int64_t rows, int64_t cols,
                                    int64_t rows_per_send, const std::vector<float>& values) {
  Program p0;
  p0.set_program_id(name);
  p0.set_model("mm");
  p0.set_generation(1);
  p0.set_worker(0);
  Program p1 = p0;
  p1.set_worker(1);
  for (int64_t r = 0; r < rows; r += rows_per_send) {
    const int64_t end = std::min(rows, r + rows_per_send);
    const std::string tag = absl::StrCat(name, "/", r);
    auto* send = AddStep(&p0)->mutable_send();
    send->set_buffer("in/" + name);
    SetBoxOf({{r, end}, {0, cols}}, send->mutable_box());
    send->set_dst_worker(1);
    send->set_dst_device(1);
    send->set_tag(tag);
    send->set_device(0);
    auto* recv = AddStep(&p1)->mutable_recv();
    recv->set_buffer("got");
    SetBoxOf({{r, end}, {0, cols}}, recv->mutable_box());
    SetBoxOf({{0, rows}, {0, cols}}, recv->mutable_buffer_box());
    recv->set_tag(tag);
    recv->set_dtype(FLOAT32);
    recv->set_src_worker(0);
    recv->set_device(1);
  }
  auto* out = AddStep(&p1)->mutable_output();
  out->set_buffer("got");
  SetBoxOf({{0, rows}, {0, cols}}, out->mutable_box());
  out->set_output(name);
  out->set_device(1);
  ASSERT_OK(Install(0, p0));
  ASSERT_OK(Install(1, p1));

  ExecuteRequest requests[2];
  for (int w = 0; w < 2; ++w) {
    requests[w].set_program_id(name);
    requests[w].set_request_id(name + "-1");
  }
  TensorSlice* in = requests[0].add_inputs();
  in->set_name(name);
  in->set_device(0);
  SetBox({{0, rows}, {0, cols}}, in);
  in->set_dtype(FLOAT32);
  in->set_data(values.data(), values.size() * 4);
  absl::Status statuses[2];
  ExecuteResponse responses[2];
  ExecuteBoth(requests, statuses, responses);
  ASSERT_OK(statuses[0]);
  ASSERT_OK(statuses[1]);
  ASSERT_EQ(responses[1].outputs_size(), 1);
  const std::string& got = responses[1].outputs(0).data();
  ASSERT_EQ(got.size(), values.size() * 4);
  EXPECT_EQ(std::memcmp(got.data(), values.data(), got.size()), 0);
}

TEST_F(WorkerServiceTest, LargeCrossWorkerTransferIsChunkedAndExact) {
  constexpr int64_t kRows = 1280, kCols = 1024;  // 5 MiB of float32
  std::vector<float> big = Values(kRows * kCols, 0.25f);
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<float>(i);
  ForwardRows("big", kRows, kCols, /*rows_per_send=*/kRows, big);
  EXPECT_EQ(nodes_[0].transport->chunks_sent(), 5);  // 5 MiB in 1 MiB chunks
}

// A run of consecutive sends to one peer travels on one PushData stream (one
// stream per slice, each a blocking round trip on 4 sender threads, once
// serialised a tiny model's requests), and every slice arrives intact.
TEST_F(WorkerServiceTest, ConsecutiveSendsToOnePeerShareOneStream) {
  constexpr int64_t kRows = 5, kCols = 3;
  ForwardRows("rows", kRows, kCols, /*rows_per_send=*/1, Values(kRows * kCols, 1.5f));
  EXPECT_EQ(nodes_[0].transport->slices_sent(), kRows);
  EXPECT_EQ(nodes_[0].transport->chunks_sent(), kRows);
  EXPECT_EQ(nodes_[0].transport->streams_opened(), 1);
}

// Small rounds of many requests to one peer share one long-lived PeerStream
// (no stream start and finish per round), and every slice arrives intact.
TEST_F(WorkerServiceTest, RoundsOfManyRequestsShareOnePeerStream) {
  constexpr int64_t kRows = 3, kCols = 2;
  for (const char* name : {"r1", "r2", "r3"}) {
    ForwardRows(name, kRows, kCols, /*rows_per_send=*/1, Values(kRows * kCols, 2.5f));
  }
  EXPECT_EQ(nodes_[0].transport->slices_sent(), 3 * kRows);
  EXPECT_EQ(nodes_[0].transport->streams_opened(), 1);
}

// Worker 1's program `id`: one receive of 4 float32 values from worker 0
// into buffer `tag` under tag `tag`.
Program ReceiveFourProgram(const std::string& id = "four", const std::string& tag = "four") {
  Program p;
  p.set_program_id(id);
  p.set_model("mm");
  p.set_generation(1);
  p.set_worker(1);
  auto* recv = p.add_steps()->mutable_recv();
  recv->set_buffer(tag);
  SetBoxOf({{0, 4}}, recv->mutable_box());
  SetBoxOf({{0, 4}}, recv->mutable_buffer_box());
  recv->set_tag(tag);
  recv->set_dtype(FLOAT32);
  recv->set_src_worker(0);
  recv->set_device(1);
  return p;
}

absl::Status ExecuteFour(WorkerService::Stub* stub, const std::string& request_id) {
  ExecuteRequest request;
  request.set_program_id("four");
  request.set_request_id(request_id);
  request.set_deadline_ms(20000);
  grpc::ClientContext context;
  ExecuteResponse response;
  return FromGrpcStatus(stub->Execute(&context, request, &response));
}

// A chunk the receiver rejects on a PeerStream fails that request on the
// receiver, with the reason, long before its deadline; the stream goes on
// and carries the next request's slice.
TEST_F(WorkerServiceTest, BadChunkOnPeerStreamFailsOnlyItsRequest) {
  ASSERT_OK(Install(1, ReceiveFourProgram()));
  grpc::ClientContext context;
  auto stream = nodes_[1].stub->PeerStream(&context);
  DataChunk bad;
  bad.set_request_id("bad");
  bad.set_tag("four");
  bad.set_total_bytes(16);
  bad.set_offset(8);  // out of order
  bad.set_data(std::string(8, '\0'));
  bad.set_src_worker(0);
  DataChunk good = bad;
  good.set_request_id("good");
  good.set_offset(0);
  good.set_data(std::string(16, '\0'));
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(good));
  const absl::Time start = absl::Now();
  EXPECT_THAT(ExecuteFour(nodes_[1].stub.get(), "bad"),
              StatusIs(absl::StatusCode::kInvalidArgument, "chunk offset 8"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "failed only at the deadline";
  EXPECT_OK(ExecuteFour(nodes_[1].stub.get(), "good"));
  stream->WritesDone();
  EXPECT_OK(FromGrpcStatus(stream->Finish()));
}

// A peer whose server went away with a PeerStream open: the next round to it
// fails with kUnavailable naming the worker instead of waiting.
TEST_F(WorkerServiceTest, PeerStreamToADeadPeerFailsTheNextRound) {
  ForwardRows("before", 2, 2, /*rows_per_send=*/2, Values(4, 1.0f));
  ASSERT_EQ(nodes_[0].transport->streams_opened(), 1);
  // Shutdown cancels the open stream after the (short) deadline.
  nodes_[1].server.server->Shutdown(std::chrono::system_clock::now() +
                                    std::chrono::milliseconds(100));
  ExpectWorker0SendIsUnavailable("after");
}

// Worker d: partial = x_d @ w_d (contracting dim split), reduce-scatter rows.
Program MatmulProgram(int64_t worker) {
  const int64_t other = 1 - worker, half = kM / 2;
  Program p;
  p.set_program_id("mm");
  p.set_model("mm");
  p.set_generation(1);
  p.set_worker(worker);
  auto* dot = AddStep(&p)->mutable_compute();
  dot->set_op("dot_general");
  dot->add_inputs("in/x");
  dot->add_inputs("param/w");
  dot->set_output("partial");
  SetBoxOf({{0, kM}, {0, kN}}, dot->mutable_out_box());
  dot->set_out_dtype(FLOAT32);
  dot->add_lhs_contracting(1);
  dot->add_rhs_contracting(0);
  dot->set_partial(true);
  dot->set_device(worker);
  auto* send = AddStep(&p)->mutable_send();
  send->set_buffer("partial");
  SetBoxOf({{other * half, (other + 1) * half}, {0, kN}}, send->mutable_box());
  send->set_dst_worker(other);
  send->set_dst_device(other);
  send->set_tag(absl::StrCat("rs/", worker, "->", other));
  send->set_device(worker);
  auto* recv = AddStep(&p)->mutable_recv();
  recv->set_buffer("partial");
  SetBoxOf({{worker * half, (worker + 1) * half}, {0, kN}}, recv->mutable_box());
  recv->set_tag(absl::StrCat("rs/", other, "->", worker));
  recv->set_accumulate(true);
  recv->set_src_worker(other);
  recv->set_device(worker);
  auto* out = AddStep(&p)->mutable_output();
  out->set_buffer("partial");
  SetBoxOf({{worker * half, (worker + 1) * half}, {0, kN}}, out->mutable_box());
  out->set_output("y");
  out->set_device(worker);
  return p;
}

TEST_F(WorkerServiceTest, TwoWorkerDotGeneralOverGrpcMatchesNaive) {
  ASSERT_OK(Install(0, MatmulProgram(0)));
  ASSERT_OK(Install(1, MatmulProgram(1)));
  const std::vector<float> x = Values(kM * kK, 1.0f);
  for (int round = 0; round < 3; ++round) {
    ExecuteRequest requests[2];
    for (int w = 0; w < 2; ++w) {
      requests[w].set_program_id("mm");
      requests[w].set_request_id(absl::StrCat("mm-", round));
      TensorSlice* in = requests[w].add_inputs();
      in->set_name("x");
      in->set_device(w);
      SetBox({{0, kM}, {w * kK / 2, (w + 1) * kK / 2}}, in);
      in->set_dtype(FLOAT32);
      std::vector<float> part;
      for (int64_t m = 0; m < kM; ++m) {
        for (int64_t k = w * kK / 2; k < (w + 1) * kK / 2; ++k) part.push_back(x[m * kK + k]);
      }
      in->set_data(part.data(), part.size() * 4);
    }
    absl::Status statuses[2];
    ExecuteResponse responses[2];
    ExecuteBoth(requests, statuses, responses);
    ASSERT_OK(statuses[0]);
    ASSERT_OK(statuses[1]);
    for (int w = 0; w < 2; ++w) {
      ASSERT_EQ(responses[w].outputs_size(), 1);
      const TensorSlice& y = responses[w].outputs(0);
      EXPECT_EQ(y.name(), "y");
      ASSERT_EQ(y.data().size(), kM / 2 * kN * 4u);
      std::vector<float> rows(kM / 2 * kN);
      std::memcpy(rows.data(), y.data().data(), y.data().size());
      for (int64_t r = 0; r < kM / 2; ++r) {
        const int64_t m = y.box().begin(0) + r;
        for (int64_t n = 0; n < kN; ++n) {
          double want = 0;
          for (int64_t k = 0; k < kK; ++k) want += double{x[m * kK + k]} * w_[k * kN + n];
          EXPECT_NEAR(rows[r * kN + n], want, 1e-4 * (1 + std::abs(want))) << m << "," << n;
        }
      }
    }
  }
}

TEST_F(WorkerServiceTest, ReceiveWithoutSenderFailsThenNextRequestIsServed) {
  ASSERT_OK(Install(1, ReceiveFourProgram("wait", "never")));
  ExecuteRequest request;
  request.set_program_id("wait");
  request.set_request_id("w1");
  request.set_deadline_ms(300);
  grpc::ClientContext context;
  ExecuteResponse response;
  absl::Status status = FromGrpcStatus(nodes_[1].stub->Execute(&context, request, &response));
  EXPECT_TRUE(status.code() == absl::StatusCode::kDeadlineExceeded ||
              status.code() == absl::StatusCode::kUnavailable)
      << status;
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, "tag 'never'"));
  // The worker keeps serving.
  ASSERT_OK(Install(0, MatmulProgram(0)));
  ASSERT_OK(Install(1, MatmulProgram(1)));
  ExecuteRequest requests[2];
  for (int w = 0; w < 2; ++w) {
    requests[w].set_program_id("mm");
    requests[w].set_request_id("after");
    TensorSlice* in = requests[w].add_inputs();
    in->set_name("x");
    in->set_device(w);
    SetBox({{0, kM}, {w * kK / 2, (w + 1) * kK / 2}}, in);
    in->set_dtype(FLOAT32);
    in->set_data(std::string(kM * kK / 2 * 4, '\0'));
  }
  absl::Status statuses[2];
  ExecuteResponse responses[2];
  ExecuteBoth(requests, statuses, responses);
  EXPECT_OK(statuses[0]);
  EXPECT_OK(statuses[1]);
}

// How late a request arrived, from "arrived <duration> past".
absl::Duration LateBy(absl::string_view message) {
  std::smatch late;
  const std::string text(message);
  if (!std::regex_search(text, late, std::regex("arrived (\\S+) past"))) {
    ADD_FAILURE() << "no lateness in: " << text;
    return absl::ZeroDuration();
  }
  absl::Duration by;
  EXPECT_TRUE(absl::ParseDuration(late[1].str(), &by)) << late[1];
  return by;
}

// Deadlines travel with the request (deadline_unix_us, set by the sender):
// one that arrives past it is answered DEADLINE_EXCEEDED naming it and how
// late, over Execute and ExecuteStream, without running; one that arrives
// before it runs until it,
// even when deadline_ms alone would allow a minute.
TEST_F(WorkerServiceTest, RequestsCarryTheirDeadlineToTheWorker) {
  ASSERT_OK(Install(1, ReceiveFourProgram("wait", "never")));
  ExecuteRequest request;
  request.set_program_id("wait");
  request.set_request_id("late");
  request.set_deadline_ms(60000);
  request.set_deadline_unix_us(absl::ToUnixMicros(absl::Now() - absl::Seconds(10)));
  auto execute = [&]() {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    ExecuteResponse response;
    return FromGrpcStatus(nodes_[1].stub->Execute(&context, request, &response));
  };
  absl::Status status = execute();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, "request 'late' arrived "));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, "; not run"));
  EXPECT_GE(LateBy(status.message()), absl::Seconds(10));
  {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    auto stream = nodes_[1].stub->ExecuteStream(&context);
    request.set_request_id("late-on-stream");
    ASSERT_TRUE(stream->Write(request));
    ExecuteStreamReply reply;
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_EQ(reply.request_id(), "late-on-stream");
    EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
    EXPECT_THAT(reply.message(), ::testing::HasSubstr("request 'late-on-stream' arrived "));
    EXPECT_GE(LateBy(reply.message()), absl::Seconds(10));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  // Before its deadline: runs, and its receive waits only until the absolute
  // deadline (the error names the receive, not the client's 30 s deadline).
  request.set_request_id("soon");
  request.set_deadline_unix_us(absl::ToUnixMicros(absl::Now() + absl::Milliseconds(300)));
  status = execute();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, "tag 'never'"));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, "request 'soon'"));
}

TEST_F(WorkerServiceTest, SendToADeadPeerIsUnavailable) {
  // Worker 0 sends to worker 1, whose server is down. The server is shut down,
  // not destroyed: destroying a grpc::Server while the other node's calls and
  // callbacks are in flight made gRPC 1.51 free a completion queue twice
  // (ASan, about 1 run in 100 of this test, old and new builds alike); a
  // stopped process destroys nothing, and a shut-down server listens no more.
  nodes_[1].server.server->Shutdown();
  ExpectWorker0SendIsUnavailable("dead");
}

TEST_F(WorkerServiceTest, BadChunksAreRejectedWithInvalidArgument) {
  grpc::ClientContext context;
  PushAck ack;
  auto writer = nodes_[0].stub->PushData(&context, &ack);
  DataChunk chunk;
  chunk.set_request_id("r");
  chunk.set_tag("t");
  chunk.set_total_bytes(4);
  chunk.set_offset(2);  // out of order
  chunk.set_data("ab");
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_THAT(FromGrpcStatus(writer->Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset 2"));
}

// The typed IR cannot hold an unknown op or a step without a kind: the
// InstallProgram handler rejects both where the message becomes IR.
TEST_F(WorkerServiceTest, UnknownComputeOpAndStepWithoutKindAreRejectedAtInstall) {
  Program conv = MatmulProgram(0);
  conv.mutable_steps(0)->mutable_compute()->set_op("conv");
  EXPECT_THAT(Install(0, conv),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown compute op 'conv'"));
  Program empty = MatmulProgram(0);
  empty.add_steps();
  EXPECT_THAT(Install(0, empty), StatusIs(absl::StatusCode::kInvalidArgument, "no kind"));
}

TEST_F(WorkerServiceTest, UnknownProgramAndStatus) {
  EXPECT_THAT(ExecuteNothing(0, "nope"), StatusIs(absl::StatusCode::kNotFound, "nope"));
  grpc::ClientContext status_context;
  WorkerStatusResponse status;
  ASSERT_OK(FromGrpcStatus(
      nodes_[0].stub->Status(&status_context, WorkerStatusRequest(), &status)));
  EXPECT_EQ(status.worker_id(), 0);
  EXPECT_EQ(status.address(), nodes_[0].address);
  EXPECT_FALSE(status.blas_core().empty());
  ASSERT_EQ(status.models_size(), 1);
  EXPECT_EQ(status.models(0).model(), "mm");
  EXPECT_EQ(status.models(0).param_bytes(), kK / 2 * kN * 4);
}

// UninstallProgram over gRPC: the program goes (Status counts it no more),
// an Execute of it is NOT_FOUND naming it, and so is a second uninstall.
TEST_F(WorkerServiceTest, UninstallProgramDropsIt) {
  ASSERT_OK(Install(0, MatmulProgram(0)));
  auto programs = [&] {
    grpc::ClientContext context;
    WorkerStatusResponse status;
    EXPECT_OK(FromGrpcStatus(nodes_[0].stub->Status(&context, WorkerStatusRequest(), &status)));
    return status.programs();
  };
  auto uninstall = [&] {
    grpc::ClientContext context;
    UninstallProgramRequest request;
    request.set_program_id("mm");
    UninstallProgramResponse response;
    return FromGrpcStatus(nodes_[0].stub->UninstallProgram(&context, request, &response));
  };
  EXPECT_EQ(programs(), 1);
  ASSERT_OK(uninstall());
  EXPECT_EQ(programs(), 0);
  EXPECT_THAT(ExecuteNothing(0, "mm"),
              StatusIs(absl::StatusCode::kNotFound, "unknown program 'mm'"));
  EXPECT_THAT(uninstall(), StatusIs(absl::StatusCode::kNotFound, "unknown program 'mm'"));
}

// ---- params as state ----

LoadModelRequest LoadOf(const std::string& model, const std::string& json, int64_t generation,
                        std::vector<int64_t> devices, std::vector<int64_t> device_workers,
                        const Node (&nodes)[2]) {
  LoadModelRequest load;
  load.set_model(model);
  load.set_generation(generation);
  load.set_model_json(json);
  auto* axis = load.mutable_mesh()->add_axes();
  axis->set_name("x");
  axis->set_size(2);
  for (int64_t d : devices) load.add_devices(d);
  for (int64_t w : device_workers) load.add_device_workers(w);
  for (int i = 0; i < 2; ++i) (*load.mutable_worker_addresses())[i] = nodes[i].address;
  return load;
}

void AddSource(LoadModelRequest* load, const std::string& param, int64_t r0, int64_t r1,
               int64_t cols, int64_t worker, int64_t generation, int64_t version) {
  ParamPiece* piece = load->add_sources();
  piece->set_param(param);
  SetBoxOf({{r0, r1}, {0, cols}}, piece->mutable_box());
  piece->set_src_worker(worker);
  piece->set_src_generation(generation);
  piece->set_src_version(version);
}

// Sends `values` (rows [r0, r1) of a [*, kN] param) to StageParams in
// `num_chunks` chunks on one stream; returns the acknowledged bytes.
absl::StatusOr<int64_t> StageRows(WorkerService::Stub* stub, int64_t generation,
                                  int64_t version, int64_t r0, int64_t r1,
                                  const std::vector<float>& values, int num_chunks) {
  grpc::ClientContext context;
  StageParamsResponse response;
  std::unique_ptr<grpc::ClientWriter<StageParamChunk>> writer =
      stub->StageParams(&context, &response);
  const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  const size_t step = (bytes.size() + num_chunks - 1) / num_chunks;
  for (size_t offset = 0; offset < bytes.size(); offset += step) {
    StageParamChunk chunk;
    chunk.set_model("mm");
    chunk.set_generation(generation);
    chunk.set_version(version);
    chunk.set_param("w");
    SetBoxOf({{r0, r1}, {0, kN}}, chunk.mutable_box());
    chunk.set_total_bytes(bytes.size());
    chunk.set_offset(offset);
    chunk.set_data(bytes.substr(offset, step));
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  MS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return response.bytes();
}

// ReadParam of rows [r0, r1) of `param` over gRPC: the floats, and the chunks.
absl::StatusOr<std::vector<float>> ReadRows(WorkerService::Stub* stub, const std::string& model,
                                            int64_t generation, int64_t version,
                                            const std::string& param, int64_t r0, int64_t r1,
                                            int64_t cols, int* chunks = nullptr) {
  ReadParamRequest request;
  request.set_model(model);
  request.set_generation(generation);
  request.set_version(version);
  request.set_param(param);
  SetBoxOf({{r0, r1}, {0, cols}}, request.mutable_box());
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(30));  // a read that never comes fails, not hangs
  std::unique_ptr<grpc::ClientReader<ParamChunk>> reader = stub->ReadParam(&context, request);
  std::string bytes;
  ParamChunk chunk;
  int n = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.offset(), static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(chunk.total_bytes(), (r1 - r0) * cols * 4);
    EXPECT_EQ(chunk.dtype(), FLOAT32);
    bytes += chunk.data();
    ++n;
  }
  MS_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  if (chunks != nullptr) *chunks = n;
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST_F(WorkerServiceTest, ReadParamRefusesARequestThatDoesNotParse) {
  // ReadParam is a raw method (its chunks go out without copies): the
  // worker parses the request itself.
  ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel(nodes_[0].address));
  grpc::Slice junk(std::string("\x0A\x7F", 2));  // field 1: a length past the end
  grpc::ByteBuffer request(&junk, 1);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader = StartRawServerStream(
      channel.get(), "/meshserve.WorkerService/ReadParam", &context, request);
  grpc::ByteBuffer chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  EXPECT_THAT(FromGrpcStatus(reader->Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, "ReadParam: unreadable request"));
  // The worker serves the next, well-formed read.
  ASSERT_OK_AND_ASSIGN(std::vector<float> rows,
                       ReadRows(nodes_[0].stub.get(), "mm", 1, 1, "w", 0, 4, kN));
  EXPECT_EQ(rows.size(), static_cast<size_t>(4 * kN));
}

// ReadParam reads on the ElasticExecutor, not on the worker's pool: a pool
// whose every thread waits (e.g. LoadModels waiting for peers' ReadParams)
// does not hold it up.
TEST_F(WorkerServiceTest, ReadParamIsServedWhileThePoolIsBusy) {
  // Shared with the pool's tasks, which may still be returning from the wait
  // when this test's frame is gone.
  auto release = std::make_shared<absl::Notification>();
  auto busy = std::make_shared<absl::BlockingCounter>(kPoolThreads);
  for (int i = 0; i < kPoolThreads; ++i) {
    nodes_[0].pool->Schedule([release, busy] {
      busy->DecrementCount();
      release->WaitForNotification();
    });
  }
  busy->Wait();
  // Worker 0 holds rows [0, kK / 2) of w (sharded over x on its rows).
  absl::StatusOr<std::vector<float>> rows =
      ReadRows(nodes_[0].stub.get(), "mm", 1, 1, "w", 0, kK / 2, kN);
  release->Notify();
  ASSERT_OK(rows.status());
  ASSERT_EQ(rows->size(), static_cast<size_t>(kK / 2 * kN));
  for (size_t i = 0; i < rows->size(); ++i) EXPECT_EQ((*rows)[i], w_[i]) << "element " << i;
}

TEST_F(WorkerServiceTest, StageParamsRefusesAChunkThatDoesNotParse) {
  // StageParams is a raw method too (chunks are staged from the received
  // slices): a message protobuf would refuse is refused, naming the chunk.
  ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel(nodes_[0].address));
  grpc::Slice junk(std::string("\x42\x7F", 2));  // field 8 (data): a length past the end
  grpc::ByteBuffer chunk(&junk, 1);
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer = StartRawClientStream(
      channel.get(), "/meshserve.WorkerService/StageParams", &context, &response);
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_THAT(FromGrpcStatus(writer->Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, "StageParams chunk 0"));
  // The worker stages the next, well-formed stream (in 3 chunks), and reads
  // the staged rows back.
  std::vector<float> values(4 * kN);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  ASSERT_OK_AND_ASSIGN(int64_t bytes, StageRows(nodes_[0].stub.get(), 1, 2, 0, 4, values, 3));
  EXPECT_EQ(bytes, static_cast<int64_t>(values.size() * 4));
  ASSERT_OK_AND_ASSIGN(std::vector<float> rows,
                       ReadRows(nodes_[0].stub.get(), "mm", 1, 2, "w", 0, 4, kN));
  EXPECT_EQ(rows, values);
}

std::vector<float> Rows(const std::vector<float>& full, int64_t r0, int64_t r1, int64_t cols) {
  return std::vector<float>(full.begin() + r0 * cols, full.begin() + r1 * cols);
}

TEST_F(WorkerServiceTest, LoadFromPeerThenPushWithReplicaFillsOverGrpc) {
  // Generation 2: each worker keeps its own w cell (local) and takes the
  // other's as a replica from the peer (ReadParam over gRPC).
  for (int i = 0; i < 2; ++i) {
    LoadModelRequest load = LoadOf("mm", ModelJson(ckpt_), 2, {i}, {0, 1}, nodes_);
    load.add_replica_devices(1 - i);
    AddSource(&load, "w", 4 * i, 4 * i + 4, kN, i, 1, 1);
    AddSource(&load, "w", 4 * (1 - i), 4 * (1 - i) + 4, kN, 1 - i, 1, 1);
    grpc::ClientContext context;
    LoadModelResponse response;
    ASSERT_OK(FromGrpcStatus(nodes_[i].stub->LoadModel(&context, load, &response)));
    EXPECT_EQ(response.param_bytes(), kK * kN * 4);
    EXPECT_EQ(response.bytes_local(), kK / 2 * kN * 4);
    EXPECT_EQ(response.bytes_fetched(), kK / 2 * kN * 4);
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> all,
                         ReadRows(nodes_[i].stub.get(), "mm", 2, 1, "w", 0, 4, kN));
    EXPECT_EQ(all, Rows(w_, 0, 4, kN)) << "worker " << i;
    ASSERT_OK_AND_ASSIGN(all, ReadRows(nodes_[i].stub.get(), "mm", 2, 1, "w", 4, 8, kN));
    EXPECT_EQ(all, Rows(w_, 4, 8, kN)) << "worker " << i;
  }
  // Push version 2: each worker gets its own cell (in 3 chunks); the
  // replicas are filled worker to worker at commit.
  const std::vector<float> pushed = Values(kK * kN, -1.5f);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(StageRows(nodes_[i].stub.get(), 2, 2, 4 * i, 4 * i + 4,
                          Rows(pushed, 4 * i, 4 * i + 4, kN), 3),
                IsOkAndHolds(kK / 2 * kN * 4));
  }
  for (int i = 0; i < 2; ++i) {
    CommitParamsRequest commit;
    commit.set_model("mm");
    commit.set_generation(2);
    commit.set_base_version(1);
    commit.set_version(2);
    commit.add_params("w");
    ParamPiece* fill = commit.add_fills();
    fill->set_param("w");
    SetBoxOf({{4 * (1 - i), 4 * (1 - i) + 4}, {0, kN}}, fill->mutable_box());
    fill->set_src_worker(1 - i);
    fill->set_src_generation(2);
    fill->set_src_version(2);
    grpc::ClientContext context;
    CommitParamsResponse response;
    ASSERT_OK(FromGrpcStatus(nodes_[i].stub->CommitParams(&context, commit, &response)));
    EXPECT_EQ(response.param_bytes(), kK * kN * 4);
    EXPECT_EQ(response.bytes_fetched(), kK / 2 * kN * 4);
  }
  for (int i = 0; i < 2; ++i) {
    for (int64_t r0 : {0, 4}) {
      EXPECT_THAT(ReadRows(nodes_[i].stub.get(), "mm", 2, 2, "w", r0, r0 + 4, kN),
                  IsOkAndHolds(Rows(pushed, r0, r0 + 4, kN)))
          << "worker " << i << " rows " << r0;
    }
    EXPECT_THAT(ReadRows(nodes_[i].stub.get(), "mm", 2, 2, "w", 2, 6, kN),
                StatusIs(absl::StatusCode::kOutOfRange, "not inside one held cell"));
  }
  // Execute picks the version: a program that outputs device 0's w cell.
  Program p;
  p.set_program_id("w-out");
  p.set_model("mm");
  p.set_generation(2);
  p.set_worker(0);
  auto* out = AddStep(&p)->mutable_output();
  out->set_buffer("param/w");
  SetBoxOf({{0, 4}, {0, kN}}, out->mutable_box());
  out->set_output("w");
  out->set_device(0);
  ASSERT_OK(Install(0, p));
  for (int64_t version : {1, 2, 0}) {
    ExecuteRequest request;
    request.set_program_id("w-out");
    request.set_request_id(absl::StrCat("v", version));
    request.set_param_version(version);
    grpc::ClientContext context;
    ExecuteResponse response;
    ASSERT_OK(FromGrpcStatus(nodes_[0].stub->Execute(&context, request, &response)));
    ASSERT_EQ(response.outputs_size(), 1);
    std::vector<float> got(4 * kN);
    ASSERT_EQ(response.outputs(0).data().size(), got.size() * 4);
    std::memcpy(got.data(), response.outputs(0).data().data(), got.size() * 4);
    EXPECT_EQ(got, Rows(version == 1 ? w_ : pushed, 0, 4, kN)) << "version " << version;
  }
  // Status reports each version with what a coordinator needs to adopt it.
  grpc::ClientContext status_context;
  WorkerStatusResponse status;
  ASSERT_OK(FromGrpcStatus(
      nodes_[0].stub->Status(&status_context, WorkerStatusRequest(), &status)));
  ASSERT_EQ(status.models_size(), 3);  // generation 1, generation 2 versions 1 and 2
  for (const auto& m : status.models()) {
    EXPECT_EQ(m.mesh().axes_size(), 1);
    EXPECT_EQ(m.device_workers_size(), 2);
    EXPECT_EQ(m.replica_devices_size(), m.generation() == 2 ? 1 : 0);
  }
  // Unload one version; the other keeps serving.
  UnloadModelRequest unload;
  unload.set_model("mm");
  unload.set_generation(2);
  unload.set_version(2);
  grpc::ClientContext unload_context;
  UnloadModelResponse unloaded;
  ASSERT_OK(FromGrpcStatus(nodes_[0].stub->UnloadModel(&unload_context, unload, &unloaded)));
  EXPECT_THAT(ReadRows(nodes_[0].stub.get(), "mm", 2, 0, "w", 0, 4, kN),
              IsOkAndHolds(Rows(w_, 0, 4, kN)));
}

TEST_F(WorkerServiceTest, BigCellIsReadInMegabyteChunksAndMovedByLoad) {
  constexpr int64_t kRows = 1024, kCols = 640;  // a cell is 1.25 MiB
  const std::string json = absl::StrReplaceAll(
      R"({'name': 'big', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 3,
  'inputs': {'x': {'shape': [-1, 1024], 'sharding': [null, 'x']}},
  'params': {'e': {'shape': [1024, 640], 'sharding': ['x', null], 'init': 'uniform',
                   'scale': 1.0}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'e',
              'out_sharding': ['x', null]}],
  'outputs': ['y']})",
      {{"'", "\""}});
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    LoadModelResponse response;
    ASSERT_OK(FromGrpcStatus(nodes_[i].stub->LoadModel(
        &context, LoadOf("big", json, 1, {i}, {0, 1}, nodes_), &response)));
  }
  InitSpec uniform;
  uniform.kind = InitKind::kUniform;
  uniform.scale = 1.0;
  ASSERT_OK_AND_ASSIGN(Tensor seed, InitializeBox(uniform, 3, "e", {kRows, kCols},
                                                  Box::FromShape({kRows, kCols}),
                                                  DType::kFloat32));
  const std::vector<float> e = seed.ToFloatVector();
  int chunks = 0;
  EXPECT_THAT(ReadRows(nodes_[0].stub.get(), "big", 1, 1, "e", 0, 512, kCols, &chunks),
              IsOkAndHolds(Rows(e, 0, 512, kCols)));
  EXPECT_EQ(chunks, 2);
  // Worker 1 takes both devices: device 0's cell over gRPC, its own shared.
  LoadModelRequest load = LoadOf("big", json, 2, {0, 1}, {1, 1}, nodes_);
  AddSource(&load, "e", 0, 512, kCols, 0, 1, 1);
  AddSource(&load, "e", 512, 1024, kCols, 1, 1, 1);
  grpc::ClientContext context;
  LoadModelResponse response;
  ASSERT_OK(FromGrpcStatus(nodes_[1].stub->LoadModel(&context, load, &response)));
  EXPECT_EQ(response.bytes_fetched(), 512 * kCols * 4);
  EXPECT_EQ(response.bytes_local(), 512 * kCols * 4);
  EXPECT_THAT(ReadRows(nodes_[1].stub.get(), "big", 2, 1, "e", 0, 512, kCols),
              IsOkAndHolds(Rows(e, 0, 512, kCols)));
  EXPECT_THAT(ReadRows(nodes_[1].stub.get(), "big", 2, 1, "e", 512, 1024, kCols),
              IsOkAndHolds(Rows(e, 512, 1024, kCols)));
}

TEST_F(WorkerServiceTest, ParamRpcErrorsOverGrpc) {
  EXPECT_THAT(ReadRows(nodes_[0].stub.get(), "mm", 1, 3, "w", 0, 4, kN),
              StatusIs(absl::StatusCode::kNotFound, "version 3"));
  EXPECT_THAT(ReadRows(nodes_[0].stub.get(), "mm", 1, 1, "q", 0, 4, kN),
              StatusIs(absl::StatusCode::kNotFound, "param 'q'"));
  // A chunk of the wrong size ends the stream with the receiver's error.
  EXPECT_THAT(StageRows(nodes_[0].stub.get(), 1, 2, 0, 4, Values(3, 1.f), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "total_bytes 12"));
  ASSERT_OK(StageRows(nodes_[0].stub.get(), 1, 2, 0, 2, Values(2 * kN, 1.f), 2).status());
  CommitParamsRequest commit;
  commit.set_model("mm");
  commit.set_generation(1);
  commit.set_base_version(1);
  commit.set_version(2);
  commit.add_params("w");
  grpc::ClientContext context;
  CommitParamsResponse response;
  EXPECT_THAT(FromGrpcStatus(nodes_[0].stub->CommitParams(&context, commit, &response)),
              StatusIs(absl::StatusCode::kInvalidArgument, "12 of 24 elements missing"));
  AbortParamsRequest abort;
  abort.set_model("mm");
  abort.set_generation(1);
  abort.set_version(2);
  for (int round = 0; round < 2; ++round) {  // idempotent
    grpc::ClientContext abort_context;
    AbortParamsResponse aborted;
    ASSERT_OK(FromGrpcStatus(nodes_[0].stub->AbortParams(&abort_context, abort, &aborted)));
  }
  EXPECT_THAT(ReadRows(nodes_[0].stub.get(), "mm", 1, 2, "w", 0, 2, kN),
              StatusIs(absl::StatusCode::kNotFound, "neither resident nor being staged"));
  ExecuteRequest request;
  request.set_program_id("absent");
  request.set_request_id("r");
  grpc::ClientContext execute_context;
  ExecuteResponse executed;
  EXPECT_THAT(FromGrpcStatus(nodes_[0].stub->Execute(&execute_context, request, &executed)),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace meshserve
