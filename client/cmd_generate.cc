// `meshserve generate`: one completion streamed from the coordinator's
// meshserve.GenerateService (proto/generate.proto).
//
//   meshserve generate --target HOST:PORT --model NAME
//       (--prompt TEXT | --prompt_ids 1,2,3) [--max_tokens N] [--temperature T]
//       [--top_k K] [--top_p P] [--seed S] [--stop_token_ids 5,6] [--stop S]...
//       [--ignore_eos] [--logprobs N] [--ids] [--timeout_s S]
//
// --stop (repeatable) is a stop string: the completion ends with
// finish_reason=stop at the token whose text completes it, and the text
// printed stops before it (the model needs a tokenizer).
//
// Prints the completion as it arrives: each chunk's text, or while there is
// no text (no tokenizer) its ids separated by spaces; then a line
// "finish_reason=length prompt_tokens=3 completion_tokens=12 total_tokens=15
// version=7". With --ids the last stdout line holds the completion's ids
// only, separated by spaces. Unset sampling flags are left to the server's
// defaults (max_tokens 16, temperature 1, top_p 1, top_k off, a drawn seed).
//
// Exit codes: 0 success; 1 the server refused or failed the call (its code
// and message on stderr); 2 bad flags (naming the flag).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli_args.h"
#include "client/client_connect.h"
#include "client/command.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "proto/generate.grpc.pb.h"

namespace meshserve {
namespace client {
namespace {

constexpr char kGenerateUsage[] =
    "generate --target HOST:PORT --model NAME (--prompt TEXT | --prompt_ids 1,2,3) "
    "[--max_tokens N] [--temperature T] [--top_k K] [--top_p P] [--seed S] "
    "[--stop_token_ids 5,6] [--stop S]... [--ignore_eos] [--logprobs N] [--ids] "
    "[--timeout_s S]";

// "1,2,3" -> ids >= 0. \error kInvalidArgument naming the flag and the text.
absl::StatusOr<std::vector<int64_t>> ParseIdList(const CliArgs& args, absl::string_view flag) {
  std::vector<int64_t> ids;
  const std::string text = args.Get(flag);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return InvalidArgument("flag --", flag, ": '", part, "' in '", text,
                             "' is not a token id (an integer >= 0)");
    }
    ids.push_back(id);
  }
  return ids;
}

// The request the flags ask for. \error kInvalidArgument naming the flag.
absl::StatusOr<GenerateRequest> RequestFromFlags(const CliArgs& args) {
  GenerateRequest r;
  r.set_model(args.Get("model"));
  if (args.Has("prompt") == args.Has("prompt_ids")) {
    return InvalidArgument("give exactly one of --prompt and --prompt_ids");
  }
  if (args.Has("prompt")) r.set_prompt(args.Get("prompt"));
  if (args.Has("prompt_ids")) {
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> ids, ParseIdList(args, "prompt_ids"));
    r.mutable_prompt_ids()->Add(ids.begin(), ids.end());
  }
  if (args.Has("stop_token_ids")) {
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> ids, ParseIdList(args, "stop_token_ids"));
    r.mutable_stop_token_ids()->Add(ids.begin(), ids.end());
  }
  for (const std::string& stop : args.GetAll("stop")) {
    if (stop.empty()) return InvalidArgument("flag --stop: a stop string must not be empty");
    r.add_stop(stop);
  }
  MS_ASSIGN_OR_RETURN(int64_t max_tokens, args.GetInt("max_tokens", 0, 1, INT64_MAX));
  r.set_max_tokens(max_tokens);
  MS_ASSIGN_OR_RETURN(int64_t top_k, args.GetInt("top_k", 0, INT32_MIN, INT32_MAX));
  r.set_top_k(static_cast<int32_t>(top_k));
  if (args.Has("temperature")) {
    MS_ASSIGN_OR_RETURN(double t, args.GetDouble("temperature", 1));
    r.set_temperature(static_cast<float>(t));
  }
  if (args.Has("top_p")) {
    MS_ASSIGN_OR_RETURN(double p, args.GetDouble("top_p", 1));
    r.set_top_p(static_cast<float>(p));
  }
  if (args.Has("seed")) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(args.Get("seed"), &seed)) {
      return InvalidArgument("flag --seed: '", args.Get("seed"),
                             "' is not an integer in [0, 2^64)");
    }
    r.set_seed(seed);
  }
  if (args.Has("logprobs")) {
    MS_ASSIGN_OR_RETURN(int64_t n, args.GetInt("logprobs", 0, INT32_MIN, INT32_MAX));
    r.set_logprobs(static_cast<int32_t>(n));
  }
  r.set_ignore_eos(args.Has("ignore_eos"));
  return r;
}

// Streams the call to stdout; the completion's ids and the last chunk.
absl::Status StreamCompletion(GenerateService::Stub& stub, grpc::ClientContext& context,
                              const GenerateRequest& request, std::vector<int64_t>& ids,
                              GenerateChunk& last) {
  std::unique_ptr<grpc::ClientReader<GenerateChunk>> reader = stub.Generate(&context, request);
  GenerateChunk chunk;
  bool printed = false;
  // A text prompt or stop strings: the model has a tokenizer.
  bool text_seen = !request.prompt().empty() || request.stop_size() > 0;
  while (reader->Read(&chunk)) {
    printed = printed || !chunk.text().empty() || chunk.token_ids_size() > 0;
    text_seen = text_seen || !chunk.text().empty();
    if (!chunk.text().empty()) {
      std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
    } else if (!text_seen) {  // empty text while a character is held back: nothing
      for (int64_t id : chunk.token_ids()) std::printf("%s%lld", ids.empty() ? "" : " ",
                                                       static_cast<long long>(id));
    }
    ids.insert(ids.end(), chunk.token_ids().begin(), chunk.token_ids().end());
    std::fflush(stdout);
    last = chunk;
  }
  if (printed) std::printf("\n");
  return FromGrpcStatus(reader->Finish());
}

int RunGenerate(const CliArgs& args) {
  absl::StatusOr<GenerateRequest> request = RequestFromFlags(args);
  if (!request.ok()) return UsageError("generate", kGenerateUsage, request.status());
  absl::StatusOr<double> timeout_s = args.GetDouble("timeout_s", 0);
  if (!timeout_s.ok() || *timeout_s < 0) {
    return UsageError("generate", kGenerateUsage,
                      InvalidArgument("flag --timeout_s: '", args.Get("timeout_s"),
                                      "' is not a number >= 0 (0: no deadline)"));
  }
  absl::StatusOr<InferenceClient::Options> client = ClientOptionsFromArgs(args);
  if (!client.ok()) return UsageError("generate", kGenerateUsage, client.status());
  ChannelOptions options;
  options.credentials = client->credentials;
  options.server_name_override = client->server_name_override;
  options.bearer_token = client->bearer_token;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(args.Get("target"), options);
  if (!channel.ok()) {
    return UsageError("generate", kGenerateUsage,
                      AnnotateStatus(channel.status(), "flag --target"));
  }
  std::unique_ptr<GenerateService::Stub> stub = GenerateService::NewStub(*channel);
  grpc::ClientContext context;
  if (*timeout_s > 0) SetDeadline(&context, absl::Seconds(*timeout_s));
  std::vector<int64_t> ids;
  GenerateChunk last;
  absl::Status status = StreamCompletion(*stub, context, *request, ids, last);
  if (!status.ok()) return Fail("generate", status);
  std::printf("finish_reason=%s prompt_tokens=%lld completion_tokens=%lld total_tokens=%lld "
              "version=%lld\n",
              last.finish_reason().c_str(),
              static_cast<long long>(last.usage().prompt_tokens()),
              static_cast<long long>(last.usage().completion_tokens()),
              static_cast<long long>(last.usage().total_tokens()),
              static_cast<long long>(last.version()));
  if (args.Has("ids")) std::printf("%s\n", absl::StrJoin(ids, " ").c_str());
  return 0;
}

MS_REGISTER_COMMAND(FlagCommand{"generate",
                                kGenerateUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                                  {"model", FlagDef::kValue, true},
                                                  {"prompt"},
                                                  {"prompt_ids"},
                                                  {"max_tokens"},
                                                  {"temperature"},
                                                  {"top_k"},
                                                  {"top_p"},
                                                  {"seed"},
                                                  {"stop_token_ids"},
                                                  {"stop", FlagDef::kRepeated},
                                                  {"ignore_eos", FlagDef::kBool},
                                                  {"logprobs"},
                                                  {"ids", FlagDef::kBool},
                                                  {"timeout_s"}}),
                                RunGenerate, /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
