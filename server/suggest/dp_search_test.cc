// DpBestLayout (dp_search.h) against exhaustive search: on small models with
// residual adds, a branch (two linears reading one value, multiplied), tied
// params across blocks and the example linear, on every candidate mesh and
// for single shapes and a mix, the DP's score equals the minimum of the
// whole-model PredictAtShape (cost_model.h, the independent reference) over
// every layout of the space, and the DP's layout scores that minimum.
#include "server/suggest/dp_search.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "server/suggest/layout_space.h"

namespace meshserve {
namespace {

ModelFile Parse(const std::string& text) {
  absl::StatusOr<ModelFile> m = ParseModelFile(absl::StrReplaceAll(text, {{"'", "\""}}), "");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

// x -> rms_norm -> up -> relu -> down, + x.
ModelFile ResidualMlp() {
  return Parse(
      "{'name': 'res_mlp', 'mesh': {'data': 2, 'model': 2}, 'inputs': {'x': {'shape': [-1, 8], "
      "'sharding': ['data']}}, 'params': {'norm.scale': {'shape': [8], 'init': 'ones'}, "
      "'up.kernel': {'shape': [8, 16]}, 'down.kernel': {'shape': [16, 8]}}, 'layers': ["
      "{'name': 'n', 'op': 'rms_norm', 'input': 'x', 'scale': 'norm.scale'},"
      "{'name': 'up', 'op': 'linear', 'input': 'n', 'kernel': 'up.kernel'},"
      "{'name': 'act', 'op': 'relu', 'input': 'up'},"
      "{'name': 'down', 'op': 'linear', 'input': 'act', 'kernel': 'down.kernel'},"
      "{'name': 'y', 'op': 'add', 'inputs': ['x', 'down']}], 'outputs': ['y']}");
}

// Two tied residual blocks: h = x + x W0, y = h + h W1 (W0, W1 one role).
ModelFile TiedResidual() {
  return Parse(
      "{'name': 'tied', 'mesh': {'data': 2, 'model': 2}, 'inputs': {'x': {'shape': [-1, 8], "
      "'sharding': ['data']}}, 'params': {'blocks.0.w': {'shape': [8, 8]}, "
      "'blocks.1.w': {'shape': [8, 8]}}, 'layers': ["
      "{'name': 'blocks.0.l', 'op': 'linear', 'input': 'x', 'kernel': 'blocks.0.w'},"
      "{'name': 'blocks.0.h', 'op': 'add', 'inputs': ['x', 'blocks.0.l']},"
      "{'name': 'blocks.1.l', 'op': 'linear', 'input': 'blocks.0.h', 'kernel': 'blocks.1.w'},"
      "{'name': 'blocks.1.h', 'op': 'add', 'inputs': ['blocks.0.h', 'blocks.1.l']}],"
      "'outputs': ['blocks.1.h']}");
}

// A gated branch: y = x + silu(x Wa) * (x Wb).
ModelFile Gated() {
  return Parse(
      "{'name': 'gated', 'mesh': {'data': 2, 'model': 2}, 'inputs': {'x': {'shape': [-1, 8], "
      "'sharding': ['data']}}, 'params': {'wa': {'shape': [8, 8]}, 'wb': {'shape': [8, 8]}}, "
      "'layers': [{'name': 'a', 'op': 'linear', 'input': 'x', 'kernel': 'wa'},"
      "{'name': 'g', 'op': 'silu', 'input': 'a'},"
      "{'name': 'b', 'op': 'linear', 'input': 'x', 'kernel': 'wb'},"
      "{'name': 'm', 'op': 'mul', 'inputs': ['g', 'b']},"
      "{'name': 'y', 'op': 'add', 'inputs': ['x', 'm']}], 'outputs': ['y']}");
}

ModelFile LinearExample() {
  absl::StatusOr<ModelFile> m =
      LoadModelFile(absl::StrCat(MESHSERVE_SOURCE_DIR, "/examples/models/linear.json"));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

// Mean PredictAtShape ms over the shape sets; infinity when rejected.
double WholeScore(const ModelFile& model, const LayoutSpace& space, const Layout& layout,
                  const Mesh& mesh, const std::vector<ShapeSet>& shapes) {
  const ModelFile m = Materialize(model, space, layout, mesh);
  double ms = 0;
  for (const ShapeSet& s : shapes) {
    absl::StatusOr<Prediction> p = PredictAtShape(m, mesh, s, CostFigures{});
    if (!p.ok()) return std::numeric_limits<double>::infinity();
    ms += p->predicted_ms / static_cast<double>(shapes.size());
  }
  return ms;
}

// The minimum of WholeScore over every layout of the space on `mesh`.
double ExhaustiveMin(const ModelFile& model, const LayoutSpace& space, const Mesh& mesh,
                     const std::vector<ShapeSet>& shapes) {
  double best = std::numeric_limits<double>::infinity();
  Layout layout(space.roles.size(), 0);
  while (true) {
    best = std::min(best, WholeScore(model, space, layout, mesh, shapes));
    size_t r = 0;
    for (; r < layout.size(); ++r) {
      if (++layout[r] < static_cast<int>(space.roles[r].options.size())) break;
      layout[r] = 0;
    }
    if (r == layout.size()) return best;
  }
}

struct Case {
  std::string label;
  ModelFile model;
  int64_t workers;
  std::vector<ShapeSet> shapes;
};

TEST(DpSearchTest, FindsTheExhaustiveMinimum) {
  const std::vector<Case> cases = {
      {"linear on 4", LinearExample(), 4, {{{"x", {8, 32}}}}},
      {"residual mlp on 4, batch 8", ResidualMlp(), 4, {{{"x", {8, 8}}}}},
      {"residual mlp on 2, mix 8 + 1", ResidualMlp(), 2, {{{"x", {8, 8}}}, {{"x", {1, 8}}}}},
      {"tied residual on 4, batch 1", TiedResidual(), 4, {{{"x", {1, 8}}}}},
      {"tied residual on 4, batch 64", TiedResidual(), 4, {{{"x", {64, 8}}}}},
      {"gated on 4, batch 4", Gated(), 4, {{{"x", {4, 8}}}}},
      {"gated on 2, batch 1", Gated(), 2, {{{"x", {1, 8}}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<LayoutSpace> space = BuildLayoutSpace(c.model, c.workers, &c.shapes.front());
    ASSERT_TRUE(space.ok()) << space.status();
    LayerCostCache costs{CostFigures{}};
    for (const Mesh& mesh : space->meshes) {
      SCOPED_TRACE(mesh.ToString());
      const double want = ExhaustiveMin(c.model, *space, mesh, c.shapes);
      std::optional<DpResult> dp = DpBestLayout(c.model, *space, mesh, c.shapes, costs);
      if (want == std::numeric_limits<double>::infinity()) {
        EXPECT_FALSE(dp.has_value());
        continue;
      }
      ASSERT_TRUE(dp.has_value());
      EXPECT_NEAR(dp->mix_ms, want, 1e-9 * want);
      EXPECT_NEAR(WholeScore(c.model, *space, dp->layout, mesh, c.shapes), want, 1e-9 * want);
      EXPECT_GT(dp->max_states, 0);
    }
  }
}

TEST(DpSearchTest, GivesUpOverItsStateLimit) {
  const ModelFile model = Gated();
  const std::vector<ShapeSet> shapes = {{{"x", {4, 8}}}};
  absl::StatusOr<LayoutSpace> space = BuildLayoutSpace(model, 4, &shapes.front());
  ASSERT_TRUE(space.ok()) << space.status();
  LayerCostCache costs{CostFigures{}};
  EXPECT_FALSE(DpBestLayout(model, *space, space->meshes[1], shapes, costs, 2).has_value());
}

}  // namespace
}  // namespace meshserve
