// LayerCostCache (layer_costs.h) against the whole-model PredictAtShape
// (cost_model.h), the independent reference: for the example models, every
// candidate mesh, every named layout and random layouts, both agree on
// whether the layout is kept and on every figure; a second pass over the same
// layouts compiles nothing new.
#include "server/suggest/layer_costs.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/suggest/layout_space.h"

namespace meshserve {
namespace {

ModelFile Load(const std::string& path) {
  absl::StatusOr<ModelFile> m = LoadModelFile(absl::StrCat(MESHSERVE_SOURCE_DIR, "/", path));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelFile{};
}

struct Case {
  std::string path;
  int64_t workers;
  ShapeSet shapes;
};

// The named layouts plus `num_random` uniformly drawn ones.
std::vector<Layout> Layouts(const ModelFile& model, const LayoutSpace& space, int num_random) {
  std::vector<Layout> out;
  for (const NamedLayout& n : NamedLayouts(model, space)) out.push_back(n.layout);
  std::mt19937 rng(7);
  for (int i = 0; i < num_random; ++i) {
    Layout l;
    for (const Role& r : space.roles) {
      l.push_back(std::uniform_int_distribution<int>(0, r.options.size() - 1)(rng));
    }
    out.push_back(l);
  }
  return out;
}

TEST(LayerCostsTest, MatchesTheWholeModelPrediction) {
  const std::vector<Case> cases = {
      {"examples/models/linear.json", 4, {{"x", {8, 32}}}},
      {"tests/integration/testdata/swiglu_small.json", 4, {{"x", {2, 3, 64}}}},
      {"tests/integration/testdata/swiglu_small.json", 2, {{"x", {1, 1, 64}}}},
      {"examples/models/transformer.json", 4, {{"x", {4, 16, 64}}}},
      {"examples/models/transformer.json", 2, {{"x", {1, 16, 64}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.path, " on ", c.workers));
    const ModelFile model = Load(c.path);
    absl::StatusOr<LayoutSpace> space = BuildLayoutSpace(model, c.workers, &c.shapes);
    ASSERT_TRUE(space.ok()) << space.status();
    LayerCostCache cache{CostFigures{}};
    int kept = 0;
    const std::vector<Layout> layouts = Layouts(model, *space, 60);
    for (const Mesh& mesh : space->meshes) {
      for (const Layout& layout : layouts) {
        const ModelFile m = Materialize(model, *space, layout, mesh);
        absl::StatusOr<Prediction> whole = PredictAtShape(m, mesh, c.shapes, CostFigures{});
        absl::StatusOr<Prediction> parts = cache.Predict(m, mesh, c.shapes);
        ASSERT_EQ(whole.ok(), parts.ok()) << LayoutKey(m, mesh) << " " << whole.status() << " "
                                          << parts.status();
        if (!whole.ok()) continue;
        ++kept;
        EXPECT_EQ(parts->bytes_per_request, whole->bytes_per_request) << LayoutKey(m, mesh);
        EXPECT_EQ(parts->rounds, whole->rounds) << LayoutKey(m, mesh);
        EXPECT_EQ(parts->param_bytes_per_worker, whole->param_bytes_per_worker);
        EXPECT_NEAR(parts->predicted_ms, whole->predicted_ms, 1e-9 * whole->predicted_ms)
            << LayoutKey(m, mesh);
        EXPECT_NEAR(parts->gemm_ms, whole->gemm_ms, 1e-9 * (1 + whole->gemm_ms));
      }
    }
    EXPECT_GT(kept, 5);
    const int64_t compiles = cache.num_compiles();
    for (const Mesh& mesh : space->meshes) {
      for (const Layout& layout : layouts) {
        (void)cache.Predict(Materialize(model, *space, layout, mesh), mesh, c.shapes);
      }
    }
    EXPECT_EQ(cache.num_compiles(), compiles);
  }
}

}  // namespace
}  // namespace meshserve
