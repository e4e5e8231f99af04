// The parameter commands of the `meshserve` CLI (docs/PARAMETERS.md):
//
//   meshserve push --target HOST:PORT --model NAME --checkpoint FILE.safetensors
//       [--timeout_s S] [--chunk_bytes N] [--direct auto|on|off]
//   meshserve pull --target HOST:PORT --model NAME --output FILE.safetensors
//       [--params a,b,...] [--offset D0,D1,..] [--shape D0,D1,..] [--version N]
//       [--timeout_s S]
//
// push sends every tensor of the file as one whole box of the param of that
// name, in --chunk_bytes chunks (default 1 MiB) read from the file as they
// are sent; the server commits a new version only if the whole push is valid.
// --direct auto (the default) sends the bytes straight to the workers that
// hold them (PushDirect, params_direct.h) and, when a worker cannot be reached
// from here or the server predates PushDirect, through the coordinator
// (PushParams, params_files.h) instead, saying why on stderr; on: direct
// only; off: through the coordinator only. A TLS connection (--tls_dir/--ca)
// pushes through the coordinator: workers admit only cluster members. Prints
//   pushed model mlp: version 2, 3 params, 8448 bytes sent in 0.004 s (2.0 MiB/s)
//   server: received 0 bytes, 8448 to workers, 8448 worker to worker, 0.003 s
//   path: direct to 2 workers
// pull writes the current version's params (every param, or --params) as a
// safetensors file in the model's dtype, with the version in its metadata:
//   pulled model mlp: version 2, 3 params, 8448 bytes -> out.safetensors (0.002 s)
// --params may name params or checkpoint tensors the model was imported from
// (GPT-2's fused c_attn); each is read straight from its holders
// (PullBoxesToFile, params_client.h: PlanPull, ReadParam, EndPull), through
// the coordinator when they cannot be reached or under TLS. --offset and
// --shape pull a box of the one name given (offset default the origin, shape
// default the rest of the tensor); --version N pulls that version while the
// server holds it (NOT_FOUND otherwise); both need --params. Then also
//   path: direct from 4 workers
//
// Exit codes: 0 success, 1 the server refused or a file failed (the error is
// printed as "CODE: message"), 2 bad flags.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli_args.h"
#include "client/client_connect.h"
#include "client/command.h"
#include "client/params_client.h"
#include "client/params_direct.h"
#include "client/params_files.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace client {
namespace {

constexpr char kPushUsage[] =
    "push --target HOST:PORT --model NAME --checkpoint FILE.safetensors [--timeout_s S] "
    "[--chunk_bytes N] [--direct auto|on|off]";
constexpr char kPullUsage[] =
    "pull --target HOST:PORT --model NAME --output FILE.safetensors [--params a,b,...] "
    "[--offset D0,D1,..] [--shape D0,D1,..] [--version N] [--timeout_s S]";

absl::StatusOr<absl::Time> DeadlineFromArgs(const CliArgs& args) {
  auto timeout = args.GetDouble("timeout_s", 600);
  if (!timeout.ok() || *timeout <= 0) {
    return InvalidArgument("flag --timeout_s: '", args.Get("timeout_s"),
                           "' is not a positive number");
  }
  return absl::Now() + absl::Seconds(*timeout);
}

double MiBPerSecond(int64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / (1 << 20) / seconds : 0.0;
}

// A push maps the checkpoint (params_direct.h): a file that shrinks
// under it raises SIGBUS on the read past its end. Say so and exit 1; the
// coordinator sees the calls break and aborts the push.
void ExitOnSigbus(int) {
  static const char kMessage[] =
      "push: FAILED_PRECONDITION: the checkpoint file shrank while it was being pushed "
      "(read past its end); nothing was committed\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  ::_exit(1);
}

int RunPush(const CliArgs& args) {
  auto deadline = DeadlineFromArgs(args);
  if (!deadline.ok()) return UsageError("push", kPushUsage, deadline.status());
  auto chunk_bytes = args.GetInt("chunk_bytes", kParamChunkBytes, 8, int64_t{64} << 20);
  if (!chunk_bytes.ok()) return UsageError("push", kPushUsage, chunk_bytes.status());
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("push", kPushUsage, client.status());
  const std::string direct = args.Get("direct", "auto");
  if (direct != "auto" && direct != "on" && direct != "off") {
    return UsageError("push", kPushUsage,
                      InvalidArgument("flag --direct: '", direct, "' is not auto, on or off"));
  }
  const bool tls = args.Has("tls_dir") || args.Has("ca");
  if (direct == "on" && tls) {
    return UsageError("push", kPushUsage,
                      InvalidArgument("flag --direct: 'on' needs a plaintext cluster (workers "
                                      "admit only cluster members under TLS)"));
  }
  const std::string path = args.Get("checkpoint");
  absl::StatusOr<PushResult> pushed = Unavailable("not pushed");
  std::string path_line = "through the coordinator";
  bool relay = direct == "off" || tls;
  struct sigaction action;  // both pushes send slices of the mapped file
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = ExitOnSigbus;
  ::sigaction(SIGBUS, &action, nullptr);
  if (!relay) {
    std::string fallback;
    pushed = PushDirectFromFile(**client, path, args.Get("model"),
                                DirectPushOptions{*chunk_bytes, absl::Seconds(2)}, *deadline,
                                &fallback);
    if (!pushed.ok() && !fallback.empty() && direct == "auto") {
      std::fprintf(stderr, "push: %s; pushing through the coordinator\n", fallback.c_str());
      path_line = absl::StrCat("through the coordinator (", fallback, ")");
      relay = true;
    } else if (!pushed.ok()) {
      return Fail("push", AnnotateStatus(pushed.status(), "flag --checkpoint ", path));
    } else {
      path_line = absl::StrCat("direct to ", pushed->workers, " workers");
    }
  }
  if (relay) {
    auto reader = PushChunkReader::Open(path, args.Get("model"), *chunk_bytes);
    if (!reader.ok()) return Fail("push", AnnotateStatus(reader.status(), "flag --checkpoint"));
    auto options = ClientOptionsFromArgs(args);
    if (!options.ok()) return UsageError("push", kPushUsage, options.status());
    pushed = PushParamsFromFile(**client, *options, **reader, *deadline);
  }
  if (!pushed.ok()) return Fail("push", pushed.status());
  const PushParamsResponse& r = pushed->response;
  // A teed direct push sends each piece to every holder: the tensors' bytes
  // are the push's, the wire's are shown apart.
  const int64_t tensors = pushed->bytes_tensors > 0 ? pushed->bytes_tensors : pushed->bytes_sent;
  const std::string wire =
      pushed->bytes_sent == tensors
          ? std::string()
          : absl::StrCat(", ", pushed->bytes_sent, " on the wire (each piece to every holder)");
  std::printf("pushed model %s: version %lld, %zu params, %lld bytes sent in %.3f s "
              "(%.1f MiB/s)%s\n",
              args.Get("model").c_str(), static_cast<long long>(r.version()),
              static_cast<size_t>(r.params_size()), static_cast<long long>(tensors),
              pushed->seconds, MiBPerSecond(tensors, pushed->seconds), wire.c_str());
  std::printf("server: received %lld bytes, %lld to workers, %lld worker to worker, %.3f s\n",
              static_cast<long long>(r.bytes_received()),
              static_cast<long long>(r.bytes_to_workers()),
              static_cast<long long>(r.bytes_filled()), r.seconds());
  std::printf("path: %s\n", path_line.c_str());
  std::fflush(stdout);
  return 0;
}

// The box flags of pull into *pull. \error kInvalidArgument naming the flag.
absl::Status BoxFromArgs(const CliArgs& args, BoxPull* pull) {
  MS_ASSIGN_OR_RETURN(pull->offset, args.GetDims("offset"));
  MS_ASSIGN_OR_RETURN(pull->shape, args.GetDims("shape"));
  MS_ASSIGN_OR_RETURN(pull->version,
                      args.GetInt("version", 0, 1, std::numeric_limits<int64_t>::max()));
  const bool box = args.Has("offset") || args.Has("shape");
  if ((box || args.Has("version")) && pull->names.empty()) {
    return InvalidArgument("flags --offset, --shape and --version need --params naming what to "
                           "pull");
  }
  if (box && pull->names.size() != 1) {
    return InvalidArgument("flags --offset and --shape: --params '", args.Get("params"),
                           "' names ", pull->names.size(), " tensors, not one");
  }
  return absl::OkStatus();
}

int RunPull(const CliArgs& args) {
  auto deadline = DeadlineFromArgs(args);
  if (!deadline.ok()) return UsageError("pull", kPullUsage, deadline.status());
  BoxPull pull;
  pull.model = args.Get("model");
  if (args.Has("params")) {
    pull.names = absl::StrSplit(args.Get("params"), ',', absl::SkipWhitespace());
    if (pull.names.empty()) {
      return UsageError("pull", kPullUsage,
                        InvalidArgument("flag --params: '", args.Get("params"),
                                        "' names no param"));
    }
  }
  const absl::Status box = BoxFromArgs(args, &pull);
  if (!box.ok()) return UsageError("pull", kPullUsage, box);
  pull.direct = !(args.Has("tls_dir") || args.Has("ca"));
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("pull", kPullUsage, client.status());
  const std::string path = args.Get("output");
  absl::StatusOr<PullResult> pulled = Unavailable("not pulled");
  if (pull.names.empty()) {
    auto writer = PulledFileWriter::Create(path);
    if (!writer.ok()) return Fail("pull", AnnotateStatus(writer.status(), "flag --output"));
    pulled = PullParamsToFile(**client, pull.model, {}, **writer, *deadline);
  } else {
    pulled = PullBoxesToFile(**client, pull, path, *deadline);
  }
  if (!pulled.ok()) return Fail("pull", pulled.status());
  std::printf("pulled model %s: version %lld, %zu params, %lld bytes -> %s (%.3f s)\n",
              args.Get("model").c_str(), static_cast<long long>(pulled->version),
              pulled->params.size(), static_cast<long long>(pulled->bytes), path.c_str(),
              pulled->seconds);
  std::printf("params: %s\n", absl::StrJoin(pulled->params, ",").c_str());
  if (!pulled->path.empty()) std::printf("path: %s\n", pulled->path.c_str());
  std::fflush(stdout);
  return 0;
}

MS_REGISTER_COMMAND(FlagCommand{"push",
                                kPushUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                                  {"model", FlagDef::kValue, true},
                                                  {"checkpoint", FlagDef::kValue, true},
                                                  {"chunk_bytes"},
                                                  {"direct"},
                                                  {"timeout_s"}}),
                                RunPush,
                                /*rejects_positional=*/true});
MS_REGISTER_COMMAND(FlagCommand{"pull",
                                kPullUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                                  {"model", FlagDef::kValue, true},
                                                  {"output", FlagDef::kValue, true},
                                                  {"params"},
                                                  {"offset"},
                                                  {"shape"},
                                                  {"version"},
                                                  {"timeout_s"}}),
                                RunPull,
                                /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
