// Test helpers for the rule tests: fixtures that read like JAX code, and the
// names every rule test uses. The tests live in namespace
// meshserve::rules_testing (inside an anonymous namespace), so they need no
// using-declarations of their own.
//   Mesh mesh = MeshOrDie("mesh[x=2,y=2]");
//   ArrayType x = Arr(mesh, {8, 2}, "P('x', None)");
//   EXPECT_THAT(DotGeneralRule(x, w, Matmul(), std::nullopt), HasType("float32[8@x,8]"));
//   EXPECT_THAT(..., StatusIs(kInvalid, "phrase"));
// Header-only; used by *_test.cc in this folder.
//
// Thread-safety: pure test helpers.
#ifndef MESHSERVE_COMMON_SHARDING_RULES_RULES_TESTING_H_
#define MESHSERVE_COMMON_SHARDING_RULES_RULES_TESTING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/base/logging.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/rule_util.h"
#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace rules_testing {

using ::meshserve::testing::MeshOrDie;
using ::meshserve::testing::SpecOrDie;
using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;
inline constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// jax.device_put(np.zeros(shape, dtype), NamedSharding(mesh, spec)), typed.
inline ArrayType Arr(const Mesh& mesh, std::vector<int64_t> shape, absl::string_view spec,
                     DType dtype = DType::kFloat32) {
  absl::StatusOr<ArrayType> t = MakeArrayType(dtype, std::move(shape), mesh, SpecOrDie(spec));
  MS_CHECK(t.ok()) << "fixture array " << spec << ": " << t.status();
  return *t;
}

// x @ y for rank-2 operands.
inline DotDimensionNumbers Matmul() { return DotDimensionNumbers{{1}, {0}, {}, {}}; }

// Matches an OK StatusOr<ArrayType> whose JAX type string equals `expected`.
MATCHER_P(HasType, expected, "is OK with type " + std::string(expected)) {
  if (!arg.ok()) {
    *result_listener << "status " << arg.status();
    return false;
  }
  std::string got = arg->ToString();
  *result_listener << "type " << got;
  return got == std::string(expected);
}

// The fixture of the layout, reduce and concat/slice tests: mesh x=2, y=2 and
// an f32[8@x,2@y].
class ShapeOpsTest : public ::testing::Test {
 protected:
  Mesh mesh_ = MeshOrDie("mesh[x=2,y=2]");
  ArrayType x_ = Arr(mesh_, {8, 2}, "P('x', 'y')");
};

}  // namespace rules_testing
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RULES_RULES_TESTING_H_
