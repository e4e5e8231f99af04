// Tests of `meshserve suggest`'s search (suggest.h) on small models: the
// choice types under JAX's rules (parsed back from the written file), the
// memory limit, one spec per tied role, the baselines' predicted order, the
// search method and budget, Megatron on einsum projections, pricing a block
// stack from short copies, the rounds of a two-phase all-reduce, and the
// bad-input errors.
#include "server/suggest/suggest.h"

#include <string>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/suggest/block_stack.h"
#include "server/suggest/cost_model.h"
#include "common/base/file_io.h"
#include "common/model/typed_model.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

ModelFile LoadExample(const std::string& name) {
  absl::StatusOr<ModelFile> m =
      LoadModelFile(absl::StrCat(MESHSERVE_SOURCE_DIR, "/examples/models/", name, ".json"));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

// The example SwiGLU at d_model 64 / hidden 256 (tests/integration/testdata).
ModelFile SmallSwiglu() {
  absl::StatusOr<ModelFile> m = LoadModelFile(absl::StrCat(
      MESHSERVE_SOURCE_DIR, "/tests/integration/testdata/swiglu_small.json"));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

// `n` MLP blocks "blocks.0" ... (d 64, hidden 128) and a head.
ModelFile Blocks(int n) {
  std::string blocks;
  std::string params;
  std::string in = "x";
  for (int b = 0; b < n; ++b) {
    const std::string p = absl::StrCat("blocks.", b);
    absl::StrAppend(&params, "'", p, ".up.kernel': {'shape': [64, 128], 'init': 'lecun_normal'},",
                    "'", p, ".down.kernel': {'shape': [128, 64], 'init': 'lecun_normal'},");
    absl::StrAppend(&blocks, "{'name': '", p, ".up', 'op': 'linear', 'input': '", in,
                    "', 'kernel': '", p, ".up.kernel'},", "{'name': '", p,
                    ".act', 'op': 'relu', 'input': '", p, ".up'},", "{'name': '", p,
                    ".down', 'op': 'linear', 'input': '", p, ".act', 'kernel': '", p,
                    ".down.kernel'},");
    in = p + ".down";
  }
  const std::string text = absl::StrCat(
      "{'name': 'two_blocks', 'mesh': {'data': 2, 'model': 2}, 'inputs': {'x': {'shape': [-1, "
      "64], 'sharding': ['data']}}, 'params': {",
      params, "'head.kernel': {'shape': [64, 64]}}, 'layers': [", blocks,
      "{'name': 'y', 'op': 'linear', 'input': '", in,
      "', 'kernel': 'head.kernel'}], 'outputs': ['y']}");
  absl::StatusOr<ModelFile> m = ParseModelFile(absl::StrReplaceAll(text, {{"'", "\""}}), "");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

ModelFile TwoBlocks() { return Blocks(2); }

SuggestOptions Options(int64_t workers, std::vector<ShapeSet> shapes) {
  SuggestOptions o;
  o.num_workers = workers;
  o.input_shapes = std::move(shapes);
  return o;
}

// Param bytes on one device, from the specs and the mesh (independent of the
// cost model): each param's elements over the sizes of the axes it uses.
int64_t ParamBytesFromSpecs(const Suggestion& s) {
  int64_t total = 0;
  for (const ParamDef& p : s.model.params) {
    int64_t n = 4;
    for (int64_t d : p.shape) n *= d;
    for (const std::string& axis : p.sharding.AxesUsed()) {
      for (const MeshAxis& a : s.mesh.axes()) {
        if (a.name == axis) n /= a.size;
      }
    }
    total += n;
  }
  return total;
}

const Suggestion* Baseline(const SuggestResult& r, const std::string& name) {
  for (const Suggestion& s : r.baselines) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

TEST(SuggestTest, WrittenChoiceTypesUnderJaxRulesOnNWorkers) {
  const ModelFile model = SmallSwiglu();
  const ShapeSet shapes = {{"x", {4, 8, 64}}};
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, Options(4, {shapes})));
  EXPECT_EQ(r.choice.mesh.num_devices(), 4);
  ASSERT_OK_AND_ASSIGN(std::string text, SuggestedModelText(model, r.choice));
  ASSERT_OK_AND_ASSIGN(ModelFile written, ParseModelFile(text, "/tmp"));
  EXPECT_OK(ValidateModel(written));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(written, 4));
  EXPECT_EQ(mesh, r.choice.mesh);
  ASSERT_OK_AND_ASSIGN(TypedModel typed, TypeModel(written, mesh, shapes));
  EXPECT_EQ(typed.TypeOf("y").shape, (std::vector<int64_t>{4, 8, 64}));
  for (const ParamDef& p : written.params) {
    EXPECT_EQ(p.sharding, r.choice.model.FindParam(p.name)->sharding) << p.name;
  }
  EXPECT_LE(r.alternatives.size(), 3u);
  for (const Suggestion& alt : r.alternatives) {
    EXPECT_GE(alt.mix_ms, r.choice.mix_ms);
    EXPECT_NE(alt.key, r.choice.key);
  }
  EXPECT_GT(r.num_evaluated, 10);
  EXPECT_GT(r.num_rejected_rules, 0);  // e.g. a kernel P(D, M) after x P(D, ...)
}

TEST(SuggestTest, MemoryLimitRulesOutReplication) {
  const ModelFile model = SmallSwiglu();
  const int64_t replicated = 3 * 64 * 256 * 4;
  SuggestOptions o = Options(2, {{{"x", {1, 1, 64}}}});
  ASSERT_OK_AND_ASSIGN(SuggestResult free_choice, Suggest(model, o));
  // At one token the tiny model's best layout exchanges nothing between
  // workers (a hop costs more than any GEMM here), and replication is kept.
  EXPECT_EQ(free_choice.choice.per_shape[0].rounds, 0) << free_choice.choice.LayoutText();
  EXPECT_NE(Baseline(free_choice, "replicated"), nullptr);
  o.memory_per_worker = replicated - 1;
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, o));
  EXPECT_LE(ParamBytesFromSpecs(r.choice), o.memory_per_worker) << r.choice.LayoutText();
  EXPECT_EQ(ParamBytesFromSpecs(r.choice), r.choice.per_shape[0].param_bytes_per_worker);
  for (const Suggestion& alt : r.alternatives) {
    EXPECT_LE(ParamBytesFromSpecs(alt), o.memory_per_worker) << alt.LayoutText();
  }
  EXPECT_EQ(Baseline(r, "replicated"), nullptr);
  EXPECT_GT(r.num_rejected_memory, 0);
  o.memory_per_worker = replicated / 4;  // below even a 2-way split of every param
  EXPECT_THAT(Suggest(model, o).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "param bytes per worker"));
}

TEST(SuggestTest, TiedRolesGetOneSpec) {
  const ModelFile model = TwoBlocks();
  ASSERT_OK_AND_ASSIGN(LayoutSpace space, BuildLayoutSpace(model, 4));
  int tied = 0;
  for (const Role& role : space.roles) {
    if (role.key == "blocks.#.up.kernel" || role.key == "blocks.#.down.kernel") {
      EXPECT_EQ(role.members.size(), 2u) << role.key;
      ++tied;
    }
  }
  EXPECT_EQ(tied, 2);
  for (const ShapeSet& shapes : {ShapeSet{{"x", {1, 64}}}, ShapeSet{{"x", {64, 64}}}}) {
    ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, Options(4, {shapes})));
    for (const Suggestion* s : {&r.choice}) {
      for (const char* p : {"up", "down"}) {
        EXPECT_EQ(s->model.FindParam(absl::StrCat("blocks.0.", p, ".kernel"))->sharding,
                  s->model.FindParam(absl::StrCat("blocks.1.", p, ".kernel"))->sharding)
            << s->LayoutText();
      }
    }
    for (const Suggestion& s : r.alternatives) {
      EXPECT_EQ(s.model.FindParam("blocks.0.up.kernel")->sharding,
                s.model.FindParam("blocks.1.up.kernel")->sharding);
    }
  }
}

// The big SwiGLU at one token is memory-bound: Megatron reads half the
// weights per worker and moves one row, so it is predicted faster than
// replication; at d_model 64 the exchange costs more than the read saved.
TEST(SuggestTest, PredictionOrderingReplicatedVsMegatronAtBatchOne) {
  ASSERT_OK_AND_ASSIGN(SuggestResult big,
                       Suggest(LoadExample("swiglu"), Options(2, {{{"x", {1, 1, 2048}}}})));
  const Suggestion* rep = Baseline(big, "replicated");
  const Suggestion* meg = Baseline(big, "megatron_column_row");
  ASSERT_NE(rep, nullptr);
  ASSERT_NE(meg, nullptr);
  EXPECT_LT(meg->mix_ms, rep->mix_ms);
  EXPECT_EQ(meg->per_shape[0].param_bytes_per_worker * 2, rep->per_shape[0].param_bytes_per_worker);
  EXPECT_GT(meg->per_shape[0].rounds, 0);
  EXPECT_EQ(rep->per_shape[0].rounds, 0);
  EXPECT_LE(big.choice.mix_ms, meg->mix_ms);
  EXPECT_EQ(big.method, "dp + coordinate descent");

  ASSERT_OK_AND_ASSIGN(SuggestResult small, Suggest(SmallSwiglu(), Options(2, {{{"x", {1, 1, 64}}}})));
  rep = Baseline(small, "replicated");
  meg = Baseline(small, "megatron_column_row");
  ASSERT_NE(rep, nullptr);
  ASSERT_NE(meg, nullptr);
  EXPECT_LT(rep->mix_ms, meg->mix_ms);
}

TEST(SuggestTest, SmallSpaceIsSearchedExhaustively) {
  ASSERT_OK_AND_ASSIGN(SuggestResult r,
                       Suggest(LoadExample("linear"), Options(2, {{{"x", {16, 32}}}})));
  EXPECT_EQ(r.method, "exhaustive");
  EXPECT_EQ(r.choice.mesh.num_devices(), 2);
}

TEST(SuggestTest, MixOfShapesIsTheMean) {
  const ShapeSet prefill = {{"x", {4, 8, 64}}}, decode = {{"x", {4, 1, 64}}};
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(SmallSwiglu(), Options(2, {prefill, decode})));
  ASSERT_EQ(r.choice.per_shape.size(), 2u);
  EXPECT_DOUBLE_EQ(r.choice.mix_ms, (r.choice.per_shape[0].predicted_ms +
                                     r.choice.per_shape[1].predicted_ms) / 2);
}

// A budget already spent when the search starts: only each mesh's seed (the
// all-neutral layout) and the baselines, scored before it, are evaluated, and
// the method says the search stopped.
// The DP (dp_search.h) seeds coordinate descent: on the transformer example
// (a space far past the exhaustive limit) the choice is at least as good as
// descent alone, and the DP's own layout is among the evaluated ones.
TEST(SuggestTest, DpSeedIsNoWorseThanDescentAlone) {
  const ModelFile model = LoadExample("transformer");
  for (const ShapeSet& shapes : {ShapeSet{{"x", {1, 16, 64}}}, ShapeSet{{"x", {8, 16, 64}}}}) {
    SuggestOptions with = Options(4, {shapes});
    SuggestOptions without = with;
    without.dp_max_states = 0;
    ASSERT_OK_AND_ASSIGN(SuggestResult a, Suggest(model, with));
    ASSERT_OK_AND_ASSIGN(SuggestResult b, Suggest(model, without));
    EXPECT_EQ(a.method, "dp + coordinate descent");
    EXPECT_EQ(b.method, "coordinate descent");
    EXPECT_LE(a.choice.mix_ms, b.choice.mix_ms * (1 + 1e-9));
  }
}

TEST(SuggestTest, SearchStopsAtItsBudgetWithTheBaselines) {
  const ModelFile model = SmallSwiglu();
  SuggestOptions o = Options(2, {{{"x", {4, 8, 64}}}});
  o.max_search_s = 1e-9;
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, o));
  EXPECT_EQ(r.method, "dp + coordinate descent (stopped at the 1e-09 s budget)");
  ASSERT_OK_AND_ASSIGN(LayoutSpace space, BuildLayoutSpace(model, 2));
  EXPECT_EQ(space.meshes.size(), 2u);
  EXPECT_LE(r.num_evaluated, 2 * static_cast<int64_t>(NamedLayouts(model, space).size() + 1));
  EXPECT_NE(Baseline(r, "megatron_column_row"), nullptr);
}

// Llama-style projections are einsums "bsi,oi->bso" with [out, in] kernels:
// Megatron splits q's kernel on its free dim 0 and o's on its contracted dim 1.
TEST(SuggestTest, MegatronSplitsEinsumProjections) {
  const std::string text = R"({"name": "proj", "mesh": {"data": 1, "model": 2},
    "inputs": {"x": {"shape": [-1, -1, 8], "sharding": ["data"]}},
    "params": {"q.weight": {"shape": [16, 8]}, "o.weight": {"shape": [8, 16]}},
    "layers": [
      {"name": "q", "op": "einsum", "equation": "bsi,oi->bso", "inputs": ["x", "q.weight"]},
      {"name": "act", "op": "relu", "input": "q"},
      {"name": "o", "op": "einsum", "equation": "bsi,oi->bso", "inputs": ["act", "o.weight"]}],
    "outputs": ["o"]})";
  ASSERT_OK_AND_ASSIGN(ModelFile model, ParseModelFile(text, ""));
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, Options(2, {{{"x", {1, 1, 8}}}})));
  const Suggestion* meg = Baseline(r, "megatron_column_row");
  ASSERT_NE(meg, nullptr);
  EXPECT_EQ(meg->model.FindParam("q.weight")->sharding.ToString(), "P('model')");
  EXPECT_EQ(meg->model.FindParam("o.weight")->sharding.ToString(), "P(None, 'model')");
}

// A stack of 5 tied blocks priced from its 1- and 2-block copies gives the
// whole model's figures, for every named layout on every mesh of 4 devices.
TEST(SuggestTest, BlockPricingMatchesTheWholeModel) {
  const ModelFile model = Blocks(5);
  EXPECT_EQ(NumStackBlocks(model), 5);
  EXPECT_EQ(NumStackBlocks(TwoBlocks()), 0);  // too short to gain
  ASSERT_OK_AND_ASSIGN(LayoutSpace space, BuildLayoutSpace(model, 4));
  const ShapeSet shapes = {{"x", {8, 64}}};
  int compared = 0;
  for (const Mesh& mesh : space.meshes) {
    for (const NamedLayout& n : NamedLayouts(model, space)) {
      const ModelFile m = Materialize(model, space, n.layout, mesh);
      absl::StatusOr<Prediction> whole = PredictAtShape(m, mesh, shapes, CostFigures{});
      absl::StatusOr<Prediction> one = PredictAtShape(CutToBlocks(m, 1), mesh, shapes, CostFigures{});
      absl::StatusOr<Prediction> two = PredictAtShape(CutToBlocks(m, 2), mesh, shapes, CostFigures{});
      ASSERT_EQ(whole.ok(), two.ok()) << n.name << " on " << mesh;
      if (!whole.ok()) continue;
      ASSERT_OK(one.status());
      const Prediction p = ExtrapolateBlocks(*one, *two, 5);
      const std::string what = absl::StrCat(n.name, " on ", mesh.ToString());
      EXPECT_EQ(p.bytes_per_request, whole->bytes_per_request) << what;
      EXPECT_EQ(p.rounds, whole->rounds) << what;
      EXPECT_EQ(p.param_bytes_per_worker, whole->param_bytes_per_worker) << what;
      EXPECT_NEAR(p.predicted_ms, whole->predicted_ms, 1e-9 * whole->predicted_ms) << what;
      ++compared;
    }
  }
  EXPECT_GE(compared, 10);
  // And the search over it picks a layout that types whole.
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, Options(4, {shapes})));
  EXPECT_OK(TypeModel(r.choice.model, r.choice.mesh, shapes).status());
  EXPECT_EQ(r.choice.model.layers.size(), model.layers.size());
}

// Column- then row-parallel linears on mesh[model=4]: y (64 x 1024 float32)
// is all-reduced. The figures' link bandwidth and hop latency reach the
// planner: at the defaults it picks the two-phase form (2 rounds, counted as
// 2 by PredictAtShape); when a hop costs 100 ms no collective is two-phase
// and each one costs at most 1 round.
TEST(SuggestTest, TwoPhaseAllReduceCountsTwoRounds) {
  const std::string text = absl::StrReplaceAll(
      R"({'name': 'mlp', 'mesh': {'model': 4}, 'inputs': {'x': {'shape': [-1, 1024]}},
    'params': {'w1': {'shape': [1024, 512], 'sharding': [null, 'model']},
               'w2': {'shape': [512, 1024], 'sharding': ['model', null]}},
    'layers': [{'name': 'h', 'op': 'linear', 'input': 'x', 'kernel': 'w1'},
      {'name': 'y', 'op': 'linear', 'input': 'h', 'kernel': 'w2', 'out_sharding': [null, null]}],
    'outputs': ['y']})",
      {{"'", "\""}});
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(text, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 4));
  const ShapeSet shapes = {{"x", {64, 1024}}};
  ASSERT_OK_AND_ASSIGN(TypedModel typed, TypeModel(m, mesh, shapes));
  // Sums the rounds of every collective; counts the two-phase ones.
  auto rounds_of = [&](const CostFigures& figures, int64_t* two_phase, int64_t* max_rounds) {
    CompiledPlan plan = *CompileModel(typed, {0, 1, 2, 3}, CompileOptionsFor(figures));
    int64_t total = 0;
    for (const LayerPlanInfo& layer : plan.layers) {
      for (const CollectiveInfo& c : layer.collectives) {
        if (c.pattern == kTwoPhaseAllReducePattern) {
          ++*two_phase;
          EXPECT_EQ(c.rounds, 2) << layer.layer;
        }
        *max_rounds = std::max(*max_rounds, c.rounds);
        total += c.rounds;
      }
    }
    return total;
  };
  int64_t two_phase = 0, max_rounds = 0;
  EXPECT_EQ(rounds_of(CostFigures{}, &two_phase, &max_rounds), 2);
  EXPECT_EQ(two_phase, 1);
  ASSERT_OK_AND_ASSIGN(Prediction p, PredictAtShape(m, mesh, shapes, CostFigures{}));
  EXPECT_EQ(p.rounds, 2);

  CostFigures slow_hop;
  slow_hop.hop_ms = 100;
  two_phase = 0;
  max_rounds = 0;
  const int64_t slow_rounds = rounds_of(slow_hop, &two_phase, &max_rounds);
  EXPECT_EQ(two_phase, 0);
  EXPECT_EQ(max_rounds, 1);
  ASSERT_OK_AND_ASSIGN(p, PredictAtShape(m, mesh, shapes, slow_hop));
  EXPECT_EQ(p.rounds, slow_rounds);
}

TEST(SuggestTest, BadInputsAreInvalidArgument) {
  EXPECT_THAT(Suggest(SmallSwiglu(), Options(0, {{{"x", {1, 1, 64}}}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "workers must be >= 1, got 0"));
  EXPECT_THAT(Suggest(SmallSwiglu(), Options(2, {})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no --input_shape"));
  EXPECT_THAT(Suggest(SmallSwiglu(), Options(2, {{{"x", {1, 64}}}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--input_shape x=1,64 does not match the model's [-1,-1,64]"));
  EXPECT_THAT(Suggest(SmallSwiglu(), Options(2, {{{"x", {1, 1, 32}}}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "x=1,1,32 does not match"));
  EXPECT_THAT(Suggest(SmallSwiglu(), Options(2, {{{"x", {1, 1, 64}}, {"z", {1}}}})).status(),
              StatusIs(absl::StatusCode::kNotFound, "has no input 'z'"));
}

}  // namespace
}  // namespace meshserve

namespace meshserve {
namespace {

// A file with "sharding": "auto" on one param: only that role is searched
// (the others keep the file's specs on the chosen mesh), and the written file
// has a spec for it, parsing without allow_auto_sharding.
TEST(SuggestTest, AutoShardingSearchesOnlyTheAutoParams) {
  absl::StatusOr<std::string> text = ReadFileToString(
      absl::StrCat(MESHSERVE_SOURCE_DIR, "/tests/integration/testdata/swiglu_small.json"));
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string from = R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)";
  const size_t pos = text->find(from);
  ASSERT_NE(pos, std::string::npos);
  std::string edited = *text;
  edited.replace(pos, from.size(), R"("sharding": "auto", "init": "lecun_normal"},
    "up_proj)");
  ASSERT_OK_AND_ASSIGN(ModelFile model, ParseModelFile(edited, "", /*allow_auto_sharding=*/true));
  ASSERT_OK_AND_ASSIGN(LayoutSpace space, BuildLayoutSpace(model, 2));
  for (const Role& r : space.roles) {
    if (r.kind != Role::kParam) continue;
    EXPECT_EQ(r.options.size(), r.key == "gate_proj.kernel" ? 7u : 1u) << r.key;
  }
  ASSERT_OK_AND_ASSIGN(SuggestResult r, Suggest(model, Options(2, {{{"x", {1, 1, 64}}}})));
  EXPECT_EQ(r.choice.model.FindParam("up_proj.kernel")->sharding.ToString(), "P('fsdp', 'model')");
  EXPECT_EQ(r.choice.model.FindParam("down_proj.kernel")->sharding.ToString(), "P('model', 'fsdp')");
  EXPECT_FALSE(r.choice.model.FindParam("gate_proj.kernel")->auto_sharding);
  ASSERT_OK_AND_ASSIGN(std::string written, SuggestedModelText(model, r.choice));
  EXPECT_EQ(written.find("\"auto\""), std::string::npos);
  ASSERT_OK_AND_ASSIGN(ModelFile back, ParseModelFile(written, ""));
  EXPECT_EQ(back.FindParam("gate_proj.kernel")->sharding,
            r.choice.model.FindParam("gate_proj.kernel")->sharding);
}

// "auto" where no layout types (on 3 workers the explicit up_proj spec
// P('fsdp', 'model') over [64, 256] divides on no mesh: 64 and 256 are not
// multiples of 3): the error names the "auto" param.
TEST(SuggestTest, AutoThatCannotBePlacedIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::string> text = ReadFileToString(
      absl::StrCat(MESHSERVE_SOURCE_DIR, "/tests/integration/testdata/swiglu_small.json"));
  ASSERT_TRUE(text.ok()) << text.status();
  std::string edited = *text;
  const std::string from = R"("sharding": ["fsdp", "model"], "init": "lecun_normal"},
    "up_proj)";
  edited.replace(edited.find(from), from.size(), R"("sharding": "auto", "init": "lecun_normal"},
    "up_proj)");
  ASSERT_OK_AND_ASSIGN(ModelFile model, ParseModelFile(edited, "", true));
  EXPECT_THAT(Suggest(model, Options(3, {{{"x", {3, 1, 64}}}})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "with param 'gate_proj.kernel' sharding \"auto\""));
}

}  // namespace
}  // namespace meshserve
