// The compiler proven on numbers: compiled programs run in process
// (compiler_interpreter.h) and are compared with a full-tensor reference
// computed with the same kernels, on 1, 2, 4 and 8 workers.
#include "server/compiler/compiler.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/program_proto.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using namespace ::meshserve::compiler_testing;  // NOLINT

PartitionSpec Spec(absl::string_view text) { return *ParsePartitionSpec(text); }

struct Case {
  std::string name;
  std::string json;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, PartitionSpec> overrides;
};

// Types, compiles for `num_workers`, runs, and compares with the reference.
void CheckCase(const Case& c, int num_workers, InterpreterStats* stats_out = nullptr) {
  SCOPED_TRACE(c.name + " on " + std::to_string(num_workers) + " workers");
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(c.json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, c.shapes, c.overrides));
  CompileOptions opts{"p1", 3};
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm,
                       CompileModel(tm, BlockWorkers(mesh.num_devices(), num_workers), opts));
  EXPECT_EQ(static_cast<int>(cm.programs.size()), num_workers);
  for (const auto& [w, p] : cm.programs) {
    EXPECT_EQ(p.worker, w);
    EXPECT_EQ(p.generation, 3);
    EXPECT_FALSE(SerializeProgram(p).empty());
  }
  InterpreterStats stats;
  ExpectPlanMatchesReference(m, tm, cm, c.shapes, &stats);
  if (num_workers == 1) {
    EXPECT_EQ(stats.network_bytes, 0);
  }
  if (stats_out != nullptr) *stats_out = stats;
}

class CompilerNumbersTest : public ::testing::TestWithParam<int> {};

TEST_P(CompilerNumbersTest, SeedLinear) {
  CheckCase({"linear", SeedLinear(), {{"x", {16, 32}}}, {}}, GetParam());
}

TEST_P(CompilerNumbersTest, SeedLinearWithRequestOutSharding) {
  CheckCase({"linear", SeedLinear(), {{"x", {16, 32}}},
             {{"y", Spec("P(None, 'data')")}}},
            GetParam());
}

TEST_P(CompilerNumbersTest, Swiglu) {
  CheckCase({"swiglu", Swiglu(16, 32), {{"x", {4, 2, 16}}}, {}}, GetParam());
}

TEST_P(CompilerNumbersTest, SwigluWithUnreducedResult) {
  CheckCase({"swiglu", Swiglu(16, 32, "{'spec': ['fsdp'], 'unreduced': ['model']}"),
             {{"x", {4, 2, 16}}}, {}},
            GetParam());
}

// y {U:model} + y {U:model}: partial sums added locally, reduced at the end.
TEST_P(CompilerNumbersTest, AddOfUnreducedPartialSums) {
  std::string json = absl::StrReplaceAll(
      Swiglu(16, 32, "{'spec': ['fsdp'], 'unreduced': ['model']}"),
      {{"}],\n    \"outputs\": [\"y\"]",
        "}, {\"name\": \"y2\", \"op\": \"add\", \"inputs\": [\"y\", \"y\"]}],\n"
        "    \"outputs\": [\"y2\"]"}});
  ASSERT_NE(json.find("y2"), std::string::npos);
  CheckCase({"swiglu+add", json, {{"x", {4, 2, 16}}}, {}}, GetParam());
}

TEST_P(CompilerNumbersTest, SwigluWithRequestOutShardings) {
  for (const PartitionSpec& spec :
       {Spec("P(None, None, 'model')"), Spec("P('model', None, 'fsdp')"),
        Spec("P('fsdp', unreduced={'model'})"), Spec("P()")}) {
    SCOPED_TRACE(spec.ToString());
    CheckCase({"swiglu", Swiglu(16, 32), {{"x", {4, 2, 16}}}, {{"y", spec}}}, GetParam());
  }
}

TEST_P(CompilerNumbersTest, TransformerBlock) {
  CheckCase({"block", TransformerBlock(), {{"x", {2, 4, 16}}}, {}}, GetParam());
}

TEST_P(CompilerNumbersTest, TransformerBlockWithRequestOutSharding) {
  CheckCase({"block", TransformerBlock(), {{"x", {2, 4, 16}}},
             {{"out", Spec("P(None, 'model', 'data')")}}},
            GetParam());
}

TEST_P(CompilerNumbersTest, GroupedQueryAttention) {
  CheckCase({"attn", AttentionBlock(), {{"x", {2, 5, 32}}}, {}}, GetParam());
}

TEST_P(CompilerNumbersTest, EmbedNormsTransposeReshardEinsum) {
  CheckCase({"misc", MiscOps(), {{"ids", {4, 4}}}, {}}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Workers, CompilerNumbersTest, ::testing::Values(1, 2, 4, 8));

TEST(CompilerTest, InputSlicesAndOutputPieces) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Swiglu(16, 32), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {4, 2, 16}}}));
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, BlockWorkers(8, 2), {"p", 0}));
  // x is P('fsdp'): one slice per device; devices 0-3 (fsdp=0) get rows 0:2.
  ASSERT_EQ(cm.input_slices.size(), 8u);
  EXPECT_EQ(cm.input_slices[0].box.ToString(), "[0:2, 0:2, 0:16]");
  EXPECT_EQ(cm.input_slices[0].worker, 0);
  EXPECT_EQ(cm.input_slices[5].box.ToString(), "[2:4, 0:2, 0:16]");
  EXPECT_EQ(cm.input_slices[5].worker, 1);
  // y is P('fsdp', None, 'model'): 8 distinct boxes, one piece each.
  ASSERT_EQ(cm.output_pieces.size(), 8u);
  int64_t covered = 0;
  for (const auto& p : cm.output_pieces) covered += p.box.NumElements();
  EXPECT_EQ(covered, 4 * 2 * 16);
}

TEST(CompilerTest, OneReplicaPerBoxForReplicatedOutputs) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(Swiglu(16, 32, "[]"), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {4, 2, 16}}}));
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, BlockWorkers(8, 4), {"p", 0}));
  ASSERT_EQ(cm.output_pieces.size(), 1u);
  EXPECT_EQ(cm.output_pieces[0].box.ToString(), "[0:4, 0:2, 0:16]");
}

TEST(CompilerTest, TagsAreUniqueAndTemporariesAreFreed) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(TransformerBlock(), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {2, 4, 16}}}));
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, BlockWorkers(8, 8), {"prog", 0}));
  std::map<std::string, int> sends, recvs;
  std::map<std::pair<int64_t, std::string>, bool> live;
  for (const auto& [w, p] : cm.programs) {
    for (const StepIr& step : p.steps) {
      if (const auto* s = std::get_if<SendStepIr>(&step)) ++sends[s->tag];
      if (const auto* s = std::get_if<RecvStepIr>(&step)) ++recvs[s->tag];
      if (const auto* s = std::get_if<ComputeStepIr>(&step)) live[{s->device, s->output}] = true;
      if (const auto* s = std::get_if<RecvStepIr>(&step)) live[{s->device, s->buffer}] = true;
      if (const auto* s = std::get_if<CopyStepIr>(&step)) live[{s->dst_device, s->dst}] = true;
      if (const auto* s = std::get_if<FreeStepIr>(&step)) live.erase({s->device, s->buffer});
    }
  }
  EXPECT_FALSE(sends.empty());
  for (const auto& [tag, n] : sends) {
    EXPECT_EQ(n, 1) << tag;
    EXPECT_EQ(recvs[tag], 1) << tag;
    EXPECT_EQ(tag.rfind("prog/", 0), 0u) << tag;
  }
  // Only the output's buffer is still live at the end.
  std::set<std::string> names;
  for (const auto& [key, unused] : live) names.insert(key.second);
  EXPECT_EQ(names.size(), 1u) << ::testing::PrintToString(names);
}

// Axes of size 1 shard nothing: on mesh[fsdp=1, model=1] P('fsdp', 'model') is
// the layout of P(), so the program copies no param and re-lays out no value
// (the 1-worker SwiGLU once copied its 192 MiB of weights on every request).
TEST(CompilerTest, SizeOneAxesCopyNothing) {
  const std::string json = absl::StrReplaceAll(Swiglu(16, 32, "[null, null, null]"),
                                                {{R"({"fsdp": 2, "model": 4})",
                                                  R"({"fsdp": 1, "model": 1})"}});
  Case c{"swiglu on one device", json, {{"x", {4, 2, 16}}}, {}};
  CheckCase(c, 1);
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(json, ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 1));
  ASSERT_EQ(mesh.num_devices(), 1);
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, c.shapes));
  ASSERT_OK_AND_ASSIGN(CompiledPlan cm, CompileModel(tm, BlockWorkers(1, 1), {"p", 0}));
  int64_t copies = 0, computes = 0;
  for (const StepIr& step : cm.programs.at(0).steps) {
    copies += std::holds_alternative<CopyStepIr>(step) ? 1 : 0;
    computes += std::holds_alternative<ComputeStepIr>(step) ? 1 : 0;
  }
  EXPECT_EQ(copies, 0) << cm.ToString();
  EXPECT_EQ(computes, 5) << cm.ToString();  // gate, up, silu, mul, down
  EXPECT_EQ(cm.bytes_moved, 0);
}

// "value (purpose)" of every collective that crosses the network when
// SeedLinear(in, out) runs 8 rows on 2 workers.
absl::StatusOr<std::vector<std::string>> NetworkCollectives(int in, int out) {
  MS_ASSIGN_OR_RETURN(ModelFile m, ParseModelFile(SeedLinear(in, out), ""));
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(m, 8));
  MS_ASSIGN_OR_RETURN(TypedModel tm, TypeModel(m, mesh, {{"x", {8, in}}}));
  MS_ASSIGN_OR_RETURN(CompiledPlan cm, CompileModel(tm, BlockWorkers(8, 2), {"p", 0}));
  std::vector<std::string> names;
  for (const LayerPlanInfo& layer : cm.layers) {
    for (const CollectiveInfo& c : layer.collectives) {
      if (c.bytes > 0) names.push_back(absl::StrCat(c.value, " (", c.purpose, ")"));
    }
  }
  return names;
}

// x P('data', None) @ kernel P(None, 'data') -> y P('data', None): gathering
// a small kernel (8 KiB, one exchange) beats gathering x's rows and
// all-to-all'ing y (3 KiB, two exchanges); a 4 MiB kernel does not.
TEST(CompilerTest, AnExchangeFewerWinsUnlessItMovesMuchMore) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> small, NetworkCollectives(32, 64));
  EXPECT_THAT(small, ::testing::ElementsAre("kernel (rhs)"));
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> large, NetworkCollectives(1024, 1024));
  EXPECT_THAT(large, ::testing::ElementsAre("x (lhs)", "y (result)"));
  CheckCase({"small sharded kernel", SeedLinear(), {{"x", {8, 32}}}, {}}, 2);
}

TEST(CompilerTest, RejectsDeviceWorkersOfTheWrongLength) {
  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(SeedLinear(), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 8));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {16, 32}}}));
  EXPECT_THAT(CompileModel(tm, {0, 0}, {"p", 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "device_workers has 2 entries"));
  EXPECT_THAT(CompileModel(tm, {0, 0, 0, 0, 0, 0, 0, -1}, {"p", 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "negative worker id -1"));
}

}  // namespace
}  // namespace meshserve
