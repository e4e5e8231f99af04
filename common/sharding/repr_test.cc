#include "common/sharding/repr.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace meshserve {
namespace {

using ::testing::ElementsAre;

Mesh M(const char* text) {
  auto mesh = ParseMesh(text);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return mesh.ok() ? *mesh : Mesh();
}

TEST(ReprTest, PyTupleReprOfIntsPrintsPythonTuples) {
  EXPECT_EQ(PyTupleRepr(std::vector<int64_t>{}), "()");
  EXPECT_EQ(PyTupleRepr(std::vector<int64_t>{5}), "(5,)");
  EXPECT_EQ(PyTupleRepr(std::vector<int64_t>{8, 2}), "(8, 2)");
}

TEST(ReprTest, PyTupleReprOfNamesQuotesThem) {
  EXPECT_EQ(PyTupleRepr(std::vector<std::string>{}), "()");
  EXPECT_EQ(PyTupleRepr(std::vector<std::string>{"x"}), "('x',)");
  EXPECT_EQ(PyTupleRepr(std::vector<std::string>{"x", "y"}), "('x', 'y')");
}

TEST(ReprTest, EntryReprPrintsNoneNameOrTuple) {
  EXPECT_EQ(EntryRepr({}), "None");
  EXPECT_EQ(EntryRepr({"x"}), "'x'");
  EXPECT_EQ(EntryRepr({"x", "y"}), "('x', 'y')");
}

TEST(ReprTest, EntriesTupleReprPrintsEachEntry) {
  EXPECT_EQ(EntriesTupleRepr({}), "()");
  EXPECT_EQ(EntriesTupleRepr({{"x"}}), "('x',)");
  EXPECT_EQ(EntriesTupleRepr({{"x"}, {}}), "('x', None)");
  EXPECT_EQ(EntriesTupleRepr({{"x", "y"}, {"z"}}), "(('x', 'y'), 'z')");
}

TEST(ReprTest, AxisSetReprBracketsOnlySeveralAxes) {
  EXPECT_EQ(AxisSetRepr(std::vector<std::string>{"x"}), "x");
  EXPECT_EQ(AxisSetRepr(std::vector<std::string>{"x", "y"}), "(x,y)");
}

TEST(ReprTest, MeshAxisNamesRepr) {
  EXPECT_EQ(MeshAxisNamesRepr(M("mesh[x=2]")), "('x',)");
  EXPECT_EQ(MeshAxisNamesRepr(M("mesh[x=2,y=4]")), "('x', 'y')");
}

TEST(ReprTest, InMeshOrderSortsByMeshThenUnknownByNameAndDeduplicates) {
  const Mesh mesh = M("mesh[x=2,y=2,z=2]");
  EXPECT_THAT(InMeshOrder(mesh, {"z", "x"}), ElementsAre("x", "z"));
  EXPECT_THAT(InMeshOrder(mesh, {"y", "x", "y"}), ElementsAre("x", "y"));
  EXPECT_THAT(InMeshOrder(mesh, {"q", "z", "b", "q"}), ElementsAre("z", "b", "q"));
  EXPECT_THAT(InMeshOrder(mesh, {}), ElementsAre());
}

}  // namespace
}  // namespace meshserve
