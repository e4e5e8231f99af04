// Parameters as state on the fake cluster: pushes (routing, exact cover,
// errors, atomic version switch), pulls, scale steps and adoption after a
// coordinator restart.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/status_macros.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

// y = x + offset on the fake workers (fake_worker_client.h).
constexpr char kModel[] = R"({
  "name": "pm", "mesh": {"data": -1}, "dtype": "float32",
  "inputs": {"x": {"shape": [8, 4], "sharding": ["data", null]}},
  "params": {"offset": {"shape": [8, 4], "sharding": ["data", null]},
             "w": {"shape": [6, 8], "sharding": [null, "data"]},
             "s": {"shape": [5], "sharding": [null]}},
  "layers": [{"name": "y", "op": "relu", "input": "x"}],
  "outputs": ["y"]
})";

std::string MakeModelDir() {
  static std::atomic<int> counter{0};
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/param_models_", getpid(), "_", counter++);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/pm.json") << kModel;
  return dir;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Float bytes (so y = x + offset stays comparable): value = base + i.
std::string FloatRamp(int n, float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

PushChunk Chunk(const std::string& param, std::vector<int64_t> offset,
                std::vector<int64_t> shape, std::string data, int64_t byte_offset = 0,
                std::optional<DType> dtype = DType::kFloat32) {
  return PushChunk{"pm", param, std::move(offset), std::move(shape), dtype, byte_offset,
                   std::move(data)};
}

// A row-major slice [rows) of a [r, c] param's full bytes.
std::string Rows(const std::string& full, int64_t cols, int64_t begin, int64_t end,
                 int64_t elem = 4) {
  return full.substr(begin * cols * elem, (end - begin) * cols * elem);
}

class ParamTest : public ::testing::Test {
 protected:
  void Start(int replicas = 1, bool control_thread = false) {
    if (model_dir_.empty()) model_dir_ = MakeModelDir();
    CoordinatorOptions options;
    options.model_dir = model_dir_;
    options.run_control_thread = control_thread;  // its period: 15 s
    options.heartbeat_interval = absl::Seconds(30);
    options.placement_retry_backoff = absl::Milliseconds(1);
    options.replicas = replicas;
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, cluster_.Factory(),
                                             std::make_unique<FakeModelCompiler>()));
  }
  // Start() with workers 0 and 1 registered and placed on.
  void StartOnTwo(int replicas = 1) {
    Start(replicas);
    AddWorker(0);
    AddWorker(1);
    coordinator_->Tick();
  }
  int64_t AddWorker(int i, int64_t previous = -1) {
    absl::StatusOr<int64_t> id = coordinator_->RegisterWorker(
        absl::StrCat("127.0.0.1:", 9100 + i), 2, 1 << 30, previous);
    EXPECT_OK(id.status());
    return *id;
  }
  ModelStatus Status() {
    absl::StatusOr<ModelStatus> s = coordinator_->GetModelStatus("pm");
    EXPECT_OK(s.status());
    return *s;
  }
  const ParamDef& Param(const std::string& name) {
    model_ = Status().model;
    return *model_->FindParam(name);
  }
  absl::StatusOr<PushResult> Push(std::vector<PushChunk> chunks) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
    for (PushChunk& c : chunks) MS_RETURN_IF_ERROR(push->Add(std::move(c)));
    return push->Finish();
  }
  // The whole current value of each param, checking the chunk metadata.
  std::map<std::string, std::string> Pull(std::vector<std::string> names = {}) {
    std::map<std::string, std::string> out;
    const int64_t version = Status().version;
    EXPECT_OK(coordinator_->PullParams("pm", names, [&](PullChunk c) {
      if (c.byte_offset == 0) {
        EXPECT_EQ(c.version, version);
        EXPECT_EQ(c.shape, Param(c.param).shape);
        EXPECT_EQ(c.dtype, DType::kFloat32);
        EXPECT_EQ(c.total_bytes, Box::FromShape(c.shape).NumElements() * 4);
      }
      EXPECT_EQ(static_cast<int64_t>(out[c.param].size()), c.byte_offset);
      out[c.param] += c.data;
      return absl::OkStatus();
    }));
    return out;
  }
  std::string Initial(const std::string& name) {
    const ParamDef& p = Param(name);
    return FakeParamBytes(p, Box::FromShape(p.shape));
  }
  // A full push of every param: offset in two boxes, the others in one.
  std::vector<PushChunk> FullPush(const std::string& offset, const std::string& w,
                                  const std::string& s) {
    std::vector<PushChunk> c;
    c.push_back(Chunk("offset", {0, 0}, {3, 4}, Rows(offset, 4, 0, 3)));
    c.push_back(Chunk("offset", {3, 0}, {5, 4}, Rows(offset, 4, 3, 5).substr(0, 30)));
    c.push_back(Chunk("offset", {}, {}, Rows(offset, 4, 3, 8).substr(30), 30));
    c.push_back(Chunk("w", {0, 0}, {6, 8}, w));
    c.push_back(Chunk("s", {0}, {5}, s));
    return c;
  }
  // Each worker's held cells of version `version` equal `full` there.
  void ExpectHeld(const std::string& name, const std::string& full, int64_t version) {
    std::shared_ptr<const Placement> p = Status().placement;
    const ParamDef& param = Param(name);
    ASSERT_OK_AND_ASSIGN(std::vector<CellHolders> cells, PlacementCells(param, *p));
    ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromBytes(param.dtype, param.shape, full));
    const BoxTensor whole{Box::FromShape(param.shape), std::move(t)};
    for (const CellHolders& cell : cells) {
      std::vector<int64_t> holders = cell.primaries;
      holders.insert(holders.end(), cell.replicas.begin(), cell.replicas.end());
      for (int64_t id : holders) {
        ASSERT_OK_AND_ASSIGN(std::string got,
                             cluster_.Worker(id)->ReadParam(
                                 {"pm", p->generation, version, name, BoxToIr(cell.box)},
                                 absl::ZeroDuration()));
        ASSERT_OK_AND_ASSIGN(std::string want, ExtractBox(whole, cell.box));
        EXPECT_EQ(got, want) << name << " " << cell.box << " on worker " << id;
      }
    }
  }
  // Version 2 holds these values: pulled, and on every holder of every cell.
  void ExpectVersion2(const std::string& offset, const std::string& w, const std::string& s) {
    std::map<std::string, std::string> pulled = Pull();
    EXPECT_EQ(pulled["offset"], offset);
    EXPECT_EQ(pulled["w"], w);
    EXPECT_EQ(pulled["s"], s);
    ExpectHeld("offset", offset, 2);
    ExpectHeld("w", w, 2);
    ExpectHeld("s", s, 2);
  }
  int64_t StagedBytes() {
    int64_t n = 0;
    for (int64_t id : Status().placement->WorkerIds()) n += cluster_.Worker(id)->staged_bytes();
    return n;
  }

  std::string model_dir_;
  FakeCluster cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<const ModelFile> model_;
};

TEST_F(ParamTest, PullBeforeAnyPushGivesTheLoadedValues) {
  StartOnTwo();
  ASSERT_EQ(Status().version, 1);
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["offset"], Initial("offset"));
  EXPECT_EQ(pulled["w"], Initial("w"));
  EXPECT_EQ(pulled["s"], Initial("s"));
  EXPECT_EQ(Pull({"w"}).size(), 1u);
  EXPECT_THAT(coordinator_->PullParams("pm", {"nope"}, [](PullChunk) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kNotFound, "'nope'"));
}

TEST_F(ParamTest, PushSendsEachByteToOneHolderAndFillsTheOthers) {
  StartOnTwo();
  const int64_t generation = Status().generation;
  const std::string offset = FloatRamp(32, 100), w = RandomBytes(6 * 8 * 4, 1),
                    s = RandomBytes(20, 2);
  ASSERT_OK_AND_ASSIGN(PushResult r, Push(FullPush(offset, w, s)));
  EXPECT_EQ(r.version, 2);
  const int64_t total = 32 * 4 + 6 * 8 * 4 + 20;
  EXPECT_EQ(r.bytes_received, total);
  EXPECT_EQ(r.bytes_to_workers, total);
  EXPECT_EQ(StagedBytes(), total);  // each byte to exactly one worker
  // Two workers with replicas: every cell is on both, so the other gets it.
  EXPECT_EQ(r.bytes_filled, total);
  EXPECT_THAT(r.params, ::testing::ElementsAre("offset", "w", "s"));
  EXPECT_EQ(Status().version, 2);
  EXPECT_EQ(Status().generation, generation);
  ExpectVersion2(offset, w, s);
  // The old version goes when nothing holds it; the generation stays.
  coordinator_->Tick();
  for (int64_t id : {0, 1}) {
    EXPECT_THAT(cluster_.Worker(id)->versions("pm", generation), ::testing::ElementsAre(2));
  }
}

// Boxes are routed in row slabs as their bytes arrive, whatever the chunk
// size (here 12 bytes: never whole rows of offset or w); the fills still name
// one piece per box and cell, so the replicas get whole pieces.
TEST_F(ParamTest, BoxesStreamInRowsWhateverTheChunkSizes) {
  Start();
  for (int i = 0; i < 4; ++i) AddWorker(i);
  coordinator_->Tick();
  ASSERT_EQ(Status().placement->WorkerIds().size(), 4u);
  const std::string offset = FloatRamp(32, 5), w = RandomBytes(6 * 8 * 4, 8),
                    s = RandomBytes(20, 9);
  std::vector<PushChunk> chunks;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::string& all) {
    for (size_t at = 0; at < all.size(); at += 12) {
      chunks.push_back(at == 0 ? Chunk(name, std::vector<int64_t>(shape.size(), 0), shape,
                                       all.substr(0, 12))
                               : Chunk(name, {}, {}, all.substr(at, 12),
                                       static_cast<int64_t>(at)));
    }
  };
  add("offset", {8, 4}, offset);
  add("w", {6, 8}, w);
  add("s", {5}, s);
  ASSERT_OK_AND_ASSIGN(PushResult r, Push(std::move(chunks)));
  const int64_t total = 32 * 4 + 6 * 8 * 4 + 20;
  EXPECT_EQ(r.bytes_to_workers, total);
  EXPECT_EQ(StagedBytes(), total);
  ExpectVersion2(offset, w, s);
  size_t fills = 0, want = 0;
  int64_t want_filled = 0;
  for (int64_t id : Status().placement->WorkerIds()) {
    for (const CommitParamsIr& c : cluster_.Worker(id)->commit_calls()) fills += c.fills.size();
  }
  for (const char* name : {"offset", "w", "s"}) {
    ASSERT_OK_AND_ASSIGN(std::vector<CellHolders> cells,
                         PlacementCells(Param(name), *Status().placement));
    for (const CellHolders& cell : cells) {
      if (cell.box.IsEmpty()) continue;
      const size_t others = cell.primaries.size() + cell.replicas.size() - 1;
      want += others;
      want_filled += static_cast<int64_t>(others) * cell.box.NumElements() * 4;
    }
  }
  EXPECT_EQ(fills, want);
  EXPECT_EQ(r.bytes_filled, want_filled);
}

// The control loop ticks every 15 s here: the old version goes at once
// because the push's end wakes the loop (its buffers are then free for the
// next push), not at the next periodic tick.
TEST_F(ParamTest, TheEndOfAPushUnloadsTheVersionItRetired) {
  Start(/*replicas=*/1, /*control_thread=*/true);
  AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  const int64_t generation = Status().generation;
  ASSERT_OK(Push({Chunk("s", {0}, {5}, RandomBytes(20, 5))}).status());
  EXPECT_EQ(Status().version, 2);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline &&
         cluster_.Worker(0)->versions("pm", generation) != std::vector<int64_t>{2}) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (int64_t id : {0, 1}) {
    EXPECT_THAT(cluster_.Worker(id)->versions("pm", generation), ::testing::ElementsAre(2));
  }
}

TEST_F(ParamTest, PartialPushKeepsTheOtherParams) {
  StartOnTwo(/*replicas=*/0);
  const std::string s = RandomBytes(20, 3);
  ASSERT_OK_AND_ASSIGN(PushResult r, Push({Chunk("s", {0}, {5}, s)}));
  EXPECT_EQ(r.bytes_to_workers, 20);
  EXPECT_EQ(r.bytes_filled, 20);  // s is replicated: the other worker fills it
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["s"], s);
  EXPECT_EQ(pulled["offset"], Initial("offset"));
  ExpectHeld("s", s, 2);
  ExpectHeld("w", Initial("w"), 2);
}

TEST_F(ParamTest, BadPushesChangeNothing) {
  StartOnTwo();
  const std::string offset = FloatRamp(32, 7);
  struct Case {
    std::vector<PushChunk> chunks;
    absl::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({{Chunk("offset", {0, 0}, {3, 4}, Rows(offset, 4, 0, 3))},
                   absl::StatusCode::kInvalidArgument,
                   "param 'offset': the pushed boxes cover 12 of 32 elements; box [3:8, 0:4] "
                   "is missing"});
  cases.push_back({{Chunk("offset", {0, 0}, {5, 4}, Rows(offset, 4, 0, 5)),
                    Chunk("offset", {4, 0}, {4, 4}, Rows(offset, 4, 4, 8))},
                   absl::StatusCode::kInvalidArgument,
                   "param 'offset': box [4:8, 0:4] overlaps box [0:5, 0:4]"});
  cases.push_back({{Chunk("offset", {6, 0}, {3, 4}, std::string(48, 'a'))},
                   absl::StatusCode::kInvalidArgument,
                   "box offset [6, 0] shape [3, 4] out of bounds of shape [8, 4]"});
  cases.push_back({{Chunk("offset", {0, 0}, {8, 4}, offset, 0, DType::kInt32)},
                   absl::StatusCode::kInvalidArgument, "dtype int32, expected float32"});
  cases.push_back({{Chunk("offset", {0, 0}, {8, 4}, offset + "xx")},
                   absl::StatusCode::kInvalidArgument, "130 bytes, expected 128"});
  cases.push_back({{Chunk("offset", {0, 0}, {8, 4}, offset.substr(0, 100))},
                   absl::StatusCode::kInvalidArgument, "stream ended after 100 of 128 bytes"});
  cases.push_back({{Chunk("offset", {0, 0}, {8, 4}, offset.substr(0, 100)),
                    Chunk("offset", {}, {}, offset.substr(100), 90)},
                   absl::StatusCode::kInvalidArgument, "byte_offset 90"});
  cases.push_back({{Chunk("nope", {0}, {1}, "abcd")}, absl::StatusCode::kNotFound,
                   "model 'pm' has no param 'nope'"});
  int aborts = 0;
  for (Case& c : cases) {
    EXPECT_THAT(Push(std::move(c.chunks)), StatusIs(c.code, (c.message)));
    EXPECT_EQ(Status().version, 1);
    EXPECT_EQ(Pull()["offset"], Initial("offset"));
    const int now = cluster_.Worker(0)->abort_calls();
    EXPECT_GT(now, aborts) << c.message;
    aborts = now;
  }
  EXPECT_THAT(coordinator_->BeginPush("other"), StatusIs(absl::StatusCode::kNotFound));
  // A good push still works after all of them.
  ASSERT_OK(Push({Chunk("offset", {0, 0}, {8, 4}, offset)}).status());
  EXPECT_EQ(Pull()["offset"], offset);
}

// A direct push: Plan routes each piece of a box and a held cell to every
// holder of the cell (teed, PushTarget::tee_direct); the "client" (this test)
// stages the pieces on the fake workers itself, and Finish commits with
// nothing left to fill.
class DirectPushTest : public ParamTest {
 protected:
  // The boxes of FullPush without data: offset in two boxes, w and s whole.
  static std::vector<PushChunk> Boxes() {
    return {Chunk("offset", {0, 0}, {3, 4}, ""), Chunk("offset", {3, 0}, {5, 4}, ""),
            Chunk("w", {0, 0}, {6, 8}, ""), Chunk("s", {0}, {5}, "")};
  }
  // Stages route `r` of `plan` with its bytes cut from `full` (the param's
  // whole value), in chunks of `chunk` bytes.
  void Stage(const PushPlan& plan, const PushPlan::Route& r, const std::string& param,
             const std::string& full, int64_t chunk = 20) {
    const ParamDef& def = Param(param);
    std::string bytes(static_cast<size_t>(r.piece.NumElements() * 4), '\0');
    ASSERT_OK(ExtractBoxBytes(full.data(), def.shape, 4, r.piece, bytes.data()));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<StageParamsWriter> writer,
                         cluster_.Worker(r.worker)->StageParams(absl::Seconds(5)));
    for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(chunk)) {
      ASSERT_OK(writer->Write(StageChunkIr{"pm", plan.generation, plan.version, param,
                                           BoxToIr(r.piece), static_cast<int64_t>(bytes.size()),
                                           static_cast<int64_t>(at),
                                           bytes.substr(at, static_cast<size_t>(chunk))}));
    }
    ASSERT_OK(writer->Finish().status());
  }
};

TEST_F(DirectPushTest, PlannedPiecesStagedByTheClientCommit) {
  StartOnTwo();
  const std::string offset = FloatRamp(32, 300), w = RandomBytes(6 * 8 * 4, 8),
                    s = RandomBytes(20, 9);
  const std::map<std::string, std::string> full = {{"offset", offset}, {"w", w}, {"s", s}};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
  const std::vector<PushChunk> boxes = Boxes();
  ASSERT_OK_AND_ASSIGN(PushPlan plan, push->Plan(boxes));
  EXPECT_EQ(plan.version, 2);
  EXPECT_EQ(plan.generation, Status().generation);
  // Per box and worker: its pieces lie in it, are disjoint and cover it (both
  // workers hold every cell, replicas 1, so each piece goes to both).
  std::map<int64_t, std::map<int, std::vector<Box>>> routed;  // worker -> box -> pieces
  for (const PushPlan::Route& r : plan.routes) {
    ASSERT_GE(r.box, 0);
    ASSERT_LT(r.box, static_cast<int>(boxes.size()));
    EXPECT_EQ(r.address, absl::StrCat("127.0.0.1:", 9100 + r.worker));
    std::vector<Box>& mine = routed[r.worker][r.box];
    for (const Box& other : mine) EXPECT_TRUE(Intersect(other, r.piece).IsEmpty());
    mine.push_back(r.piece);
  }
  ASSERT_EQ(routed.size(), 2u);
  EXPECT_EQ(routed.begin()->second, routed.rbegin()->second);
  std::map<int, std::vector<Box>> pieces = routed.begin()->second;
  for (size_t i = 0; i < boxes.size(); ++i) {
    Box box;
    for (size_t d = 0; d < boxes[i].shape.size(); ++d) {
      box.mutable_dims().push_back(
          Interval{boxes[i].offset[d], boxes[i].offset[d] + boxes[i].shape[d]});
    }
    int64_t volume = 0;
    for (const Box& p : pieces[static_cast<int>(i)]) {
      EXPECT_TRUE(box.Contains(p)) << p << " outside " << box;
      volume += p.NumElements();
    }
    EXPECT_EQ(volume, box.NumElements()) << "box " << i;
  }
  EXPECT_THAT(push->Add(Chunk("s", {0}, {5}, s)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is direct"));
  // Add refused the chunk and left the push dead: plan and stage a new one.
  push.reset();
  ASSERT_OK_AND_ASSIGN(push, coordinator_->BeginPush("pm"));
  ASSERT_OK_AND_ASSIGN(plan, push->Plan(boxes));
  for (const PushPlan::Route& r : plan.routes) {
    Stage(plan, r, boxes[static_cast<size_t>(r.box)].param,
          full.at(boxes[static_cast<size_t>(r.box)].param));
  }
  ASSERT_OK_AND_ASSIGN(PushResult result, push->Finish());
  const int64_t total = 32 * 4 + 6 * 8 * 4 + 20;
  EXPECT_EQ(result.version, 2);
  EXPECT_EQ(result.bytes_received, 0);  // no byte through the coordinator
  EXPECT_EQ(result.bytes_to_workers, 2 * total);  // each byte to both holders
  EXPECT_EQ(result.bytes_filled, 0);               // nothing left to fill
  EXPECT_EQ(StagedBytes(), 2 * total);
  EXPECT_EQ(Status().version, 2);
  ExpectVersion2(offset, w, s);
}

TEST_F(DirectPushTest, BadPlansAndMissingPiecesChangeNothing) {
  StartOnTwo();
  auto plan_of = [&](std::vector<PushChunk> boxes) -> absl::StatusOr<PushPlan> {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
    return push->Plan(boxes);
  };
  EXPECT_THAT(plan_of({Chunk("nope", {0}, {1}, "")}),
              StatusIs(absl::StatusCode::kNotFound, "model 'pm' has no param 'nope'"));
  EXPECT_THAT(plan_of({Chunk("offset", {0, 0}, {3, 4}, "")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "box [3:8, 0:4] is missing"));
  EXPECT_THAT(plan_of({Chunk("offset", {0, 0}, {8, 4}, "", 0, DType::kInt32)}),
              StatusIs(absl::StatusCode::kInvalidArgument, "dtype int32, expected float32"));
  EXPECT_THAT(plan_of({Chunk("offset", {0, 0}, {5, 4}, ""), Chunk("offset", {4, 0}, {4, 4}, "")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "overlaps box [0:5, 0:4]"));
  // Every piece but the last staged: the commit fails, nothing changes.
  const std::string offset = FloatRamp(32, 5);
  const int aborts = cluster_.Worker(0)->abort_calls();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
    ASSERT_OK_AND_ASSIGN(PushPlan plan, push->Plan({Chunk("offset", {0, 0}, {8, 4}, "")}));
    ASSERT_GE(plan.routes.size(), 2u);
    for (size_t i = 0; i + 1 < plan.routes.size(); ++i) Stage(plan, plan.routes[i], "offset", offset);
    EXPECT_THAT(push->Finish(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         "the pieces staged do not match the plan"));
  }
  EXPECT_GT(cluster_.Worker(0)->abort_calls(), aborts);
  EXPECT_EQ(Status().version, 1);
  EXPECT_EQ(Pull()["offset"], Initial("offset"));
  // The abort dropped what was staged: a whole push of the same pieces works
  // (a piece left staged would overlap).
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
  ASSERT_OK_AND_ASSIGN(PushPlan plan, push->Plan({Chunk("offset", {0, 0}, {8, 4}, "")}));
  for (const PushPlan::Route& r : plan.routes) Stage(plan, r, "offset", offset);
  ASSERT_OK(push->Finish().status());
  EXPECT_EQ(Pull()["offset"], offset);
}

TEST_F(ParamTest, FailedCommitAbortsEverywhere) {
  StartOnTwo();
  cluster_.Worker(1)->FailCommit(absl::ResourceExhaustedError("out of memory"));
  EXPECT_THAT(Push({Chunk("s", {0}, {5}, RandomBytes(20, 4))}),
              StatusIs(absl::StatusCode::kResourceExhausted, "out of memory"));
  EXPECT_EQ(Status().version, 1);
  EXPECT_EQ(Pull()["s"], Initial("s"));
  for (int64_t id : {0, 1}) {
    EXPECT_THAT(cluster_.Worker(id)->versions("pm", Status().generation),
                ::testing::ElementsAre(1));
  }
}

TEST_F(ParamTest, OnePushAtATime) {
  Start();
  AddWorker(0);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> first, coordinator_->BeginPush("pm"));
  EXPECT_THAT(coordinator_->BeginPush("pm"),
              StatusIs(absl::StatusCode::kAborted, "a push to model pm is in progress"));
  first.reset();  // dropped unfinished: aborted, released
  EXPECT_OK(coordinator_->BeginPush("pm").status());
}

TEST_F(ParamTest, MembershipChangeDuringPushAbortsIt) {
  Start();
  AddWorker(0);
  coordinator_->Tick();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamPush> push, coordinator_->BeginPush("pm"));
  ASSERT_OK(push->Add(Chunk("s", {0}, {5}, RandomBytes(20, 5))));
  AddWorker(1);
  coordinator_->Tick();  // scale step to two workers
  EXPECT_THAT(push->Finish(), StatusIs(absl::StatusCode::kAborted,
                                       "membership changed during the push; nothing changed"));
  push.reset();
  EXPECT_EQ(Status().version, 1);
  EXPECT_EQ(Status().placement->WorkerIds().size(), 2u);
  EXPECT_EQ(Pull()["s"], Initial("s"));
}

TEST_F(ParamTest, VersionSwitchIsAtomicForConcurrentRequests) {
  StartOnTwo();
  std::vector<std::string> versions = {Initial("offset")};
  for (int v = 0; v < 4; ++v) versions.push_back(FloatRamp(32, 1000.0f * (v + 1)));
  std::atomic<bool> stop{false};
  std::atomic<int> answers{0}, mixed{0}, failed{0};
  std::atomic<int> newest{0};  // index of the newest committed version
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      while (!stop) {
        const int floor = newest;
        InferRequest r;
        r.model = "pm";
        r.inputs.push_back({"x", DType::kFloat32, {8, 4}, std::string(128, '\0')});
        absl::StatusOr<InferResponse> got = coordinator_->Infer(r);
        if (!got.ok()) {
          ++failed;
          continue;
        }
        const std::string& y = got->outputs[0].tensor.bytes;
        auto it = std::find(versions.begin(), versions.end(), y);
        // One whole version, never older than what was committed before the start.
        if (it == versions.end() || it - versions.begin() < floor) ++mixed;
        ++answers;
      }
    });
  }
  for (int v = 1; v < static_cast<int>(versions.size()); ++v) {
    ASSERT_OK(Push({Chunk("offset", {0, 0}, {4, 4}, Rows(versions[v], 4, 0, 4)),
                    Chunk("offset", {4, 0}, {4, 4}, Rows(versions[v], 4, 4, 8))})
                  .status());
    newest = v;
    coordinator_->Tick();  // unloads versions no request holds
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_GT(answers, 0);
  EXPECT_EQ(mixed, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(Status().version, 5);
}

TEST_F(ParamTest, ScaleStepsMoveShardsAndRecordStats) {
  StartOnTwo();
  const std::string offset = FloatRamp(32, 3), w = RandomBytes(6 * 8 * 4, 6),
                    s = RandomBytes(20, 7);
  ASSERT_OK(Push(FullPush(offset, w, s)).status());
  AddWorker(2);
  AddWorker(3);
  coordinator_->Tick();  // scale up to 4 workers
  ModelStatus st = Status();
  EXPECT_EQ(st.version, 2);
  EXPECT_EQ(st.mesh, "mesh[data=4]");
  ASSERT_EQ(st.scale_steps.size(), 2u);
  const ScaleStep& up = st.scale_steps.back();
  EXPECT_EQ(up.generation, st.generation);
  EXPECT_EQ(up.workers, 4);
  EXPECT_EQ(up.stats.bytes_initialized, 0);
  EXPECT_GT(up.stats.bytes_moved, 0);
  EXPECT_EQ(up.stats.bytes_moved, up.stats.lower_bound_bytes);
  EXPECT_GT(up.stats.bytes_local, 0);
  ExpectHeld("offset", offset, 2);
  ExpectHeld("w", w, 2);
  ExpectHeld("s", s, 2);
  // A worker dies: its boxes come back from the replicas.
  cluster_.Worker(3)->SetDown(true);
  coordinator_->registry().MarkDead(3);
  coordinator_->Tick();
  st = Status();
  EXPECT_EQ(st.state, "ready");
  EXPECT_EQ(st.placement->WorkerIds().size(), 2u);  // 3 workers do not divide 8 rows
  EXPECT_EQ(st.scale_steps.back().stats.bytes_initialized, 0);
  std::map<std::string, std::string> pulled = Pull();
  EXPECT_EQ(pulled["offset"], offset);
  EXPECT_EQ(pulled["w"], w);
  EXPECT_EQ(pulled["s"], s);
}

TEST_F(ParamTest, WithoutReplicasALostPushedBoxIsAnError) {
  StartOnTwo(/*replicas=*/0);
  ASSERT_OK(Push({Chunk("offset", {0, 0}, {8, 4}, FloatRamp(32, 1))}).status());
  cluster_.Worker(1)->SetDown(true);
  coordinator_->registry().MarkDead(1);
  coordinator_->Tick();
  ModelStatus st = Status();
  EXPECT_THAT(st.state, HasSubstr("error: param offset box [4:8, 0:4] lost with worker 1; "
                                  "version 2 cannot be rebuilt"));
  EXPECT_THAT(coordinator_->BeginPush("pm"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ParamTest, NeverPushedModelReinitialisesALostBox) {
  StartOnTwo(/*replicas=*/0);
  cluster_.Worker(1)->SetDown(true);
  coordinator_->registry().MarkDead(1);
  coordinator_->Tick();
  ModelStatus st = Status();
  EXPECT_EQ(st.state, "ready");
  EXPECT_GT(st.scale_steps.back().stats.bytes_initialized, 0);
  EXPECT_EQ(Pull()["offset"], Initial("offset"));
}

TEST_F(ParamTest, DrainingWorkerHandsItsShardsOver) {
  Start(/*replicas=*/0);
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  const std::string offset = FloatRamp(32, 9);
  ASSERT_OK(Push({Chunk("offset", {0, 0}, {8, 4}, offset)}).status());
  coordinator_->Heartbeat(w1, /*draining=*/true);
  coordinator_->Tick();
  ModelStatus st = Status();
  EXPECT_THAT(st.placement->WorkerIds(), ::testing::ElementsAre(w0));
  EXPECT_EQ(st.scale_steps.back().stats.bytes_initialized, 0);
  EXPECT_GT(st.scale_steps.back().stats.bytes_moved, 0);
  EXPECT_EQ(Pull()["offset"], offset);
}

TEST_F(ParamTest, RestartedCoordinatorAdoptsWhatWorkersHold) {
  Start();
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  const std::string offset = FloatRamp(32, 11);
  ASSERT_OK(Push({Chunk("offset", {0, 0}, {8, 4}, offset)}).status());
  const int64_t generation = Status().generation;
  const size_t loads = cluster_.Worker(w0)->load_calls().size();
  coordinator_.reset();
  Start();  // a new coordinator, the same workers
  EXPECT_EQ(AddWorker(1, w1), w1);
  EXPECT_EQ(AddWorker(0, w0), w0);
  coordinator_->Tick();
  ModelStatus st = Status();
  EXPECT_EQ(st.state, "ready");
  EXPECT_EQ(st.generation, generation);
  EXPECT_EQ(st.version, 2);
  EXPECT_EQ(cluster_.Worker(w0)->load_calls().size(), loads);  // nothing loaded
  EXPECT_EQ(Pull()["offset"], offset);
  InferRequest r;
  r.model = "pm";
  r.inputs.push_back({"x", DType::kFloat32, {8, 4}, std::string(128, '\0')});
  ASSERT_OK_AND_ASSIGN(InferResponse y, coordinator_->Infer(r));
  EXPECT_EQ(y.outputs[0].tensor.bytes, offset);
  // A later scale step gets a new generation number and moves, not re-reads.
  AddWorker(2);
  AddWorker(3);
  coordinator_->Tick();
  st = Status();
  EXPECT_GT(st.generation, generation);
  EXPECT_EQ(st.scale_steps.back().stats.bytes_initialized, 0);
  EXPECT_EQ(Pull()["offset"], offset);
}

TEST_F(ParamTest, RestartedCoordinatorOnOtherWorkersMovesTheNewestVersion) {
  Start();
  const int64_t w0 = AddWorker(0), w1 = AddWorker(1);
  coordinator_->Tick();
  const std::string offset = FloatRamp(32, 13);
  ASSERT_OK(Push({Chunk("offset", {0, 0}, {8, 4}, offset)}).status());
  coordinator_.reset();
  Start();
  AddWorker(0, w0);
  AddWorker(1, w1);
  AddWorker(2);
  AddWorker(3);  // four workers: the old placement does not fit
  coordinator_->Tick();
  ModelStatus st = Status();
  EXPECT_EQ(st.state, "ready");
  EXPECT_EQ(st.version, 2);
  EXPECT_EQ(st.placement->WorkerIds().size(), 4u);
  ASSERT_FALSE(st.scale_steps.empty());
  EXPECT_EQ(st.scale_steps.back().stats.bytes_initialized, 0);
  EXPECT_EQ(Pull()["offset"], offset);
}

TEST_F(ParamTest, ForgottenWorkerThatKeptItsStateIsNotReplaced) {
  Start();
  const int64_t w0 = AddWorker(0);
  AddWorker(1);
  coordinator_->Tick();
  const int64_t generation = Status().generation;
  absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(AddWorker(0, w0), w0);  // re-registers (heartbeat said unknown)
  coordinator_->Tick();
  EXPECT_EQ(Status().generation, generation);
  cluster_.Worker(w0)->Restart();  // a new process: its state is gone
  absl::SleepFor(absl::Milliseconds(2));
  AddWorker(0, w0);
  coordinator_->Tick();
  EXPECT_GT(Status().generation, generation);
  EXPECT_EQ(Pull()["offset"], Initial("offset"));
}

}  // namespace
}  // namespace meshserve
