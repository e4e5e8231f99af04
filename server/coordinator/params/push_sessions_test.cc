// Push sessions over the fake cluster (fake workers hold real boxes): ranks
// that begin and join one session, put their own boxes (staged on the
// workers the plan names, or relayed by StageThrough), and one commit by any
// of them; the cover check, expiry, aborts and the errors.
#include "server/coordinator/params/push_sessions.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/status_macros.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::testing::HasSubstr;
using ::meshserve::testing::StatusIs;

// offset: rows split over the data axis; w: columns split; s: replicated;
// q and k: the two halves of checkpoint tensor c_attn [4, 8]; s_twin: a
// checkpoint name tied to s; attn.bias: a checkpoint buffer nothing reads.
constexpr char kModel[] = R"({"name": "pm", "mesh": {"data": -1}, "dtype": "float32",
  "checkpoint": "pm.safetensors",
  "params": {
    "s": {"shape": [5], "sharding": [null]},
    "w": {"shape": [6, 8], "sharding": [null, "data"]},
    "offset": {"shape": [8, 4], "sharding": ["data", null]},
    "q": {"shape": [4, 4], "sharding": [null, "data"], "from": "c_attn"},
    "k": {"shape": [4, 4], "sharding": ["data", null], "from": "c_attn", "from_offset": [0, 4]}
  },
  "checkpoint_tied": {"s_twin": "s"}, "checkpoint_ignored": ["attn.bias"],
  "inputs": {"x": {"shape": [8, 4], "sharding": ["data", null]}},
  "layers": [{"name": "y", "op": "relu", "input": "x"}], "outputs": ["y"]})";

std::string RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = static_cast<float>(rng() % 100000) / 7.0f;
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Elements `box` of a row-major float32 array of `shape` held in `full`.
std::string Cut(const std::string& full, const std::vector<int64_t>& shape, const Box& box) {
  std::string out(static_cast<size_t>(box.NumElements() * 4), '\0');
  EXPECT_OK(ExtractBoxBytes(full.data(), shape, 4, box, out.data()));
  return out;
}

Box MakeBox(const std::vector<int64_t>& offset, const std::vector<int64_t>& shape) {
  Box b;
  for (size_t d = 0; d < shape.size(); ++d) {
    b.mutable_dims().push_back(Interval{offset[d], offset[d] + shape[d]});
  }
  return b;
}

class PushSessionsTest : public ::testing::Test {
 protected:
  void Start(int workers = 2) {
    static std::atomic<int> counter{0};
    CoordinatorOptions options;
    options.replicas = 1;
    options.max_live_versions = max_live_versions_;
    options.run_control_thread = false;  // the test ticks
    options.model_dir =
        absl::StrCat(::testing::TempDir(), "/push_sessions_", getpid(), "_", counter++);
    ASSERT_TRUE(std::filesystem::create_directories(options.model_dir));
    {
      std::ofstream file(options.model_dir + "/pm.json");
      file << kModel;
    }
    options.placement_retry_backoff = absl::Milliseconds(1);
    options.heartbeat_interval = absl::Seconds(30);
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, cluster_.Factory(),
                                             std::make_unique<FakeModelCompiler>()));
    for (int i = 0; i < workers; ++i) {
      ASSERT_OK(coordinator_
                    ->RegisterWorker(absl::StrCat("127.0.0.1:", 9300 + i), 2, 1 << 30, -1)
                    .status());
    }
    coordinator_->Tick();
    ASSERT_EQ(Status().version, 1);
    sessions_ = std::make_unique<PushSessions>(
        [this](const std::string& model) { return coordinator_->BeginPush(model); },
        PushSessions::Options{kTtl, [this] { return now_; }, /*reaper=*/false});
    for (const char* name : {"offset", "w", "s"}) {
      const ParamDef& p = *Status().model->FindParam(name);
      shapes_[name] = p.shape;
      full_[name] = RandomFloats(Box::FromShape(p.shape).NumElements(), name[0]);
    }
    shapes_["c_attn"] = {4, 8};
    full_["c_attn"] = RandomFloats(32, 99);
    shapes_["q"] = shapes_["k"] = {4, 4};
    full_["q"] = Cut(full_["c_attn"], {4, 8}, MakeBox({0, 0}, {4, 4}));
    full_["k"] = Cut(full_["c_attn"], {4, 8}, MakeBox({0, 4}, {4, 4}));
  }
  ModelStatus Status() {
    absl::StatusOr<ModelStatus> s = coordinator_->GetModelStatus("pm");
    EXPECT_OK(s.status());
    return *s;
  }
  // Plans the put of box offset + shape of `name` (values from full_) and
  // stages every piece as a client does: on the worker named, or through
  // StageThrough.
  absl::StatusOr<PutPlan> Put(const std::string& id, const std::string& name,
                              std::vector<int64_t> offset, std::vector<int64_t> shape,
                              bool through = false) {
    MS_ASSIGN_OR_RETURN(PutPlan plan, sessions_->PlanPut("pm", id, name, offset, shape));
    if (offset.empty()) offset.assign(shapes_[name].size(), 0);  // the defaults
    if (shape.empty()) shape = shapes_[name];
    const std::string data = Cut(full_[name], shapes_[name], MakeBox(offset, shape));
    std::vector<RelayChunk> relay;
    for (const PutRoute& piece : plan.pieces) {
      EXPECT_EQ(piece.dtype, DType::kFloat32);
      std::string bytes = Cut(data, shape, MakeBox(piece.src_offset, piece.box.shape()));
      const int64_t total = static_cast<int64_t>(bytes.size());
      if (through) {
        relay.push_back(RelayChunk{id, piece.worker, piece.param, BoxToIr(piece.box), total, 0,
                                   std::move(bytes)});
        continue;
      }
      MS_ASSIGN_OR_RETURN(std::unique_ptr<StageParamsWriter> writer,
                          cluster_.Worker(piece.worker)->StageParams(absl::Seconds(5)));
      MS_RETURN_IF_ERROR(writer->Write(StageChunkIr{"pm", plan.session.generation,
                                                    plan.session.version, piece.param,
                                                    BoxToIr(piece.box), total, 0,
                                                    std::move(bytes)}));
      MS_RETURN_IF_ERROR(writer->Finish().status());
    }
    if (through) {
      size_t next = 0;
      MS_ASSIGN_OR_RETURN(int64_t relayed, sessions_->StageThrough([&](RelayChunk* c) {
        if (next == relay.size()) return false;
        *c = relay[next++];
        return true;
      }));
      EXPECT_EQ(relayed, MakeBox(offset, shape).NumElements() * 4);
    }
    return plan;
  }
  // Every holder (primary or replica) of every cell of `name` at `version`
  // holds full_[name] there.
  void ExpectHeld(const std::string& name, int64_t version) {
    std::shared_ptr<const Placement> p = Status().placement;
    ASSERT_OK_AND_ASSIGN(std::vector<CellHolders> cells,
                         PlacementCells(*Status().model->FindParam(name), *p));
    for (const CellHolders& cell : cells) {
      const ReadParamIr read{"pm", p->generation, version, name, BoxToIr(cell.box)};
      for (const std::vector<int64_t>* group : {&cell.primaries, &cell.replicas}) {
        for (int64_t id : *group) {
          absl::StatusOr<std::string> got = cluster_.Worker(id)->ReadParam(read, {});
          ASSERT_OK(got.status());
          EXPECT_EQ(*got, Cut(full_[name], shapes_[name], cell.box))
              << name << " " << cell.box << " on worker " << id;
        }
      }
    }
  }
  std::map<std::string, std::string> Pull() {
    std::map<std::string, std::string> out;
    EXPECT_OK(coordinator_->PullParams("pm", {}, [&](PullChunk c) {
      out[c.param] += c.data;
      return absl::OkStatus();
    }));
    return out;
  }
  int Aborts() {
    int n = 0;
    for (int64_t id : Status().placement->WorkerIds()) n += cluster_.Worker(id)->abort_calls();
    return n;
  }
  int64_t StagedBytes() {
    int64_t n = 0;
    for (int64_t id : Status().placement->WorkerIds()) n += cluster_.Worker(id)->staged_bytes();
    return n;
  }

  static constexpr absl::Duration kTtl = absl::Seconds(300);
  int max_live_versions_ = 3;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<PushSessions> sessions_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::string> full_;
};

TEST_F(PushSessionsTest, TwoRanksPutHalvesAndTheJoinerCommits) {
  Start(/*workers=*/4);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  EXPECT_THAT(a.push_id, ::testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(a.version, 2);
  EXPECT_EQ(a.generation, Status().generation);
  EXPECT_EQ(a.ttl_s, 300);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo b, sessions_->JoinPush("pm", a.push_id));
  EXPECT_EQ(b.push_id, a.push_id);
  EXPECT_EQ(b.version, 2);
  // Rank a: the first rows of offset, the first columns of w; rank b the rest.
  ASSERT_OK(Put(a.push_id, "offset", {0, 0}, {3, 4}).status());
  ASSERT_OK(Put(a.push_id, "w", {0, 0}, {6, 3}).status());
  ASSERT_OK(Put(b.push_id, "offset", {3, 0}, {5, 4}).status());
  ASSERT_OK(Put(b.push_id, "w", {0, 3}, {6, 5}).status());
  ASSERT_OK(Put(b.push_id, "s", {}, {}).status());
  const int64_t total = (32 + 48 + 5) * 4;
  EXPECT_EQ(StagedBytes(), total);  // each put byte staged once
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", b.push_id));
  EXPECT_EQ(r.version, 2);
  EXPECT_THAT(r.params, ::testing::ElementsAre("offset", "w", "s"));
  EXPECT_EQ(r.bytes_to_workers, total);
  EXPECT_GT(r.bytes_filled, 0);  // replicas filled worker to worker
  EXPECT_EQ(Status().version, 2);
  std::map<std::string, std::string> pulled = Pull();
  for (const char* name : {"offset", "w", "s"}) {
    EXPECT_EQ(pulled[name], full_[name]) << name;
    ExpectHeld(name, 2);
  }
  EXPECT_EQ(sessions_->size(), 0);
  EXPECT_THAT(sessions_->JoinPush("pm", a.push_id).status(),
              StatusIs(absl::StatusCode::kNotFound, a.push_id));
  EXPECT_OK(sessions_->BeginPush("pm").status());  // the admission was released
}

// Ranks in threads of their own put at once (the registry and the session
// are shared); one commit covers every rank's rows.
TEST_F(PushSessionsTest, RanksPutAtOnce) {
  Start(/*workers=*/4);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  std::vector<std::thread> ranks;
  for (int64_t rank = 0; rank < 4; ++rank) {
    ranks.emplace_back([&, rank] {
      ASSERT_OK_AND_ASSIGN(PushSessionInfo mine, sessions_->JoinPush("pm", a.push_id));
      EXPECT_OK(Put(mine.push_id, "offset", {2 * rank, 0}, {2, 4}).status());
      EXPECT_OK(Put(mine.push_id, "w", {0, 2 * rank}, {6, 2}).status());
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", a.push_id));
  EXPECT_EQ(r.bytes_to_workers, (32 + 48) * 4);
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["offset"], full_["offset"]);
  EXPECT_EQ(pulled["w"], full_["w"]);
  ExpectHeld("w", 2);
}

// Overlapping puts (a replicated param from both ranks, rows put twice) all
// route each cell to one holder, so the worker sees every copy and compares
// them (the fake, as a real worker, accepts identical bytes).
TEST_F(PushSessionsTest, OverlappingPutsOfACellMeetOnOneHolder) {
  Start(/*workers=*/4);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK_AND_ASSIGN(PushSessionInfo b, sessions_->JoinPush("pm", a.push_id));
  ASSERT_OK_AND_ASSIGN(PutPlan pa, Put(a.push_id, "offset", {0, 0}, {8, 4}));
  ASSERT_OK_AND_ASSIGN(PutPlan pb, Put(b.push_id, "offset", {}, {}));
  ASSERT_OK_AND_ASSIGN(PutPlan sa, Put(a.push_id, "s", {}, {}));
  ASSERT_OK_AND_ASSIGN(PutPlan sb, Put(b.push_id, "s", {0}, {5}));
  ASSERT_OK_AND_ASSIGN(PutPlan mid, Put(b.push_id, "offset", {1, 1}, {6, 2}));
  ASSERT_OK_AND_ASSIGN(std::vector<CellHolders> cells,
                       PlacementCells(*Status().model->FindParam("offset"), *Status().placement));
  std::set<int64_t> holders;
  for (const CellHolders& cell : cells) {
    std::set<int64_t> seen;
    for (const PutPlan* plan : {&pa, &pb, &mid}) {
      for (const PutRoute& r : plan->pieces) {
        if (cell.box.Contains(r.box)) seen.insert(r.worker);
        EXPECT_FALSE(!cell.box.Contains(r.box) && !Intersect(cell.box, r.box).IsEmpty())
            << "piece " << r.box << " crosses cell " << cell.box;
      }
    }
    EXPECT_EQ(seen.size(), 1u) << "cell " << cell.box;
    holders.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(holders.size(), cells.size());  // the cells' holders are spread
  // The mid box's pieces say where they start inside it.
  for (const PutRoute& r : mid.pieces) {
    EXPECT_EQ(r.src_offset[0], r.box.dims()[0].begin - 1);
    EXPECT_EQ(r.src_offset[1], 0);
  }
  ASSERT_EQ(sa.pieces.size(), 1u);
  ASSERT_EQ(sb.pieces.size(), 1u);
  EXPECT_EQ(sa.pieces[0].worker, sb.pieces[0].worker);
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", a.push_id));
  EXPECT_EQ(r.version, 2);
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["offset"], full_["offset"]);
  EXPECT_EQ(pulled["s"], full_["s"]);
  ExpectHeld("offset", 2);
  ExpectHeld("s", 2);
}

// Overlapping puts whose bytes differ refuse the commit (the holder compares
// them), and nothing changes.
TEST_F(PushSessionsTest, OverlappingPutsThatDifferRefuseTheCommit) {
  Start(/*workers=*/4);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK(Put(a.push_id, "s", {}, {}).status());
  const std::string pushed = full_["s"];
  full_["s"][0] ^= 1;  // rank b's copy differs in one byte
  ASSERT_OK(Put(a.push_id, "s", {}, {}).status());
  full_["s"] = pushed;
  EXPECT_THAT(sessions_->CommitPush("pm", a.push_id),
              StatusIs(absl::StatusCode::kInvalidArgument, "different bytes"));
  EXPECT_EQ(Status().version, 1);
  EXPECT_THAT(sessions_->JoinPush("pm", a.push_id).status(),
              StatusIs(absl::StatusCode::kNotFound, a.push_id));
}

TEST_F(PushSessionsTest, AnUncoveredElementRefusesTheCommitAndEndsTheSession) {
  Start();
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK(Put(a.push_id, "offset", {0, 0}, {8, 4}).status());
  ASSERT_OK(Put(a.push_id, "w", {0, 0}, {6, 4}).status());
  ASSERT_OK(Put(a.push_id, "w", {0, 4}, {5, 4}).status());  // row 5 of columns 4.. missing
  const int aborts = Aborts();
  EXPECT_THAT(sessions_->CommitPush("pm", a.push_id),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'w': the pushed boxes cover 44 of 48 elements; box [5:6, 4:8] "
                       "is missing"));
  EXPECT_GT(Aborts(), aborts);  // aborted on every worker
  EXPECT_EQ(Status().version, 1);
  EXPECT_THAT(sessions_->JoinPush("pm", a.push_id).status(),
              StatusIs(absl::StatusCode::kNotFound, a.push_id));
  EXPECT_THAT(sessions_->CommitPush("pm", a.push_id).status(),
              StatusIs(absl::StatusCode::kNotFound, a.push_id));
  ASSERT_OK_AND_ASSIGN(PushSessionInfo next, sessions_->BeginPush("pm"));
  EXPECT_THAT(sessions_->CommitPush("pm", next.push_id).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no params"));
}

TEST_F(PushSessionsTest, AnUntouchedSessionExpiresAbortedAndFreed) {
  Start();
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK_AND_ASSIGN(PutPlan plan, Put(a.push_id, "s", {}, {}));
  ASSERT_EQ(plan.pieces.size(), 1u);
  const PutRoute& piece = plan.pieces[0];
  const ReadParamIr staged{"pm", a.generation, a.version, "s", BoxToIr(piece.box)};
  ASSERT_OK_AND_ASSIGN(std::string bytes,
                       cluster_.Worker(piece.worker)->ReadParam(staged, absl::ZeroDuration()));
  EXPECT_EQ(bytes, full_["s"]);
  now_ += kTtl - absl::Seconds(1);
  EXPECT_EQ(sessions_->ExpireIdle(), 0);
  ASSERT_OK(sessions_->JoinPush("pm", a.push_id).status());  // touches it
  now_ += kTtl - absl::Seconds(1);
  EXPECT_EQ(sessions_->ExpireIdle(), 0);
  const int aborts = Aborts();
  now_ += absl::Seconds(1);
  EXPECT_EQ(sessions_->ExpireIdle(), 1);
  EXPECT_EQ(Aborts(), aborts + 2);  // AbortParams on both workers
  EXPECT_THAT(cluster_.Worker(piece.worker)->ReadParam(staged, absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kNotFound));  // the staged bytes are gone
  for (auto s : {sessions_->JoinPush("pm", a.push_id).status(),
                 sessions_->PlanPut("pm", a.push_id, "s", {}, {}).status(),
                 sessions_->CommitPush("pm", a.push_id).status()}) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound,
                            absl::StrCat("push session '", a.push_id, "' not found")));
  }
  EXPECT_EQ(Status().version, 1);
  EXPECT_OK(sessions_->BeginPush("pm").status());  // the admission was released
}

TEST_F(PushSessionsTest, JoinOfAnUnknownIdIsNotFound) {
  Start();
  EXPECT_THAT(sessions_->JoinPush("pm", "0123abcd").status(),
              StatusIs(absl::StatusCode::kNotFound, "push session '0123abcd' not found"));
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  EXPECT_THAT(sessions_->JoinPush("other", a.push_id).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "a push to model 'pm', not 'other'"));
  EXPECT_THAT(sessions_->AbortPush("pm", "feed"),
              StatusIs(absl::StatusCode::kNotFound, "'feed'"));
}

TEST_F(PushSessionsTest, AdmissionIsAsForPushes) {
  Start();
  EXPECT_THAT(sessions_->BeginPush("nope").status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  EXPECT_THAT(sessions_->BeginPush("pm").status(),
              StatusIs(absl::StatusCode::kAborted, "in progress"));
  EXPECT_THAT(coordinator_->BeginPush("pm").status(), StatusIs(absl::StatusCode::kAborted));
  const int aborts = Aborts();
  ASSERT_OK(sessions_->AbortPush("pm", a.push_id));
  EXPECT_EQ(Aborts(), aborts + 2);
  EXPECT_THAT(sessions_->AbortPush("pm", a.push_id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(sessions_->BeginPush("pm").status());
}

TEST_F(PushSessionsTest, BadPutsNameTheValueAndLeaveTheSession) {
  Start();
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  EXPECT_THAT(sessions_->PlanPut("pm", a.push_id, "nope", {}, {}).status(),
              StatusIs(absl::StatusCode::kNotFound, "'nope'"));
  EXPECT_THAT(sessions_->PlanPut("pm", a.push_id, "w", {0}, {6}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'w' has rank 2 (shape [6, 8]); offset [0] has 1 entries"));
  EXPECT_THAT(sessions_->PlanPut("pm", a.push_id, "w", {4, 0}, {3, 8}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the box at offset [4, 0] of shape [3, 8] is not inside it (dim 0)"));
  ASSERT_OK(Put(a.push_id, "s", {}, {}).status());
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", a.push_id));
  EXPECT_THAT(r.params, ::testing::ElementsAre("s"));
  EXPECT_EQ(Pull()["s"], full_["s"]);
}

// The commit's deadline is the committing call's: past it, while a sequence
// holds the only version the bound allows, the commit is refused and the
// session ends.
TEST_F(PushSessionsTest, TheCommitWaitsForTheVersionBoundUntilItsDeadline) {
  max_live_versions_ = 1;
  Start();
  std::shared_ptr<const Placement> sequence = Status().placement;  // holds version 1
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK(Put(a.push_id, "s", {}, {}).status());
  EXPECT_THAT(sessions_->CommitPush("pm", a.push_id, absl::Now() + absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "--max_live_versions=1"));
  EXPECT_EQ(Status().version, 1);
  EXPECT_THAT(sessions_->JoinPush("pm", a.push_id).status(),
              StatusIs(absl::StatusCode::kNotFound));
  sequence.reset();
  ASSERT_OK_AND_ASSIGN(PushSessionInfo b, sessions_->BeginPush("pm"));
  ASSERT_OK(Put(b.push_id, "s", {}, {}).status());
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", b.push_id));
  EXPECT_EQ(r.version, 2);
}

// A checkpoint tensor's boxes go to the params that read it, a tied name to
// its twin's holder, and a buffer nothing reads is ignored with a note.
TEST_F(PushSessionsTest, CheckpointNamesPutTheParamsTheyFeed) {
  Start(/*workers=*/2);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK_AND_ASSIGN(PushSessionInfo b, sessions_->JoinPush("pm", a.push_id));
  // Rank a: columns 2..6 of c_attn (half of q, half of k); rank b the rest.
  ASSERT_OK_AND_ASSIGN(PutPlan mid, Put(a.push_id, "c_attn", {0, 2}, {4, 4}));
  std::set<std::string> params;
  for (const PutRoute& r : mid.pieces) params.insert(r.param);
  EXPECT_THAT(params, ::testing::ElementsAre("k", "q"));
  ASSERT_OK(Put(b.push_id, "c_attn", {0, 0}, {4, 2}).status());
  ASSERT_OK(Put(b.push_id, "c_attn", {0, 6}, {4, 2}).status());
  ASSERT_OK_AND_ASSIGN(PutPlan s, Put(a.push_id, "s", {}, {}));
  ASSERT_OK_AND_ASSIGN(PutPlan twin, sessions_->PlanPut("pm", b.push_id, "s_twin", {}, {}));
  ASSERT_EQ(twin.pieces.size(), 1u);
  EXPECT_EQ(twin.pieces[0].param, "s");
  EXPECT_EQ(twin.pieces[0].worker, s.pieces[0].worker);
  ASSERT_OK_AND_ASSIGN(PutPlan bias, sessions_->PlanPut("pm", b.push_id, "attn.bias", {}, {}));
  EXPECT_TRUE(bias.pieces.empty());
  EXPECT_THAT(bias.note, HasSubstr("attn.bias"));
  EXPECT_THAT(sessions_->PlanPut("pm", a.push_id, "c_attn", {0, 6}, {4, 4}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "not inside it"));
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", b.push_id));
  EXPECT_THAT(r.params, ::testing::UnorderedElementsAre("q", "k", "s"));
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["q"], full_["q"]);
  EXPECT_EQ(pulled["k"], full_["k"]);
  EXPECT_EQ(pulled["s"], full_["s"]);
  ExpectHeld("q", 2);
  ExpectHeld("k", 2);
}

// Puts relayed through the coordinator (StageThrough) commit the same bytes.
TEST_F(PushSessionsTest, StageThroughRelaysToTheWorkersNamed) {
  Start(/*workers=*/4);
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, sessions_->BeginPush("pm"));
  ASSERT_OK(Put(a.push_id, "w", {0, 0}, {6, 8}, /*through=*/true).status());
  ASSERT_OK(Put(a.push_id, "offset", {0, 0}, {8, 4}, /*through=*/true).status());
  EXPECT_EQ(StagedBytes(), (48 + 32) * 4);
  RelayChunk bad{a.push_id, 77, "s", BoxToIr(Box::FromShape({5})), 20, 0, std::string(20, 'x')};
  bool sent = false;
  auto once = [&](RelayChunk* c) {
    if (sent) return false;
    *c = bad;
    sent = true;
    return true;
  };
  EXPECT_THAT(sessions_->StageThrough(once).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker 77 is not on the placement"));
  sent = false;
  bad.push_id = "beef";
  EXPECT_THAT(sessions_->StageThrough(once).status(),
              StatusIs(absl::StatusCode::kNotFound, "'beef'"));
  ASSERT_OK_AND_ASSIGN(PushResult r, sessions_->CommitPush("pm", a.push_id));
  EXPECT_EQ(r.version, 2);
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["w"], full_["w"]);
  EXPECT_EQ(pulled["offset"], full_["offset"]);
  ExpectHeld("w", 2);
}

// The coordinator's own registry (--push_ttl_s) is wired to its pushes.
TEST_F(PushSessionsTest, TheCoordinatorsRegistryCommits) {
  Start();
  PushSessions& own = coordinator_->push_sessions();
  ASSERT_OK_AND_ASSIGN(PushSessionInfo a, own.BeginPush("pm"));
  EXPECT_EQ(a.ttl_s, 300);
  EXPECT_THAT(sessions_->BeginPush("pm").status(), StatusIs(absl::StatusCode::kAborted));
  ASSERT_OK_AND_ASSIGN(PutPlan plan, own.PlanPut("pm", a.push_id, "s", {}, {}));
  ASSERT_EQ(plan.pieces.size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StageParamsWriter> writer,
                       cluster_.Worker(plan.pieces[0].worker)->StageParams(absl::Seconds(5)));
  ASSERT_OK(writer->Write(StageChunkIr{"pm", a.generation, a.version, "s",
                                       BoxToIr(plan.pieces[0].box), 20, 0, full_["s"]}));
  ASSERT_OK(writer->Finish().status());
  ASSERT_OK_AND_ASSIGN(PushResult r, own.CommitPush("pm", a.push_id));
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(Pull()["s"], full_["s"]);
}

}  // namespace
}  // namespace meshserve
