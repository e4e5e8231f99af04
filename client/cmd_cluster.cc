// The cluster client commands of the `meshserve` CLI:
//
//   meshserve infer --target HOST:PORT --model NAME --input NAME=FILE.npy ...
//       [--out_sharding OUTPUT=SPEC ...] [--output_dir DIR] [--timeout_s S]
//   meshserve describe --target HOST:PORT MODEL [--input_shape NAME=D0,D1,...]
//   meshserve status --target HOST:PORT
//   meshserve bench --target HOST:PORT --model NAME --input_shape NAME=D0,...
//       [--concurrency C] [--requests N] [--warmup W] [--out_sharding O=SPEC]
//
// Exit codes: 0 success, 1 the server (or a file) failed the request (the
// error is printed as "CODE: message"), 2 bad flags.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/cli_args.h"
#include "client/command.h"
#include "client/inference_client.h"
#include "client/cli_format.h"
#include "client/client_connect.h"
#include "client/npy_files.h"
#include "common/base/parallel_for.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace client {
namespace {

absl::Time DeadlineFromFlag(const CliArgs& args, double fallback_s) {
  double seconds = args.GetDouble("timeout_s", fallback_s).value_or(fallback_s);
  return absl::Now() + absl::Seconds(seconds);
}

// Parses repeated "NAME=D0,D1,..." flags.
absl::StatusOr<std::map<std::string, std::vector<int64_t>>> ParseShapeFlags(
    const CliArgs& args, absl::string_view flag) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& text : args.GetAll(flag)) {
    MS_ASSIGN_OR_RETURN(auto name_value, SplitNameValue(flag, text));
    MS_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseDims(name_value.second),
                        "flag --", flag);
    if (!shapes.emplace(name_value.first, std::move(dims)).second) {
      return InvalidArgument("flag --", flag, ": input '", name_value.first,
                             "' given twice");
    }
  }
  return shapes;
}

absl::StatusOr<std::map<std::string, std::string>> ParseOutShardings(
    const CliArgs& args) {
  std::map<std::string, std::string> out;
  for (const std::string& text : args.GetAll("out_sharding")) {
    MS_ASSIGN_OR_RETURN(auto name_value, SplitNameValue("out_sharding", text));
    if (!out.emplace(name_value.first, name_value.second).second) {
      return InvalidArgument("flag --out_sharding: output '", name_value.first,
                             "' given twice");
    }
  }
  return out;
}

// Input dtypes the model expects ("FP32", "BF16", ...), by name.
std::map<std::string, DType> ModelInputDTypes(InferenceClient& client,
                                              absl::string_view model,
                                              absl::Time deadline) {
  std::map<std::string, DType> dtypes;
  auto metadata = client.ModelMetadata(model, deadline);
  if (!metadata.ok()) return dtypes;  // the Infer call reports the error
  for (const auto& input : metadata->inputs()) {
    auto dtype = ParseDType(input.datatype());
    if (dtype.ok()) dtypes[input.name()] = *dtype;
  }
  return dtypes;
}

// Reads NAME=FILE.npy (npy_files.h).
absl::StatusOr<NamedTensor> ReadInputFlag(const std::string& text,
                                         const std::map<std::string, DType>& want) {
  MS_ASSIGN_OR_RETURN(auto name_value, SplitNameValue("input", text));
  auto it = want.find(name_value.first);
  MS_ASSIGN_OR_RETURN(
      NamedTensor tensor,
      ReadNpyInput(name_value.first, name_value.second,
                   it == want.end() ? std::nullopt : std::optional<DType>(it->second)),
      "flag --input ", name_value.first);
  return tensor;
}

constexpr char kInferUsage[] =
    "infer --target HOST:PORT --model NAME --input NAME=FILE.npy [--input ...] "
    "[--out_sharding OUTPUT=SPEC ...] [--output_dir DIR] [--timeout_s S]";

// What `infer` asks for, from its flags (the inputs are read later, once the
// model's dtypes are known).
struct InferRequestFlags {
  std::string model;
  std::map<std::string, std::string> out_shardings;
  std::string output_dir;
  absl::Time deadline;
};

absl::StatusOr<InferRequestFlags> InferRequestFromFlags(const CliArgs& args) {
  InferRequestFlags r;
  MS_ASSIGN_OR_RETURN(r.out_shardings, ParseOutShardings(args));
  if (auto timeout = args.GetDouble("timeout_s", 120); !timeout.ok() || *timeout <= 0) {
    return InvalidArgument("flag --timeout_s: '", args.Get("timeout_s"),
                           "' is not a positive number");
  }
  r.model = args.Get("model");
  r.output_dir = args.Get("output_dir");
  r.deadline = DeadlineFromFlag(args, 120);
  return r;
}

absl::StatusOr<std::vector<NamedTensor>> ReadInputFlags(const CliArgs& args,
                                                       const std::map<std::string, DType>& want) {
  std::vector<NamedTensor> inputs;
  for (const std::string& text : args.GetAll("input")) {
    MS_ASSIGN_OR_RETURN(NamedTensor input, ReadInputFlag(text, want));
    inputs.push_back(std::move(input));
  }
  return inputs;
}

// A malformed --input flag (usage) rather than a file that cannot be read.
bool IsInputSyntaxError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument &&
         status.message().find("NAME=VALUE") != absl::string_view::npos;
}

absl::Status MakeOutputDir(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return Unavailable("--output_dir '", dir, "' cannot be created: ", error.message());
  }
  return absl::OkStatus();
}

// Prints each output's type (and its grid), writing it to --output_dir.
absl::Status PrintOutputs(InferenceClient& client, const InferRequestFlags& request,
                          const std::vector<NamedTensor>& inputs, InferResult& result) {
  std::map<std::string, std::vector<int64_t>> input_shapes;
  for (const NamedTensor& input : inputs) input_shapes[input.name] = input.shape;
  OutputTypeResolver types(client, request.model, input_shapes, request.out_shardings,
                           request.deadline);
  for (InferOutput& output : result.outputs) {
    NamedTensor& tensor = output.tensor;
    OutputType type = types.Resolve(output);
    std::printf("%s: %s\n", tensor.name.c_str(), type.type_str.c_str());
    if (!type.visualization.empty()) std::printf("%s\n", type.visualization.c_str());
    if (request.output_dir.empty()) continue;
    const std::string name = tensor.name;
    MS_RETURN_IF_ERROR(WriteNpyOutput(request.output_dir, std::move(tensor)));
    std::printf("  wrote %s/%s.npy (float32)\n", request.output_dir.c_str(), name.c_str());
  }
  return absl::OkStatus();
}

int RunInfer(const CliArgs& args) {
  auto request = InferRequestFromFlags(args);
  if (!request.ok()) return UsageError("infer", kInferUsage, request.status());
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("infer", kInferUsage, client.status());
  auto inputs =
      ReadInputFlags(args, ModelInputDTypes(**client, request->model, request->deadline));
  if (!inputs.ok()) {
    return IsInputSyntaxError(inputs.status())
               ? UsageError("infer", kInferUsage, inputs.status())
               : Fail("infer", inputs.status());
  }
  auto result =
      (*client)->InferMovingInputs(request->model, absl::MakeSpan(*inputs),
                                   request->out_shardings, request->deadline);
  if (!result.ok()) return Fail("infer", result.status());
  absl::Status printed = MakeOutputDir(request->output_dir);
  if (printed.ok()) printed = PrintOutputs(**client, *request, *inputs, *result);
  if (!printed.ok()) return Fail("infer", printed);
  std::fflush(stdout);
  return 0;
}

constexpr char kDescribeUsage[] =
    "describe --target HOST:PORT MODEL [--input_shape NAME=D0,D1,... ...]";

int RunDescribe(const CliArgs& args) {
  std::string model = args.Get("model");
  if (args.positional().size() == 1 && model.empty()) {
    model = args.positional()[0];
  } else if (!args.positional().empty() || model.empty()) {
    return UsageError("describe", kDescribeUsage,
                      InvalidArgument("expected exactly one MODEL argument"));
  }
  auto shapes = ParseShapeFlags(args, "input_shape");
  if (!shapes.ok()) return UsageError("describe", kDescribeUsage, shapes.status());
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("describe", kDescribeUsage, client.status());
  auto response = (*client)->Describe(model, *shapes, DeadlineFromFlag(args, 60));
  if (!response.ok()) return Fail("describe", response.status());
  std::printf("%s", FormatDescribe(*response).c_str());
  std::fflush(stdout);
  return 0;
}

constexpr char kStatusUsage[] = "status --target HOST:PORT";

int RunStatus(const CliArgs& args) {
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("status", kStatusUsage, client.status());
  auto response = (*client)->Status(DeadlineFromFlag(args, 30));
  if (!response.ok()) return Fail("status", response.status());
  std::printf("%s", FormatStatus(*response).c_str());
  std::fflush(stdout);
  return 0;
}

// ---- bench ----

// Random inputs of the given shapes and the model's dtypes (normal(0, 1)).
absl::StatusOr<std::vector<NamedTensor>> RandomInputs(
    const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::map<std::string, DType>& dtypes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<NamedTensor> inputs;
  for (const auto& [name, shape] : shapes) {
    auto it = dtypes.find(name);
    DType dtype = it == dtypes.end() ? DType::kFloat32 : it->second;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(n);
    for (float& v : values) v = normal(rng);
    if (dtype == DType::kInt32) {
      for (float& v : values) v = std::floor(std::fabs(v) * 4);
    }
    MS_ASSIGN_OR_RETURN(Tensor tensor, Tensor::FromValues(dtype, shape, values),
                        "input '", name, "'");
    MS_ASSIGN_OR_RETURN(NamedTensor host, NamedTensor::Create(name, dtype, shape,
                                                            std::string(tensor.bytes())));
    inputs.push_back(std::move(host));
  }
  return inputs;
}

double Percentile(std::vector<double> sorted, double q) {
  if (sorted.empty()) return 0;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank, as perf_analyzer reports.
  size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

constexpr char kBenchUsage[] =
    "bench --target HOST:PORT --model NAME --input_shape NAME=D0,D1,... "
    "[--concurrency C] [--requests N] [--warmup W] [--out_sharding OUTPUT=SPEC] "
    "[--timeout_s S]";

struct BenchOptions {
  std::string model;
  std::map<std::string, std::vector<int64_t>> shapes;
  int64_t concurrency = 1, requests = 100, warmup = 1, seed = 0;
  std::map<std::string, std::string> out_shardings;
  double timeout_s = 60;

  absl::Time Deadline() const { return absl::Now() + absl::Seconds(timeout_s); }
};

absl::StatusOr<BenchOptions> BenchOptionsFromFlags(const CliArgs& args) {
  BenchOptions o;
  o.model = args.Get("model");
  MS_ASSIGN_OR_RETURN(o.shapes, ParseShapeFlags(args, "input_shape"));
  MS_ASSIGN_OR_RETURN(o.concurrency, args.GetInt("concurrency", 1, 1, 1024));
  MS_ASSIGN_OR_RETURN(o.requests, args.GetInt("requests", 100, 1, int64_t{1} << 30));
  MS_ASSIGN_OR_RETURN(o.warmup, args.GetInt("warmup", 1, 0, 1 << 20));
  MS_ASSIGN_OR_RETURN(o.seed, args.GetInt("seed", 0, 0, INT64_MAX));
  MS_ASSIGN_OR_RETURN(o.out_shardings, ParseOutShardings(args));
  MS_ASSIGN_OR_RETURN(o.timeout_s, args.GetDouble("timeout_s", 60));
  return o;
}

// A few distinct random inputs, made up front so that generating them is not
// measured.
absl::StatusOr<std::vector<std::vector<NamedTensor>>> MakeInputVariants(
    const BenchOptions& o, const std::map<std::string, DType>& dtypes) {
  const int num_variants = static_cast<int>(std::min<int64_t>(o.concurrency, 4));
  std::vector<std::vector<NamedTensor>> variants;
  for (int v = 0; v < num_variants; ++v) {
    MS_ASSIGN_OR_RETURN(std::vector<NamedTensor> inputs, RandomInputs(o.shapes, dtypes, o.seed + v));
    variants.push_back(std::move(inputs));
  }
  return variants;
}

// Requests that compile and install the program before the measurement.
void Warmup(InferenceClient& client, const BenchOptions& o,
            const std::vector<NamedTensor>& inputs) {
  for (int64_t i = 0; i < o.warmup; ++i) {
    auto result = client.Infer(o.model, inputs, o.out_shardings, o.Deadline());
    if (!result.ok()) {
      std::fprintf(stderr, "meshserve bench: warmup: %s\n", result.status().ToString().c_str());
      return;
    }
  }
}

struct BenchStats {
  std::vector<double> latencies_ms;  // of the successful requests
  int64_t errors = 0;
  std::string first_error;
  double wall_s = 0;
  int64_t batched = 0; double batch_size_sum = 0, queue_us_sum = 0;  // batched models' answers
};

// o.requests requests from o.concurrency callers at once (ParallelFor), each
// sending one variant.
BenchStats RunLoad(InferenceClient& client, const BenchOptions& o,
                   const std::vector<std::vector<NamedTensor>>& variants) {
  BenchStats stats;
  stats.latencies_ms.reserve(o.requests);
  std::atomic<int64_t> next{0};
  absl::Mutex mu;
  auto worker = [&](int thread) {
    const std::vector<NamedTensor>& inputs = variants[thread % variants.size()];
    while (next.fetch_add(1) < o.requests) {
      auto start = std::chrono::steady_clock::now();
      auto result = client.Infer(o.model, inputs, o.out_shardings, o.Deadline());
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      absl::MutexLock lock(&mu);
      if (result.ok()) {
        stats.latencies_ms.push_back(ms);
        if (result->batch_size > 0) ++stats.batched;
        stats.batch_size_sum += result->batch_size;
        stats.queue_us_sum += result->queue_us;
      } else {
        ++stats.errors;
        if (stats.first_error.empty()) stats.first_error = result.status().ToString();
      }
    }
  };
  auto start = std::chrono::steady_clock::now();
  ParallelFor(static_cast<size_t>(o.concurrency), [&](size_t t) { worker(static_cast<int>(t)); });
  stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

void PrintBenchReport(const BenchOptions& o, const BenchStats& stats) {
  if (!stats.first_error.empty()) {
    std::fprintf(stderr, "meshserve bench: first error: %s\n", stats.first_error.c_str());
  }
  const int64_t ok = static_cast<int64_t>(stats.latencies_ms.size());
  std::printf("model %s, %lld requests, concurrency %lld, %lld ok, %lld errors, %.3f s\n",
              o.model.c_str(), static_cast<long long>(o.requests),
              static_cast<long long>(o.concurrency), static_cast<long long>(ok),
              static_cast<long long>(stats.errors), stats.wall_s);
  const double n = static_cast<double>(std::max<int64_t>(stats.batched, 1));
  std::printf("{\"requests\": %lld, \"errors\": %lld, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
              "\"requests_per_s\": %.3f, \"mean_batch_size\": %.3f, \"mean_queue_us\": %.1f}\n",
              static_cast<long long>(o.requests), static_cast<long long>(stats.errors),
              Percentile(stats.latencies_ms, 0.50), Percentile(stats.latencies_ms, 0.99),
              stats.wall_s > 0 ? ok / stats.wall_s : 0.0,
              stats.batched > 0 ? stats.batch_size_sum / n : 1.0, stats.queue_us_sum / n);
  std::fflush(stdout);
}

int RunBench(const CliArgs& args) {
  auto options = BenchOptionsFromFlags(args);
  if (!options.ok()) return UsageError("bench", kBenchUsage, options.status());
  auto client = ConnectFromArgs(args);
  if (!client.ok()) return UsageError("bench", kBenchUsage, client.status());
  auto dtypes = ModelInputDTypes(**client, options->model, options->Deadline());
  auto variants = MakeInputVariants(*options, dtypes);
  if (!variants.ok()) return UsageError("bench", kBenchUsage, variants.status());
  Warmup(**client, *options, variants->front());
  BenchStats stats = RunLoad(**client, *options, *variants);
  PrintBenchReport(*options, stats);
  return stats.errors == 0 ? 0 : kExitError;
}

MS_REGISTER_COMMAND(FlagCommand{"infer",
                                kInferUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                 {"model", FlagDef::kValue, true},
                                 {"input", FlagDef::kRepeated},
                                 {"out_sharding", FlagDef::kRepeated},
                                 {"output_dir"},
                                 {"timeout_s"}}),
                                RunInfer,
                                /*rejects_positional=*/true});
MS_REGISTER_COMMAND(FlagCommand{"describe",
                                kDescribeUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                 {"model"},
                                 {"input_shape", FlagDef::kRepeated},
                                 {"timeout_s"}}),
                                RunDescribe});
MS_REGISTER_COMMAND(FlagCommand{
    "status", kStatusUsage,
    WithConnectFlags({{"target", FlagDef::kValue, true}, {"timeout_s"}}), RunStatus});
MS_REGISTER_COMMAND(FlagCommand{"bench",
                                kBenchUsage,
                                WithConnectFlags({{"target", FlagDef::kValue, true},
                                 {"model", FlagDef::kValue, true},
                                 {"input_shape", FlagDef::kRepeated, true},
                                 {"concurrency"},
                                 {"requests"},
                                 {"warmup"},
                                 {"out_sharding", FlagDef::kRepeated},
                                 {"seed"},
                                 {"timeout_s"}}),
                                RunBench});

}  // namespace
}  // namespace client
}  // namespace meshserve
