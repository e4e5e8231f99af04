// MarkParamOnlySteps (param_only.h): its rules on hand-built programs, and on
// compiled test models proven on numbers with the reference interpreter's
// param cache (reference_interpreter.h): fill with one request's inputs, use
// with another's, and expect exactly what a plain run of the second returns.
// Marking any one more step must break that.
#include "server/compiler/param_only.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/model_file.h"
#include "common/program/ir_conv.h"
#include "common/program/testing/program_ir_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compiler/compiler.h"
#include "server/compiler/testing/reference_interpreter.h"
#include "server/compiler/testing/test_models.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using namespace ::meshserve::compiler_testing;  // NOLINT
using namespace ::meshserve::program_testing;   // NOLINT

constexpr DType kF32 = DType::kFloat32;

// lhs [m, k] . rhs [k, n] -> [m, n].
ComputeStepIr Dot(int64_t device, std::string lhs, std::string rhs, std::string output,
                  BoxIr box) {
  ComputeStepIr c = Compute(device, ComputeOp::kDotGeneral, {std::move(lhs), std::move(rhs)},
                            std::move(output), std::move(box), kF32);
  c.lhs_contracting = {1};
  c.rhs_contracting = {0};
  return c;
}

CompiledPlan PlanOf(std::map<int64_t, std::vector<StepIr>> steps) {
  CompiledPlan plan;
  plan.program_id = "p";
  for (auto& [w, s] : steps) plan.programs[w] = ProgramOf("p", "m", 1, w, std::move(s));
  return plan;
}

std::map<int64_t, std::vector<int64_t>> Marks(const CompiledPlan& plan) {
  std::map<int64_t, std::vector<int64_t>> marks;
  for (const auto& [w, p] : plan.programs) marks[w] = p.param_only_steps;
  return marks;
}

using MarkMap = std::map<int64_t, std::vector<int64_t>>;

// ---------------------------------------------------------------------------
// Fill then use, on numbers.

// Inputs other than RandomInputs': other floats, other ids (the "keep" mask
// stays a mask).
std::map<std::string, Tensor> OtherInputs(
    const ModelFile& m, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, Tensor> inputs = RandomInputs(m, shapes);
  uint64_t seed = 50;
  for (auto& [name, t] : inputs) {
    if (t.dtype() != DType::kInt32) {
      t = RandomTensor(t.shape(), seed++);
    } else if (name != "keep") {
      std::vector<int32_t> ids(t.NumElements());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 11 + 5) % 32);
      t = *Tensor::FromInt32(t.shape(), ids);
    }
  }
  return inputs;
}

struct FillUseResult {
  int64_t max_kept_bytes = 0;  // the fill's busiest worker
  int64_t skipped_steps = 0;   // by the use
};

// Plain run on inputs B; fill on inputs A; use on inputs B. An error when a
// run fails or the use's outputs are not bit for bit the plain run's.
absl::StatusOr<FillUseResult> FillThenUse(
    const ModelFile& m, const TypedModel& tm, const CompiledPlan& plan,
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  const std::map<std::string, Tensor> params = RandomParams(m);
  const std::map<std::string, Tensor> a = RandomInputs(m, shapes), b = OtherInputs(m, shapes);
  MS_ASSIGN_OR_RETURN(auto want, RunCompiledPlan(plan, tm, b, params), "plain run");
  ParamCacheRun cache;
  cache.mode = ParamCacheMode::kFill;
  MS_ASSIGN_OR_RETURN(auto filled, RunCompiledPlan(plan, tm, a, params, nullptr, &cache),
                      "fill run");
  cache.mode = ParamCacheMode::kUse;
  MS_ASSIGN_OR_RETURN(auto got, RunCompiledPlan(plan, tm, b, params, nullptr, &cache),
                      "use run");
  bool inputs_matter = false;
  for (const std::string& o : m.outputs) {
    if (MaxAbsDiff(got.at(o), want.at(o)) != 0) {
      return Internal("output '", o, "' of the use run differs by ",
                      MaxAbsDiff(got.at(o), want.at(o)));
    }
    inputs_matter = inputs_matter || MaxAbsDiff(filled.at(o), want.at(o)) > 0;
  }
  // Else a use that replays the fill's values would pass unnoticed.
  if (!inputs_matter) return FailedPrecondition("inputs A and B give the same outputs");
  FillUseResult result;
  for (const auto& [w, bytes] : cache.kept_bytes) {
    result.max_kept_bytes = std::max(result.max_kept_bytes, bytes);
  }
  result.skipped_steps = cache.skipped_steps;
  return result;
}

int64_t NumMarks(const CompiledPlan& plan) {
  int64_t n = 0;
  for (const auto& [w, p] : plan.programs) n += static_cast<int64_t>(p.param_only_steps.size());
  return n;
}

// One line per step, "*" before the marked ones: context for failures.
std::string Describe(const CompiledPlan& plan) {
  std::string out;
  for (const auto& [w, p] : plan.programs) {
    std::set<int64_t> marks(p.param_only_steps.begin(), p.param_only_steps.end());
    for (size_t i = 0; i < p.steps.size(); ++i) {
      absl::StrAppend(&out, w, " ", i, marks.count(static_cast<int64_t>(i)) ? " * " : "   ");
      std::visit(
          [&out](const auto& s) {
            using T = std::decay_t<decltype(s)>;
            if constexpr (std::is_same_v<T, ComputeStepIr>) {
              absl::StrAppend(&out, ComputeOpName(s.op), " -> ", s.output, "@", s.device, " ",
                              BoxIrToString(s.out_box));
            } else if constexpr (std::is_same_v<T, SendStepIr>) {
              absl::StrAppend(&out, "send ", s.buffer, "@", s.device, " ", BoxIrToString(s.box),
                              " to ", s.dst_worker, " tag ", s.tag);
            } else if constexpr (std::is_same_v<T, RecvStepIr>) {
              absl::StrAppend(&out, "recv ", s.buffer, "@", s.device, " ", BoxIrToString(s.box),
                              s.accumulate ? " +=" : "", " tag ", s.tag);
            } else if constexpr (std::is_same_v<T, CopyStepIr>) {
              absl::StrAppend(&out, "copy ", s.src, "@", s.src_device, " -> ", s.dst, "@",
                              s.dst_device, " ", BoxIrToString(s.box), s.accumulate ? " +=" : "");
            } else if constexpr (std::is_same_v<T, FreeStepIr>) {
              absl::StrAppend(&out, "free ", s.buffer, "@", s.device);
            } else {
              absl::StrAppend(&out, "output ", s.output, " <- ", s.buffer, "@", s.device);
            }
          },
          p.steps[i]);
      absl::StrAppend(&out, "\n");
    }
  }
  return absl::StrCat(out, "kept_param_bytes ", plan.kept_param_bytes, "\n");
}

void ExpectPairsMarkedAlike(const CompiledPlan& plan) {
  std::map<std::string, std::vector<bool>> by_tag;  // send's then recv's mark
  for (const auto& [w, p] : plan.programs) {
    std::set<int64_t> marks(p.param_only_steps.begin(), p.param_only_steps.end());
    for (size_t i = 0; i < p.steps.size(); ++i) {
      bool marked = marks.count(static_cast<int64_t>(i)) > 0;
      if (const auto* s = std::get_if<SendStepIr>(&p.steps[i])) by_tag[s->tag].push_back(marked);
      if (const auto* r = std::get_if<RecvStepIr>(&p.steps[i])) by_tag[r->tag].push_back(marked);
    }
  }
  for (const auto& [tag, marks] : by_tag) {
    ASSERT_EQ(marks.size(), 2u) << tag;
    EXPECT_EQ(marks[0], marks[1]) << "tag " << tag;
  }
}

// ---------------------------------------------------------------------------
// Hand-built programs.

// y = x [4, 4] P('data') . w [4, 8] P(None, 'data') on data=2, one device per
// worker: each worker all-gathers w (a copy of its own half, a send of it, a
// recv of the other's) into t0/w, then computes its rows of y.
std::string GatherModel() {
  return Json(R"({'name': 'g', 'mesh': {'data': 2},
    'inputs': {'x': {'shape': [-1, 4], 'sharding': ['data']}},
    'params': {'w': {'shape': [4, 8], 'sharding': [null, 'data']}},
    'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'w',
                'out_sharding': ['data']}],
    'outputs': ['y']})");
}

CompiledPlan GatherPlan() {
  std::map<int64_t, std::vector<StepIr>> steps;
  for (int64_t d : {0, 1}) {
    const int64_t o = 1 - d;
    const BoxIr own = IrBox({{0, 4}, {4 * d, 4 * d + 4}});
    const BoxIr other = IrBox({{0, 4}, {4 * o, 4 * o + 4}});
    const BoxIr full = IrBox({{0, 4}, {0, 8}}), rows = IrBox({{2 * d, 2 * d + 2}, {0, 8}});
    steps[d] = {Copy(d, "param/w", own, d, "t0/w", full, kF32),
                Send(d, "param/w", own, o, o, absl::StrCat("p/", d)),
                Recv(d, "t0/w", other, absl::StrCat("p/", o), false, full, kF32, o),
                Dot(d, "in/x", "t0/w", "t1/y", rows),
                Free(d, "t0/w"),
                Output(d, "t1/y", rows, "y"),
                Free(d, "t1/y")};
  }
  CompiledPlan plan = PlanOf(std::move(steps));
  for (int64_t d : {0, 1}) {
    Box rows = UncheckedBoxFromIr(IrBox({{2 * d, 2 * d + 2}, {0, 4}}));
    plan.input_slices.push_back({"x", d, d, rows});
  }
  return plan;
}

TEST(ParamOnlyTest, MarksAParamAllGatherNotTheDotThatReadsIt) {
  CompiledPlan plan = GatherPlan();
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0, 1, 2, 4}}, {1, {0, 1, 2, 4}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 4 * 8 * 4);  // the gathered w, float32, per worker

  ASSERT_OK_AND_ASSIGN(ModelFile m, ParseModelFile(GatherModel(), ""));
  ASSERT_OK_AND_ASSIGN(Mesh mesh, ResolveMesh(m, 2));
  ASSERT_OK_AND_ASSIGN(TypedModel tm, TypeModel(m, mesh, {{"x", {4, 4}}}));
  ASSERT_OK_AND_ASSIGN(FillUseResult r, FillThenUse(m, tm, plan, {{"x", {4, 4}}}));
  EXPECT_EQ(r.max_kept_bytes, plan.kept_param_bytes);
  EXPECT_EQ(r.skipped_steps, 8);
}

// A reduction that mixes a param with the request's input is the request's.
TEST(ParamOnlyTest, AParamReducedIntoAnInputDerivedBufferIsNotMarked) {
  const BoxIr box = IrBox({{0, 4}, {0, 4}});
  const StepIr send = Send(0, "param/w", box, 1, 1, "r");
  const StepIr recv_add = Recv(1, "t/s", box, "r", /*accumulate=*/true, box, kF32, 0);
  // The input's part first, the param's sum added into it.
  CompiledPlan before = PlanOf(
      {{0, {send}},
       {1, {Compute(1, ComputeOp::kRelu, {"in/x"}, "t/s", box, kF32), recv_add,
            Copy(1, "param/w", box, 1, "t/s", box, kF32, /*accumulate=*/true),
            Output(1, "t/s", box, "s"), Free(1, "t/s")}}});
  // The param's sum first, the input's part added into it.
  CompiledPlan after = PlanOf(
      {{0, {send}},
       {1, {recv_add, Copy(1, "in/x", box, 1, "t/s", box, kF32, /*accumulate=*/true),
            Output(1, "t/s", box, "s"), Free(1, "t/s")}}});
  for (CompiledPlan* plan : {&before, &after}) {
    MarkParamOnlySteps(plan);
    EXPECT_EQ(Marks(*plan), (MarkMap{{0, {}}, {1, {}}})) << Describe(*plan);
    EXPECT_EQ(plan->kept_param_bytes, 0);
  }
}

TEST(ParamOnlyTest, ABufferWithAnUnmarkedWriterHasNoMarkedWriter) {
  const BoxIr full = IrBox({{0, 4}, {0, 8}});
  CompiledPlan plan =
      PlanOf({{0, {Copy(0, "param/w", IrBox({{0, 4}, {0, 4}}), 0, "t/b", full, kF32),
                   Copy(0, "in/x", IrBox({{0, 4}, {4, 8}}), 0, "t/b", full, kF32),
                   Output(0, "t/b", full, "b"), Free(0, "t/b")}}});
  plan.programs[0].param_only_steps = {0, 3};  // stale marks are replaced
  plan.kept_param_bytes = 7;
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 0);
}

// The compiler frees a value on every device, also where it never had a box.
TEST(ParamOnlyTest, FreesAreMarkedIffTheirBufferIsParamOnly) {
  const BoxIr box = IrBox({{0, 4}, {0, 4}});
  CompiledPlan plan = PlanOf(
      {{0, {Compute(0, ComputeOp::kRelu, {"param/w"}, "t/a", box, kF32),
            Compute(0, ComputeOp::kRelu, {"in/x"}, "t/b", box, kF32),
            Compute(0, ComputeOp::kAdd, {"t/a", "t/b"}, "t/c", box, kF32), Free(0, "t/a"),
            Free(0, "t/b"), Output(0, "t/c", box, "c"), Free(0, "t/c"), Free(1, "t/a"),
            Free(0, "in/x"), Free(0, "param/w")}}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0, 3}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 4 * 4 * 4);  // t/a, read by the add
}

// Each accumulating copy reads what the others wrote: growing the marking
// from nothing would admit none of them.
TEST(ParamOnlyTest, AccumulatedPartialSumsOfParamsAreMarked) {
  const BoxIr box = IrBox({{0, 2}, {0, 2}});
  std::vector<StepIr> steps;
  for (int64_t d : {0, 1, 2}) {
    ComputeStepIr dot = Dot(d, "param/a", "param/b", "t/p", box);
    dot.partial = true;
    steps.push_back(dot);
  }
  for (int64_t d : {0, 1, 2}) {
    steps.push_back(Copy(d, "t/p", box, 0, "t/r", box, kF32, /*accumulate=*/d > 0));
  }
  for (int64_t d : {0, 1, 2}) steps.push_back(Free(d, "t/p"));
  steps.push_back(Compute(0, ComputeOp::kAdd, {"in/x", "t/r"}, "t/y", box, kF32));
  steps.push_back(Output(0, "t/y", box, "y"));
  steps.push_back(Free(0, "t/r"));
  CompiledPlan plan = PlanOf({{0, steps}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 2 * 2 * 4);  // t/r
}

// An unskipped step reading a buffer before its last writer would see less
// than what a fill keeps.
TEST(ParamOnlyTest, AnUnmarkedReadBeforeALaterWriterUnmarksTheBuffer) {
  const BoxIr full = IrBox({{0, 4}, {0, 8}});
  const BoxIr left = IrBox({{0, 4}, {0, 4}}), right = IrBox({{0, 4}, {4, 8}});
  CompiledPlan plan = PlanOf({{0, {Copy(0, "param/w", left, 0, "t/b", full, kF32),
                                   Output(0, "t/b", left, "b"),
                                   Copy(0, "param/w", right, 0, "t/b", full, kF32),
                                   Output(0, "t/b", right, "b"), Free(0, "t/b")}}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 0);
}

TEST(ParamOnlyTest, OnlyPairedSendsAndRecvsAreMarked) {
  const BoxIr box = IrBox({{0, 8}});
  auto send = [&](const std::string& tag, int64_t dst) {
    return Send(0, "param/w", box, dst, dst, tag);
  };
  auto recv_and_output = [&](const std::string& tag, int64_t device) {
    return std::vector<StepIr>{Recv(device, "t/" + tag, box, tag, false, box, kF32, 0),
                               Output(device, "t/" + tag, box, tag)};
  };
  std::vector<StepIr> w1 = recv_and_output("a", 1), w1c = recv_and_output("c", 1),
                      w1d = recv_and_output("d", 1);
  w1.insert(w1.end(), w1c.begin(), w1c.end());
  w1.insert(w1.end(), w1d.begin(), w1d.end());
  // "a": paired; "b": sent to worker 1, received on 2; "c": sent twice; "d":
  // never sent.
  CompiledPlan plan = PlanOf({{0, {send("a", 1), send("b", 1), send("c", 1), send("c", 1)}},
                              {1, w1},
                              {2, recv_and_output("b", 2)}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0}}, {1, {0}}, {2, {}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 8 * 4);  // t/a on worker 1
}

// zeros depends on out_box alone, fixed per program; positions are a
// generation step's own (decode_step.h) and never kept.
TEST(ParamOnlyTest, ComputesWithoutInputsAreMarkedButNotPositions) {
  const BoxIr box = IrBox({{0, 4}});
  CompiledPlan plan =
      PlanOf({{0, {Compute(0, ComputeOp::kZeros, {}, "t/z", box, DType::kInt32),
                   Compute(0, ComputeOp::kAdd, {"in/x", "t/z"}, "t/y", box, kF32),
                   Output(0, "t/y", box, "y"), Free(0, "t/z")}}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0, 3}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 4 * 4);  // int32
  CompiledPlan positions =
      PlanOf({{0, {Compute(0, ComputeOp::kPositions, {}, "t/pos", box, DType::kInt32),
                   Compute(0, ComputeOp::kAdd, {"in/x", "t/pos"}, "t/y", box, kF32),
                   Output(0, "t/y", box, "y"), Free(0, "t/pos")}}});
  MarkParamOnlySteps(&positions);
  EXPECT_EQ(Marks(positions), (MarkMap{{0, {}}})) << Describe(positions);
}

// Box and dtype of the step that makes each kept buffer; unset dtypes
// resolved as the worker does; the busiest worker, not the sum.
TEST(ParamOnlyTest, KeptBytesFollowTheMakersBoxAndDType) {
  const BoxIr half = IrBox({{0, 4}, {0, 4}}), full = IrBox({{0, 4}, {0, 8}});
  ComputeStepIr partial = Dot(0, "param/w", "param/w", "t/p", half);
  partial.partial = true;
  partial.out_dtype = DType::kBFloat16;  // partial sums are float32 regardless
  std::vector<StepIr> w0 = {
      Copy(0, "param/w", half, 0, "t/h", full, DType::kBFloat16),               // 32 x 2
      Compute(0, ComputeOp::kRelu, {"t/h"}, "t/g", full, std::nullopt),      // 32 x 2
      partial,                                                               // 16 x 4
      Compute(0, ComputeOp::kRelu, {"param/w"}, "t/s", BoxIr{}, DType::kFloat64),  // 1 x 8
      Copy(0, "t/g", half, 0, "t/u", half, std::nullopt),                    // 16 x 2
  };
  for (const char* kept : {"t/h", "t/g", "t/p", "t/s", "t/u"}) {
    w0.push_back(Compute(0, ComputeOp::kAdd, {"in/x", kept}, absl::StrCat(kept, "+x"), half));
  }
  const BoxIr ten = IrBox({{0, 10}});
  CompiledPlan plan =
      PlanOf({{0, w0},
              {1, {Copy(1, "param/w", ten, 1, "t/k", ten, kF32),
                   Compute(1, ComputeOp::kAdd, {"in/x", "t/k"}, "t/y", ten)}}});
  MarkParamOnlySteps(&plan);
  EXPECT_EQ(Marks(plan), (MarkMap{{0, {0, 1, 2, 3, 4}}, {1, {0}}})) << Describe(plan);
  EXPECT_EQ(plan.kept_param_bytes, 64 + 64 + 64 + 8 + 32);
}

// A param's slice copied onto its own device, box == dst_box, float32, rank 2,
// is not made by the worker but read in place by a dot_general's rhs
// (ParamSliceOf, common/program/compute_step.h): the copy is marked, and the
// slice counts no kept bytes unless another step reads it (which makes it).
TEST(ParamOnlyTest, AParamSliceReadInPlaceByADotKeepsNoBytes) {
  const BoxIr rows = IrBox({{0, 4}, {0, 8}}), out = IrBox({{0, 2}, {0, 4}});
  auto head = [&](std::vector<StepIr> readers) {
    std::vector<StepIr> steps = {Copy(0, "param/head", rows, 0, "t/head", rows, kF32)};
    for (StepIr& r : readers) steps.push_back(std::move(r));
    CompiledPlan plan = PlanOf({{0, std::move(steps)}});
    MarkParamOnlySteps(&plan);
    return plan;
  };
  // x [2, 8] . head slice [4, 8] over dim 1 of each: the LM head's logits.
  ComputeStepIr logits = Dot(0, "in/x", "t/head", "t/y", out);
  logits.rhs_contracting = {1};
  CompiledPlan in_place = head({logits, Free(0, "t/head")});
  EXPECT_EQ(Marks(in_place), (MarkMap{{0, {0, 2}}})) << Describe(in_place);
  EXPECT_EQ(in_place.kept_param_bytes, 0);
  // Read by an add too, or as a dot's lhs: the worker makes the buffer.
  CompiledPlan also_add = head({logits, Compute(0, ComputeOp::kAdd, {"in/x", "t/head"}, "t/z",
                                                rows)});
  EXPECT_EQ(also_add.kept_param_bytes, 4 * 8 * 4) << Describe(also_add);
  CompiledPlan as_lhs = head({Dot(0, "t/head", "in/x", "t/y", out)});
  EXPECT_EQ(as_lhs.kept_param_bytes, 4 * 8 * 4) << Describe(as_lhs);
  // Copies the worker runs: to bfloat16, or a box that is not dst_box.
  for (const CopyStepIr& copy : {Copy(0, "param/head", rows, 0, "t/head", rows, DType::kBFloat16),
                                 Copy(0, "param/head", out, 0, "t/head", rows, kF32)}) {
    CompiledPlan plan = PlanOf({{0, {copy, logits}}});
    MarkParamOnlySteps(&plan);
    EXPECT_EQ(Marks(plan), (MarkMap{{0, {0}}})) << Describe(plan);
    EXPECT_GT(plan.kept_param_bytes, 0) << Describe(plan);
  }
}

// ---------------------------------------------------------------------------
// Compiled models.

std::string ExampleModel(const std::string& name) {
  return std::string(MESHSERVE_SOURCE_DIR) + "/examples/models/" + name + ".json";
}

struct ModelCase {
  std::string name;
  std::string json;     // or
  std::string example;  // examples/models/<example>.json
  std::map<std::string, std::vector<int64_t>> shapes;
};

struct CompiledCase {
  ModelFile model;
  TypedModel typed;
  CompiledPlan plan;
};

absl::StatusOr<CompiledCase> CompileCase(const ModelCase& c, int num_workers) {
  CompiledCase out;
  if (c.example.empty()) {
    MS_ASSIGN_OR_RETURN(out.model, ParseModelFile(c.json, ""));
  } else {
    MS_ASSIGN_OR_RETURN(out.model, LoadModelFile(ExampleModel(c.example)));
  }
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(out.model, 8));
  MS_ASSIGN_OR_RETURN(out.typed, TypeModel(out.model, mesh, c.shapes));
  MS_ASSIGN_OR_RETURN(out.plan, CompileModel(out.typed,
                                             BlockWorkers(mesh.num_devices(), num_workers),
                                             {"p", 1}));
  return out;
}

// linear.json on 2 workers of 4 devices: the strategy all-gathers the kernel
// [32, 32] P(None, 'data') onto every device (AnExchangeFewerWinsUnless... in
// compiler_test.cc); that is every step but the dots, the input frees and the
// outputs.
TEST(ParamOnlyCompiledTest, LinearExampleMarksTheKernelAllGather) {
  ASSERT_OK_AND_ASSIGN(CompiledCase c, CompileCase({"linear", "", "linear", {{"x", {16, 32}}}}, 2));
  const CompiledPlan& plan = c.plan;
  int64_t sends = 0;
  for (const auto& [w, p] : plan.programs) {
    std::set<int64_t> marks(p.param_only_steps.begin(), p.param_only_steps.end());
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const StepIr& step = p.steps[i];
      bool dot = std::holds_alternative<ComputeStepIr>(step);
      bool output = std::holds_alternative<OutputStepIr>(step);
      const auto* free = std::get_if<FreeStepIr>(&step);
      bool input_free = free != nullptr && free->buffer == "in/x";
      sends += std::holds_alternative<SendStepIr>(step) ? 1 : 0;
      EXPECT_EQ(marks.count(static_cast<int64_t>(i)) > 0, !dot && !output && !input_free)
          << "worker " << w << " step " << i << "\n" << Describe(plan);
    }
  }
  EXPECT_EQ(sends, 8);  // each device's kernel box to the other worker
  // Each worker keeps the whole kernel on each of its 4 devices.
  EXPECT_EQ(plan.kept_param_bytes, 4 * 32 * 32 * 4);
}

// Axes of size 1 copy no param (compiler_test.cc SizeOneAxesCopyNothing):
// nothing to mark, nothing kept, and a use run is a plain run.
TEST(ParamOnlyCompiledTest, NothingIsMarkedWhenNoParamMoves) {
  const std::string json = absl::StrReplaceAll(
      Swiglu(16, 32, "[null, null, null]"),
      {{R"({"fsdp": 2, "model": 4})", R"({"fsdp": 1, "model": 1})"}});
  ModelCase mc{"swiglu on one device", json, "", {{"x", {4, 2, 16}}}};
  ASSERT_OK_AND_ASSIGN(CompiledCase c, CompileCase(mc, 1));
  EXPECT_EQ(NumMarks(c.plan), 0) << Describe(c.plan);
  EXPECT_EQ(c.plan.kept_param_bytes, 0);
  ASSERT_OK_AND_ASSIGN(FillUseResult r, FillThenUse(c.model, c.typed, c.plan, mc.shapes));
  EXPECT_EQ(r.max_kept_bytes, 0);
  EXPECT_EQ(r.skipped_steps, 0);
}

std::vector<ModelCase> ModelCases() {
  return {
      {"seed_linear", SeedLinear(), "", {{"x", {16, 32}}}},
      {"seed_linear_1024", SeedLinear(1024, 1024), "", {{"x", {8, 1024}}}},
      {"swiglu", Swiglu(16, 32), "", {{"x", {4, 2, 16}}}},
      {"swiglu_unreduced", Swiglu(16, 32, "{'spec': ['fsdp'], 'unreduced': ['model']}"), "",
       {{"x", {4, 2, 16}}}},
      {"block", TransformerBlock(), "", {{"x", {2, 4, 16}}}},
      {"misc", MiscOps(), "", {{"ids", {4, 4}}}},
      {"linear_json", "", "linear", {{"x", {16, 32}}}},
      {"transformer_json", "", "transformer", {{"x", {2, 16, 64}}}},
      {"swiglu_batched_json", "", "swiglu_batched", {{"x", {4, 256}}}},
  };
}

class FillThenUseTest : public ::testing::TestWithParam<std::tuple<ModelCase, int>> {};

TEST_P(FillThenUseTest, UseRunEqualsAPlainRun) {
  const auto& [mc, num_workers] = GetParam();
  ASSERT_OK_AND_ASSIGN(CompiledCase c, CompileCase(mc, num_workers));
  ExpectPairsMarkedAlike(c.plan);
  absl::StatusOr<FillUseResult> r = FillThenUse(c.model, c.typed, c.plan, mc.shapes);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << Describe(c.plan);
  EXPECT_EQ(r->max_kept_bytes, c.plan.kept_param_bytes) << Describe(c.plan);
  EXPECT_EQ(r->skipped_steps, NumMarks(c.plan));
}

INSTANTIATE_TEST_SUITE_P(Models, FillThenUseTest,
                         ::testing::Combine(::testing::ValuesIn(ModelCases()),
                                            ::testing::Values(1, 2, 4, 8)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_on_",
                                               std::get<1>(info.param));
                         });

// (worker, step index) of the steps an output depends on: the compiler also
// computes replicas that no output piece reads (one replica per box).
std::set<std::pair<int64_t, int64_t>> LiveSteps(const CompiledPlan& plan) {
  std::set<std::pair<int64_t, int64_t>> live;
  std::set<std::pair<int64_t, std::string>> live_reads;  // (device, buffer)
  std::set<std::string> live_tags;
  bool grew = true;
  while (grew) {
    grew = false;
    for (const auto& [w, p] : plan.programs) {
      for (size_t i = p.steps.size(); i-- > 0;) {
        const StepIr& step = p.steps[i];
        std::optional<std::pair<int64_t, std::string>> writes;
        if (const auto* c = std::get_if<ComputeStepIr>(&step)) writes = {c->device, c->output};
        if (const auto* r = std::get_if<RecvStepIr>(&step)) writes = {r->device, r->buffer};
        if (const auto* c = std::get_if<CopyStepIr>(&step)) writes = {c->dst_device, c->dst};
        const auto* send = std::get_if<SendStepIr>(&step);
        bool is_live = std::holds_alternative<OutputStepIr>(step) ||
                       (writes.has_value() && live_reads.count(*writes) > 0) ||
                       (send != nullptr && live_tags.count(send->tag) > 0);
        if (!is_live || !live.emplace(w, static_cast<int64_t>(i)).second) continue;
        grew = true;
        std::visit(
            [&](const auto& s) {
              using T = std::decay_t<decltype(s)>;
              if constexpr (std::is_same_v<T, ComputeStepIr>) {
                for (const std::string& in : s.inputs) live_reads.emplace(s.device, in);
              } else if constexpr (std::is_same_v<T, CopyStepIr>) {
                live_reads.emplace(s.src_device, s.src);
                if (s.accumulate) live_reads.emplace(s.dst_device, s.dst);
              } else if constexpr (std::is_same_v<T, RecvStepIr>) {
                live_tags.insert(s.tag);
                if (s.accumulate) live_reads.emplace(s.device, s.buffer);
              } else if constexpr (std::is_same_v<T, SendStepIr> ||
                                   std::is_same_v<T, OutputStepIr>) {
                live_reads.emplace(s.device, s.buffer);
              }
            },
            step);
      }
    }
  }
  return live;
}

// The harness can fail: adding any one live unmarked step (not a free, whose
// skipping changes no value) to the marks, or dropping a marked send or recv,
// must make the fill-then-use check fail.
TEST(FillThenUseMutationTest, OneMoreOrOneLessMarkIsCaught) {
  int64_t added = 0, dropped = 0;
  for (const ModelCase& mc : ModelCases()) {
    if (mc.name != "seed_linear" && mc.name != "misc" && mc.name != "transformer_json") continue;
    SCOPED_TRACE(mc.name);
    ASSERT_OK_AND_ASSIGN(CompiledCase c, CompileCase(mc, 2));
    ASSERT_OK(FillThenUse(c.model, c.typed, c.plan, mc.shapes).status());
    const std::set<std::pair<int64_t, int64_t>> live = LiveSteps(c.plan);
    for (const auto& [w, p] : c.plan.programs) {
      std::set<int64_t> marks(p.param_only_steps.begin(), p.param_only_steps.end());
      for (size_t i = 0; i < p.steps.size(); ++i) {
        const StepIr& step = p.steps[i];
        const bool marked = marks.count(static_cast<int64_t>(i)) > 0;
        bool pair = std::holds_alternative<SendStepIr>(step) ||
                    std::holds_alternative<RecvStepIr>(step);
        if (marked ? !pair : std::holds_alternative<FreeStepIr>(step)) continue;
        if (!marked && live.count({w, static_cast<int64_t>(i)}) == 0) continue;
        std::set<int64_t> mutated = marks;
        if (marked) {
          mutated.erase(static_cast<int64_t>(i));
        } else {
          mutated.insert(static_cast<int64_t>(i));
        }
        CompiledPlan plan = c.plan;
        plan.programs[w].param_only_steps.assign(mutated.begin(), mutated.end());
        EXPECT_FALSE(FillThenUse(c.model, c.typed, plan, mc.shapes).ok())
            << (marked ? "unmarking" : "marking") << " worker " << w << " step " << i
            << " went unnoticed\n" << Describe(c.plan);
        ++(marked ? dropped : added);
      }
    }
  }
  EXPECT_GT(added, 0);
  EXPECT_GT(dropped, 0);
}

}  // namespace
}  // namespace meshserve
