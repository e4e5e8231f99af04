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
#include <random>
#include <string>
#include <thread>
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
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/bfloat16.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

int UsageError(const char* command, const char* usage, const absl::Status& status) {
  std::fprintf(stderr, "meshserve %s: %s\nusage: meshserve %s\n", command,
               std::string(status.message()).c_str(), usage);
  return kExitUsage;
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "meshserve %s: %s\n", command, status.ToString().c_str());
  return kExitError;
}

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

// Reads NAME=FILE.npy. A float32 file for a bfloat16 input is rounded to
// bfloat16 (NumPy has no bfloat16); no other conversion is made, so a wrong
// dtype reaches the server and is reported by it.
absl::StatusOr<HostTensor> ReadInputFlag(const std::string& text,
                                         const std::map<std::string, DType>& want) {
  MS_ASSIGN_OR_RETURN(auto name_value, SplitNameValue("input", text));
  MS_ASSIGN_OR_RETURN(Tensor tensor, ReadNpy(name_value.second), "flag --input ",
                      name_value.first);
  auto it = want.find(name_value.first);
  if (it != want.end() && it->second == DType::kBFloat16 &&
      tensor.dtype() == DType::kFloat32) {
    std::string bytes(tensor.NumElements() * 2, '\0');
    FloatToBFloat16(tensor.data<float>(), reinterpret_cast<uint16_t*>(bytes.data()),
                    tensor.NumElements());
    return HostTensor::Create(name_value.first, DType::kBFloat16, tensor.shape(),
                              std::move(bytes));
  }
  return HostTensor::Create(name_value.first, tensor.dtype(), tensor.shape(),
                            std::string(tensor.bytes()));
}

// Widens to float32 and writes DIR/NAME.npy.
absl::Status WriteOutput(const std::string& dir, const HostTensor& tensor) {
  MS_ASSIGN_OR_RETURN(std::vector<float> values, tensor.ToFloat32());
  MS_ASSIGN_OR_RETURN(Tensor out,
                      Tensor::FromValues(DType::kFloat32, tensor.shape, values));
  return WriteNpy(absl::StrCat(dir, "/", tensor.name, ".npy"), out);
}

constexpr char kInferUsage[] =
    "infer --target HOST:PORT --model NAME --input NAME=FILE.npy [--input ...] "
    "[--out_sharding OUTPUT=SPEC ...] [--output_dir DIR] [--timeout_s S]";

int RunInfer(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv,
                             {{"target", FlagDef::kValue, true},
                              {"model", FlagDef::kValue, true},
                              {"input", FlagDef::kRepeated, false},
                              {"out_sharding", FlagDef::kRepeated, false},
                              {"output_dir", FlagDef::kValue, false},
                              {"timeout_s", FlagDef::kValue, false}});
  if (!args.ok()) return UsageError("infer", kInferUsage, args.status());
  if (!args->positional().empty()) {
    return UsageError("infer", kInferUsage,
                      InvalidArgument("unexpected argument '", args->positional()[0], "'"));
  }
  auto out_shardings = ParseOutShardings(*args);
  if (!out_shardings.ok()) return UsageError("infer", kInferUsage, out_shardings.status());
  if (auto timeout = args->GetDouble("timeout_s", 120); !timeout.ok() || *timeout <= 0) {
    return UsageError("infer", kInferUsage,
                      InvalidArgument("flag --timeout_s: '", args->Get("timeout_s"),
                                      "' is not a positive number"));
  }
  auto client = InferenceClient::Create(args->Get("target"));
  if (!client.ok()) return UsageError("infer", kInferUsage, client.status());
  absl::Time deadline = DeadlineFromFlag(*args, 120);
  std::string model = args->Get("model");

  std::map<std::string, DType> want = ModelInputDTypes(**client, model, deadline);
  std::vector<HostTensor> inputs;
  for (const std::string& text : args->GetAll("input")) {
    auto input = ReadInputFlag(text, want);
    if (!input.ok()) {
      return input.status().code() == absl::StatusCode::kInvalidArgument &&
                     input.status().message().find("NAME=VALUE") != absl::string_view::npos
                 ? UsageError("infer", kInferUsage, input.status())
                 : Fail("infer", input.status());
    }
    inputs.push_back(*std::move(input));
  }
  auto result = (*client)->Infer(model, inputs, *out_shardings, deadline);
  if (!result.ok()) return Fail("infer", result.status());

  std::string output_dir = args->Get("output_dir");
  if (!output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(output_dir, error);
    if (error) {
      return Fail("infer", Unavailable("--output_dir '", output_dir,
                                       "' cannot be created: ", error.message()));
    }
  }
  std::map<std::string, std::vector<int64_t>> input_shapes;
  for (const HostTensor& input : inputs) input_shapes[input.name] = input.shape;
  OutputTypeResolver types(**client, model, input_shapes, *out_shardings, deadline);
  for (const InferOutput& output : result->outputs) {
    const HostTensor& tensor = output.tensor;
    OutputType type = types.Resolve(output);
    std::printf("%s: %s\n", tensor.name.c_str(), type.type_str.c_str());
    if (!type.visualization.empty()) std::printf("%s\n", type.visualization.c_str());
    if (!output_dir.empty()) {
      absl::Status written = WriteOutput(output_dir, tensor);
      if (!written.ok()) return Fail("infer", written);
      std::printf("  wrote %s/%s.npy (float32)\n", output_dir.c_str(),
                  tensor.name.c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

constexpr char kDescribeUsage[] =
    "describe --target HOST:PORT MODEL [--input_shape NAME=D0,D1,... ...]";

int RunDescribe(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv,
                             {{"target", FlagDef::kValue, true},
                              {"model", FlagDef::kValue, false},
                              {"input_shape", FlagDef::kRepeated, false},
                              {"timeout_s", FlagDef::kValue, false}});
  if (!args.ok()) return UsageError("describe", kDescribeUsage, args.status());
  std::string model = args->Get("model");
  if (args->positional().size() == 1 && model.empty()) {
    model = args->positional()[0];
  } else if (!args->positional().empty() || model.empty()) {
    return UsageError("describe", kDescribeUsage,
                      InvalidArgument("expected exactly one MODEL argument"));
  }
  auto shapes = ParseShapeFlags(*args, "input_shape");
  if (!shapes.ok()) return UsageError("describe", kDescribeUsage, shapes.status());
  auto client = InferenceClient::Create(args->Get("target"));
  if (!client.ok()) return UsageError("describe", kDescribeUsage, client.status());
  auto response = (*client)->Describe(model, *shapes, DeadlineFromFlag(*args, 60));
  if (!response.ok()) return Fail("describe", response.status());
  std::printf("%s", FormatDescribe(*response).c_str());
  std::fflush(stdout);
  return 0;
}

constexpr char kStatusUsage[] = "status --target HOST:PORT";

int RunStatus(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv,
                             {{"target", FlagDef::kValue, true},
                              {"timeout_s", FlagDef::kValue, false}});
  if (!args.ok()) return UsageError("status", kStatusUsage, args.status());
  auto client = InferenceClient::Create(args->Get("target"));
  if (!client.ok()) return UsageError("status", kStatusUsage, client.status());
  auto response = (*client)->Status(DeadlineFromFlag(*args, 30));
  if (!response.ok()) return Fail("status", response.status());
  std::printf("%s", FormatStatus(*response).c_str());
  std::fflush(stdout);
  return 0;
}

// ---- bench ----

// Random inputs of the given shapes and the model's dtypes (normal(0, 1)).
absl::StatusOr<std::vector<HostTensor>> RandomInputs(
    const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::map<std::string, DType>& dtypes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<HostTensor> inputs;
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
    MS_ASSIGN_OR_RETURN(HostTensor host, HostTensor::Create(name, dtype, shape,
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

int RunBench(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv,
                             {{"target", FlagDef::kValue, true},
                              {"model", FlagDef::kValue, true},
                              {"input_shape", FlagDef::kRepeated, true},
                              {"concurrency", FlagDef::kValue, false},
                              {"requests", FlagDef::kValue, false},
                              {"warmup", FlagDef::kValue, false},
                              {"out_sharding", FlagDef::kRepeated, false},
                              {"seed", FlagDef::kValue, false},
                              {"timeout_s", FlagDef::kValue, false}});
  if (!args.ok()) return UsageError("bench", kBenchUsage, args.status());
  auto shapes = ParseShapeFlags(*args, "input_shape");
  if (!shapes.ok()) return UsageError("bench", kBenchUsage, shapes.status());
  auto concurrency = args->GetInt("concurrency", 1, 1, 1024);
  if (!concurrency.ok()) return UsageError("bench", kBenchUsage, concurrency.status());
  auto requests = args->GetInt("requests", 100, 1, int64_t{1} << 30);
  if (!requests.ok()) return UsageError("bench", kBenchUsage, requests.status());
  auto warmup = args->GetInt("warmup", 1, 0, 1 << 20);
  if (!warmup.ok()) return UsageError("bench", kBenchUsage, warmup.status());
  auto seed = args->GetInt("seed", 0, 0, INT64_MAX);
  if (!seed.ok()) return UsageError("bench", kBenchUsage, seed.status());
  auto out_shardings = ParseOutShardings(*args);
  if (!out_shardings.ok()) return UsageError("bench", kBenchUsage, out_shardings.status());
  auto timeout_s = args->GetDouble("timeout_s", 60);
  if (!timeout_s.ok()) return UsageError("bench", kBenchUsage, timeout_s.status());
  auto client = InferenceClient::Create(args->Get("target"));
  if (!client.ok()) return UsageError("bench", kBenchUsage, client.status());
  std::string model = args->Get("model");

  auto dtypes = ModelInputDTypes(**client, model, absl::Now() + absl::Seconds(*timeout_s));
  // A few distinct random inputs, made up front so that generating them is
  // not measured.
  int num_variants = static_cast<int>(std::min<int64_t>(*concurrency, 4));
  std::vector<std::vector<HostTensor>> variants;
  for (int v = 0; v < num_variants; ++v) {
    auto inputs = RandomInputs(*shapes, dtypes, *seed + v);
    if (!inputs.ok()) return UsageError("bench", kBenchUsage, inputs.status());
    variants.push_back(*std::move(inputs));
  }
  std::string first_error;
  for (int64_t i = 0; i < *warmup; ++i) {  // compiles and installs the program
    auto result = (*client)->Infer(model, variants[0], *out_shardings,
                                   absl::Now() + absl::Seconds(*timeout_s));
    if (!result.ok()) {
      std::fprintf(stderr, "meshserve bench: warmup: %s\n",
                   result.status().ToString().c_str());
      break;
    }
  }

  std::atomic<int64_t> next{0};
  std::atomic<int64_t> errors{0};
  absl::Mutex mu;
  std::vector<double> latencies_ms;
  latencies_ms.reserve(*requests);
  auto worker = [&](int thread) {
    const std::vector<HostTensor>& inputs = variants[thread % num_variants];
    while (next.fetch_add(1) < *requests) {
      auto start = std::chrono::steady_clock::now();
      auto result = (*client)->Infer(model, inputs, *out_shardings,
                                     absl::Now() + absl::Seconds(*timeout_s));
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      absl::MutexLock lock(&mu);
      if (result.ok()) {
        latencies_ms.push_back(ms);
      } else {
        errors.fetch_add(1);
        if (first_error.empty()) first_error = result.status().ToString();
      }
    }
  };
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < *concurrency; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (!first_error.empty()) {
    std::fprintf(stderr, "meshserve bench: first error: %s\n", first_error.c_str());
  }
  int64_t ok = static_cast<int64_t>(latencies_ms.size());
  std::printf("model %s, %lld requests, concurrency %lld, %lld ok, %lld errors, %.3f s\n",
              model.c_str(), static_cast<long long>(*requests),
              static_cast<long long>(*concurrency), static_cast<long long>(ok),
              static_cast<long long>(errors.load()), wall_s);
  std::printf("{\"requests\": %lld, \"errors\": %lld, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
              "\"requests_per_s\": %.3f}\n",
              static_cast<long long>(*requests), static_cast<long long>(errors.load()),
              Percentile(latencies_ms, 0.50), Percentile(latencies_ms, 0.99),
              wall_s > 0 ? ok / wall_s : 0.0);
  std::fflush(stdout);
  return errors.load() == 0 ? 0 : kExitError;
}

}  // namespace
}  // namespace meshserve

MS_REGISTER_COMMAND("infer", meshserve::kInferUsage, meshserve::RunInfer);
MS_REGISTER_COMMAND("describe", meshserve::kDescribeUsage, meshserve::RunDescribe);
MS_REGISTER_COMMAND("status", meshserve::kStatusUsage, meshserve::RunStatus);
MS_REGISTER_COMMAND("bench", meshserve::kBenchUsage, meshserve::RunBench);
