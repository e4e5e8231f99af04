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
  EXPECT_THAT(text, HasSubstr("linear  ready  mesh[data=8]"));
}

}  // namespace
}  // namespace client
}  // namespace meshserve
