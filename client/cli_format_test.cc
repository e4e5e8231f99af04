// The CLI's renderings (cli_format.h): the type of an output from its spec and
// the cluster status listing.
#include "client/cli_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TypeFromSpecTest, TypeStringAndVisualization) {
  ASSERT_OK_AND_ASSIGN(OutputType type,
                       TypeFromSpec(DType::kFloat32, {16, 32}, "mesh[data=8]", "P(None, 'data')"));
  EXPECT_EQ(type.type_str, "float32[16,32@data]");
  EXPECT_THAT(type.visualization, HasSubstr("CPU 7"));
  EXPECT_THAT(TypeFromSpec(DType::kFloat32, {16, 32}, "mesh[data=8]", "P('nope')"),
              StatusIs(absl::StatusCode::kInvalidArgument, "nope"));
}

TEST(FormatStatusTest, ListsWorkersAndModels) {
  ClusterStatusResponse response;
  auto* w = response.add_workers();
  w->set_worker_id(3);
  w->set_address("127.0.0.1:4000");
  w->set_healthy(true);
  w->set_blas_core("SkylakeX");
  w->set_gemm_gflops_one_row(31.5);
  w->set_gemm_gflops_small_m(80);
  w->set_gemm_gflops_large_m(140.25);
  w->set_memory_bytes_per_s(1.5e10);
  auto* p = w->add_placements();
  p->set_model("linear");
  p->add_devices(3);
  p->add_coords("data=3");
  auto* m = response.add_models();
  m->set_name("linear");
  m->set_state("ready");
  m->set_mesh("mesh[data=8]");
  std::string text = FormatStatus(response);
  EXPECT_THAT(text, HasSubstr("workers: 1"));
  EXPECT_THAT(text, HasSubstr("worker 3  127.0.0.1:4000  healthy  blas=SkylakeX"));
  EXPECT_THAT(text, HasSubstr("coords [data=3]"));
  EXPECT_THAT(text, HasSubstr("calibration: GEMM 31.5 / 80.0 / 140.2 GFLOP/s (one row / M<=16 / "
                              "large M), memory 15.0 GB/s"));
  EXPECT_THAT(text, HasSubstr("linear  ready  mesh[data=8]"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("last scale step")));
  w->set_warming(true);  // a joiner touching its pool before it is placed on
  EXPECT_THAT(FormatStatus(response), HasSubstr("worker 3  127.0.0.1:4000  warming  blas="));
}

TEST(FormatStatusTest, ShowsVersionsReplicasAndTheLastScaleStep) {
  ClusterStatusResponse response;
  auto* p = response.add_workers()->add_placements();
  p->set_model("mlp");
  p->set_generation(4);
  p->set_version(2);
  p->add_devices(0);
  p->add_replica_devices(1);
  auto* m = response.add_models();
  m->set_name("mlp");
  m->set_state("ready");
  m->set_mesh("mesh[model=8]");
  m->set_generation(4);
  m->set_version(2);
  m->set_replicas(1);
  auto* old_step = m->add_scale_steps();
  old_step->set_generation(3);
  auto* step = m->add_scale_steps();
  step->set_generation(4);
  step->set_workers(8);
  step->set_seconds(0.25);
  step->set_bytes_moved(1024);
  step->set_lower_bound_bytes(1024);
  step->set_bytes_local(2048);
  step->set_bytes_initialized(0);
  std::string text = FormatStatus(response);
  EXPECT_THAT(text, HasSubstr("version 2 replicas [1]"));
  EXPECT_THAT(text, HasSubstr("mlp  ready  mesh[model=8]  generation 4  version 2  replicas 1"));
  EXPECT_THAT(text, HasSubstr("last scale step: generation 4, 8 workers, 0.250 s, "
                              "bytes moved 1024 (lower bound 1024), local 2048, initialized 0"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("generation 3,")));
}

TEST(FormatDescribeTest, KvCacheHasItsOwnSectionWithBytesPerTokenPerWorker) {
  DescribeResponse r;
  r.set_model("tiny_lm");
  r.set_mesh("mesh[model=2]");
  auto* wk = r.add_values();
  wk->set_name("wk");
  wk->set_kind("param");
  wk->set_type_str("float32[8,4@model]");
  for (const char* name : {"attn.k_cache", "attn.v_cache"}) {
    auto* v = r.add_values();
    v->set_name(name);
    v->set_kind("kv_cache");
    v->set_layer_op("attention");
    v->set_type_str("float32[16,2@model,2]");
    v->set_visualization(
        "bytes per token: worker 3 (devices 0): 8\n"
        "bytes per token: worker 5 (devices 1): 8\n");
  }
  const std::string text = FormatDescribe(r);
  const size_t section =
      text.find("# kv cache (per attention layer: [tokens, kv_heads, head_dim])\n");
  ASSERT_NE(section, std::string::npos) << text;
  // Not among the model's values nor the visualisations: only in its section.
  EXPECT_EQ(text.find("attn.k_cache"), text.find("attn.k_cache", section)) << text;
  EXPECT_THAT(text, HasSubstr("\nwk  float32[8,4@model]\n"));
  EXPECT_THAT(text.substr(section),
              HasSubstr("attn.k_cache  float32[16,2@model,2]\n"
                        "  bytes per token: worker 3 (devices 0): 8\n"
                        "  bytes per token: worker 5 (devices 1): 8\n"
                        "attn.v_cache  float32[16,2@model,2]\n"));
  // 8 bytes of keys + 8 of values per worker.
  EXPECT_THAT(text, HasSubstr("total bytes per token (all layers, k and v): "
                              "worker 3 (devices 0): 16\n"
                              "total bytes per token (all layers, k and v): "
                              "worker 5 (devices 1): 16\n"));
}

TEST(FormatDescribeTest, NoKvCacheSectionForAModelThatDoesNotGenerate) {
  DescribeResponse r;
  r.set_model("lin");
  auto* x = r.add_values();
  x->set_name("x");
  x->set_kind("input");
  x->set_type_str("float32[8@data]");
  EXPECT_EQ(FormatDescribe(r).find("kv cache"), std::string::npos);
}

}  // namespace
}  // namespace client
}  // namespace meshserve
