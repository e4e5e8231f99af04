// Params as state on WorkerEngines connected in memory: versions, held
// replicas, loading from sources (local share/copy, remote fetch), push
// staging and commit (chunks, overlaps, gaps, fills), ReadParam errors. Values
// are checked against the values pushed or InitializeBox, never against what
// the engine reports about itself.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/testing/program_ir_builder.h"
#include "common/sharding/box.h"
#include "common/tensor/initializers.h"
#include "server/worker/testing/in_memory_transport.h"
#include "server/worker/worker_engine.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;
using namespace ::meshserve::program_testing;  // NOLINT

constexpr int64_t kRows = 8, kCols = 6, kM = 3;
constexpr auto& B = IrBox;
const BoxIr kTop = IrBox({{0, 4}, {0, kCols}});     // w on device 0
const BoxIr kBottom = IrBox({{4, 8}, {0, kCols}});  // w on device 1
const BoxIr kR = IrBox({{0, kCols}});               // r, replicated

// w [8, 6] split over rows on mesh x=2, r [6] replicated.
const std::string& ModelJson() {
  static const std::string* json = new std::string(absl::StrReplaceAll(
      R"({'name': 'pm', 'dtype': 'float32', 'seed': 11, 'mesh': {'x': 2},
  'params': {'r': {'shape': [6], 'sharding': [null], 'init': 'uniform', 'scale': 2.0},
             'w': {'shape': [8, 6], 'sharding': ['x', null], 'init': 'normal', 'stddev': 1.0}},
  'inputs': {'x': {'shape': [-1, 8], 'sharding': [null, 'x']}}, 'outputs': ['y'],
  'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
              'out_sharding': ['x', null]}]})",
      {{"'", "\""}}));
  return *json;
}

LoadModelIr Load(int64_t generation, std::vector<int64_t> devices,
                 std::vector<int64_t> device_workers, std::vector<int64_t> replicas = {},
                 std::vector<ParamPieceIr> sources = {}) {
  LoadModelIr load;
  load.model = "pm";
  load.generation = generation;
  load.model_json = ModelJson();
  load.mesh = {MeshAxisIr{"x", 2, ""}};
  load.devices = std::move(devices);
  load.device_workers = std::move(device_workers);
  load.replica_devices = std::move(replicas);
  load.sources = std::move(sources);
  return load;
}

ParamPieceIr Piece(std::string param, BoxIr box, int64_t worker, int64_t generation,
                   int64_t version) {
  return ParamPieceIr{std::move(param), std::move(box), worker, generation, version};
}

// Distinct values per version: element i of `box` of a [8, 6] (or [6]) param.
std::vector<float> Pattern(const BoxIr& box, float version) {
  std::vector<float> v;
  const bool rank2 = box.begin.size() == 2;
  for (int64_t r = box.begin[0]; r < box.end[0]; ++r) {
    for (int64_t c = rank2 ? box.begin[1] : 0; c < (rank2 ? box.end[1] : 1); ++c) {
      v.push_back(version * 100 + static_cast<float>(r * kCols + c) * 0.5f - 7);
    }
  }
  return v;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
std::vector<float> Floats(absl::string_view bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The seed's values of `box` of w (what a first load creates).
std::vector<float> SeedW(const BoxIr& box) {
  InitSpec normal;
  normal.kind = InitKind::kNormal;
  normal.stddev = 1.0;
  Box b({Interval{box.begin[0], box.end[0]}, Interval{box.begin[1], box.end[1]}});
  absl::StatusOr<Tensor> t =
      InitializeBox(normal, 11, "w", {kRows, kCols}, b, DType::kFloat32);
  EXPECT_TRUE(t.ok()) << t.status();
  return t->ToFloatVector();
}

// Stages `values` of `box` in chunks of `chunk_bytes`.
absl::Status Stage(WorkerEngine& engine, int64_t version, const std::string& param,
                   const BoxIr& box, const std::vector<float>& values,
                   int64_t chunk_bytes = 1 << 20, int64_t stream_epoch = -1) {
  const std::string bytes = Bytes(values);
  int64_t offset = 0;
  do {
    StageChunkIr chunk{"pm", 1, version, param, box, static_cast<int64_t>(bytes.size()),
                       offset, bytes.substr(offset, chunk_bytes)};
    absl::StatusOr<int64_t> staged = engine.StageParams(chunk, stream_epoch);
    if (!staged.ok()) return staged.status();
    offset += *staged;
  } while (offset < static_cast<int64_t>(bytes.size()));
  return absl::OkStatus();
}

CommitParamsIr Commit(int64_t version, std::vector<std::string> params,
                      std::vector<ParamPieceIr> fills = {}) {
  return CommitParamsIr{"pm", 1, version - 1, version, std::move(params), std::move(fills)};
}

absl::StatusOr<ParamBytes> Read(const WorkerEngine& engine, int64_t generation,
                                int64_t version, const std::string& param, const BoxIr& box) {
  return engine.ReadParam(ReadParamIr{"pm", generation, version, param, box});
}

std::vector<float> ReadFloats(const WorkerEngine& engine, int64_t generation, int64_t version,
                              const std::string& param, const BoxIr& box) {
  absl::StatusOr<ParamBytes> read = Read(engine, generation, version, param, box);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? Floats(read->bytes) : std::vector<float>();
}

// y = x @ w[0:4] on device 0 (x's first four columns: K half of device 0).
ProgramIr DotProgram() {
  ComputeStepIr dot = Compute(0, ComputeOp::kDotGeneral, {"in/x", "param/w"}, "y",
                              B({{0, kM}, {0, kCols}}));
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {0};
  dot.partial = true;
  return ProgramOf("dot", "pm", 1, 0, {dot, Output(0, "y", B({{0, kM}, {0, kCols}}), "y")});
}

SliceIr XSlice(const std::vector<float>& x) {
  return SliceIr{"x", 0, B({{0, kM}, {0, 4}}), DType::kFloat32, Bytes(x)};
}

std::vector<double> NaiveDot(const std::vector<float>& x, const std::vector<float>& w_top) {
  std::vector<double> y(kM * kCols, 0.0);
  for (int64_t m = 0; m < kM; ++m) {
    for (int64_t n = 0; n < kCols; ++n) {
      for (int64_t k = 0; k < 4; ++k) y[m * kCols + n] += double{x[m * 4 + k]} * w_top[k * kCols + n];
    }
  }
  return y;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// N engines (worker ids 0..N-1) on one InMemoryTransport.
class Engines {
 public:
  explicit Engines(int n, int64_t chunk_bytes = 0) : transport_(chunk_bytes) {
    for (int i = 0; i < n; ++i) {
      WorkerEngine::Options options;
      options.worker_id = i;
      engines_.push_back(std::make_unique<WorkerEngine>(options, &transport_));
      transport_.Register(i, engines_.back().get());
    }
  }
  WorkerEngine& operator[](int i) { return *engines_[i]; }
  InMemoryTransport& transport() { return transport_; }

 private:
  InMemoryTransport transport_;
  std::vector<std::unique_ptr<WorkerEngine>> engines_;
};

TEST(ParamVersionsTest, ExecuteRunsOnTheRequestedVersion) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK_AND_ASSIGN(LoadModelResultIr v1, engine.LoadModel(Load(1, {0, 1}, {0, 0})));
  EXPECT_EQ(v1.param_bytes, (kRows * kCols + kCols) * 4);
  ASSERT_OK(engine.InstallProgram(DotProgram()));
  ASSERT_OK(Stage(engine, 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(Stage(engine, 2, "w", kBottom, Pattern(kBottom, 2)));
  ASSERT_OK_AND_ASSIGN(CommitResultIr v2, engine.CommitParams(Commit(2, {"w"})));
  EXPECT_EQ(v2.param_bytes, (kRows * kCols + kCols) * 4);
  EXPECT_EQ(v2.bytes_fetched, 0);

  std::vector<float> x(kM * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  auto run = [&](const std::string& id, int64_t version) -> std::vector<float> {
    absl::StatusOr<std::vector<SliceIr>> out =
        engine.Execute("dot", id, {XSlice(x)}, absl::Seconds(10), version);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() && out->size() == 1 ? Floats((*out)[0].data) : std::vector<float>();
  };
  ExpectNear(run("a", 1), NaiveDot(x, SeedW(kTop)));
  ExpectNear(run("b", 2), NaiveDot(x, Pattern(kTop, 2)));
  ExpectNear(run("c", 0), NaiveDot(x, Pattern(kTop, 2)));  // the newest
  EXPECT_THAT(engine.Execute("dot", "d", {XSlice(x)}, absl::Seconds(10), 3),
              StatusIs(absl::StatusCode::kNotFound,
                       "model 'pm' generation 1 version 3 is not resident"));

  // Commit shares what it did not change: r is one buffer in both versions.
  ASSERT_OK_AND_ASSIGN(ParamBytes r1, Read(engine, 1, 1, "r", kR));
  ASSERT_OK_AND_ASSIGN(ParamBytes r2, Read(engine, 1, 2, "r", kR));
  ASSERT_OK_AND_ASSIGN(ParamBytes w1, Read(engine, 1, 1, "w", kTop));
  ASSERT_OK_AND_ASSIGN(ParamBytes w2, Read(engine, 1, 2, "w", kTop));
  EXPECT_EQ(r1.keep_alive.get(), r2.keep_alive.get());
  EXPECT_NE(w1.keep_alive.get(), w2.keep_alive.get());
  EXPECT_EQ(engine.Status().models.size(), 2u);

  ASSERT_OK(engine.UnloadModel("pm", 1, 2));
  ExpectNear(run("e", 0), NaiveDot(x, SeedW(kTop)));
  WorkerStatusIr status = engine.Status();
  ASSERT_EQ(status.models.size(), 1u);
  EXPECT_EQ(status.models[0].version, 1);
  EXPECT_EQ(status.programs, 1);  // the generation is still resident
  ASSERT_OK(engine.UnloadModel("pm", 1, 0));
  EXPECT_EQ(engine.Status().programs, 0);
  EXPECT_THAT(engine.UnloadModel("pm", 1, 0), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ParamReplicasTest, ReplicaCellsAreHeldAndServedButNotHosted) {
  Engines engines(2);
  ASSERT_OK_AND_ASSIGN(LoadModelResultIr plain, engines[0].LoadModel(Load(1, {0}, {0, 1})));
  EXPECT_EQ(plain.param_bytes, (4 * kCols + kCols) * 4);
  ASSERT_OK_AND_ASSIGN(LoadModelResultIr held,
                       engines[0].LoadModel(Load(2, {0}, {0, 1}, /*replicas=*/{1})));
  EXPECT_EQ(held.param_bytes, (kRows * kCols + kCols) * 4);  // r stays one buffer
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "w", kBottom), SeedW(kBottom));
  EXPECT_THAT(Read(engines[0], 1, 1, "w", kBottom),
              StatusIs(absl::StatusCode::kOutOfRange, "not inside one held cell"));
  WorkerStatusIr status = engines[0].Status();
  ASSERT_EQ(status.models.size(), 2u);
  for (const HostedModelIr& m : status.models) {
    EXPECT_EQ(m.devices, std::vector<int64_t>{0});
    EXPECT_EQ(m.device_workers, (std::vector<int64_t>{0, 1}));
    ASSERT_EQ(m.mesh.size(), 1u);
    EXPECT_EQ(m.mesh[0].size, 2);
    EXPECT_EQ(m.replica_devices,
              m.generation == 2 ? std::vector<int64_t>{1} : std::vector<int64_t>{});
  }
  // Programs read only the hosted devices.
  ProgramIr p = ProgramOf("rep", "pm", 2, 0, {Output(1, "param/w", kBottom, "w")});
  ASSERT_OK(engines[0].InstallProgram(p));
  EXPECT_THAT(engines[0].Execute("rep", "r", {}, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, "device 1 is not hosted"));
}

TEST(ParamSourcesTest, LocalPiecesShareWholeCellsAndCopySubBoxes) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0, 1}, {0, 0})).status());
  ASSERT_OK(Stage(engine, 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(Stage(engine, 2, "w", kBottom, Pattern(kBottom, 2)));
  ASSERT_OK(engine.CommitParams(Commit(2, {"w"})).status());
  // Generation 2 hosts device 0: its w cell is shared whole from version 2,
  // r is copied from version 1 in two pieces.
  ASSERT_OK_AND_ASSIGN(
      LoadModelResultIr loaded,
      engine.LoadModel(Load(2, {0}, {0, 1}, {},
                            {Piece("w", kTop, 0, 1, 2), Piece("r", B({{0, 2}}), 0, 1, 1),
                             Piece("r", B({{2, 6}}), 0, 1, 1)})));
  EXPECT_EQ(loaded.bytes_local, (4 * kCols + kCols) * 4);
  EXPECT_EQ(loaded.bytes_fetched, 0);
  EXPECT_EQ(loaded.param_bytes, (4 * kCols + kCols) * 4);
  ASSERT_OK_AND_ASSIGN(ParamBytes src_w, Read(engine, 1, 2, "w", kTop));
  ASSERT_OK_AND_ASSIGN(ParamBytes new_w, Read(engine, 2, 1, "w", kTop));
  EXPECT_EQ(src_w.keep_alive.get(), new_w.keep_alive.get());  // zero copy
  EXPECT_EQ(Floats(new_w.bytes), Pattern(kTop, 2));
  ASSERT_OK_AND_ASSIGN(ParamBytes src_r, Read(engine, 1, 1, "r", kR));
  ASSERT_OK_AND_ASSIGN(ParamBytes new_r, Read(engine, 2, 1, "r", kR));
  EXPECT_NE(src_r.keep_alive.get(), new_r.keep_alive.get());
  EXPECT_EQ(Floats(new_r.bytes), Floats(src_r.bytes));
  // A sub-box of a local cell, the rest from the seed (no piece meets it).
  ASSERT_OK_AND_ASSIGN(
      LoadModelResultIr partial,
      engine.LoadModel(Load(3, {0, 1}, {0, 0}, {},
                            {Piece("w", B({{0, 2}, {0, kCols}}), 0, 1, 2),
                             Piece("w", B({{2, 4}, {0, kCols}}), 0, 1, 2)})));
  EXPECT_EQ(partial.bytes_local, 4 * kCols * 4);
  EXPECT_EQ(ReadFloats(engine, 3, 1, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engine, 3, 1, "w", kBottom), SeedW(kBottom));
}

TEST(ParamSourcesTest, RemotePiecesAreFetchedFromPeersInChunks) {
  Engines engines(3, /*chunk_bytes=*/10);  // chunks split floats
  ASSERT_OK(engines[1].LoadModel(Load(1, {0}, {1, 2})).status());
  ASSERT_OK(engines[2].LoadModel(Load(1, {1}, {1, 2})).status());
  ASSERT_OK(Stage(engines[1], 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(engines[1].CommitParams(Commit(2, {"w"})).status());
  ASSERT_OK(Stage(engines[2], 2, "w", kBottom, Pattern(kBottom, 2)));
  ASSERT_OK(engines[2].CommitParams(Commit(2, {"w"})).status());
  // Worker 0 takes both devices over: w from both peers, r from worker 2 in
  // two pieces of one cell.
  ASSERT_OK_AND_ASSIGN(
      LoadModelResultIr loaded,
      engines[0].LoadModel(Load(2, {0, 1}, {0, 0}, {},
                                {Piece("w", kTop, 1, 1, 2), Piece("w", kBottom, 2, 1, 2),
                                 Piece("r", B({{0, 3}}), 2, 1, 1),
                                 Piece("r", B({{3, 6}}), 1, 1, 1)})));
  EXPECT_EQ(loaded.bytes_fetched, (kRows * kCols + kCols) * 4);
  EXPECT_EQ(loaded.bytes_local, 0);
  EXPECT_EQ(engines.transport().param_reads(), 4);
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "w", kBottom), Pattern(kBottom, 2));
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "r", kR), ReadFloats(engines[1], 1, 1, "r", kR));
  // A peer that cannot be reached fails the load, naming it.
  engines.transport().SetLinkDown(2, true);
  EXPECT_THAT(engines[0].LoadModel(Load(3, {0, 1}, {0, 0}, {}, {Piece("w", kBottom, 2, 1, 2)})),
              StatusIs(absl::StatusCode::kUnavailable, "worker 2"));
  EXPECT_THAT(engines[0].LoadModel(Load(3, {0, 1}, {0, 0}, {}, {Piece("w", kTop, 1, 1, 7)})),
              StatusIs(absl::StatusCode::kNotFound, "version 7"));
}

TEST(ParamSourcesTest, OneCellFromALocalPieceAndARemoteOneAtOnce) {
  // The peer's reads run while the local pieces are copied (param_sources.cc):
  // both write the same cell, each its own rows.
  Engines engines(2, /*chunk_bytes=*/10);
  ASSERT_OK(engines[0].LoadModel(Load(1, {0}, {0, 1})).status());
  ASSERT_OK(engines[1].LoadModel(Load(1, {1}, {0, 1}, /*replicas=*/{0})).status());
  ASSERT_OK(Stage(engines[0], 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(engines[0].CommitParams(Commit(2, {"w"})).status());
  ASSERT_OK(Stage(engines[1], 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(Stage(engines[1], 2, "w", kBottom, Pattern(kBottom, 2)));
  ASSERT_OK(engines[1].CommitParams(Commit(2, {"w"})).status());
  // Worker 0 takes both devices: rows 0-1 of its own cell, rows 2-3 and the
  // bottom cell from worker 1.
  ASSERT_OK_AND_ASSIGN(
      LoadModelResultIr loaded,
      engines[0].LoadModel(Load(2, {0, 1}, {0, 0}, {},
                                {Piece("w", B({{0, 2}, {0, kCols}}), 0, 1, 2),
                                 Piece("w", B({{2, 4}, {0, kCols}}), 1, 1, 2),
                                 Piece("w", kBottom, 1, 1, 2)})));
  EXPECT_EQ(loaded.bytes_local, 2 * kCols * 4);
  EXPECT_EQ(loaded.bytes_fetched, 6 * kCols * 4);
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engines[0], 2, 1, "w", kBottom), Pattern(kBottom, 2));
  // A failed read still waits for the local copies, and the load fails whole.
  const size_t resident = engines[0].Status().models.size();
  engines.transport().SetLinkDown(1, true);
  EXPECT_THAT(engines[0].LoadModel(Load(3, {0, 1}, {0, 0}, {},
                                        {Piece("w", B({{0, 2}, {0, kCols}}), 0, 1, 2),
                                         Piece("w", B({{2, 4}, {0, kCols}}), 1, 1, 2)})),
              StatusIs(absl::StatusCode::kUnavailable, "worker 1"));
  EXPECT_EQ(engines[0].Status().models.size(), resident);  // no generation 3
}

TEST(ParamSourcesTest, PiecesThatDoNotTileACellAreInvalid) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0, 1}, {0, 0})).status());
  auto load = [&](std::vector<ParamPieceIr> pieces) {
    return engine.LoadModel(Load(2, {0}, {0, 1}, {}, std::move(pieces)));
  };
  EXPECT_THAT(load({Piece("w", B({{0, 2}, {0, kCols}}), 0, 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'w' cell [0:4, 0:6]: source pieces cover 12 of 24 elements"));
  EXPECT_THAT(load({Piece("w", B({{0, 3}, {0, kCols}}), 0, 1, 1),
                    Piece("w", B({{2, 4}, {0, kCols}}), 0, 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "source pieces [0:3, 0:6] and [2:4, 0:6] overlap"));
  EXPECT_THAT(load({Piece("w", B({{2, 6}, {0, kCols}}), 0, 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "source piece [2:6, 0:6] (from worker 0) is not inside the cell"));
  EXPECT_THAT(load({Piece("v", kTop, 0, 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, "param 'v'"));
  EXPECT_THAT(load({Piece("w", kR, 0, 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, "has rank 1"));
  EXPECT_THAT(load({Piece("w", kTop, 0, 5, 1)}),
              StatusIs(absl::StatusCode::kNotFound, "generation 5 version 1 is not resident"));
  EXPECT_EQ(engine.Status().models.size(), 1u);  // nothing loaded
}

TEST(ParamStagingTest, ChunksAcrossMessagesAndSubBoxesAssemble) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0, 1}, {0, 0})).status());
  const BoxIr a = B({{0, 1}, {0, kCols}}), b = B({{1, 4}, {0, 3}}), c = B({{1, 4}, {3, 6}});
  ASSERT_OK(Stage(engine, 2, "w", a, Pattern(a, 2), /*chunk_bytes=*/7));
  ASSERT_OK(Stage(engine, 2, "w", b, Pattern(b, 2), 5));
  ASSERT_OK(Stage(engine, 2, "w", c, Pattern(c, 2)));
  ASSERT_OK(Stage(engine, 2, "w", kBottom, Pattern(kBottom, 2), 9));  // a whole cell
  ASSERT_OK(Stage(engine, 2, "r", kR, Pattern(kR, 2), 3));
  // Staged boxes are readable (fills) before the commit.
  EXPECT_EQ(ReadFloats(engine, 1, 2, "w", b), Pattern(b, 2));
  ASSERT_OK(engine.CommitParams(Commit(2, {"w", "r"})).status());
  EXPECT_EQ(ReadFloats(engine, 1, 2, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engine, 1, 2, "w", kBottom), Pattern(kBottom, 2));
  EXPECT_EQ(ReadFloats(engine, 1, 2, "r", kR), Pattern(kR, 2));
  EXPECT_EQ(ReadFloats(engine, 1, 1, "w", kTop), SeedW(kTop));  // v1 unchanged
}

TEST(ParamStagingTest, GapsAndBadChunksAreRefused) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0}, {0, 1})).status());
  const BoxIr head = B({{0, 2}, {0, kCols}});
  ASSERT_OK(Stage(engine, 2, "w", head, Pattern(head, 2)));
  // The gap [2:4] is found at commit; nothing becomes resident.
  EXPECT_THAT(engine.CommitParams(Commit(2, {"w"})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'w' cell [0:4, 0:6]: 12 of 24 elements missing ([2:4, 0:6] is "
                       "not staged)"));
  EXPECT_THAT(engine.CommitParams(Commit(2, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, "'w' is staged but not in params"));
  EXPECT_THAT(Read(engine, 1, 2, "w", kTop),
              StatusIs(absl::StatusCode::kFailedPrecondition, "only 12 of 24 elements"));
  EXPECT_EQ(engine.Status().models.size(), 1u);

  auto chunk = [](std::string param, BoxIr box, int64_t total, int64_t offset, int64_t n) {
    return StageChunkIr{"pm", 1, 2, std::move(param), std::move(box), total, offset,
                        std::string(n, '\0')};
  };
  const BoxIr tail = B({{2, 4}, {0, kCols}});  // 48 bytes
  EXPECT_THAT(engine.StageParams(chunk("v", tail, 48, 0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown param 'v'"));
  EXPECT_THAT(engine.StageParams(chunk("w", tail, 40, 0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "total_bytes 40 but 12 float32"));
  EXPECT_THAT(engine.StageParams(chunk("w", tail, 48, 44, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "chunk [44, 52) is outside"));
  EXPECT_THAT(engine.StageParams(chunk("w", tail, 48, 8, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "first chunk at offset 8"));
  EXPECT_THAT(engine.StageParams(chunk("w", B({{2, 6}, {0, kCols}}), 96, 0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "not inside one held cell"));
  EXPECT_THAT(engine.StageParams(chunk("w", kR, 24, 0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "has rank 1"));
  ASSERT_OK(engine.StageParams(chunk("w", tail, 48, 0, 8)).status());
  EXPECT_THAT(engine.StageParams(chunk("w", tail, 48, 16, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset 16 but 8 bytes have arrived"));
  StageChunkIr resident = chunk("w", tail, 48, 0, 8);
  resident.version = 1;
  EXPECT_THAT(engine.StageParams(resident), StatusIs(absl::StatusCode::kAlreadyExists));
  resident.generation = 9;
  EXPECT_THAT(engine.StageParams(resident),
              StatusIs(absl::StatusCode::kNotFound, "generation 9 is not resident"));

  // Abort drops the staging; a second abort is a no-op.
  ASSERT_OK(engine.AbortParams("pm", 1, 2));
  EXPECT_THAT(Read(engine, 1, 2, "w", kTop),
              StatusIs(absl::StatusCode::kNotFound, "neither resident nor being staged"));
  ASSERT_OK(engine.AbortParams("pm", 1, 2));
  // A stream that began before an abort (a cancelled push whose chunks are
  // still arriving) cannot stage into that version any more; a stream that
  // began after it (the next push) can, and other versions are not affected.
  const int64_t before = engine.StagingEpoch();
  ASSERT_OK(engine.StageParams(chunk("w", tail, 48, 0, 8), before).status());
  ASSERT_OK(engine.AbortParams("pm", 1, 2));
  EXPECT_THAT(engine.StageParams(chunk("w", tail, 48, 8, 8), before),
              StatusIs(absl::StatusCode::kAborted, "version 2 was aborted while this stream"));
  StageChunkIr other = chunk("w", tail, 48, 0, 8);
  other.version = 3;
  ASSERT_OK(engine.StageParams(other, before).status());
  ASSERT_OK(engine.AbortParams("pm", 1, 3));
  // After the abort the same version can be pushed again from scratch.
  ASSERT_OK(Stage(engine, 2, "w", kTop, Pattern(kTop, 3), 1 << 20, engine.StagingEpoch()));
  ASSERT_OK(engine.CommitParams(Commit(2, {"w"})).status());
  EXPECT_EQ(ReadFloats(engine, 1, 2, "w", kTop), Pattern(kTop, 3));
  ASSERT_OK(engine.AbortParams("pm", 1, 2));  // drops the resident version too
  EXPECT_THAT(Read(engine, 1, 2, "w", kTop), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(ReadFloats(engine, 1, 0, "w", kTop), SeedW(kTop));
}

// One chunk [offset, offset + n) of `values` put as `box` of w.
StageChunkIr WChunk(int64_t version, const BoxIr& box, const std::vector<float>& values,
                    int64_t offset, int64_t n) {
  const std::string bytes = Bytes(values);
  return StageChunkIr{"pm", 1, version, "w", box, static_cast<int64_t>(bytes.size()), offset,
                      bytes.substr(offset, n)};
}

// Puts of `box` in `chunk_bytes` chunks, the chunks of all puts interleaved
// (put 0's first, put 1's first, put 0's second, ...).
absl::Status StageInterleaved(WorkerEngine& engine, int64_t version, const BoxIr& box,
                              const std::vector<std::vector<float>>& puts, int64_t chunk_bytes) {
  const int64_t total = static_cast<int64_t>(puts[0].size() * sizeof(float));
  for (int64_t offset = 0; offset < total; offset += chunk_bytes) {
    for (const std::vector<float>& put : puts) {
      absl::StatusOr<int64_t> staged =
          engine.StageParams(WChunk(version, box, put, offset, chunk_bytes));
      if (!staged.ok()) return staged.status();
    }
  }
  return absl::OkStatus();
}

// Push sessions: several ranks put the same replicated box, a tied twin is
// put over its twin. Overlapping puts are accepted when byte-identical and
// the commit covers each element at least once; a difference refuses the
// commit naming param, both boxes and the first differing element (row-major
// over the overlap), and the staging stays until aborted.
TEST(ParamStagingTest, OverlappingPutsMustBeByteIdentical) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0}, {0, 1})).status());
  const BoxIr head = B({{0, 2}, {0, kCols}}), middle = B({{1, 3}, {0, kCols}});
  // Version 2: sub-boxes overlapping, then the whole cell over both.
  ASSERT_OK(Stage(engine, 2, "w", head, Pattern(head, 2)));
  ASSERT_OK(Stage(engine, 2, "w", middle, Pattern(middle, 2), /*chunk_bytes=*/7));
  ASSERT_OK(Stage(engine, 2, "w", kTop, Pattern(kTop, 2), 5));
  ASSERT_OK(Stage(engine, 2, "w", middle, Pattern(middle, 2), 7));  // compared as it arrives
  ASSERT_OK(Stage(engine, 2, "r", kR, Pattern(kR, 2)));
  ASSERT_OK(Stage(engine, 2, "r", kR, Pattern(kR, 2)));  // a second rank, same bytes
  ASSERT_OK(engine.CommitParams(Commit(2, {"w", "r"})).status());
  EXPECT_EQ(ReadFloats(engine, 1, 2, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engine, 1, 2, "r", kR), Pattern(kR, 2));

  // Version 3: a whole-cell put written straight into the buffer while a
  // sub-box completes (it waits) and a second put of the whole cell arrives
  // interleaved chunk by chunk with the first.
  ASSERT_OK(engine.StageParams(WChunk(3, kTop, Pattern(kTop, 3), 0, 8)).status());
  ASSERT_OK(Stage(engine, 3, "w", middle, Pattern(middle, 3)));
  EXPECT_THAT(Read(engine, 1, 3, "w", middle),  // waits for the whole cell
              StatusIs(absl::StatusCode::kFailedPrecondition, "only 0 of 12 elements"));
  ASSERT_OK(engine.StageParams(WChunk(3, kTop, Pattern(kTop, 3), 0, 8)).status());
  for (int64_t offset = 8; offset < 96; offset += 8) {
    ASSERT_OK(engine.StageParams(WChunk(3, kTop, Pattern(kTop, 3), offset, 8)).status());
    ASSERT_OK(engine.StageParams(WChunk(3, kTop, Pattern(kTop, 3), offset, 8)).status());
  }
  EXPECT_EQ(ReadFloats(engine, 1, 3, "w", middle), Pattern(middle, 3));
  ASSERT_OK(engine.CommitParams(CommitParamsIr{"pm", 1, 2, 3, {"w"}, {}}).status());
  EXPECT_EQ(ReadFloats(engine, 1, 3, "w", kTop), Pattern(kTop, 3));

  // Version 4: a row put over the whole cell with one element changed, in
  // 5-byte chunks (compared as they arrive, elements split across chunks).
  std::vector<float> row = Pattern(B({{2, 3}, {0, kCols}}), 4);
  row[4] += 1;
  ASSERT_OK(Stage(engine, 4, "w", kTop, Pattern(kTop, 4)));
  ASSERT_OK(Stage(engine, 4, "w", B({{2, 3}, {0, kCols}}), row, 5));  // accepted here
  const CommitParamsIr commit4{"pm", 1, 3, 4, {"w"}, {}};
  EXPECT_THAT(engine.CommitParams(commit4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'w': overlapping puts differ: box [2:3, 0:6] and box [0:4, 0:6] "
                       "first differ at element [2, 4]"));
  EXPECT_THAT(Read(engine, 1, 4, "w", kTop),
              StatusIs(absl::StatusCode::kFailedPrecondition, "first differ at element [2, 4]"));
  EXPECT_THAT(engine.CommitParams(commit4), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(engine.Status().models.size(), 3u);  // versions 1-3: nothing committed
  ASSERT_OK(engine.AbortParams("pm", 1, 4));

  // Two puts of the whole cell interleaved, differing at [3, 1]: found.
  std::vector<float> other = Pattern(kTop, 4);
  other[3 * kCols + 1] = -1;
  ASSERT_OK(StageInterleaved(engine, 4, kTop, {Pattern(kTop, 4), other}, 12));
  EXPECT_THAT(engine.CommitParams(commit4),
              StatusIs(absl::StatusCode::kInvalidArgument, "first differ at element [3, 1]"));
  ASSERT_OK(engine.AbortParams("pm", 1, 4));
  // A one-chunk put over a staged box, differing at [1, 3]: found.
  std::vector<float> rows = Pattern(middle, 4);
  rows[3] = 1e9f;
  ASSERT_OK(Stage(engine, 4, "w", kTop, Pattern(kTop, 4)));
  ASSERT_OK(Stage(engine, 4, "w", middle, rows));
  EXPECT_THAT(engine.CommitParams(commit4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "box [1:3, 0:6] and box [0:4, 0:6] first differ at element [1, 3]"));
  ASSERT_OK(engine.AbortParams("pm", 1, 4));
  // A differing box that waited for the whole cell is compared when it ends.
  std::vector<float> first_row = Pattern(head, 4);
  first_row[2] = 0.25f;
  ASSERT_OK(engine.StageParams(WChunk(4, kTop, Pattern(kTop, 4), 0, 16)).status());
  ASSERT_OK(Stage(engine, 4, "w", head, first_row));
  ASSERT_OK(engine.StageParams(WChunk(4, kTop, Pattern(kTop, 4), 16, 80)).status());
  EXPECT_THAT(engine.CommitParams(commit4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "box [0:2, 0:6] and box [0:4, 0:6] first differ at element [0, 2]"));
  ASSERT_OK(engine.AbortParams("pm", 1, 4));
  // After the abort the same version is pushed again, identical puts only.
  ASSERT_OK(StageInterleaved(engine, 4, kTop, {Pattern(kTop, 4), Pattern(kTop, 4)}, 12));
  ASSERT_OK(Stage(engine, 4, "w", head, Pattern(head, 4)));
  ASSERT_OK(engine.CommitParams(commit4).status());
  EXPECT_EQ(ReadFloats(engine, 1, 4, "w", kTop), Pattern(kTop, 4));
  EXPECT_EQ(ReadFloats(engine, 1, 3, "w", kTop), Pattern(kTop, 3));  // v3 unchanged
}

TEST(ParamStagingTest, ReplicasAreFilledFromThePeersStaging) {
  Engines engines(2, /*chunk_bytes=*/16);
  // Each worker hosts one device and holds the other's cells as a replica.
  ASSERT_OK(engines[0].LoadModel(Load(1, {0}, {0, 1}, {1})).status());
  ASSERT_OK(engines[1].LoadModel(Load(1, {1}, {0, 1}, {0})).status());
  // The client sends each worker its own devices' cells, and worker 0 also a
  // part of its replica kBottom (as a second rank would): the fill of
  // kBottom overlaps it with the same bytes.
  ASSERT_OK(Stage(engines[0], 2, "w", kTop, Pattern(kTop, 2)));
  ASSERT_OK(Stage(engines[0], 2, "w", B({{5, 7}, {1, 4}}), Pattern(B({{5, 7}, {1, 4}}), 2)));
  ASSERT_OK(Stage(engines[1], 2, "w", kBottom, Pattern(kBottom, 2)));
  // Worker 0 commits first (reads worker 1's staging), worker 1 then reads
  // worker 0's new resident version.
  ASSERT_OK_AND_ASSIGN(CommitResultIr c0,
                       engines[0].CommitParams(Commit(2, {"w"}, {Piece("w", kBottom, 1, 1, 2)})));
  ASSERT_OK_AND_ASSIGN(CommitResultIr c1,
                       engines[1].CommitParams(Commit(2, {"w"}, {Piece("w", kTop, 0, 1, 2)})));
  EXPECT_EQ(c0.bytes_fetched, 4 * kCols * 4);
  EXPECT_EQ(c1.bytes_fetched, 4 * kCols * 4);
  EXPECT_EQ(c0.param_bytes, (kRows * kCols + kCols) * 4);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(ReadFloats(engines[w], 1, 2, "w", kTop), Pattern(kTop, 2)) << "worker " << w;
    EXPECT_EQ(ReadFloats(engines[w], 1, 2, "w", kBottom), Pattern(kBottom, 2)) << "worker " << w;
  }
  // A retried commit that already succeeded succeeds again.
  ASSERT_OK(engines[0].CommitParams(Commit(2, {"w"})).status());
  // A fill of a box that is not staged anywhere fails the commit.
  ASSERT_OK(Stage(engines[0], 3, "w", kTop, Pattern(kTop, 3)));
  EXPECT_THAT(engines[0].CommitParams(Commit(3, {"w"}, {Piece("w", kBottom, 1, 1, 3)})),
              StatusIs(absl::StatusCode::kNotFound, "version 3 is neither resident"));
  // A fill over a staged box with other bytes (version 2's against version
  // 3's) refuses the commit, naming both boxes and the first element; the
  // staging stays, refusing reads, until it is aborted.
  EXPECT_THAT(engines[0].CommitParams(Commit(3, {"w"}, {Piece("w", kTop, 1, 1, 2)})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "param 'w': overlapping puts differ: box [0:4, 0:6] and box [0:4, 0:6] "
                       "first differ at element [0, 0]"));
  EXPECT_THAT(Read(engines[0], 1, 3, "w", kTop),
              StatusIs(absl::StatusCode::kFailedPrecondition, "overlapping puts differ"));
  EXPECT_EQ(engines[0].Status().models.size(), 2u);
  ASSERT_OK(engines[0].AbortParams("pm", 1, 3));
  EXPECT_THAT(Read(engines[0], 1, 3, "w", kTop), StatusIs(absl::StatusCode::kNotFound));
}

// A push streams a box as row slabs, each a box of its own in one chunk, in
// any order across boxes; staged cells are read whole (shared) or in part
// (copied), and a fill that is only part of a cell arrives in many chunks.
TEST(ParamStagingTest, SingleChunkSlabsInAnyOrderAndChunkedPartialFills) {
  Engines engines(2, /*chunk_bytes=*/12);
  ASSERT_OK(engines[0].LoadModel(Load(1, {0}, {0, 1}, {1})).status());
  ASSERT_OK(engines[1].LoadModel(Load(1, {1}, {0, 1}, {0})).status());
  // Worker 0's cell kTop [0:4] in slabs, last rows first, one slab in columns.
  const BoxIr slabs[] = {B({{3, 4}, {0, kCols}}), B({{1, 3}, {2, kCols}}),
                         B({{0, 1}, {0, kCols}}), B({{1, 3}, {0, 2}})};
  for (const BoxIr& slab : slabs) ASSERT_OK(Stage(engines[0], 2, "w", slab, Pattern(slab, 2)));
  ASSERT_OK(Stage(engines[1], 2, "w", kBottom, Pattern(kBottom, 2), 7));
  const BoxIr inner = B({{1, 3}, {1, 5}});  // spans three slabs
  EXPECT_EQ(ReadFloats(engines[0], 1, 2, "w", kTop), Pattern(kTop, 2));
  EXPECT_EQ(ReadFloats(engines[0], 1, 2, "w", inner), Pattern(inner, 2));
  // Worker 1 fills its replica of kTop from worker 0's staging in two parts
  // (neither is the whole cell), each read in 12-byte chunks.
  const BoxIr upper = B({{0, 1}, {0, kCols}}), lower = B({{1, 4}, {0, kCols}});
  ASSERT_OK_AND_ASSIGN(CommitResultIr c1,
                       engines[1].CommitParams(Commit(2, {"w"}, {Piece("w", upper, 0, 1, 2),
                                                                 Piece("w", lower, 0, 1, 2)})));
  EXPECT_EQ(c1.bytes_fetched, 4 * kCols * 4);
  ASSERT_OK(engines[0].CommitParams(Commit(2, {"w"}, {Piece("w", kBottom, 1, 1, 2)})).status());
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(ReadFloats(engines[w], 1, 2, "w", kTop), Pattern(kTop, 2)) << "worker " << w;
    EXPECT_EQ(ReadFloats(engines[w], 1, 2, "w", kBottom), Pattern(kBottom, 2)) << "worker " << w;
    EXPECT_EQ(ReadFloats(engines[w], 1, 2, "w", inner), Pattern(inner, 2)) << "worker " << w;
    EXPECT_EQ(ReadFloats(engines[w], 1, 1, "w", kTop), SeedW(kTop)) << "worker " << w;
  }
}

TEST(ReadParamTest, ErrorsNameWhatIsMissing) {
  WorkerEngine engine(WorkerEngine::Options(), nullptr);
  ASSERT_OK(engine.LoadModel(Load(1, {0}, {0, 1})).status());
  EXPECT_THAT(Read(engine, 2, 1, "w", kTop),
              StatusIs(absl::StatusCode::kNotFound,
                       "model 'pm' generation 2 version 1 is neither resident nor being staged"));
  EXPECT_THAT(Read(engine, 1, 4, "w", kTop), StatusIs(absl::StatusCode::kNotFound, "version 4"));
  EXPECT_THAT(Read(engine, 1, 1, "q", kTop),
              StatusIs(absl::StatusCode::kNotFound, "has no param 'q'"));
  EXPECT_THAT(Read(engine, 1, 1, "w", B({{3, 5}, {0, kCols}})),
              StatusIs(absl::StatusCode::kOutOfRange, "held: [0:4, 0:6]"));
  EXPECT_THAT(Read(engine, 1, 1, "w", BoxIr{{0, 0}, {4}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Read(engine, 1, 1, "w", kR), StatusIs(absl::StatusCode::kInvalidArgument, "rank"));
  // A sub-box is a copy of the cell's elements.
  EXPECT_EQ(ReadFloats(engine, 1, 0, "w", B({{1, 3}, {2, 5}})), SeedW(B({{1, 3}, {2, 5}})));
}

}  // namespace
}  // namespace meshserve
