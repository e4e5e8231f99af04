// OpenAiRoutes (openai_routes.h).
#include "server/coordinator/http/openai_routes.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"
#include "server/coordinator/http/openai_response.h"

namespace meshserve {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kEventStream[] = "text/event-stream";
constexpr char kKeepAlive[] = ": keep-alive\n\n";
// StartOnOneVersion's bound: pushes are seconds apart, Starts microseconds.
constexpr int kMaxStartAttempts = 3;

void SendError(const absl::Status& status, httplib::Response& res) {
  const OpenAiError error = EncodeOpenAiError(status);
  res.status = error.http_status;
  res.set_content(error.body, kJson);
}

absl::Status GenerationDisabled() {
  return absl::UnavailableError("generation is not enabled on this coordinator");
}

uint64_t RandomIdBase() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// The route's detokenizer when it has one, else the model's tokenizer (the
// handles'): each id's bytes, an id it does not know giving none.
Detokenizer DetokenizerFor(const Detokenizer& route,
                           const std::vector<GenerationHandle>& handles) {
  if (route != nullptr || handles.empty() || handles.front().tokenizer == nullptr) return route;
  std::shared_ptr<const tokenizer::Tokenizer> tok = handles.front().tokenizer;
  return [tok](const std::string&, const std::vector<int64_t>& ids) {
    std::string bytes;
    for (int64_t id : ids) {
      if (id < 0 || id > INT32_MAX) continue;
      absl::StatusOr<std::string> b = tok->Decode({static_cast<int32_t>(id)});
      if (b.ok()) bytes += *b;
    }
    return bytes;
  };
}

}  // namespace

// A streamed answer: what the content provider keeps between its calls (on
// the answering thread) and the releaser reads at the end.
struct OpenAiRoutes::Stream {
  const OpenAiRoutes* routes = nullptr;
  std::shared_ptr<CompletionRun> run;
  std::vector<GenerationHandle> handles;
  CompletionMeta meta;
  ChoiceTracker tracker;
  std::vector<bool> sent_first;
  bool include_usage = false;
  bool ended = false;  // [DONE] written

  Stream(const OpenAiRoutes* r, const CompletionRequest& request, Detokenizer detokenize)
      : routes(r),
        tracker(request.model, request.n, request.logprobs, std::move(detokenize),
                request.stop_strings),
        sent_first(static_cast<size_t>(request.n), false),
        include_usage(request.include_usage) {}

  // The next piece of the stream: the chunks of the events that came within
  // `wait` (a keep-alive comment when none did), and the end when every
  // choice has finished or one failed.
  std::string Next(absl::Duration wait) {
    const std::vector<CompletionRun::Event> events = run->Take(wait);
    if (events.empty()) return kKeepAlive;
    std::string out;
    for (const CompletionRun::Event& e : events) {
      const CompletionChoice delta = tracker.Apply(e);
      if (!tracker.error().ok()) break;
      const size_t i = static_cast<size_t>(e.choice);
      absl::StrAppend(&out, EncodeCompletionChunk(meta, delta, !sent_first[i]));
      sent_first[i] = true;
    }
    if (!tracker.error().ok()) {
      routes->CancelAll(handles);
      absl::StrAppend(&out, EncodeErrorEvent(tracker.error()), EncodeDoneEvent());
      ended = true;
    } else if (tracker.all_finished()) {
      if (include_usage) absl::StrAppend(&out, EncodeUsageChunk(meta, tracker.usage()));
      absl::StrAppend(&out, EncodeDoneEvent());
      ended = true;
    }
    return out;
  }
};

OpenAiRoutes::OpenAiRoutes(OpenAiRouteOptions options)
    : options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())),
      next_id_(RandomIdBase()) {}

void OpenAiRoutes::Register(httplib::Server& server) {
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Completions(req, res);
  });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { Models(res); });
}

void OpenAiRoutes::Models(httplib::Response& res) const {
  if (options_.generator == nullptr) return SendError(GenerationDisabled(), res);
  std::vector<std::string> names;
  if (options_.model_names != nullptr) names = options_.model_names();
  res.status = 200;
  res.set_content(EncodeModelList(names, created_), kJson);
}

void OpenAiRoutes::CancelAll(const std::vector<GenerationHandle>& handles) const {
  for (const GenerationHandle& h : handles) options_.generator->Cancel(h);
}

absl::StatusOr<std::vector<GenerationHandle>> OpenAiRoutes::StartChoices(
    const CompletionRequest& request, const std::shared_ptr<CompletionRun>& run) {
  // One group: the n choices share the prompt's prefill where the model's
  // executor can fork caches (Generator::StartGroup); all start or none.
  std::vector<GenerationRequest> requests;
  std::vector<Generator::SinkFactory> sinks;
  for (int32_t i = 0; i < request.n; ++i) {
    requests.push_back(ToGenerateRequest(request, i));
    sinks.push_back([run, i](const GenerationHandle&) { return run->SinkFor(i); });
  }
  return options_.generator->StartGroup(std::move(requests), sinks);
}

absl::StatusOr<std::vector<GenerationHandle>> OpenAiRoutes::StartOnOneVersion(
    const CompletionRequest& request, std::shared_ptr<CompletionRun>* run) {
  for (int attempt = 1;; ++attempt) {
    *run = std::make_shared<CompletionRun>();  // a fresh one: the cancelled events stay out
    absl::StatusOr<std::vector<GenerationHandle>> handles = StartChoices(request, *run);
    if (!handles.ok()) return handles;
    const int64_t version = handles->front().version;
    const bool one_version = std::all_of(handles->begin(), handles->end(),
                                         [&](const GenerationHandle& h) {
                                           return h.version == version;
                                         });
    if (one_version) return handles;
    CancelAll(*handles);
    if (attempt == kMaxStartAttempts) {
      return absl::UnavailableError(absl::StrCat(
          "the weights of model '", request.model, "' changed while its ", request.n,
          " choices started, ", kMaxStartAttempts, " times: retry"));
    }
  }
}

CompletionMeta OpenAiRoutes::MetaFor(const CompletionRequest& request,
                                     const GenerationHandle& first) {
  CompletionMeta meta;
  meta.id = MakeCompletionId(next_id_.fetch_add(1, std::memory_order_relaxed));
  meta.created = absl::ToUnixSeconds(absl::Now());
  meta.model = request.model;
  meta.weight_version = first.version;
  meta.return_token_ids = request.return_token_ids;
  meta.prompt_token_ids = first.prompt_ids;  // a text prompt's encoding too
  return meta;
}

void OpenAiRoutes::Completions(const httplib::Request& req, httplib::Response& res) {
  if (options_.generator == nullptr) return SendError(GenerationDisabled(), res);
  absl::StatusOr<CompletionRequest> request = ParseCompletionRequest(req.body);
  if (!request.ok()) return SendError(request.status(), res);
  std::shared_ptr<CompletionRun> run;
  absl::StatusOr<std::vector<GenerationHandle>> handles = StartOnOneVersion(*request, &run);
  if (!handles.ok()) return SendError(handles.status(), res);
  const CompletionMeta meta = MetaFor(*request, handles->front());
  if (request->stream) return AnswerStream(*request, meta, run, *std::move(handles), res);
  AnswerWhole(*request, meta, run, *handles, res);
}

void OpenAiRoutes::AnswerWhole(const CompletionRequest& request, const CompletionMeta& meta,
                               const std::shared_ptr<CompletionRun>& run,
                               const std::vector<GenerationHandle>& handles,
                               httplib::Response& res) {
  ChoiceTracker tracker(request.model, request.n, request.logprobs,
                        DetokenizerFor(options_.detokenize, handles), request.stop_strings);
  std::vector<CompletionChoice> choices(static_cast<size_t>(request.n));
  for (int32_t i = 0; i < request.n; ++i) choices[static_cast<size_t>(i)].index = i;
  while (!tracker.all_finished() && tracker.error().ok()) {
    for (const CompletionRun::Event& e : run->Take(absl::InfiniteDuration())) {
      AppendChoiceDelta(tracker.Apply(e), &choices[static_cast<size_t>(e.choice)]);
    }
  }
  if (!tracker.error().ok()) {
    CancelAll(handles);
    return SendError(tracker.error(), res);
  }
  res.status = 200;
  res.set_content(EncodeCompletionResponse(meta, choices, tracker.usage()), kJson);
}

void OpenAiRoutes::AnswerStream(const CompletionRequest& request, const CompletionMeta& meta,
                                const std::shared_ptr<CompletionRun>& run,
                                std::vector<GenerationHandle> handles, httplib::Response& res) {
  auto stream =
      std::make_shared<Stream>(this, request, DetokenizerFor(options_.detokenize, handles));
  stream->run = run;
  stream->handles = std::move(handles);
  stream->meta = meta;
  const absl::Duration wait = options_.keepalive_interval;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      kEventStream,
      [stream, wait](size_t, httplib::DataSink& sink) {
        if (stream->ended) {  // not expected: done() ends the calls
          sink.done();
          return true;
        }
        const std::string piece = stream->Next(wait);
        if (!sink.write(piece.data(), piece.size())) return false;  // the client left
        if (stream->ended) sink.done();
        return true;
      },
      // Runs when the answer is over, written or not: a stream that did not
      // reach its end (the client left, the server stops) cancels its choices.
      [stream](bool) {
        if (!stream->ended) stream->routes->CancelAll(stream->handles);
      });
}

}  // namespace meshserve
