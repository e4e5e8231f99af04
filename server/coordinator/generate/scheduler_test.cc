// GenerationScheduler against fake workers that keep each sequence's fed
// tokens (the KV cache's stand-in) and "sample" a token that is a function of
// the whole cached history: a sequence's tokens equal the reference (the
// function applied to the growing sequence alone) only if every step fed
// exactly the right tokens at the right positions, whatever the batching,
// chunking, preemption or failures.
#include "server/coordinator/generate/scheduler.h"

#include "server/coordinator/generate/generation_loop.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/generate/testing/fake_steps.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::FakeExecutor;
using ::meshserve::testing::FakeWorkers;
using ::meshserve::testing::kVocab;
using ::meshserve::testing::Reference;
using ::testing::ElementsAreArray;
using ::meshserve::testing::StatusIs;

struct Record {
  std::vector<int64_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int finishes = 0;
  SequenceEvent last;
};

struct Harness {
  std::unique_ptr<GenerationScheduler> scheduler;
  FakeWorkers workers;
  std::map<SequenceId, Record> records;
  int64_t steps = 0;

  explicit Harness(SchedulerOptions options) {
    auto s = GenerationScheduler::Create(std::move(options));
    EXPECT_OK(s.status());
    scheduler = std::move(*s);
  }
  SequenceId Add(std::vector<int64_t> prompt, int64_t max_tokens, int64_t version = 1,
                 std::vector<int64_t> stops = {}) {
    SequenceRequest r;
    r.prompt_ids = std::move(prompt);
    r.stop.max_tokens = max_tokens;
    r.stop.stop_token_ids = std::move(stops);
    auto id = std::make_shared<SequenceId>(0);
    auto added = scheduler->Add(std::move(r), version, [this, id](const SequenceEvent& e) {
      Record& rec = records[*id];
      rec.tokens.insert(rec.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finish != FinishReason::kNone) {
        rec.finish = e.finish;
        ++rec.finishes;
        rec.last = e;
      }
    });
    EXPECT_OK(added.status());
    *id = added.value_or(0);
    return *id;
  }
  // Runs steps until nothing is left (bounded).
  void Drain(int64_t max_steps = 10000) {
    while (scheduler->HasWork() && steps < max_steps) Step();
    EXPECT_FALSE(scheduler->HasWork());
  }
  StepPlan Step() {
    StepPlan plan = scheduler->NextStep();
    ++steps;
    scheduler->CompleteStep(plan, workers.Run(plan));
    return plan;
  }
};

SchedulerOptions Options(int64_t num_blocks = 1000) {
  SchedulerOptions o;
  o.block_tokens = 4;
  o.num_blocks = num_blocks;
  o.context_length = 256;
  o.max_prefill_tokens_per_step = 16;
  return o;
}

TEST(GenerationSchedulerTest, OneSequenceMatchesTheReference) {
  Harness h(Options());
  SequenceId id = h.Add({1, 2, 3}, 10);
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_THAT(h.records[id].tokens, ElementsAreArray(Reference({1, 2, 3}, 10, {})));
  EXPECT_EQ(h.records[id].finish, FinishReason::kLength);
  EXPECT_EQ(h.records[id].finishes, 1);
  EXPECT_EQ(h.records[id].last.prompt_tokens, 3);
  EXPECT_EQ(h.records[id].last.completion_tokens, 10);
  // One prefill step, one token a step, then a step that only frees the cache.
  EXPECT_EQ(h.steps, 11);
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
}

// The sampled token's logprob and its position's top N reach the sink
// parallel to the ids when asked (num_logprobs >= 1), the logprob alone with
// num_logprobs 0, neither with -1.
TEST(GenerationSchedulerTest, EventsCarryTheLogprobsAsked) {
  Harness h(Options());
  std::map<int32_t, std::vector<SequenceEvent>> events;  // by num_logprobs
  std::map<SequenceId, int32_t> asked;
  for (int32_t n : {-1, 0, 2}) {
    SequenceRequest r;
    r.prompt_ids = {1, 2};
    r.stop.max_tokens = 2;
    r.sampling.num_logprobs = n;
    auto id = h.scheduler->Add(std::move(r), 1,
                               [&events, n](const SequenceEvent& e) { events[n].push_back(e); });
    ASSERT_OK(id.status());
    asked[*id] = n;
  }
  const std::vector<TopLogprob> top = {{40, -0.5f}, {41, -1.25f}};
  for (int step = 0; step < 3; ++step) {
    StepPlan plan = h.scheduler->NextStep();
    std::vector<SampledToken> tokens;
    for (const StepBatch& b : plan.batches) {
      for (const StepSpan& span : b.spans) {
        if (span.sample) tokens.push_back({span.seq, 40, -0.5f, top});
      }
    }
    h.scheduler->CompleteStep(plan, tokens);
  }
  for (const auto& [n, got] : events) {
    ASSERT_EQ(got.size(), 2u) << "num_logprobs " << n;
    for (const SequenceEvent& e : got) {
      EXPECT_EQ(e.token_ids, std::vector<int64_t>{40});
      EXPECT_EQ(e.logprobs, n >= 0 ? std::vector<float>{-0.5f} : std::vector<float>{});
      EXPECT_EQ(e.top_logprobs, n >= 1 ? std::vector<std::vector<TopLogprob>>{top}
                                       : std::vector<std::vector<TopLogprob>>{});
    }
  }
}

// n choices of one prompt (AddGroup) with their own seeds, against fake
// workers that feed and fork caches: every choice's tokens equal its
// reference (so every fork copied the right positions), each span carried
// the choice's own seed, and the prompt was prefilled once: L - 1 tokens by
// the source, then one decode token each.
std::vector<SequenceId> AddChoices(Harness& h, const std::vector<int64_t>& prompt, int n,
                                   int64_t max_tokens) {
  std::vector<SequenceRequest> requests(static_cast<size_t>(n));
  std::vector<SequenceSink> sinks;
  auto ids = std::make_shared<std::vector<SequenceId>>();
  for (int i = 0; i < n; ++i) {
    requests[i].prompt_ids = prompt;
    requests[i].stop.max_tokens = max_tokens;
    requests[i].sampling.seed = 100 + static_cast<uint64_t>(i);
    sinks.push_back([&h, ids, i](const SequenceEvent& e) {
      Record& rec = h.records[(*ids)[static_cast<size_t>(i)]];
      rec.tokens.insert(rec.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finish != FinishReason::kNone) {
        rec.finish = e.finish;
        ++rec.finishes;
        rec.last = e;
      }
    });
  }
  auto added = h.scheduler->AddGroup(std::move(requests), 1, std::move(sinks));
  EXPECT_OK(added.status());
  *ids = added.value_or(std::vector<SequenceId>{});
  return *ids;
}

TEST(GenerationSchedulerTest, ChoicesOfOnePromptShareItsPrefill) {
  Harness h(Options());
  const std::vector<int64_t> prompt = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8};
  const std::vector<SequenceId> ids = AddChoices(h, prompt, 4, 6);
  ASSERT_EQ(ids.size(), 4u);
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_THAT(h.records[ids[i]].tokens, ElementsAreArray(Reference(prompt, 6, {})));
    EXPECT_EQ(h.records[ids[i]].finish, FinishReason::kLength);
    EXPECT_EQ(h.records[ids[i]].last.prompt_tokens, 19);
    EXPECT_EQ(h.workers.seeds[ids[i]], 100 + i);
  }
  EXPECT_EQ(h.workers.forked, 3);
  EXPECT_EQ(h.workers.prefill_tokens, 18);  // once, but the last token
  EXPECT_EQ(h.scheduler->GetStats().prefill_tokens, 18);
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
  // Alone, the same four prefill 4 x 19 tokens.
  Harness alone(Options());
  for (int i = 0; i < 4; ++i) alone.Add(prompt, 6);
  alone.Drain();
  EXPECT_EQ(alone.workers.prefill_tokens, 4 * 19);
  EXPECT_EQ(alone.scheduler->GetStats().prefill_tokens, 4 * 19);
  EXPECT_EQ(alone.workers.forked, 0);
}

TEST(GenerationSchedulerTest, ChoicesPrefillAloneWhenTheirSourceEndsOrNoRoomIsLeft) {
  const std::vector<int64_t> prompt = {3, 3, 7, 1, 2, 9, 4, 4, 8, 1};
  {
    // The source cancelled before the fork: the others prefill alone.
    Harness h(Options());
    const std::vector<SequenceId> ids = AddChoices(h, prompt, 3, 4);
    EXPECT_EQ(h.scheduler->GetStats().waiting, 3);
    ASSERT_TRUE(h.scheduler->Cancel(ids[0]));
    h.Drain();
    EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
    EXPECT_EQ(h.records[ids[0]].finish, FinishReason::kCancelled);
    for (size_t i = 1; i < 3; ++i) {
      EXPECT_THAT(h.records[ids[i]].tokens, ElementsAreArray(Reference(prompt, 4, {})));
    }
    EXPECT_EQ(h.workers.forked, 0);
    EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
  }
  {
    // Two running slots: one choice is forked, the other waits and prefills
    // alone once a slot frees.
    SchedulerOptions o = Options();
    o.max_running = 2;
    Harness h(o);
    const std::vector<SequenceId> ids = AddChoices(h, prompt, 3, 4);
    h.Drain();
    EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
    for (SequenceId id : ids) {
      EXPECT_THAT(h.records[id].tokens, ElementsAreArray(Reference(prompt, 4, {})));
    }
    EXPECT_EQ(h.workers.forked, 1);
    EXPECT_EQ(h.workers.prefill_tokens, 9 + 10);
  }
  {
    // A one-token prompt has nothing to share; differing prompts are refused.
    Harness h(Options());
    const std::vector<SequenceId> ids = AddChoices(h, {4}, 2, 3);
    h.Drain();
    for (SequenceId id : ids) {
      EXPECT_THAT(h.records[id].tokens, ElementsAreArray(Reference({4}, 3, {})));
    }
    EXPECT_EQ(h.workers.forked, 0);
    std::vector<SequenceRequest> two(2);
    two[0].prompt_ids = {1, 2};
    two[1].prompt_ids = {1, 3};
    EXPECT_THAT(h.scheduler->AddGroup(two, 1, {nullptr, nullptr}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "prompt differs"));
  }
}

TEST(GenerationSchedulerTest, AStopTokenEndsTheSequenceAndIsReported) {
  Harness h(Options());
  std::vector<int64_t> ref = Reference({7, 8}, 10, {});
  SequenceId id = h.Add({7, 8}, 10, 1, {ref[3]});
  h.Drain();
  std::vector<int64_t> expected = Reference({7, 8}, 10, {ref[3]});
  EXPECT_THAT(h.records[id].tokens, ElementsAreArray(expected));
  EXPECT_EQ(h.records[id].tokens.back(), ref[3]);
  EXPECT_EQ(h.records[id].finish, FinishReason::kStop);
}

TEST(GenerationSchedulerTest, EosStopsUnlessIgnored) {
  SchedulerOptions o = Options();
  std::vector<int64_t> ref = Reference({4}, 8, {});
  o.eos_token_ids = {ref[1]};
  Harness h(o);
  SequenceId stopped = h.Add({4}, 8);
  SequenceRequest r;
  r.prompt_ids = {4};
  r.stop.max_tokens = 8;
  r.stop.ignore_eos = true;
  Record ignoring;
  ASSERT_OK(h.scheduler->Add(r, 1, [&](const SequenceEvent& e) {
    ignoring.tokens.insert(ignoring.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finish != FinishReason::kNone) ignoring.finish = e.finish;
  }).status());
  h.Drain();
  EXPECT_EQ(h.records[stopped].tokens.size(), 2u);
  EXPECT_EQ(h.records[stopped].finish, FinishReason::kStop);
  EXPECT_THAT(ignoring.tokens, ElementsAreArray(ref));
  EXPECT_EQ(ignoring.finish, FinishReason::kLength);
}

TEST(GenerationSchedulerTest, BatchedSequencesEqualTheirReferencesAndPrefillRidesAlong) {
  Harness h(Options());
  std::map<SequenceId, std::pair<std::vector<int64_t>, int64_t>> asked;
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> prompt;
    for (int j = 0; j < 1 + (i * 7) % 40; ++j) prompt.push_back((i * 13 + j * 3) % kVocab);
    const int64_t max_tokens = 5 + (i * 11) % 26;
    asked[h.Add(prompt, max_tokens)] = {prompt, max_tokens};
  }
  int64_t decode_steps_with_all_running = 0;
  while (h.scheduler->HasWork()) {
    const auto before = h.scheduler->GetStats();
    StepPlan plan = h.Step();
    ASSERT_LE(plan.batches.size(), 1u);
    if (before.waiting == 0 && !plan.batches.empty()) {
      // Nothing waits: every running sequence got a span this step.
      EXPECT_EQ(static_cast<int64_t>(plan.batches[0].spans.size()), before.running);
      ++decode_steps_with_all_running;
    }
  }
  EXPECT_GT(decode_steps_with_all_running, 0);
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_LE(h.workers.max_prefill_seen, 16);
  for (const auto& [id, a] : asked) {
    EXPECT_THAT(h.records[id].tokens, ElementsAreArray(Reference(a.first, a.second, {})))
        << "sequence " << id;
  }
}

TEST(GenerationSchedulerTest, PreemptedSequencesResumeByRecomputingAndNeverFail) {
  // 10 blocks of 4 tokens: six sequences that each grow to 6-9 blocks.
  Harness h(Options(10));
  std::map<SequenceId, std::vector<int64_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int64_t> prompt(6 + i, i + 1);
    prompts[h.Add(prompt, 20)] = prompt;
  }
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_GT(h.scheduler->GetStats().preemptions, 0);
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
  for (const auto& [id, prompt] : prompts) {
    EXPECT_EQ(h.records[id].finish, FinishReason::kLength) << id;
    EXPECT_THAT(h.records[id].tokens, ElementsAreArray(Reference(prompt, 20, {}))) << id;
  }
}

TEST(GenerationSchedulerTest, RefusesWhatCanNeverRunNamingTheNumbers) {
  SchedulerOptions o = Options(5);
  o.max_waiting = 2;
  Harness h(o);
  SequenceRequest r;
  r.stop.max_tokens = 4;
  EXPECT_THAT(h.scheduler->Add(r, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "prompt is empty"));
  r.prompt_ids = std::vector<int64_t>(250, 1);
  r.stop.max_tokens = 10;
  EXPECT_THAT(h.scheduler->Add(r, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "prompt (250 tokens) + max_tokens (10) = 260 exceeds the "
                                 "model's context of 256"));
  r.prompt_ids = std::vector<int64_t>(20, 1);
  r.stop.max_tokens = 2;  // 21 cached positions: 6 blocks of 4 > 5
  EXPECT_THAT(h.scheduler->Add(r, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "needs 6 KV cache blocks of 4 tokens; the cache holds 5"));
  r.stop.max_tokens = 0;
  EXPECT_THAT(h.scheduler->Add(r, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_tokens must be >= 1"));
  r.prompt_ids = {1, 2};
  r.stop.max_tokens = 3;
  ASSERT_OK(h.scheduler->Add(r, 1, nullptr).status());
  ASSERT_OK(h.scheduler->Add(r, 1, nullptr).status());
  EXPECT_THAT(h.scheduler->Add(r, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "2 sequences wait"));
  h.Drain();  // the queue drains and takes new sequences again
  EXPECT_OK(h.scheduler->Add(r, 1, nullptr).status());
  EXPECT_THAT(GenerationScheduler::Create(Options(0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_blocks must be > 0"));
}

TEST(GenerationSchedulerTest, CancelEndsAtTheStepBoundaryAndFreesTheCache) {
  Harness h(Options());
  SequenceId a = h.Add({1, 2, 3, 4, 5}, 50);
  SequenceId b = h.Add({9}, 6);
  for (int i = 0; i < 3; ++i) h.Step();
  EXPECT_GT(h.scheduler->GetStats().blocks_used, 0);
  EXPECT_TRUE(h.scheduler->Cancel(a));
  EXPECT_FALSE(h.scheduler->Cancel(a));
  StepPlan plan = h.Step();
  EXPECT_THAT(plan.release, ElementsAreArray({a}));
  EXPECT_EQ(h.records[a].finish, FinishReason::kCancelled);
  EXPECT_EQ(h.records[a].tokens.size(), 3u);
  h.Drain();
  EXPECT_THAT(h.records[b].tokens, ElementsAreArray(Reference({9}, 6, {})));
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
  EXPECT_FALSE(h.scheduler->Cancel(12345));
}

// The last sequence's end (cancelled, or by length) is followed at once by a
// plan of releases only, which frees its cache on the workers; while another
// sequence runs, a release rides that sequence's batch instead.
TEST(GenerationSchedulerTest, TheLastSequencesReleaseIsAStepOfItsOwn) {
  Harness h(Options());
  SequenceId a = h.Add({1, 2, 3, 4, 5}, 50);
  SequenceId b = h.Add({9}, 3);
  for (int i = 0; i < 2; ++i) h.Step();
  EXPECT_TRUE(h.scheduler->Cancel(a));
  StepPlan plan = h.Step();  // b still runs: a's release rides its batch
  EXPECT_THAT(plan.release, ElementsAreArray({a}));
  EXPECT_FALSE(plan.release_only());
  EXPECT_EQ(h.workers.release_only_steps, 0);
  while (h.records[b].finish == FinishReason::kNone) h.Step();
  EXPECT_EQ(h.workers.kv.count(b), 1u);  // b ended by length; its cache is still held
  ASSERT_TRUE(h.scheduler->HasWork());   // its release is pending work
  plan = h.Step();
  EXPECT_TRUE(plan.release_only());
  EXPECT_THAT(plan.release, ElementsAreArray({b}));
  EXPECT_EQ(h.workers.kv.count(b), 0u);
  EXPECT_FALSE(h.scheduler->HasWork());
  EXPECT_TRUE(h.scheduler->NextStep().empty());

  // The last one cancelled: the next plan frees it and nothing else.
  SequenceId c = h.Add({4, 4}, 50);
  for (int i = 0; i < 3; ++i) h.Step();
  EXPECT_TRUE(h.scheduler->Cancel(c));
  plan = h.Step();
  EXPECT_TRUE(plan.release_only());
  EXPECT_THAT(plan.release, ElementsAreArray({c}));
  EXPECT_EQ(h.records[c].finish, FinishReason::kCancelled);
  EXPECT_TRUE(h.workers.released.count(c) > 0 && h.workers.kv.count(c) == 0);
  EXPECT_EQ(h.workers.release_only_steps, 2);
  EXPECT_FALSE(h.scheduler->HasWork());
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
}

TEST(GenerationSchedulerTest, AFailedStepRebuildsEveryCacheAndTheTokensStayRight) {
  Harness h(Options());
  SequenceId a = h.Add({3, 1, 4, 1, 5, 9, 2, 6}, 12);
  SequenceId b = h.Add({2, 7}, 12);
  for (int i = 0; i < 4; ++i) h.Step();
  StepPlan lost = h.scheduler->NextStep();
  h.workers.kv.clear();  // a worker died: every cache is gone
  h.scheduler->FailStep(lost, absl::UnavailableError("worker 2 lost"));
  StepPlan next = h.scheduler->NextStep();
  EXPECT_EQ(next.release.size(), 2u);
  for (const StepSpan& span : next.batches.at(0).spans) EXPECT_EQ(span.past_len, 0);
  h.scheduler->CompleteStep(next, h.workers.Run(next));
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_THAT(h.records[a].tokens, ElementsAreArray(Reference({3, 1, 4, 1, 5, 9, 2, 6}, 12, {})));
  EXPECT_THAT(h.records[b].tokens, ElementsAreArray(Reference({2, 7}, 12, {})));
}

TEST(GenerationSchedulerTest, RepeatedFailuresEndTheSequenceWithTheError) {
  Harness h(Options());
  SequenceId a = h.Add({1, 2}, 5);
  for (int i = 0; i < 3; ++i) {
    StepPlan plan = h.scheduler->NextStep();
    h.scheduler->FailStep(plan, absl::InternalError("program failed"));
  }
  EXPECT_EQ(h.records[a].finish, FinishReason::kError);
  EXPECT_THAT(h.records[a].last.status,
              StatusIs(absl::StatusCode::kInternal, "max_step_failures 3"));
  EXPECT_THAT(h.records[a].last.status, StatusIs(absl::StatusCode::kInternal, "program failed"));
  EXPECT_FALSE(h.scheduler->HasWork() && h.scheduler->GetStats().running > 0);
}

// A lost worker fails steps until the coordinator has placed the model anew:
// more failures in a row than max_step_failures, within recovery_timeout, end
// no sequence, and the caches are rebuilt on the next layout.
TEST(GenerationSchedulerTest, RecoverableFailuresWaitForTheNewLayoutWithinTheTimeout) {
  SchedulerOptions options = Options();
  options.recovery_timeout = absl::Hours(1);
  Harness h(options);
  SequenceId a = h.Add({3, 1, 4, 1, 5}, 10);
  SequenceId b = h.Add({2, 7}, 10);
  for (int i = 0; i < 3; ++i) h.Step();
  h.workers.kv.clear();
  for (int i = 0; i < 10; ++i) {
    StepPlan plan = h.scheduler->NextStep();
    ASSERT_FALSE(plan.batches.empty());
    h.scheduler->FailStep(plan,
                          i % 2 == 0 ? absl::UnavailableError("worker 2 lost")
                                     : absl::AbortedError("placement moved"),
                          /*recoverable=*/true);
  }
  EXPECT_EQ(h.records[a].finish, FinishReason::kNone);
  EXPECT_EQ(h.records[b].finish, FinishReason::kNone);
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_EQ(h.records[a].finish, FinishReason::kLength);
  EXPECT_THAT(h.records[a].tokens, ElementsAreArray(Reference({3, 1, 4, 1, 5}, 10, {})));
  EXPECT_THAT(h.records[b].tokens, ElementsAreArray(Reference({2, 7}, 10, {})));
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
}

// A cluster that does not recover: after max_step_failures and
// recovery_timeout the sequence ends with the failure's code and a message
// that says so.
TEST(GenerationSchedulerTest, AClusterThatDoesNotRecoverEndsTheSequenceWithAClearError) {
  SchedulerOptions options = Options();
  options.recovery_timeout = absl::Milliseconds(30);
  Harness h(options);
  SequenceId a = h.Add({1, 2}, 5);
  for (int i = 0; i < 3; ++i) {
    h.scheduler->FailStep(h.scheduler->NextStep(), absl::UnavailableError("worker 2 lost"), true);
  }
  EXPECT_EQ(h.records[a].finish, FinishReason::kNone);  // 3 failures, but within 30 ms
  absl::SleepFor(absl::Milliseconds(40));
  h.scheduler->FailStep(h.scheduler->NextStep(), absl::UnavailableError("worker 2 lost"), true);
  EXPECT_EQ(h.records[a].finish, FinishReason::kError);
  const absl::Status& error = h.records[a].last.status;
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kUnavailable, "failed 4 times in a row"));
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kUnavailable, "did not recover"));
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kUnavailable, "worker 2 lost"));
  EXPECT_FALSE(h.scheduler->HasWork() && h.scheduler->GetStats().running > 0);
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
}

TEST(GenerationSchedulerTest, RefusesANegativeRecoveryTimeout) {
  SchedulerOptions options = Options();
  options.recovery_timeout = absl::Seconds(-1);
  EXPECT_THAT(GenerationScheduler::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "recovery_timeout"));
}

// The model placed anew on a mesh whose pools hold fewer blocks: the newest
// running sequences give theirs back (and resume by recomputing), one that
// can never fit now ends naming the numbers, and the others stay exact.
TEST(GenerationSchedulerTest, ASmallerCacheAfterAReplacementPreemptsAndRefusesWhatNoLongerFits) {
  Harness h(Options(40));  // blocks of 4 tokens
  SequenceId a = h.Add({1, 2, 3}, 20);      // 22 positions: 6 blocks
  SequenceId b = h.Add({4, 5, 6, 7}, 20);   // 23: 6 blocks
  SequenceId big = h.Add({8, 9}, 40);       // 41: 11 blocks
  for (int i = 0; i < 10; ++i) h.Step();
  const int64_t used = h.scheduler->GetStats().blocks_used;
  ASSERT_GT(used, 6);
  const int64_t preemptions = h.scheduler->GetStats().preemptions;
  h.scheduler->SetNumBlocks(6);
  EXPECT_EQ(h.records[big].finish, FinishReason::kError);
  EXPECT_THAT(h.records[big].last.status,
              StatusIs(absl::StatusCode::kResourceExhausted, "now holds 6 blocks of 4 tokens"));
  GenerationScheduler::Stats stats = h.scheduler->GetStats();
  EXPECT_EQ(stats.num_blocks, 6);
  EXPECT_LE(stats.blocks_used, 6);
  EXPECT_GT(stats.preemptions, preemptions);
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_THAT(h.records[a].tokens, ElementsAreArray(Reference({1, 2, 3}, 20, {})));
  EXPECT_THAT(h.records[b].tokens, ElementsAreArray(Reference({4, 5, 6, 7}, 20, {})));
  EXPECT_EQ(h.scheduler->GetStats().blocks_used, 0);
  // A larger cache again: what did not fit is accepted.
  h.scheduler->SetNumBlocks(40);
  SequenceId again = h.Add({8, 9}, 40);
  h.Drain();
  EXPECT_THAT(h.records[again].tokens, ElementsAreArray(Reference({8, 9}, 40, {})));
}

TEST(GenerationSchedulerTest, AStepMissingATokenFailsInsteadOfCorrupting) {
  Harness h(Options());
  SequenceId a = h.Add({1, 2}, 5);
  StepPlan plan = h.scheduler->NextStep();
  h.workers.Run(plan);
  h.scheduler->CompleteStep(plan, {});  // the token went missing
  h.workers.kv.clear();
  h.Drain();
  EXPECT_THAT(h.workers.errors, ::testing::IsEmpty());
  EXPECT_THAT(h.records[a].tokens, ElementsAreArray(Reference({1, 2}, 5, {})));
}

TEST(GenerationSchedulerTest, EachVersionRunsAsItsOwnBatchAndIsHeldUntilItsLastSequence) {
  Harness h(Options());
  SequenceId old_seq = h.Add({1, 2, 3}, 3, /*version=*/1);
  SequenceId new_seq = h.Add({4, 5}, 8, /*version=*/2);
  EXPECT_THAT(h.scheduler->LiveVersions(), ElementsAreArray({1, 2}));
  StepPlan plan = h.Step();
  ASSERT_EQ(plan.batches.size(), 2u);
  EXPECT_EQ(plan.batches[0].version, 1);
  EXPECT_EQ(plan.batches[1].version, 2);
  h.Step();
  h.Step();
  EXPECT_EQ(h.records[old_seq].last.version, 1);
  EXPECT_THAT(h.scheduler->LiveVersions(), ElementsAreArray({2}));
  h.Drain();
  EXPECT_EQ(h.records[new_seq].last.version, 2);
  EXPECT_TRUE(h.scheduler->LiveVersions().empty());
}

// Threads add and cancel while one loop runs steps (run under TSan).
TEST(GenerationSchedulerTest, ConcurrentAddsAndCancelsEachFinishOnce) {
  auto scheduler = GenerationScheduler::Create(Options(40)).value();
  std::atomic<int> finished{0};
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    FakeWorkers workers;
    while (!stop.load() || scheduler->HasWork()) {
      StepPlan plan = scheduler->NextStep();
      scheduler->CompleteStep(plan, workers.Run(plan));
      if (plan.empty()) std::this_thread::yield();
    }
  });
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 25; ++i) {
        SequenceRequest r;
        r.prompt_ids = std::vector<int64_t>(1 + (i + c) % 9, c + 1);
        r.stop.max_tokens = 1 + i % 7;
        auto id = scheduler->Add(r, 1, [&](const SequenceEvent& e) {
          if (e.finish != FinishReason::kNone) finished.fetch_add(1);
        });
        ASSERT_OK(id.status());
        if (i % 5 == 0) scheduler->Cancel(*id);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  stop.store(true);
  loop.join();
  EXPECT_EQ(finished.load(), 100);
  EXPECT_EQ(scheduler->GetStats().blocks_used, 0);
}

// Streams from several threads through the loop while `executor` fails;
// returns each stream's tokens and finish (its last event's status in `errors`).
struct LoopRun {
  std::vector<std::vector<int64_t>> got;
  std::vector<FinishReason> finish;
  std::vector<absl::Status> errors;
};
LoopRun StreamThroughLoop(FakeExecutor& executor, SchedulerOptions options, int streams) {
  LoopRun run;
  run.got.resize(streams);
  run.finish.resize(streams);
  run.errors.resize(streams);
  GenerationLoopOptions loop_options;
  loop_options.retry_backoff = absl::Milliseconds(1);
  loop_options.max_retry_backoff = absl::Milliseconds(8);
  GenerationLoop loop(GenerationScheduler::Create(options).value(), &executor, loop_options);
  std::vector<std::thread> clients;
  for (int c = 0; c < streams; ++c) {
    clients.emplace_back([&, c] {
      absl::Notification done;
      SequenceRequest r;
      r.prompt_ids = std::vector<int64_t>(2 + c * 3, c);
      r.stop.max_tokens = 12;
      ASSERT_OK(loop.Add(r, 1, [&](const SequenceEvent& e) {
        run.got[c].insert(run.got[c].end(), e.token_ids.begin(), e.token_ids.end());
        if (e.finish != FinishReason::kNone) {
          run.finish[c] = e.finish;
          run.errors[c] = e.status;
          done.Notify();
        }
      }).status());
      done.WaitForNotification();
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(loop.Stats().blocks_used, 0);
  return run;
}

// Eight streams from eight threads through the loop's thread; one step fails
// on the way (a lost worker) and every stream still gets its exact tokens.
// Every stream of StreamThroughLoop ended "length" with its reference tokens,
// and the fake workers saw every span at its sequence's cached length.
void ExpectExactStreams(const FakeExecutor& executor, const LoopRun& run) {
  EXPECT_THAT(executor.workers.errors, ::testing::IsEmpty());
  for (size_t c = 0; c < run.got.size(); ++c) {
    const std::vector<int64_t> prompt(2 + c * 3, static_cast<int64_t>(c));
    EXPECT_EQ(run.finish[c], FinishReason::kLength);
    EXPECT_THAT(run.got[c], ElementsAreArray(Reference(prompt, 12, {})));
  }
}

TEST(GenerationLoopTest, StreamsFromManyThreadsAndSurvivesALostWorker) {
  FakeExecutor executor;
  executor.fail_at_step = 6;
  LoopRun run = StreamThroughLoop(executor, Options(60), 8);
  EXPECT_GE(executor.steps, 6);
  ExpectExactStreams(executor, run);
}

// A worker lost for 20 steps in a row (the model being re-placed): the loop
// backs off and retries, and every stream still gets its exact tokens.
TEST(GenerationLoopTest, ManyFailedStepsInARowEndNoStream) {
  FakeExecutor executor;
  executor.fail_at_step = 4;
  executor.fail_steps = 20;
  executor.recoverable = true;
  SchedulerOptions options = Options(60);
  options.recovery_timeout = absl::Hours(1);
  LoopRun run = StreamThroughLoop(executor, options, 8);
  EXPECT_EQ(executor.failed, 20);
  ExpectExactStreams(executor, run);
}

// Workers that never come back: every stream ends with the error (no hang).
TEST(GenerationLoopTest, AClusterThatNeverRecoversEndsEveryStreamWithTheError) {
  FakeExecutor executor;
  executor.fail_at_step = 3;
  executor.fail_steps = -1;
  executor.recoverable = true;
  SchedulerOptions options = Options(60);
  options.recovery_timeout = absl::Milliseconds(50);
  LoopRun run = StreamThroughLoop(executor, options, 4);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(run.finish[c], FinishReason::kError);
    EXPECT_THAT(run.errors[c], StatusIs(absl::StatusCode::kUnavailable, "did not recover"));
  }
}

// A client cancels the only stream: the loop frees its cache on the workers
// with a step of releases only, without any new request coming.
TEST(GenerationLoopTest, CancellingTheLastStreamFreesItsCacheOnTheWorkers) {
  FakeExecutor executor;
  SequenceId id = 0;
  absl::Notification first_token, cancel_sent, finished;
  FinishReason finish = FinishReason::kNone;
  {
    GenerationLoop loop(GenerationScheduler::Create(Options(60)).value(), &executor);
    SequenceRequest r;
    r.prompt_ids = {3, 1, 4, 1, 5};
    r.stop.max_tokens = 200;
    ASSERT_OK_AND_ASSIGN(id, loop.Add(r, 1, [&](const SequenceEvent& e) {
      if (e.finish != FinishReason::kNone) {
        finish = e.finish;
        finished.Notify();
      } else if (!first_token.HasBeenNotified()) {
        first_token.Notify();
        cancel_sent.WaitForNotification();  // the stream is live when cancelled
      }
    }));
    first_token.WaitForNotification();
    EXPECT_FALSE(executor.Released(id));
    ASSERT_TRUE(loop.Cancel(id));
    cancel_sent.Notify();
    finished.WaitForNotification();
    EXPECT_EQ(finish, FinishReason::kCancelled);
    // A bound against a hang: the release comes from the loop by itself.
    EXPECT_TRUE(executor.AwaitReleased(id, absl::Seconds(30)));
    EXPECT_EQ(loop.Stats().blocks_used, 0);
  }
  EXPECT_EQ(executor.workers.kv.count(id), 0u);
  EXPECT_EQ(executor.workers.release_only_steps, 1);
  EXPECT_THAT(executor.workers.errors, ::testing::IsEmpty());
}

TEST(GenerationLoopTest, StoppingEndsEverySequenceOnce) {
  FakeExecutor executor;
  std::atomic<int> finished{0};
  {
    GenerationLoop loop(GenerationScheduler::Create(Options(60)).value(), &executor);
    for (int c = 0; c < 5; ++c) {
      SequenceRequest r;
      r.prompt_ids = {c, c + 1};
      r.stop.max_tokens = 200;
      ASSERT_OK(loop.Add(r, 1, [&](const SequenceEvent& e) {
        if (e.finish != FinishReason::kNone) finished.fetch_add(1);
      }).status());
    }
  }
  EXPECT_EQ(finished.load(), 5);
}

}  // namespace
}  // namespace meshserve
