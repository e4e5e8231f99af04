// Generator: per-model loops, request checks, seeds, version pinning.
#include "server/coordinator/generate/generator.h"

#include <map>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/generate/testing/fake_steps.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::FakeExecutor;
using ::meshserve::testing::Reference;
using ::meshserve::testing::StatusIs;
using ::testing::ElementsAreArray;

class FakeBackend : public GenerationBackend {
 public:
  absl::StatusOr<GenerationModel> Model(const std::string& name) override {
    if (name == "plain") return absl::FailedPreconditionError("model 'plain' cannot generate");
    if (name != "lm") return absl::NotFoundError("no model '" + name + "'");
    GenerationModel m;
    m.vocab_size = 50;
    m.context_length = 64;
    m.block_tokens = 4;
    m.num_blocks = 64;
    m.version = version;
    return m;
  }
  absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string& name) override {
    ++executors;
    auto executor = std::make_unique<FakeExecutor>();
    last_executor = executor.get();
    return std::unique_ptr<StepExecutor>(std::move(executor));
  }
  int64_t version = 1;
  int executors = 0;
  FakeExecutor* last_executor = nullptr;
};

struct Result {
  std::vector<int64_t> tokens;
  SequenceEvent last;
  absl::Notification done;
};

SequenceSink Collect(Result* r) {
  return [r](const SequenceEvent& e) {
    r->tokens.insert(r->tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finish != FinishReason::kNone) {
      r->last = e;
      r->done.Notify();
    }
  };
}

GenerateRequest Request(std::vector<int64_t> ids, int64_t max_tokens) {
  GenerateRequest r;
  r.model = "lm";
  r.prompt_ids = std::move(ids);
  r.stop.max_tokens = max_tokens;
  return r;
}

TEST(GeneratorTest, GeneratesThroughOneLoopPerModelPinnedToTheVersion) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  Result a, b;
  ASSERT_OK_AND_ASSIGN(GenerationHandle ha, generator.Start(Request({1, 2, 3}, 8), Collect(&a)));
  backend.version = 2;  // a push committed: the next sequence runs on version 2
  ASSERT_OK_AND_ASSIGN(GenerationHandle hb, generator.Start(Request({4}, 5), Collect(&b)));
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_EQ(backend.executors, 1);
  EXPECT_EQ(ha.version, 1);
  EXPECT_EQ(hb.version, 2);
  EXPECT_EQ(a.last.version, 1);
  EXPECT_EQ(b.last.version, 2);
  EXPECT_THAT(a.tokens, ElementsAreArray(Reference({1, 2, 3}, 8, {})));
  EXPECT_THAT(b.tokens, ElementsAreArray(Reference({4}, 5, {})));
  EXPECT_EQ(a.last.finish, FinishReason::kLength);
  EXPECT_EQ(a.last.prompt_tokens, 3);
  EXPECT_EQ(a.last.completion_tokens, 8);
}

TEST(GeneratorTest, RefusesBadRequestsNamingTheValue) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  GenerateRequest r = Request({1, 50}, 4);
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt token 1 is 50, outside the vocabulary [0, 50)"));
  r = Request({1, 2}, 63);
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt (2 tokens) + max_tokens (63) = 65 exceeds the model's context "
                       "of 64"));
  r.model = "nope";
  EXPECT_THAT(generator.Start(r, nullptr).status(), StatusIs(absl::StatusCode::kNotFound));
  r.model = "plain";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  r = Request({}, 4);
  r.prompt_text = "hello";
  EXPECT_THAT(generator.Start(r, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no tokenizer"));
  // Still serving.
  Result ok;
  ASSERT_OK(generator.Start(Request({7}, 3), Collect(&ok)).status());
  ok.done.WaitForNotification();
  EXPECT_EQ(ok.tokens.size(), 3u);
}

TEST(GeneratorTest, CancelEndsTheSequence) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  Result r;
  ASSERT_OK_AND_ASSIGN(GenerationHandle h, generator.Start(Request({1}, 60), Collect(&r)));
  generator.Cancel(h);
  r.done.WaitForNotification();
  EXPECT_THAT(r.last.finish, ::testing::AnyOf(FinishReason::kCancelled, FinishReason::kLength));
}

TEST(GeneratorTest, SeedsAreDrawnWhenNotGiven) {
  FakeBackend backend;
  Generator generator(&backend, GeneratorOptions{});
  GenerateRequest r = Request({1}, 2);
  r.has_seed = true;
  r.sampling.seed = 42;
  Result a, b, c;
  ASSERT_OK_AND_ASSIGN(GenerationHandle ha, generator.Start(r, Collect(&a)));
  ASSERT_OK_AND_ASSIGN(GenerationHandle hb, generator.Start(Request({1}, 2), Collect(&b)));
  ASSERT_OK_AND_ASSIGN(GenerationHandle hc, generator.Start(Request({1}, 2), Collect(&c)));
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  c.done.WaitForNotification();
  const auto& seeds = backend.last_executor->workers.seeds;
  EXPECT_EQ(seeds.at(ha.seq), 42u);
  EXPECT_NE(seeds.at(hb.seq), seeds.at(hc.seq));
}

}  // namespace
}  // namespace meshserve
