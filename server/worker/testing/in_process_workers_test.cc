// InProcessWorkers through the proto API (as the compiler's tests use it): a
// 2-worker matmul with a reduce-scatter, slices chunked in memory, and a
// failure on one worker cancelling the request on the other.
#include "server/worker/testing/in_process_workers.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/worker_service.pb.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;

constexpr int64_t kM = 4, kK = 8, kN = 6;

// w is all ones: y[m, n] = sum_k x[m, k].
std::string ModelJson() {
  return absl::StrReplaceAll(
      R"({'name': 'mm', 'mesh': {'x': 2}, 'dtype': 'float32', 'seed': 1,
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, 'x']}},
  'params': {'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'ones'}},
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': ['x', null]}],
  'outputs': ['y']})",
      {{"'", "\""}});
}

template <typename M>
void SetBox(std::vector<std::pair<int64_t, int64_t>> dims, M* box) {
  for (auto [b, e] : dims) {
    box->add_begin(b);
    box->add_end(e);
  }
}

Program MatmulProgram(int64_t worker, bool send) {
  const int64_t other = 1 - worker, half = kM / 2;
  Program p;
  p.set_program_id("mm");
  p.set_model("mm");
  p.set_generation(3);
  p.set_worker(worker);
  auto* dot = p.add_steps()->mutable_compute();
  dot->set_op("dot_general");
  dot->add_inputs("in/x");
  dot->add_inputs("param/w");
  dot->set_output("partial");
  SetBox({{0, kM}, {0, kN}}, dot->mutable_out_box());
  dot->add_lhs_contracting(1);
  dot->add_rhs_contracting(0);
  dot->set_partial(true);
  dot->set_device(worker);
  if (send) {
    auto* s = p.add_steps()->mutable_send();
    s->set_buffer("partial");
    SetBox({{other * half, (other + 1) * half}, {0, kN}}, s->mutable_box());
    s->set_dst_worker(other);
    s->set_dst_device(other);
    s->set_tag(absl::StrCat(worker, "->", other));
    s->set_device(worker);
  }
  auto* r = p.add_steps()->mutable_recv();
  r->set_buffer("partial");
  SetBox({{worker * half, (worker + 1) * half}, {0, kN}}, r->mutable_box());
  r->set_tag(absl::StrCat(other, "->", worker));
  r->set_accumulate(true);
  r->set_src_worker(other);
  r->set_device(worker);
  auto* o = p.add_steps()->mutable_output();
  o->set_buffer("partial");
  SetBox({{worker * half, (worker + 1) * half}, {0, kN}}, o->mutable_box());
  o->set_output("y");
  o->set_device(worker);
  return p;
}

LoadModelRequest Load() {
  LoadModelRequest load;
  load.set_model("mm");
  load.set_generation(3);
  load.set_model_json(ModelJson());
  auto* axis = load.mutable_mesh()->add_axes();
  axis->set_name("x");
  axis->set_size(2);
  load.add_device_workers(0);
  load.add_device_workers(1);
  return load;
}

std::map<int64_t, ExecuteRequest> Requests(const std::vector<float>& x, const std::string& id) {
  std::map<int64_t, ExecuteRequest> requests;
  for (int w = 0; w < 2; ++w) {
    ExecuteRequest& r = requests[w];
    r.set_program_id("mm");
    r.set_request_id(id);
    r.set_deadline_ms(500);
    TensorSlice* in = r.add_inputs();
    in->set_name("x");
    in->set_device(w);
    SetBox({{0, kM}, {w * kK / 2, (w + 1) * kK / 2}}, in->mutable_box());
    in->set_dtype(FLOAT32);
    std::vector<float> part;
    for (int64_t m = 0; m < kM; ++m) {
      for (int64_t k = w * kK / 2; k < (w + 1) * kK / 2; ++k) part.push_back(x[m * kK + k]);
    }
    in->set_data(part.data(), part.size() * 4);
  }
  return requests;
}

TEST(InProcessWorkersTest, RunsAProgramAcrossWorkersWithChunkedSlices) {
  InProcessWorkers::Options options;
  options.chunk_bytes = 7;
  InProcessWorkers cluster(2, options);
  ASSERT_OK_AND_ASSIGN(int64_t bytes, cluster.LoadModel(Load()));
  EXPECT_EQ(bytes, kK * kN * 4);
  ASSERT_OK(cluster.InstallPrograms({MatmulProgram(0, true), MatmulProgram(1, true)}));
  std::vector<float> x(kM * kK);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i % 7) - 1.f;
  ASSERT_OK_AND_ASSIGN(auto responses, cluster.Execute(Requests(x, "r")));
  ASSERT_EQ(responses.size(), 2u);
  for (const auto& [w, response] : responses) {
    ASSERT_EQ(response.outputs_size(), 1);
    const TensorSlice& y = response.outputs(0);
    std::vector<float> rows(y.data().size() / 4);
    std::memcpy(rows.data(), y.data().data(), y.data().size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t m = y.box().begin(0) + static_cast<int64_t>(i) / kN;
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) want += x[m * kK + k];
      EXPECT_NEAR(rows[i], want, 1e-5) << "worker " << w << " element " << i;
    }
  }
  EXPECT_EQ(cluster.transport().slices_sent(), 2);
}

TEST(InProcessWorkersTest, AFailureOnOneWorkerIsReportedAndTheOtherIsCancelled) {
  InProcessWorkers cluster(2);
  ASSERT_OK(cluster.LoadModel(Load()).status());
  // Worker 1 never sends: worker 0's receive waits; worker 1 gets a bad input.
  ASSERT_OK(cluster.InstallPrograms({MatmulProgram(0, true), MatmulProgram(1, false)}));
  std::map<int64_t, ExecuteRequest> requests = Requests(std::vector<float>(kM * kK, 1.f), "bad");
  requests[1].mutable_inputs(0)->mutable_data()->pop_back();
  requests[0].set_deadline_ms(30000);
  absl::Time start = absl::Now();
  EXPECT_THAT(cluster.Execute(std::move(requests)),
              StatusIs(absl::StatusCode::kInvalidArgument, "byte length"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // cancelled, not timed out
}

TEST(InProcessWorkersTest, BadWorkerIdsAreInvalidArgument) {
  InProcessWorkers cluster(2);
  LoadModelRequest load = Load();
  load.set_device_workers(1, 5);
  EXPECT_THAT(cluster.LoadModel(load), StatusIs(absl::StatusCode::kInvalidArgument, "worker 5"));
  Program p = MatmulProgram(0, true);
  p.set_worker(2);
  EXPECT_THAT(cluster.InstallPrograms({p}), StatusIs(absl::StatusCode::kInvalidArgument));
}

// The typed IR cannot hold an unknown op or a step without a kind: ShardWorker
// rejects both at install, where the proto becomes IR.
TEST(InProcessWorkersTest, UnknownComputeOpAndStepWithoutKindAreRejectedAtInstall) {
  InProcessWorkers cluster(2);
  Program conv = MatmulProgram(0, true);
  conv.mutable_steps(0)->mutable_compute()->set_op("conv");
  EXPECT_THAT(cluster.InstallPrograms({conv}),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown compute op 'conv'"));
  Program empty = MatmulProgram(0, true);
  empty.add_steps();
  EXPECT_THAT(cluster.InstallPrograms({empty}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no kind"));
}

}  // namespace
}  // namespace meshserve
