#include "server/coordinator/infer_request.h"

#include <cstring>
#include <functional>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A float32 model: input x of `shape` (-1: any size), relu layers named for
// `outputs`, each of x. Validation reads only names, dtypes and shapes.
std::shared_ptr<const ModelFile> Model(const std::string& name, std::vector<int64_t> shape,
                                       std::vector<std::string> outputs = {"y"}) {
  auto model = std::make_shared<ModelFile>();
  model->name = name;
  model->inputs.push_back({"x", std::move(shape), PartitionSpec(), DType::kFloat32});
  for (const std::string& out : outputs) {
    LayerDef layer;
    layer.name = out;
    layer.kind = ModelOp::kRelu;
    layer.inputs = {"x"};
    model->layers.push_back(std::move(layer));
  }
  model->outputs = std::move(outputs);
  return model;
}

std::shared_ptr<const ModelFile> Fixed() { return Model("fixed", {8, 6}); }
std::shared_ptr<const ModelFile> Ident() { return Model("ident", {-1, 4}); }
std::shared_ptr<const ModelFile> TwoOutputs() { return Model("two", {4, 2}, {"y", "z"}); }

std::string FloatBytes(int n) { return std::string(n * sizeof(float), '\0'); }

InferRequest FixedRequest() {
  InferRequest r;
  r.model = "fixed";
  r.id = "t";
  r.inputs.push_back({"x", DType::kFloat32, {8, 6}, FloatBytes(48)});
  return r;
}

TEST(InferRequestTest, ValidRequestInCompilerTerms) {
  InferRequest r = FixedRequest();
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v, ValidateInferRequest(Fixed(), r));
  EXPECT_EQ(v.model->name, "fixed");
  EXPECT_EQ(v.shapes.at("x"), (std::vector<int64_t>{8, 6}));
  EXPECT_THAT(v.outputs, ElementsAre("y"));
  EXPECT_TRUE(v.out_specs.empty());
  EXPECT_EQ(v.inputs.at("x"), &r.inputs[0]);
  EXPECT_EQ(v.cache_key_suffix, "x[8,6]");
}

TEST(InferRequestTest, OutShardingsJoinTheCacheKey) {
  InferRequest r = FixedRequest();
  r.out_shardings["y"] = "P(None, 'model')";
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v, ValidateInferRequest(Fixed(), r));
  ASSERT_EQ(v.out_specs.count("y"), 1u);
  EXPECT_EQ(v.cache_key_suffix, "x[8,6];y=" + v.out_specs.at("y").ToString());
}

TEST(InferRequestTest, RequestedOutputsComeInModelOrder) {
  InferRequest r;
  r.model = "two";
  r.inputs.push_back({"x", DType::kFloat32, {4, 2}, FloatBytes(8)});
  ASSERT_OK_AND_ASSIGN(ValidatedRequest all, ValidateInferRequest(TwoOutputs(), r));
  EXPECT_THAT(all.outputs, ElementsAre("y", "z"));
  r.requested_outputs = {"z", "y"};
  ASSERT_OK_AND_ASSIGN(ValidatedRequest both, ValidateInferRequest(TwoOutputs(), r));
  EXPECT_THAT(both.outputs, ElementsAre("y", "z"));
  r.requested_outputs = {"z"};
  ASSERT_OK_AND_ASSIGN(ValidatedRequest one, ValidateInferRequest(TwoOutputs(), r));
  EXPECT_THAT(one.outputs, ElementsAre("z"));
}

TEST(InferRequestTest, MinusOneDimTakesAnySizeFromOne) {
  InferRequest r;
  r.model = "ident";
  r.inputs.push_back({"x", DType::kFloat32, {6, 4}, FloatBytes(24)});
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v, ValidateInferRequest(Ident(), r));
  EXPECT_EQ(v.shapes.at("x"), (std::vector<int64_t>{6, 4}));
  InferRequest minus_one;
  minus_one.model = "ident";
  minus_one.inputs.push_back({"x", DType::kFloat32, {0, 4}, ""});
  EXPECT_THAT(ValidateInferRequest(Ident(), minus_one),
              StatusIs(absl::StatusCode::kInvalidArgument, "dim 0 is 0"));
}

TEST(InferRequestTest, BadRequestsGetInvalidArgumentNamingTheValue) {
  struct Case {
    std::function<void(InferRequest*)> mutate;
    std::string substr;
  };
  std::vector<Case> cases = {
      {[](InferRequest* r) { r->inputs[0].name = "z"; }, "has no input 'z' (inputs: x)"},
      {[](InferRequest* r) { r->inputs.clear(); }, "missing input 'x'"},
      {[](InferRequest* r) { r->inputs.push_back(r->inputs[0]); }, "'x' given twice"},
      {[](InferRequest* r) { r->inputs[0].dtype = DType::kBFloat16; },
       "dtype bfloat16, expected float32"},
      {[](InferRequest* r) { r->inputs[0].shape = {48}; }, "rank 1, expected rank 2"},
      {[](InferRequest* r) { r->inputs[0].shape = {6, 8}; }, "dim 0 is 6, expected 8"},
      {[](InferRequest* r) { r->inputs[0].bytes.pop_back(); },
       "191 bytes of data, expected 192"},
      {[](InferRequest* r) { r->out_shardings["y"] = "P('data'"; },
       "bad out_sharding 'P('data''"},
      {[](InferRequest* r) { r->out_shardings["q"] = "P()"; },
       "out_sharding for unknown output 'q'"},
      {[](InferRequest* r) { r->requested_outputs = {"q"}; }, "has no output 'q'"},
  };
  const std::shared_ptr<const ModelFile> model = Fixed();
  for (const Case& c : cases) {
    InferRequest r = FixedRequest();
    c.mutate(&r);
    EXPECT_THAT(ValidateInferRequest(model, r),
                StatusIs(absl::StatusCode::kInvalidArgument, c.substr));
  }
}

TEST(InferRequestTest, ErrorsNameTheModelAndTheExpectedShape) {
  InferRequest r = FixedRequest();
  r.inputs[0].shape = {6, 8};
  absl::StatusOr<ValidatedRequest> v = ValidateInferRequest(Fixed(), r);
  EXPECT_THAT(v.status().message(),
              HasSubstr("model 'fixed' input 'x': shape [6,8] dim 0 is 6, expected 8 "
                        "(model shape [8,6])"));
}

TEST(InferRequestTest, OverflowingShapeIsInvalidArgument) {
  InferRequest r;
  r.model = "ident";
  r.inputs.push_back({"x", DType::kFloat32, {int64_t{1} << 62, 4}, ""});
  EXPECT_THAT(ValidateInferRequest(Ident(), r),
              StatusIs(absl::StatusCode::kInvalidArgument, "overflows int64"));
}

// An ids model: input `ids` of `dtype` [-1, -1] read by embed 'tok' from a
// table of 10 rows.
std::shared_ptr<const ModelFile> IdsModel(DType dtype) {
  auto model = std::make_shared<ModelFile>();
  model->name = "lm";
  model->inputs.push_back({"ids", {-1, -1}, PartitionSpec(), dtype});
  ParamDef table;
  table.name = "wte";
  table.shape = {10, 4};
  model->params.push_back(table);
  LayerDef tok;
  tok.name = "tok";
  tok.kind = ModelOp::kEmbed;
  tok.inputs = {"ids"};
  tok.table = "wte";
  model->layers.push_back(tok);
  model->outputs = {"tok"};
  return model;
}

template <typename T>
InferRequest IdsRequest(DType dtype, std::vector<T> ids) {
  InferRequest r;
  r.model = "lm";
  std::string bytes(ids.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  r.inputs.push_back({"ids", dtype, {1, static_cast<int64_t>(ids.size())}, bytes});
  return r;
}

TEST(InferRequestTest, Int64IdsForAnInt32InputAreConverted) {
  InferRequest r = IdsRequest<int64_t>(DType::kInt64, {3, 0, 9});
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v, ValidateInferRequest(IdsModel(DType::kInt32), r));
  const NamedTensor& in = *v.inputs.at("ids");
  EXPECT_EQ(in.dtype, DType::kInt32);
  ASSERT_EQ(in.bytes.size(), 3 * sizeof(int32_t));
  std::vector<int32_t> got(3);
  std::memcpy(got.data(), in.bytes.data(), in.bytes.size());
  EXPECT_THAT(got, ElementsAre(3, 0, 9));
  InferRequest big = IdsRequest<int64_t>(DType::kInt64, {1, int64_t{1} << 40});
  EXPECT_THAT(ValidateInferRequest(IdsModel(DType::kInt32), big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input 'ids': element 1 = 1099511627776 is outside the int32"));
}

TEST(InferRequestTest, Int32IdsForAnInt64InputAreConverted) {
  InferRequest r = IdsRequest<int32_t>(DType::kInt32, {7, 2});
  ASSERT_OK_AND_ASSIGN(ValidatedRequest v, ValidateInferRequest(IdsModel(DType::kInt64), r));
  const NamedTensor& in = *v.inputs.at("ids");
  EXPECT_EQ(in.dtype, DType::kInt64);
  std::vector<int64_t> got(2);
  std::memcpy(got.data(), in.bytes.data(), in.bytes.size());
  EXPECT_THAT(got, ElementsAre(7, 2));
  InferRequest f = FixedRequest();
  f.model = "lm";
  f.inputs[0].name = "ids";
  EXPECT_THAT(ValidateInferRequest(IdsModel(DType::kInt64), f),
              StatusIs(absl::StatusCode::kInvalidArgument, "dtype float32"));
}

TEST(InferRequestTest, EmbedIdsOutsideTheVocabularyAreRejected) {
  for (DType dtype : {DType::kInt32, DType::kInt64}) {
    EXPECT_THAT(ValidateInferRequest(IdsModel(dtype), IdsRequest<int32_t>(DType::kInt32, {1, 10})),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "input 'ids': id 10 (element 1) is outside [0, 10) of embed "
                         "layer 'tok'"));
    EXPECT_THAT(ValidateInferRequest(IdsModel(dtype), IdsRequest<int64_t>(DType::kInt64, {-1})),
                StatusIs(absl::StatusCode::kInvalidArgument, "id -1 (element 0)"));
  }
}

}  // namespace
}  // namespace meshserve
