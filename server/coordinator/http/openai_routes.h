// The OpenAI-compatible completions API on the coordinator's HTTP port
// (issue #32), on cpp-httplib: the routes that join the JSON codec
// (openai_request.h, openai_response.h) to the Generator.
//
//   POST /v1/completions
//     body -> ParseCompletionRequest -> ToGenerateRequest(request, i) for
//             each of the n choices (choice i's seed is seed + i when a seed
//             is given) -> Generator::StartGroup: one group, sharing the
//             prompt's prefill where the model's executor can fork caches
//     "stream": false  waits for the n sequences and answers the whole completion.
//     "stream": true   answers 200 text/event-stream at once, chunked: one
//                      `data:` chunk per SequenceEvent (its choice's new ids and
//                      text, finish_reason on its last), with
//                      stream_options.include_usage the usage chunk, then
//                      `data: [DONE]`. While no event comes for
//                      keepalive_interval an SSE comment line (": keep-alive")
//                      is written (clients skip it): a client that has gone is
//                      found by a failed write, and its sequences are
//                      cancelled (Generator::Cancel).
//   GET /v1/models     {"object": "list", "data": [{"id": name, ...}]} of
//                      options.model_names().
//
// Refusals answer OpenAI's error body with its status (EncodeOpenAiError):
// the request's fields (ParseCompletionRequest's 400s) and the Generator's
// checks, which are the model checks (it refuses an unknown model, 404; a
// text prompt or "stop" strings for a model without a tokenizer, an id
// outside the vocabulary, prompt + max_tokens past the context, 400; a full
// queue, 429). When choice i > 0 is refused, the started ones are cancelled.
// The n choices run on one weight version (system_fingerprint names it): when
// a push commits between their Starts, they are cancelled and started again.
// A choice that ends without a result (the loop's kError, or kCancelled by
// the server) fails the request: a whole completion answers that error, a
// stream sends it as one error event (EncodeErrorEvent) before [DONE]; the
// other choices are cancelled. Without a Generator both routes answer 503
// "generation is not enabled on this coordinator".
//
// Text: the model's tokenizer (GenerationHandle::tokenizer: a text prompt is
// encoded by the Generator, each choice's ids decoded by its ChoiceTracker),
// unless the options carry a Detokenizer (tests), which wins. "stop" strings
// end a choice with finish_reason "stop" (the Generator cuts its ids after
// the token that completed the stop); its ChoiceTracker cuts the text before
// the stop and, in a stream, holds back text that may still start one.
//
// A whole (non-streamed) completion holds its HTTP thread until its n
// sequences end (bounded by max_tokens); cpp-httplib 0.11 does not say when
// such a client leaves, so only streams are cancelled on a disconnect.
//
// Thread-safety: handlers run on cpp-httplib's threads; the Generator is
// thread-safe and must outlive the server.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_ROUTES_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_ROUTES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/http/completion_run.h"
#include "server/coordinator/http/openai_request.h"

namespace meshserve {

struct OpenAiRouteOptions {
  Generator* generator = nullptr;  // null: generation is not enabled (503)
  // The names GET /v1/models lists.
  std::function<std::vector<std::string>()> model_names;
  // Null: the model's tokenizer (GenerationHandle::tokenizer) gives the text,
  // "" without one. Set (tests): it wins over the model's.
  Detokenizer detokenize;
  absl::Duration keepalive_interval = absl::Seconds(1);
};

class OpenAiRoutes {
 public:
  explicit OpenAiRoutes(OpenAiRouteOptions options);
  // Adds POST /v1/completions and GET /v1/models to `server`; this object
  // must outlive its serving.
  void Register(httplib::Server& server);

 private:
  struct Stream;  // a streamed answer's state (openai_routes.cc)

  void Completions(const httplib::Request& req, httplib::Response& res);
  void Models(httplib::Response& res) const;
  // Starts the request's n sequences into `run` as one group (all or none).
  // \error Generator::StartGroup's.
  absl::StatusOr<std::vector<GenerationHandle>> StartChoices(
      const CompletionRequest& request, const std::shared_ptr<CompletionRun>& run);
  // StartChoices until every choice runs on one weight version (a push that
  // commits between two Starts splits them: they are cancelled and started
  // again, at most kMaxStartAttempts times). \error StartChoices';
  //   kUnavailable when the versions kept changing.
  absl::StatusOr<std::vector<GenerationHandle>> StartOnOneVersion(
      const CompletionRequest& request, std::shared_ptr<CompletionRun>* run);
  CompletionMeta MetaFor(const CompletionRequest& request, const GenerationHandle& first);
  void AnswerWhole(const CompletionRequest& request, const CompletionMeta& meta,
                   const std::shared_ptr<CompletionRun>& run,
                   const std::vector<GenerationHandle>& handles, httplib::Response& res);
  void AnswerStream(const CompletionRequest& request, const CompletionMeta& meta,
                    const std::shared_ptr<CompletionRun>& run,
                    std::vector<GenerationHandle> handles, httplib::Response& res);
  void CancelAll(const std::vector<GenerationHandle>& handles) const;

  const OpenAiRouteOptions options_;
  const int64_t created_;  // "created" of every model listed (this server's start)
  std::atomic<uint64_t> next_id_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_OPENAI_ROUTES_H_
