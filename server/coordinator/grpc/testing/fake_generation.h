// A Generator over fake workers, for the tests of the Generate edges (the
// gRPC service, the CLI, the Python client): one model "lm" (vocabulary
// testing::kVocab = 50, context 4096, no eos, weight version 7) whose steps
// run on testing::FakeExecutor (generate/testing/fake_steps.h), so a
// sequence's ids equal testing::Reference(prompt, max_tokens, stop_token_ids).
// Any other model name is NOT_FOUND.
//
// The header names no generator.h type (server/coordinator/grpc/generate_call.h
// says why): the Generator is reached through generator().
//
// Thread-safety: thread-safe; the executor's counters are guarded.
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_TESTING_FAKE_GENERATION_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_TESTING_FAKE_GENERATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace meshserve {

class Generator;

namespace testing {

struct FakeGenerationOptions {
  int64_t max_running = 64;
  int64_t max_waiting = 256;
  int64_t version = 7;
  absl::Duration step_delay = absl::ZeroDuration();  // each step sleeps this long
  bool fail_steps = false;  // every step fails UNAVAILABLE "worker 1 lost"
  // The model has a tokenizer of one character per id (FakeTokenText), so
  // text prompts and stop strings work; else it has none.
  bool with_tokenizer = false;
};

// The text of `ids` under the tokenizer of with_tokenizer: id i is the
// character kFakeTokenChars[i] (50 of them: letters, digits, space,
// punctuation, newline).
inline constexpr char kFakeTokenChars[] =
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ.,!?-0123456\n";
std::string FakeTokenText(const std::vector<int64_t>& ids);

class FakeGeneration {
 public:
  explicit FakeGeneration(FakeGenerationOptions options = {});
  ~FakeGeneration();

  Generator* generator();

  // Steps run so far.
  int64_t steps() const;
  // Sequences whose caches the fake workers hold now (released ones are gone).
  int64_t cached_sequences() const;
  // Sequence caches released so far (finished, cancelled).
  int64_t released() const;
  // Sequences waiting in the model's queue, and running or waiting
  // (Generator::Stats).
  int64_t waiting() const;
  int64_t live() const;
  // While paused, a step waits in the executor (the loop thread blocks there).
  void Pause();
  void Resume();
  // Waits until a step has entered the executor while paused.
  void WaitUntilStepWaits();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_TESTING_FAKE_GENERATION_H_
