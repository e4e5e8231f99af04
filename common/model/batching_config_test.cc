#include "common/model/batching_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/model_file.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

std::string Model(const std::string& batching, const std::string& x_shape = "[-1, 4]") {
  return absl::StrReplaceAll(absl::StrCat(R"({'name': 'm', 'mesh': {'data': 1},
    'inputs': {'x': {'shape': )", x_shape, R"(, 'sharding': [null, null]}},
    'params': {'k': {'shape': [4, 4], 'sharding': [null, null]}},
    'layers': [{'name': 'y', 'op': 'linear', 'input': 'x', 'kernel': 'k'}],
    'outputs': ['y'])", batching, "}"),
                             {{"'", "\""}});
}

TEST(BatchingConfigTest, AbsentMeansUnbatched) {
  absl::StatusOr<ModelFile> m = ParseModelFile(Model(""), "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->batching.has_value());
}

TEST(BatchingConfigTest, ReadsFieldsAndDefaults) {
  absl::StatusOr<ModelFile> m = ParseModelFile(
      Model(", 'batching': {'max_batch_size': 32, 'max_queue_delay_us': 500}"), "");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->batching.has_value());
  EXPECT_EQ(m->batching->max_batch_size, 32);
  EXPECT_EQ(m->batching->max_queue_delay_us, 500);
  EXPECT_EQ(m->batching->max_queue_size, 256);
  EXPECT_EQ(m->batching->max_concurrent_batches, 1);
  m = ParseModelFile(
      Model(", 'batching': {'max_batch_size': 2, 'max_concurrent_batches': 3}"), "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->batching->max_concurrent_batches, 3);
  m = ParseModelFile(Model(", 'batching': {'max_batch_size': 2, 'max_queue_size': 3}"), "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->batching->max_queue_delay_us, 0);
  EXPECT_EQ(m->batching->max_queue_size, 3);
}

TEST(BatchingConfigTest, Errors) {
  EXPECT_THAT(ParseModelFile(Model(", 'batching': 3"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "batching must be an object"));
  EXPECT_THAT(ParseModelFile(Model(", 'batching': {}"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_batch_size"));
  EXPECT_THAT(ParseModelFile(Model(", 'batching': {'max_batch_size': 0}"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "must be >= 1, got 0"));
  EXPECT_THAT(ParseModelFile(Model(", 'batching': {'max_batch_size': 2, 'delay': 1}"), "")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown field 'delay'"));
  EXPECT_THAT(
      ParseModelFile(Model(", 'batching': {'max_batch_size': 2, 'max_queue_delay_us': -1}"), "")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "max_queue_delay_us"));
  EXPECT_THAT(
      ParseModelFile(Model(", 'batching': {'max_batch_size': 2, 'max_concurrent_batches': 0}"),
                     "")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "batching.max_concurrent_batches must be >= 1, got 0"));
  EXPECT_THAT(ParseModelFile(Model(", 'batching': {'max_batch_size': 2}", "[2, 4]"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input 'x' must have a leading -1 (batch) dim"));
}

}  // namespace
}  // namespace meshserve
