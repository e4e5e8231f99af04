#include "common/sharding/named_sharding.h"

#include <string>
#include <vector>

#include "absl/hash/hash_testing.h"
#include "common/sharding/testing/fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;

using ::meshserve::testing::MeshOrDie;
using ::meshserve::testing::SpecOrDie;

TEST(NamedShardingTest, CreatePadsSpecToRank) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s,
                       NamedSharding::Create(MeshOrDie("mesh[x=2,y=4]"), SpecOrDie("P('x')"), 3));
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.spec(), SpecOrDie("P('x', None, None)"));
  EXPECT_EQ(s.NumShardsAlongDim(0), 2);
  EXPECT_EQ(s.NumShardsAlongDim(1), 1);
  EXPECT_EQ(s.ToString(), "NamedSharding(mesh[x=2,y=4], P('x', None, None))");
}

TEST(NamedShardingTest, NumShardsAlongDimMultipliesTupleAxes) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s, NamedSharding::Create(
                                            MeshOrDie("mesh[x=2,y=3,z=5]"), SpecOrDie("P(('z', 'x'))"), 1));
  EXPECT_EQ(s.NumShardsAlongDim(0), 10);
  EXPECT_FALSE(s.IsFullyReplicated());
}

TEST(NamedShardingTest, CreateRejectsUnknownAxis) {
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"), SpecOrDie("P('z')"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Resource axis: z of P('z') is not found in mesh: ('x', 'y')."));
  EXPECT_THAT(NamedSharding::Create(Mesh(), SpecOrDie("P('x')"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "not found in mesh: ()"));
}

TEST(NamedShardingTest, CreateRejectsDuplicateAxis) {
  EXPECT_THAT(
      NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"), SpecOrDie("P('x', 'x')"), 2),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "A single NamedSharding spec specification can map every mesh axis "
               "to at most one positional dimension, but P('x', 'x') has "
               "duplicate entries for `x`"));
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"), SpecOrDie("P(('x', 'y'), 'y')"), 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "has duplicate entries for `y`"));
}

TEST(NamedShardingTest, CreateRejectsSpecLongerThanRank) {
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2]"),
                                    SpecOrDie("P('x', None, None, None)"), 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Length of sharding.spec (4) must be equal to aval's ndim (3)"));
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2]"), SpecOrDie("P()"), -1),
              StatusIs(absl::StatusCode::kInvalidArgument, "-1"));
}

TEST(NamedShardingTest, CreateRejectsBadUnreduced) {
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"),
                                    SpecOrDie("P('x', unreduced={'q'})"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "Unreduced axis: q"));
  EXPECT_THAT(NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"),
                                    SpecOrDie("P('x', unreduced={'x'})"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "partitions cannot overlap with unreduced axes"));
}

TEST(NamedShardingTest, CreateStoresUnreducedInMeshOrder) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s,
                       NamedSharding::Create(MeshOrDie("mesh[x=2,y=2,z=2]"),
                                             SpecOrDie("P(unreduced={'z', 'x'})"), 1));
  EXPECT_THAT(s.spec().unreduced(), ::testing::ElementsAre("x", "z"));
}

TEST(NamedShardingTest, HashIsCorrect) {
  std::vector<NamedSharding> values;
  for (const char* spec : {"P()", "P('x')", "P(None, 'x')", "P(('x', 'y'))",
                           "P(unreduced={'y'})"}) {
    auto s = NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"), SpecOrDie(spec), 2);
    ASSERT_THAT(s, IsOk());
    values.push_back(*s);
  }
  values.push_back(NamedSharding());
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly(values));
}

TEST(CheckDivisibleTest, AcceptsDivisibleShapes) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s, NamedSharding::Create(
                                            MeshOrDie("mesh[x=2,y=4]"), SpecOrDie("P('x', 'y')"), 2));
  EXPECT_THAT(CheckDivisible({4, 8}, s), IsOk());
}

TEST(CheckDivisibleTest, RejectsWithJaxMessage) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s,
                       NamedSharding::Create(MeshOrDie("mesh[x=2,y=2]"), SpecOrDie("P('x')"), 2));
  EXPECT_THAT(
      CheckDivisible({5, 2}, s),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "Sharding spec ('x',) implies that array axis 0 is partitioned 2 "
               "times, but does not evenly divide the dimension size 5. Got shape: "
               "(5, 2) and sharding P('x')"));
  ASSERT_OK_AND_ASSIGN(NamedSharding t, NamedSharding::Create(
                                            MeshOrDie("mesh[x=2,y=3]"), SpecOrDie("P(None, ('x', 'y'))"), 2));
  EXPECT_THAT(CheckDivisible({4, 8}, t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Sharding spec ('x', 'y') implies that array axis 1 is "
                       "partitioned 6 times"));
}

TEST(CheckDivisibleTest, IgnoresAutoAndManualAxes) {
  ASSERT_OK_AND_ASSIGN(NamedSharding s,
                       NamedSharding::Create(MeshOrDie("mesh[x=2,y=3:Auto]"),
                                             SpecOrDie("P(('x', 'y'))"), 1));
  EXPECT_THAT(CheckDivisible({4}, s), IsOk());
  EXPECT_THAT(CheckDivisible({3}, s),
              StatusIs(absl::StatusCode::kInvalidArgument, "(3,)"));
}

TEST(ExplicitOnlySpecTest, DropsAutoAndManualAxes) {
  Mesh mesh = MeshOrDie("mesh[x=2,y=2:Auto,z=2:Manual]");
  EXPECT_EQ(ExplicitOnlySpec(mesh, SpecOrDie("P(('x', 'y'), None)")), SpecOrDie("P('x', None)"));
  EXPECT_EQ(ExplicitOnlySpec(mesh, SpecOrDie("P('y', 'z', unreduced={'x', 'y'})")),
            SpecOrDie("P(None, None, unreduced={'x'})"));
}

ArrayType Type(DType dtype, std::vector<int64_t> shape, const char* mesh,
               const char* spec) {
  auto t = MakeArrayType(dtype, std::move(shape), MeshOrDie(mesh), SpecOrDie(spec));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : ArrayType();
}

TEST(ArrayTypeTest, ToStringMatchesJax) {
  EXPECT_EQ(Type(DType::kFloat32, {8, 4096, 8192}, "mesh[fsdp=2,model=4]",
                 "P('fsdp', None, 'model')")
                .ToString(),
            "float32[8@fsdp,4096,8192@model]");
  EXPECT_EQ(Type(DType::kFloat32, {128, 64}, "mesh[data=2,model=4]",
                 "P(('model', 'data'), None)")
                .ToString(),
            "float32[128@(model,data),64]");
  EXPECT_EQ(Type(DType::kBFloat16, {8, 4096, 2048}, "mesh[fsdp=2,model=4]",
                 "P('fsdp', unreduced={'model'})")
                .ToString(),
            "bfloat16[8@fsdp,4096,2048]{U:model}");
  EXPECT_EQ(Type(DType::kFloat32, {128, 64}, "mesh[x=2]", "P()").ToString(),
            "float32[128,64]");
  EXPECT_EQ(Type(DType::kFloat32, {}, "mesh[x=2]", "P()").ToString(), "float32[]");
}

TEST(ArrayTypeTest, ToStringShortDtype) {
  EXPECT_EQ(Type(DType::kFloat32, {8, 2}, "mesh[x=2]", "P('x')").ToString(true),
            "f32[8@x,2]");
}

TEST(ArrayTypeTest, ToStringShowsVaryingAndUnreducedInMeshOrder) {
  ArrayType t = Type(DType::kInt32, {4, 2}, "mesh[x=2:Manual,y=2]", "P(None, 'y')");
  t.varying = {"x"};
  EXPECT_EQ(t.ToString(), "int32[4,2@y]{V:x}");
  ArrayType u = Type(DType::kFloat32, {8, 16}, "mesh[a=2:Manual,b=2:Manual,c=2,d=2]",
                     "P(unreduced={'d', 'c'})");
  u.varying = {"b", "a"};
  EXPECT_EQ(u.ToString(), "float32[8,16]{V:(a,b), U:(c,d)}");
}

TEST(ArrayTypeTest, ToStringDropsAutoAxes) {
  EXPECT_EQ(Type(DType::kFloat32, {8, 4}, "mesh[x=2,y=2:Auto]", "P(('x', 'y'))")
                .ToString(),
            "float32[8@x,4]");
}

TEST(ArrayTypeTest, NumElementsAndBytes) {
  ArrayType t = Type(DType::kBFloat16, {8, 4}, "mesh[x=2]", "P('x')");
  EXPECT_EQ(t.NumElements(), 32);
  EXPECT_EQ(t.NumBytes(), 64);
  EXPECT_EQ(t.rank(), 2);
}

TEST(ArrayTypeTest, HashIsCorrect) {
  ArrayType varying = Type(DType::kInt32, {4, 2}, "mesh[x=2:Manual,y=2]", "P(None, 'y')");
  varying.varying = {"x"};
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly({
      ArrayType(), Type(DType::kFloat32, {8, 2}, "mesh[x=2]", "P('x')"),
      Type(DType::kBFloat16, {8, 2}, "mesh[x=2]", "P('x')"),
      Type(DType::kFloat32, {8, 4}, "mesh[x=2]", "P('x')"),
      Type(DType::kFloat32, {8, 2}, "mesh[x=2]", "P()"),
      Type(DType::kInt32, {4, 2}, "mesh[x=2:Manual,y=2]", "P(None, 'y')"), varying}));
}

TEST(MakeArrayTypeTest, RejectsInvalidInput) {
  EXPECT_THAT(MakeArrayType(DType::kFloat32, {5, 2}, MeshOrDie("mesh[x=2]"), SpecOrDie("P('x')")),
              StatusIs(absl::StatusCode::kInvalidArgument, "does not evenly divide"));
  EXPECT_THAT(MakeArrayType(DType::kFloat32, {4}, MeshOrDie("mesh[x=2]"), SpecOrDie("P('x', None)")),
              StatusIs(absl::StatusCode::kInvalidArgument, "Length of sharding.spec"));
  EXPECT_THAT(MakeArrayType(DType::kFloat32, {-4}, MeshOrDie("mesh[x=2]"), SpecOrDie("P()")),
              StatusIs(absl::StatusCode::kInvalidArgument, "negative dimension -4"));
  EXPECT_THAT(MakeArrayType(DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40},
                            MeshOrDie("mesh[x=2]"), SpecOrDie("P()")),
              StatusIs(absl::StatusCode::kInvalidArgument, "overflows"));
}

}  // namespace
}  // namespace meshserve
