// GenerateServiceImpl over a real gRPC server (port 0) and a real stub, with a
// Generator over fake workers (testing/fake_generation.h): streamed ids equal
// the fake model's Reference, the last chunk's finish_reason / usage /
// version, every bad field's code and message (and the server keeps
// serving), a full queue, a client cancel releasing the sequence's cache, and
// a server without a generator.
#include "server/coordinator/grpc/generate_service.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/generate.grpc.pb.h"
#include "server/coordinator/generate/testing/fake_steps.h"
#include "server/coordinator/grpc/generate_proto.h"
#include "server/coordinator/grpc/testing/fake_generation.h"

namespace meshserve {
namespace {

using ::meshserve::testing::FakeGeneration;
using ::meshserve::testing::FakeGenerationOptions;
using ::meshserve::testing::FakeTokenText;
using ::meshserve::testing::Reference;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A server with the service on 127.0.0.1:0 and a stub to it.
class Served {
 public:
  explicit Served(Generator* generator) : service_(generator, &gate_) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = GenerateService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  ~Served() { server_->Shutdown(); }
  GenerateService::Stub& stub() { return *stub_; }

 private:
  CallGate gate_{"test"};
  GenerateServiceImpl service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GenerateService::Stub> stub_;
};

struct Streamed {
  std::vector<GenerateChunk> chunks;
  std::vector<int64_t> ids;
  grpc::Status status;
};

Streamed Generate(GenerateService::Stub& stub, const GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&context, request);
  Streamed out;
  GenerateChunk chunk;
  while (reader->Read(&chunk)) {
    out.ids.insert(out.ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    out.chunks.push_back(chunk);
  }
  out.status = reader->Finish();
  return out;
}

GenerateRequest Ids(std::vector<int64_t> ids, int64_t max_tokens) {
  GenerateRequest r;
  r.set_model("lm");
  for (int64_t id : ids) r.add_prompt_ids(id);
  r.set_max_tokens(max_tokens);
  return r;
}

// Polls `done` for up to 20 s (a wait, not a timing assertion).
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

TEST(GenerateServiceTest, StreamsTheReferenceIdsThenFinishReasonUsageAndVersion) {
  FakeGeneration generation;
  Served served(generation.generator());
  GenerateRequest request = Ids({1, 2, 3}, 12);
  request.set_seed(5);
  request.set_temperature(0.7f);
  Streamed s = Generate(served.stub(), request);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_THAT(s.ids, ElementsAreArray(Reference({1, 2, 3}, 12, {})));
  ASSERT_EQ(s.chunks.size(), 12u);  // one per step
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    EXPECT_EQ(s.chunks[i].token_ids_size(), 1) << i;
    EXPECT_EQ(s.chunks[i].version(), 7) << i;
    EXPECT_EQ(s.chunks[i].text(), "") << i;
    EXPECT_EQ(s.chunks[i].finish_reason(), i + 1 == s.chunks.size() ? "length" : "") << i;
  }
  const GenerateChunk& last = s.chunks.back();
  EXPECT_EQ(last.usage().prompt_tokens(), 3);
  EXPECT_EQ(last.usage().completion_tokens(), 12);
  EXPECT_EQ(last.usage().total_tokens(), 15);
  EXPECT_FALSE(s.chunks.front().has_usage());
}

TEST(GenerateServiceTest, StopTokenEndsWithStopAndDefaultsApply) {
  FakeGeneration generation;
  Served served(generation.generator());
  const std::vector<int64_t> full = Reference({9, 4}, 16, {});
  // Stop at the 5th token (its first occurrence).
  const int64_t stop = full[4];
  GenerateRequest request = Ids({9, 4}, 0);  // max_tokens 0: 16
  request.add_stop_token_ids(stop);
  request.set_top_k(-1);
  request.set_logprobs(0);
  Streamed s = Generate(served.stub(), request);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const std::vector<int64_t> want = Reference({9, 4}, 16, {stop});
  EXPECT_THAT(s.ids, ElementsAreArray(want));
  EXPECT_EQ(s.chunks.back().finish_reason(), "stop");
  EXPECT_EQ(s.chunks.back().usage().completion_tokens(), static_cast<int64_t>(want.size()));
  for (const GenerateChunk& c : s.chunks) {
    ASSERT_EQ(c.logprobs_size(), 1);  // logprobs 0: the sampled token's
    EXPECT_FLOAT_EQ(c.logprobs(0), -1.5f);  // what the fake workers return
  }
  // No stop ids, max_tokens 0: the default 16.
  s = Generate(served.stub(), Ids({9, 4}, 0));
  EXPECT_THAT(s.ids, ElementsAreArray(full));
  EXPECT_EQ(s.chunks.back().logprobs_size(), 0);  // not asked for
}

struct BadCase {
  std::string name;
  std::function<void(GenerateRequest&)> change;
  grpc::StatusCode code;
  std::string message;
};

TEST(GenerateServiceTest, StopStringsEndAtTheTokenThatCompletesThemAndCutTheText) {
  FakeGenerationOptions options;
  options.with_tokenizer = true;
  FakeGeneration generation(options);
  Served served(generation.generator());
  const std::vector<int64_t> full = Reference({6, 1, 8}, 40, {});
  const std::string full_text = FakeTokenText(full);
  const std::string stop = full_text.substr(15, 3);  // spans three tokens
  const size_t cut = full_text.find(stop);
  const size_t num_ids = cut + stop.size();  // one character per token
  GenerateRequest request = Ids({6, 1, 8}, 40);
  request.add_stop(stop);
  request.add_stop("Z");  // never among the fake tokens' characters
  Streamed s = Generate(served.stub(), request);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_THAT(s.ids, ElementsAreArray(std::vector<int64_t>(full.begin(), full.begin() + num_ids)));
  std::string text;
  for (const GenerateChunk& chunk : s.chunks) {
    text += chunk.text();
    EXPECT_LE(text.size(), cut) << "text past the stop: " << text;
  }
  EXPECT_EQ(text, full_text.substr(0, cut));
  const GenerateChunk& last = s.chunks.back();
  EXPECT_EQ(last.finish_reason(), "stop");
  EXPECT_EQ(last.usage().completion_tokens(), static_cast<int64_t>(num_ids));
  EXPECT_EQ(last.usage().prompt_tokens(), 3);
  // The sequence was cancelled at the stop: its cache goes.
  EXPECT_TRUE(Eventually([&] { return generation.live() == 0; }));
  // A text prompt through the same tokenizer.
  GenerateRequest text_request;
  text_request.set_model("lm");
  text_request.set_prompt(FakeTokenText({6, 1, 8}));
  text_request.set_max_tokens(40);
  Streamed t = Generate(served.stub(), text_request);
  ASSERT_TRUE(t.status.ok()) << t.status.error_message();
  EXPECT_THAT(t.ids, ElementsAreArray(full));
}

// The chunk carries each token's top N (ids and logprobs, most likely first)
// parallel to token_ids, beside the sampled tokens' logprobs.
TEST(GenerateProtoTest, AnEventsTopLogprobsBecomeTheChunks) {
  SequenceEvent e;
  e.token_ids = {7, 9};
  e.logprobs = {-0.5f, -2.0f};
  e.top_logprobs = {{{7, -0.5f}, {3, -1.0f}}, {{3, -0.25f}, {8, -1.5f}}};
  e.version = 2;
  GenerateChunk chunk;
  SequenceEventToProto(e, &chunk);
  ASSERT_EQ(chunk.top_logprobs_size(), 2);
  EXPECT_THAT(chunk.logprobs(), ::testing::ElementsAre(-0.5f, -2.0f));
  EXPECT_THAT(chunk.top_logprobs(0).token_ids(), ::testing::ElementsAre(7, 3));
  EXPECT_THAT(chunk.top_logprobs(0).logprobs(), ::testing::ElementsAre(-0.5f, -1.0f));
  EXPECT_THAT(chunk.top_logprobs(1).token_ids(), ::testing::ElementsAre(3, 8));
  EXPECT_THAT(chunk.top_logprobs(1).logprobs(), ::testing::ElementsAre(-0.25f, -1.5f));
  GenerateChunk none;
  e.top_logprobs.clear();
  SequenceEventToProto(e, &none);
  EXPECT_EQ(none.top_logprobs_size(), 0);
}

TEST(GenerateServiceTest, RefusesEveryBadFieldNamingTheValueAndKeepsServing) {
  FakeGeneration generation;
  Served served(generation.generator());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const grpc::StatusCode kBad = grpc::StatusCode::INVALID_ARGUMENT;
  const std::vector<BadCase> cases = {
      {"max_tokens", [](GenerateRequest& r) { r.set_max_tokens(-1); }, kBad, "max_tokens -1"},
      {"temperature", [](GenerateRequest& r) { r.set_temperature(-0.5f); }, kBad,
       "temperature -0.5 must be finite and >= 0"},
      {"temperature nan", [&](GenerateRequest& r) { r.set_temperature(nan); }, kBad,
       "temperature nan"},
      {"temperature inf", [&](GenerateRequest& r) { r.set_temperature(inf); }, kBad,
       "temperature inf"},
      {"top_p 0", [](GenerateRequest& r) { r.set_top_p(0); }, kBad, "top_p 0 must be in (0, 1]"},
      {"top_p 1.5", [](GenerateRequest& r) { r.set_top_p(1.5f); }, kBad, "top_p 1.5"},
      {"top_p nan", [&](GenerateRequest& r) { r.set_top_p(nan); }, kBad, "top_p nan"},
      {"top_k", [](GenerateRequest& r) { r.set_top_k(-2); }, kBad, "top_k -2 must be >= -1 (0 and -1 turn it off)"},
      {"logprobs 21", [](GenerateRequest& r) { r.set_logprobs(21); }, kBad,
       "logprobs 21 must be in [0, 20]"},
      {"logprobs -1", [](GenerateRequest& r) { r.set_logprobs(-1); }, kBad, "logprobs -1"},
      {"both prompts", [](GenerateRequest& r) { r.set_prompt("hi"); }, kBad,
       "prompt and prompt_ids are both given"},
      {"no prompt", [](GenerateRequest& r) { r.clear_prompt_ids(); }, kBad,
       "prompt and prompt_ids are both empty"},
      {"negative id", [](GenerateRequest& r) { r.add_prompt_ids(-3); }, kBad,
       "prompt_ids[3] is -3"},
      {"negative stop id", [](GenerateRequest& r) { r.add_stop_token_ids(-1); }, kBad,
       "stop_token_ids[0] is -1"},
      {"id past the vocabulary", [](GenerateRequest& r) { r.add_prompt_ids(50); }, kBad,
       "prompt token 3 is 50, outside the vocabulary [0, 50)"},
      {"context", [](GenerateRequest& r) { r.set_max_tokens(4094); }, kBad,
       "exceeds the model's context of 4096"},
      {"text without tokenizer",
       [](GenerateRequest& r) {
         r.clear_prompt_ids();
         r.set_prompt("hello");
       },
       kBad, "no tokenizer"},
      {"empty stop",
       [](GenerateRequest& r) {
         r.add_stop("x");
         r.add_stop("");
       },
       kBad, "stop[1] is empty"},
      {"stop without tokenizer", [](GenerateRequest& r) { r.add_stop("\n"); }, kBad,
       "stop strings [\"\n\"] need the text of model 'lm'"},
      {"no model", [](GenerateRequest& r) { r.set_model(""); }, kBad, "model is empty"},
      {"unknown model", [](GenerateRequest& r) { r.set_model("nope"); },
       grpc::StatusCode::NOT_FOUND, "no model 'nope'"},
  };
  for (const BadCase& c : cases) {
    GenerateRequest request = Ids({1, 2, 3}, 4);
    c.change(request);
    Streamed s = Generate(served.stub(), request);
    EXPECT_EQ(s.status.error_code(), c.code) << c.name << ": " << s.status.error_message();
    EXPECT_THAT(s.status.error_message(), HasSubstr(c.message)) << c.name;
    EXPECT_TRUE(s.chunks.empty()) << c.name;
  }
  Streamed ok = Generate(served.stub(), Ids({1, 2, 3}, 4));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_THAT(ok.ids, ElementsAreArray(Reference({1, 2, 3}, 4, {})));
}

TEST(GenerateServiceTest, AFullQueueIsResourceExhausted) {
  FakeGenerationOptions options;
  options.max_running = 1;
  options.max_waiting = 1;
  FakeGeneration generation(options);
  Served served(generation.generator());
  generation.Pause();
  grpc::ClientContext a_context, b_context;
  auto a = served.stub().Generate(&a_context, Ids({1}, 3));
  generation.WaitUntilStepWaits();  // a runs, its first step held
  auto b = served.stub().Generate(&b_context, Ids({2}, 3));
  ASSERT_TRUE(Eventually([&] { return generation.waiting() == 1; }));  // b waits
  Streamed c = Generate(served.stub(), Ids({3}, 3));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(c.status.error_message(), HasSubstr("the generation queue is full"));
  generation.Resume();
  using Reader = grpc::ClientReader<GenerateChunk>;
  for (auto [reader, prompt] :
       std::vector<std::pair<Reader*, int64_t>>{{a.get(), 1}, {b.get(), 2}}) {
    std::vector<int64_t> ids;
    GenerateChunk chunk;
    while (reader->Read(&chunk)) ids.insert(ids.end(), chunk.token_ids().begin(),
                                            chunk.token_ids().end());
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_THAT(ids, ElementsAreArray(Reference({prompt}, 3, {})));
  }
}

// Steps of 2 ms: a long sequence is still running when the test cancels it.
FakeGenerationOptions Slow() {
  FakeGenerationOptions options;
  options.step_delay = absl::Milliseconds(2);
  return options;
}

// Reads until the call ends; its status.
grpc::Status Drain(grpc::ClientReader<GenerateChunk>& reader) {
  GenerateChunk chunk;
  while (reader.Read(&chunk)) {
  }
  return reader.Finish();
}

TEST(GenerateServiceTest, AClientCancelEndsTheSequence) {
  FakeGeneration generation(Slow());
  Served served(generation.generator());
  // Another long sequence runs beside the one cancelled.
  grpc::ClientContext other_context;
  auto other = served.stub().Generate(&other_context, Ids({7}, 4000));
  grpc::ClientContext context;
  auto reader = served.stub().Generate(&context, Ids({1, 2, 3}, 4000));
  GenerateChunk chunk;
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(reader->Read(&chunk));
    ids.push_back(chunk.token_ids(0));
  }
  EXPECT_THAT(ids, ElementsAreArray(Reference({1, 2, 3}, 3, {})));
  ASSERT_TRUE(Eventually([&] { return generation.cached_sequences() == 2; }));
  EXPECT_EQ(generation.released(), 0);
  context.TryCancel();
  EXPECT_EQ(Drain(*reader).error_code(), grpc::StatusCode::CANCELLED);
  // The fake workers freed the cancelled sequence's cache (the other's stays)
  // and the scheduler holds only the other.
  ASSERT_TRUE(Eventually(
      [&] { return generation.released() == 1 && generation.cached_sequences() == 1; }))
      << generation.released() << " released, " << generation.cached_sequences() << " cached";
  EXPECT_EQ(generation.live(), 1);
  other_context.TryCancel();
  EXPECT_EQ(Drain(*other).error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(Eventually([&] { return generation.live() == 0; }));
  EXPECT_LT(generation.steps(), 3000);  // both ended long before 4000 tokens
  // And the service goes on.
  Streamed ok = Generate(served.stub(), Ids({5}, 3));
  EXPECT_THAT(ok.ids, ElementsAreArray(Reference({5}, 3, {})));
}

// The last running sequence cancelled: its cache is freed too (the loop runs a
// plan that only releases).
TEST(GenerateServiceTest, CancellingTheLastSequenceFreesItsCache) {
  FakeGeneration generation(Slow());
  Served served(generation.generator());
  grpc::ClientContext context;
  auto reader = served.stub().Generate(&context, Ids({1, 2, 3}, 4000));
  GenerateChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  context.TryCancel();
  EXPECT_EQ(Drain(*reader).error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(Eventually([&] { return generation.live() == 0; }));
  EXPECT_TRUE(Eventually(
      [&] { return generation.released() == 1 && generation.cached_sequences() == 0; }))
      << generation.released() << " released, " << generation.cached_sequences() << " cached";
}

TEST(GenerateServiceTest, ASequenceThatFailsEndsTheCallWithItsStatus) {
  FakeGenerationOptions options;
  options.fail_steps = true;  // every step: UNAVAILABLE "worker 1 lost"
  FakeGeneration generation(options);
  Served served(generation.generator());
  Streamed s = Generate(served.stub(), Ids({1, 2}, 4));
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::UNAVAILABLE) << s.status.error_message();
  EXPECT_THAT(s.status.error_message(), HasSubstr("worker 1 lost"));
  EXPECT_TRUE(s.chunks.empty());
  // The sequence is gone (ended after the scheduler's max_step_failures).
  EXPECT_TRUE(Eventually([&] { return generation.live() == 0; }));
}

TEST(GenerateServiceTest, WithoutAGeneratorEveryCallIsFailedPrecondition) {
  Served served(nullptr);
  Streamed s = Generate(served.stub(), Ids({1}, 3));
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.status.error_message(), HasSubstr("generation is not enabled"));
}

}  // namespace
}  // namespace meshserve
