// ParamPulls over fake holders: a GPT-2-shaped model whose q/k/v read
// columns of a fused c_attn [4, 12], sharded over 2 workers with replicas.
// Each fake worker serves ReadParam only for a box inside a cell it holds
// (primary or replica, PlacementCells) at the placement's generation and a
// version it holds; its values are the c_attn element values (row * 12 +
// column + 1000 * version), so an assembled box is compared against the same
// box computed straight from that formula.
#include "server/coordinator/params/param_pull.h"

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/program/ir_conv.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

constexpr char kModel[] = R"({
  "name": "g", "mesh": {"model": 2}, "checkpoint": "x.safetensors",
  "inputs": {"x": {"shape": [2, 4], "sharding": [null, null]}},
  "params": {
    "wte.weight": {"shape": [6, 4], "sharding": ["model", null]},
    "h.0.attn.q.weight": {"shape": [4, 4], "sharding": [null, "model"], "from": "c_attn", "from_offset": [0, 0]},
    "h.0.attn.k.weight": {"shape": [4, 4], "sharding": [null, "model"], "from": "c_attn", "from_offset": [0, 4]},
    "h.0.attn.v.weight": {"shape": [4, 4], "sharding": [null, "model"], "from": "c_attn", "from_offset": [0, 8]}
  },
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"],
  "checkpoint_tied": {"lm_head.weight": "wte.weight"},
  "checkpoint_ignored": ["h.0.attn.bias"]
})";

// The reference values: c_attn(i, j) of a version; wte(i, j) likewise.
float CAttn(int64_t i, int64_t j, int64_t version) {
  return static_cast<float>(i * 12 + j + 1000 * version);
}
float Value(const ParamDef& p, int64_t i, int64_t j, int64_t version) {
  if (p.name == "wte.weight") return static_cast<float>(-(i * 4 + j) - 1000 * version);
  return CAttn(i + p.from_offset[0], j + p.from_offset[1], version);
}

class HolderFake : public FakeWorkerClient {
 public:
  HolderFake(int64_t id, const ModelFile* model) : FakeWorkerClient(id), id_(id), model_(model) {}
  absl::StatusOr<std::string> ReadParam(const ReadParamIr& call, absl::Duration) override {
    absl::MutexLock lock(&fake_mu_);
    ++reads;
    if (held_versions.count(call.version) == 0 || call.generation != placement->generation) {
      return absl::NotFoundError(absl::StrCat("version ", call.version, " not held"));
    }
    const ParamDef* p = model_->FindParam(call.param);
    if (p == nullptr) return absl::NotFoundError("no param " + call.param);
    Box box = UncheckedBoxFromIr(call.box);
    absl::StatusOr<std::vector<CellHolders>> cells = PlacementCells(*p, *placement);
    if (!cells.ok()) return cells.status();
    bool inside = false;
    for (const CellHolders& cell : *cells) {
      std::set<int64_t> ids(cell.primaries.begin(), cell.primaries.end());
      ids.insert(cell.replicas.begin(), cell.replicas.end());
      inside = inside || (ids.count(id_) > 0 && cell.box.Contains(box));
    }
    if (!inside) return absl::NotFoundError(absl::StrCat("box ", box.ToString(), " not held"));
    std::vector<float> out;
    for (int64_t i = box[0].begin; i < box[0].end; ++i) {
      for (int64_t j = box[1].begin; j < box[1].end; ++j) {
        out.push_back(Value(*p, i, j, call.version));
      }
    }
    return std::string(reinterpret_cast<const char*>(out.data()), out.size() * 4);
  }
  absl::Mutex fake_mu_;
  std::shared_ptr<const Placement> placement;
  std::set<int64_t> held_versions = {1};
  int reads = 0;

 private:
  const int64_t id_;
  const ModelFile* model_;
};

class ParamPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = std::make_shared<const ModelFile>(*ParseModelFile(kModel, ""));
    Placement p = *ComputePlacement(*model_, {{0, "w0:1"}, {1, "w1:1"}}, 7, /*replicas=*/1);
    current_ = std::make_shared<const Placement>(p);
    for (int64_t id : {0, 1}) {
      workers_[id] = std::make_shared<HolderFake>(id, model_.get());
      workers_[id]->placement = current_;
    }
    PullSource source;
    source.model = [this](const std::string& name)
        -> absl::StatusOr<std::shared_ptr<const ModelFile>> {
      if (name != "g") return absl::NotFoundError("no model " + name);
      return model_;
    };
    source.current = [this](const std::string&) { return current_; };
    source.held_versions = [this](const std::string&) { return held_; };
    source.pin = [this](const std::string&, int64_t v) -> std::shared_ptr<const void> {
      return v == 1 ? retired_v1_ : nullptr;
    };
    source.alive = [this](int64_t id) { return dead_.count(id) == 0; };
    source.client = [this](int64_t id, const std::string&)
        -> absl::StatusOr<std::shared_ptr<WorkerClient>> { return workers_.at(id); };
    PullOptions options;
    options.expiry_thread = expiry_thread_;
    options.now = [this] { return now_; };
    options.chunk_bytes = 40;  // 10 floats: several slabs
    options.max_leases = 3;
    pulls_ = std::make_unique<ParamPulls>(std::move(source), std::move(options));
  }

  // The box [offset, offset + shape) of c_attn at `version`, from the formula.
  static std::vector<float> CAttnBox(std::vector<int64_t> offset, std::vector<int64_t> shape,
                                     int64_t version) {
    std::vector<float> out;
    for (int64_t i = 0; i < shape[0]; ++i) {
      for (int64_t j = 0; j < shape[1]; ++j) {
        out.push_back(CAttn(offset[0] + i, offset[1] + j, version));
      }
    }
    return out;
  }

  // The plan's pieces read from their workers, placed at dst_offset; counts
  // how often each element is written.
  std::vector<float> Assemble(const PullPlan& plan, std::vector<int>* writes) {
    std::vector<float> out(plan.shape[0] * plan.shape[1], -1);
    writes->assign(out.size(), 0);
    for (const PullPlanPiece& piece : plan.pieces) {
      absl::StatusOr<std::string> bytes = workers_.at(piece.worker_id)->ReadParam(
          {"g", plan.generation, plan.version, piece.param, BoxToIr(piece.box)},
          absl::Seconds(1));
      EXPECT_TRUE(bytes.ok()) << bytes.status() << " worker " << piece.worker_id;
      if (!bytes.ok()) continue;
      const int64_t cols = piece.box[1].size();
      for (int64_t i = 0; i < piece.box[0].size(); ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t at = (piece.dst_offset[0] + i) * plan.shape[1] + piece.dst_offset[1] + j;
          std::memcpy(&out[at], bytes->data() + (i * cols + j) * 4, 4);
          ++(*writes)[at];
        }
      }
    }
    return out;
  }

  std::vector<float> Stream(const BoxPullRequest& request, std::vector<BoxPullChunk>* chunks) {
    std::string all;
    absl::Status s = pulls_->PullBox(request, [&](BoxPullChunk c) {
      all += c.data;
      chunks->push_back(std::move(c));
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out(all.size() / 4);
    std::memcpy(out.data(), all.data(), all.size());
    return out;
  }

  std::shared_ptr<const ModelFile> model_;
  std::shared_ptr<const Placement> current_;
  std::map<int64_t, std::shared_ptr<HolderFake>> workers_;
  std::map<int64_t, int64_t> held_;
  std::shared_ptr<const int> retired_v1_ = std::make_shared<const int>(1);  // stands for v1
  std::set<int64_t> dead_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  bool expiry_thread_ = false;
  std::unique_ptr<ParamPulls> pulls_;
};

TEST_F(ParamPullTest, PlanOfAFusedBoxSpanningQAndKTilesTheBox) {
  ASSERT_OK_AND_ASSIGN(PullPlan plan, pulls_->PlanPull({"g", "c_attn", {1, 2}, {3, 5}, 0}));
  EXPECT_EQ(plan.generation, 7);
  EXPECT_EQ(plan.version, 1);
  EXPECT_EQ(plan.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(plan.dtype, DType::kFloat32);
  std::set<std::string> params;
  for (const PullPlanPiece& piece : plan.pieces) params.insert(piece.param);
  EXPECT_EQ(params, (std::set<std::string>{"h.0.attn.q.weight", "h.0.attn.k.weight"}));
  std::vector<int> writes;
  EXPECT_EQ(Assemble(plan, &writes), CAttnBox({1, 2}, {3, 5}, 1));
  EXPECT_THAT(writes, ::testing::Each(1));
  // Both workers serve some of it (the least-loaded holder gets each cut).
  std::set<int64_t> used;
  for (const PullPlanPiece& piece : plan.pieces) used.insert(piece.worker_id);
  EXPECT_EQ(used.size(), 2u);
  EXPECT_OK(pulls_->EndPull("g", plan.lease_id));
}

TEST_F(ParamPullTest, StreamedBoxMatchesInSmallChunks) {
  std::vector<BoxPullChunk> chunks;
  EXPECT_EQ(Stream({"g", "c_attn", {0, 3}, {4, 7}, 0}, &chunks), CAttnBox({0, 3}, {4, 7}, 1));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_TRUE(chunks[0].first);
  EXPECT_EQ(chunks[0].shape, (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(chunks[0].total_bytes, 4 * 7 * 4);
  EXPECT_EQ(chunks[0].version, 1);
  int64_t offset = 0;
  for (const BoxPullChunk& c : chunks) {
    EXPECT_EQ(c.byte_offset, offset);
    EXPECT_LE(c.data.size(), 40u);
    offset += static_cast<int64_t>(c.data.size());
  }
  EXPECT_EQ(pulls_->active_leases(), 0);  // a stream opens no lease
  // A whole param by a tied name, streamed: wte's values.
  chunks.clear();
  std::vector<float> head = Stream({"g", "lm_head.weight", {}, {}, 0}, &chunks);
  ASSERT_EQ(head.size(), 24u);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(head[i], -i - 1000) << i;
}

TEST_F(ParamPullTest, DeadHolderIsAvoided) {
  dead_.insert(0);
  ASSERT_OK_AND_ASSIGN(PullPlan plan, pulls_->PlanPull({"g", "c_attn", {}, {}, 0}));
  for (const PullPlanPiece& piece : plan.pieces) EXPECT_EQ(piece.worker_id, 1);
  std::vector<int> writes;
  EXPECT_EQ(Assemble(plan, &writes), CAttnBox({0, 0}, {4, 12}, 1));
  std::vector<BoxPullChunk> chunks;
  EXPECT_EQ(Stream({"g", "c_attn", {}, {}, 0}, &chunks), CAttnBox({0, 0}, {4, 12}, 1));
  EXPECT_EQ(workers_[0]->reads, 0);
}

TEST_F(ParamPullTest, LeasePinsTheVersionUntilEndOrExpiry) {
  const long before = current_.use_count();
  ASSERT_OK_AND_ASSIGN(PullPlan plan, pulls_->PlanPull({"g", "wte.weight", {}, {}, 0}));
  EXPECT_EQ(plan.lease_s, 60);
  EXPECT_EQ(current_.use_count(), before + 1);  // the lease holds the placement
  // A push makes version 2 current; version 1 stays readable through the lease.
  auto v2 = std::make_shared<Placement>(*current_);
  v2->version = 2;
  std::shared_ptr<const Placement> v1 = current_;
  current_ = v2;
  for (auto& [id, w] : workers_) {
    w->held_versions = {1, 2};
    w->placement = v2;
  }
  std::vector<BoxPullChunk> chunks;
  std::vector<float> old = Stream({"g", "c_attn", {0, 0}, {1, 3}, 1}, &chunks);
  EXPECT_EQ(old, CAttnBox({0, 0}, {1, 3}, 1));
  EXPECT_EQ(chunks[0].version, 1);
  EXPECT_EQ(Stream({"g", "c_attn", {0, 0}, {1, 3}, 0}, &chunks), CAttnBox({0, 0}, {1, 3}, 2));
  // Expiry drops the lease; nothing else holds version 1.
  now_ += absl::Seconds(61);
  pulls_->ExpireLeases();
  EXPECT_EQ(pulls_->active_leases(), 0);
  v1.reset();
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {}, {}, 1}).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       "model 'g' version 1 is not held any more; versions held: 2 (current)"));
  EXPECT_THAT(pulls_->EndPull("g", plan.lease_id),
              StatusIs(absl::StatusCode::kNotFound, plan.lease_id));
  // A version some sequence holds is read on the current layout, and the
  // lease pins it (the source's pin: the retired placement) until EndPull.
  held_[1] = 2;
  ASSERT_OK_AND_ASSIGN(PullPlan again, pulls_->PlanPull({"g", "c_attn", {}, {}, 1}));
  EXPECT_EQ(retired_v1_.use_count(), 2);
  std::vector<int> writes;
  EXPECT_EQ(Assemble(again, &writes), CAttnBox({0, 0}, {4, 12}, 1));
  ASSERT_OK(pulls_->EndPull("g", again.lease_id));
  EXPECT_EQ(retired_v1_.use_count(), 1);
}

TEST_F(ParamPullTest, Errors) {
  EXPECT_THAT(pulls_->PlanPull({"g", "h.0.attn.bias", {}, {}, 0}).status(),
              StatusIs(absl::StatusCode::kNotFound, "the server holds no bytes of it"));
  EXPECT_THAT(pulls_->PlanPull({"g", "nope", {}, {}, 0}).status(),
              StatusIs(absl::StatusCode::kNotFound, "tensor 'nope'"));
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {0, 10}, {1, 3}, 0}).status(),
              StatusIs(absl::StatusCode::kOutOfRange, "offset [0, 10] of shape [1, 3]"));
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {}, {}, -1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "version -1"));
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {}, {}, 5}).status(),
              StatusIs(absl::StatusCode::kNotFound, "version 5 is not held"));
  dead_ = {0, 1};
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {}, {}, 0}).status(),
              StatusIs(absl::StatusCode::kUnavailable, "no live holder"));
  dead_.clear();
  for (int i = 0; i < 3; ++i) EXPECT_OK(pulls_->PlanPull({"g", "c_attn", {}, {}, 0}).status());
  EXPECT_THAT(pulls_->PlanPull({"g", "c_attn", {}, {}, 0}).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "3 pull leases are active"));
}

// Plans, streams and ends from several threads beside the expiry thread (for
// TSAN): every lease ends, every stream is the reference box.
class ParamPullThreadsTest : public ParamPullTest {
 protected:
  void SetUp() override {
    expiry_thread_ = true;
    ParamPullTest::SetUp();
  }
};

TEST_F(ParamPullThreadsTest, ConcurrentPullsAndExpiry) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<PullPlan> plan = pulls_->PlanPull({"g", "c_attn", {0, t}, {2, 5}, 0});
        if (!plan.ok() && plan.status().code() != absl::StatusCode::kResourceExhausted) {
          ++failures;
        }
        std::string all;
        absl::Status s = pulls_->PullBox({"g", "c_attn", {1, t}, {3, 6}, 0},
                                         [&](BoxPullChunk c) {
                                           all += c.data;
                                           return absl::OkStatus();
                                         });
        std::vector<float> got(all.size() / 4);
        std::memcpy(got.data(), all.data(), all.size());
        if (!s.ok() || got != CAttnBox({1, t}, {3, 6}, 1)) ++failures;
        if (plan.ok() && !pulls_->EndPull("g", plan->lease_id).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pulls_->active_leases(), 0);
}

}  // namespace
}  // namespace meshserve
