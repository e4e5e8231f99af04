// ResolveTensorBox over a GPT-2-shaped model: a box of the fused c_attn
// assembled from its pieces equals the same box cut straight from the tensor
// (the reference: the tensor's values, sliced directly), tied and ignored
// names, params by name, and each error.
#include "server/coordinator/params/tensor_names.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

constexpr int64_t kD = 4;
const char kCAttn[] = "transformer.h.0.attn.c_attn.weight";

ParamDef Param(const std::string& name, std::vector<int64_t> shape, const std::string& from,
               std::vector<int64_t> from_offset) {
  ParamDef p;
  p.name = name;
  p.shape = std::move(shape);
  p.from = from.empty() ? name : from;
  p.has_from = !from.empty();
  p.from_offset = from_offset.empty() ? std::vector<int64_t>(p.shape.size(), 0) : from_offset;
  return p;
}

ModelFile Gpt2Like() {
  ModelFile m;
  m.name = "gpt2";
  m.params.push_back(Param("wte.weight", {10, kD}, "transformer.wte.weight", {}));
  m.params.push_back(Param("h.0.attn.q.weight", {kD, kD}, kCAttn, {0, 0}));
  m.params.push_back(Param("h.0.attn.k.weight", {kD, kD}, kCAttn, {0, kD}));
  m.params.push_back(Param("h.0.attn.v.weight", {kD, kD}, kCAttn, {0, 2 * kD}));
  m.checkpoint_tied["lm_head.weight"] = "wte.weight";
  m.checkpoint_ignored = {"transformer.h.0.attn.bias", "transformer.h.0.attn.masked_bias"};
  return m;
}

// Value of c_attn [kD, 3kD] at (i, j), and of a param at (i, j) read from it.
float CAttn(int64_t i, int64_t j) { return static_cast<float>(i * 3 * kD + j); }
float ParamValue(const ModelFile& m, const std::string& param, int64_t i, int64_t j) {
  const ParamDef* p = m.FindParam(param);
  return CAttn(i + p->from_offset[0], j + p->from_offset[1]);
}

// The box [offset, offset + shape) of c_attn assembled from the pieces, with
// each element written once; unwritten elements stay -1.
std::vector<float> Assemble(const ModelFile& m, const ResolvedBox& r, std::vector<int>* writes) {
  std::vector<float> out(r.shape[0] * r.shape[1], -1);
  writes->assign(out.size(), 0);
  for (const TensorPiece& piece : r.pieces) {
    for (int64_t i = piece.box[0].begin; i < piece.box[0].end; ++i) {
      for (int64_t j = piece.box[1].begin; j < piece.box[1].end; ++j) {
        const int64_t di = piece.dst_offset[0] + i - piece.box[0].begin;
        const int64_t dj = piece.dst_offset[1] + j - piece.box[1].begin;
        out[di * r.shape[1] + dj] = ParamValue(m, piece.param, i, j);
        ++(*writes)[di * r.shape[1] + dj];
      }
    }
  }
  return out;
}

TEST(TensorNamesTest, FusedBoxSpanningQAndKMatchesTheTensorSlice) {
  const ModelFile m = Gpt2Like();
  ASSERT_OK_AND_ASSIGN(ResolvedBox r, ResolveTensorBox(m, kCAttn, {1, kD / 2}, {2, kD}));
  EXPECT_FALSE(r.is_param);
  EXPECT_TRUE(r.shape_known);
  EXPECT_EQ(r.full_shape, (std::vector<int64_t>{kD, 3 * kD}));
  ASSERT_EQ(r.pieces.size(), 2u);
  EXPECT_EQ(r.pieces[0].param, "h.0.attn.q.weight");
  EXPECT_EQ(r.pieces[0].box, (Box{{1, 3}, {kD / 2, kD}}));
  EXPECT_EQ(r.pieces[0].dst_offset, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(r.pieces[1].param, "h.0.attn.k.weight");
  EXPECT_EQ(r.pieces[1].box, (Box{{1, 3}, {0, kD / 2}}));
  EXPECT_EQ(r.pieces[1].dst_offset, (std::vector<int64_t>{0, kD / 2}));
  EXPECT_EQ(r.uncovered, 0);
  std::vector<int> writes;
  const std::vector<float> got = Assemble(m, r, &writes);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < kD; ++j) {
      EXPECT_EQ(got[i * kD + j], CAttn(1 + i, kD / 2 + j)) << i << "," << j;
      EXPECT_EQ(writes[i * kD + j], 1);
    }
  }
}

TEST(TensorNamesTest, WholeFusedTensorIsThreePieces) {
  const ModelFile m = Gpt2Like();
  ASSERT_OK_AND_ASSIGN(ResolvedBox r, ResolveTensorBox(m, kCAttn, {}, {}));
  EXPECT_EQ(r.offset, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(r.shape, (std::vector<int64_t>{kD, 3 * kD}));
  ASSERT_EQ(r.pieces.size(), 3u);
  std::vector<int> writes;
  const std::vector<float> got = Assemble(m, r, &writes);
  for (int64_t i = 0; i < kD; ++i) {
    for (int64_t j = 0; j < 3 * kD; ++j) EXPECT_EQ(got[i * 3 * kD + j], CAttn(i, j));
  }
  // Only an offset: the rest of the tensor from there.
  ASSERT_OK_AND_ASSIGN(r, ResolveTensorBox(m, kCAttn, {2, 2 * kD + 1}, {}));
  EXPECT_EQ(r.shape, (std::vector<int64_t>{kD - 2, kD - 1}));
  ASSERT_EQ(r.pieces.size(), 1u);
  EXPECT_EQ(r.pieces[0].param, "h.0.attn.v.weight");
  EXPECT_EQ(r.pieces[0].box, (Box{{2, kD}, {1, kD}}));
}

TEST(TensorNamesTest, ParamNameIsOnePiece) {
  const ModelFile m = Gpt2Like();
  ASSERT_OK_AND_ASSIGN(ResolvedBox r, ResolveTensorBox(m, "h.0.attn.k.weight", {1, 0}, {2, 3}));
  EXPECT_TRUE(r.is_param);
  ASSERT_EQ(r.pieces.size(), 1u);
  EXPECT_EQ(r.pieces[0].box, (Box{{1, 3}, {0, 3}}));
  EXPECT_EQ(r.pieces[0].dst_offset, (std::vector<int64_t>{0, 0}));
  // A param's checkpoint name reaches the same param.
  ASSERT_OK_AND_ASSIGN(r, ResolveTensorBox(m, "transformer.wte.weight", {}, {}));
  ASSERT_EQ(r.pieces.size(), 1u);
  EXPECT_EQ(r.pieces[0].param, "wte.weight");
  EXPECT_EQ(r.pieces[0].box, (Box{{0, 10}, {0, kD}}));
}

TEST(TensorNamesTest, TiedNameReadsItsTwin) {
  const ModelFile m = Gpt2Like();
  ASSERT_OK_AND_ASSIGN(ResolvedBox r, ResolveTensorBox(m, "lm_head.weight", {3, 0}, {2, kD}));
  EXPECT_EQ(r.tensor, "wte.weight");
  EXPECT_NE(r.note.find("tied to 'wte.weight'"), std::string::npos) << r.note;
  ASSERT_EQ(r.pieces.size(), 1u);
  EXPECT_EQ(r.pieces[0].param, "wte.weight");
  EXPECT_EQ(r.pieces[0].box, (Box{{3, 5}, {0, kD}}));
}

TEST(TensorNamesTest, IgnoredNameHasNoPieces) {
  const ModelFile m = Gpt2Like();
  ASSERT_OK_AND_ASSIGN(ResolvedBox r,
                       ResolveTensorBox(m, "transformer.h.0.attn.masked_bias", {}, {7}));
  EXPECT_TRUE(r.ignored);
  EXPECT_TRUE(r.pieces.empty());
  EXPECT_NE(r.note.find("ignored"), std::string::npos) << r.note;
}

TEST(TensorNamesTest, PartlyReadTensorCountsUncovered) {
  ModelFile m;
  m.name = "half";
  m.params.push_back(Param("a", {2, 3}, "t", {0, 0}));
  m.params.push_back(Param("b", {2, 3}, "t", {2, 1}));  // t's extent [4, 4]; 4 unread
  ASSERT_OK_AND_ASSIGN(ResolvedBox r, ResolveTensorBox(m, "t", {}, {}));
  EXPECT_FALSE(r.shape_known);
  EXPECT_EQ(r.full_shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(r.uncovered, 4);
}

TEST(TensorNamesTest, Errors) {
  const ModelFile m = Gpt2Like();
  EXPECT_THAT(ResolveTensorBox(m, "h.0.attn.qq", {}, {}).status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'gpt2' has no param or checkpoint "
                                                    "tensor 'h.0.attn.qq'"));
  EXPECT_THAT(ResolveTensorBox(m, kCAttn, {0}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset [0] has 1 entries"));
  EXPECT_THAT(ResolveTensorBox(m, "wte.weight", {}, {1, 1, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "box shape [1, 1, 1] has 3 entries"));
  EXPECT_THAT(ResolveTensorBox(m, "wte.weight", {}, {0, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "must be >= 1"));
  EXPECT_THAT(ResolveTensorBox(m, kCAttn, {1, 10}, {2, 4}).status(),
              StatusIs(absl::StatusCode::kOutOfRange,
                       "of shape [4, 12]: the box at offset [1, 10] of shape [2, 4] is not "
                       "inside it"));
  EXPECT_THAT(ResolveTensorBox(m, "wte.weight", {-1, 0}, {1, 1}).status(),
              StatusIs(absl::StatusCode::kOutOfRange, "offset [-1, 0]"));
  EXPECT_THAT(ResolveTensorBox(m, "wte.weight", {10, 0}, {}).status(),
              StatusIs(absl::StatusCode::kOutOfRange, "offset [10, 0]"));
}

}  // namespace
}  // namespace meshserve
