// `meshserve suggest`: chooses a model's mesh and shardings for N workers by
// predicted time per request (server/suggest/suggest.h) and writes the model
// file with the chosen layout.
//
//   meshserve suggest (--model_file F | --hf_dir D) --workers N
//       --input_shape NAME=D0,D1[,...] [--input_shape ...]
//       [--memory_per_worker BYTES] [--max_search_s S (default 60)]
//       [--search dp|descent (default dp)]
//       [--target HOST:PORT [--calibration_wait_s S (default 30)]]
//       --out OUT.json [--json]
//
// Several --input_shape flags: a new shape set starts whenever a name repeats
// (x=1,8,64 then x=1,1,64 is a prefill / decode mix, weighted equally; a
// model with inputs a and b gives a=..,b=.. per set). With --hf_dir the model
// is the one `meshserve import` writes (mesh data=1, model=-1 so the search
// can split either way; config.json alone is enough, the params are then
// initialised), and OUT refers to the checkpoint from OUT's folder as
// `meshserve import --out_dir` would. Prints the choice and the next 3
// alternatives, then each named baseline's best; with --json the last stdout
// line is one JSON object (predicted_ms at the first shape set,
// bytes_per_request, rounds, param_bytes_per_worker, search_s, alternatives).
// The cost figures are the stored defaults (server/suggest/cost_figures.h),
// or with --target the GEMM and memory figures the cluster's workers measured
// (server/suggest/target_figures.h: median over workers; it waits up to
// --calibration_wait_s for every healthy worker to report). The output names
// them ("figures (target|defaults): ..."; --json "figures", "figures_source").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client_connect.h"
#include "client/command.h"
#include "client/hf_import.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/json_util.h"
#include "common/model/typed_model.h"
#include "server/suggest/suggest.h"
#include "server/suggest/target_figures.h"

namespace meshserve {
namespace client {
namespace {

namespace fs = std::filesystem;

constexpr char kSuggestUsage[] =
    "suggest (--model_file F | --hf_dir D) --workers N --input_shape NAME=D0,D1[,...] "
    "[--input_shape ...] [--memory_per_worker BYTES] [--max_search_s S] [--search dp|descent] "
    "[--target HOST:PORT [--calibration_wait_s S]] --out OUT.json [--json]";

// "x=1,8,64" flags -> shape sets; a repeated name starts the next set.
absl::StatusOr<std::vector<ShapeSet>> ParseShapeSets(const std::vector<std::string>& flags) {
  std::vector<ShapeSet> sets;
  for (const std::string& flag : flags) {
    MS_ASSIGN_OR_RETURN(auto name_value, SplitNameValue("--input_shape", flag));
    std::vector<int64_t> dims;
    for (absl::string_view d : absl::StrSplit(name_value.second, ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v < 1) {
        return InvalidArgument("--input_shape ", flag, ": '", d, "' is not an integer >= 1");
      }
      dims.push_back(v);
    }
    if (sets.empty() || sets.back().count(name_value.first)) sets.emplace_back();
    sets.back()[name_value.first] = dims;
  }
  if (sets.empty()) return InvalidArgument("missing required flag --input_shape");
  return sets;
}

// The model `meshserve import` writes for `hf_dir`, imported into a scratch
// folder (its checkpoint paths are resolved when written out again).
absl::StatusOr<ModelFile> ImportForSearch(const std::string& hf_dir) {
  ImportOptions options;
  options.hf_dir = hf_dir;
  options.mesh = {{"data", 1}, {"model", -1}};
  options.init_from_seed = !fs::exists(fs::path(hf_dir) / "model.safetensors") &&
                           !fs::exists(fs::path(hf_dir) / "model.safetensors.index.json");
  char scratch[] = "/tmp/meshserve-suggest-XXXXXX";
  if (mkdtemp(scratch) == nullptr) return absl::UnavailableError("cannot create a scratch folder");
  options.out_dir = scratch;
  absl::StatusOr<ImportResult> imported = ImportHfModel(options);
  absl::StatusOr<ModelFile> model =
      imported.ok() ? LoadModelFile(imported->model_path) : imported.status();
  std::error_code ec;
  fs::remove_all(scratch, ec);
  return model;
}

std::string Shapes(const ShapeSet& shapes) {
  std::vector<std::string> parts;
  for (const auto& [name, dims] : shapes) parts.push_back(absl::StrCat(name, "=", absl::StrJoin(dims, ",")));
  return absl::StrJoin(parts, " ");
}

Json SuggestionJson(const Suggestion& s) {
  const Prediction& p = s.per_shape.front();
  return Json{{"layout", s.name},
              {"mesh", s.mesh.ToString()},
              {"predicted_ms", p.predicted_ms},
              {"mix_ms", s.mix_ms},
              {"bytes_per_request", p.bytes_per_request},
              {"rounds", p.rounds},
              {"param_bytes_per_worker", p.param_bytes_per_worker}};
}

void PrintRow(const char* label, const Suggestion& s) {
  const Prediction& p = s.per_shape.front();
  std::printf("  %-3s %-20s %-26s %10.3f %10.3f %14lld %6lld %14lld\n", label, s.name.c_str(),
              s.mesh.ToString().c_str(), p.predicted_ms, s.mix_ms,
              static_cast<long long>(p.bytes_per_request), static_cast<long long>(p.rounds),
              static_cast<long long>(p.param_bytes_per_worker));
}

void PrintResult(const ModelFile& model, const SuggestOptions& options, const SuggestResult& r) {
  std::printf("model '%s' on %lld workers at %s%s: %lld layouts evaluated by %s in %.2f s "
              "(%lld rejected by JAX's rules or the compiler, %lld over the memory limit); "
              "figures: %s\n",
              model.name.c_str(), static_cast<long long>(options.num_workers),
              Shapes(options.input_shapes.front()).c_str(),
              options.input_shapes.size() > 1 ? " (+ more shapes, mixed equally)" : "",
              static_cast<long long>(r.num_evaluated), r.method.c_str(), r.search_s,
              static_cast<long long>(r.num_rejected_rules),
              static_cast<long long>(r.num_rejected_memory), options.figures.source.c_str());
  std::printf("choice: %s\n  %s\n", r.choice.name.c_str(), r.choice.LayoutText().c_str());
  std::printf("  %-3s %-20s %-26s %10s %10s %14s %6s %14s\n", "#", "layout", "mesh",
              "pred_ms", "mix_ms", "bytes/request", "rounds", "param_B/worker");
  PrintRow("1", r.choice);
  for (size_t i = 0; i < r.alternatives.size(); ++i) {
    PrintRow(std::to_string(i + 2).c_str(), r.alternatives[i]);
  }
  std::printf("named layouts (best mesh each):\n");
  for (const Suggestion& s : r.baselines) PrintRow("-", s);
  for (const auto& [name, reasons] : r.rejected_baselines) {
    std::printf("  -   %-20s rejected on every mesh:\n", name.c_str());
    for (const std::string& why : reasons) {
      std::printf("        %s\n", why.substr(0, 200).c_str());
    }
  }
}

// The cluster's figures: polls ClusterService.Status until every healthy
// worker reports its calibration, or `wait_s` passed (then the ones that do).
absl::StatusOr<CostFigures> TargetFigures(const CliArgs& args, double wait_s) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<InferenceClient> client, ConnectFromArgs(args));
  const absl::Time give_up = absl::Now() + absl::Seconds(wait_s);
  while (true) {
    MS_ASSIGN_OR_RETURN(ClusterStatusResponse status,
                        client->Status(absl::Now() + absl::Seconds(30)),
                        "status of --target ", args.Get("target"));
    const int64_t healthy = std::count_if(status.workers().begin(), status.workers().end(),
                                          [](const auto& w) { return w.healthy(); });
    if ((healthy > 0 && WorkersWithFigures(status) >= healthy) || absl::Now() >= give_up) {
      return FiguresFromClusterStatus(status, CostFigures{});
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

Json FiguresJson(const CostFigures& f) {
  return Json{{"gemm_gflops_one_row", f.gemm_gflops_one_row},
              {"gemm_gflops_small_m", f.gemm_gflops_small_m},
              {"gemm_gflops_large_m", f.gemm_gflops_large_m},
              {"memory_bytes_per_s", f.memory_bytes_per_s},
              {"link_bytes_per_s", f.link_bytes_per_s},
              {"hop_ms", f.hop_ms}};
}

void PrintFigures(const CostFigures& f) {
  std::printf("figures (%s): GEMM GFLOP/s one-row %.1f, small-M %.1f, large-M %.1f; memory "
              "%.2f GB/s; link %.2f GB/s, hop %.3f ms (stored defaults, not measured)\n",
              f.source.c_str(), f.gemm_gflops_one_row, f.gemm_gflops_small_m,
              f.gemm_gflops_large_m, f.memory_bytes_per_s / 1e9, f.link_bytes_per_s / 1e9,
              f.hop_ms);
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteChoice(const ModelFile& model, const SuggestOptions& options,
                         const SuggestResult& r, const std::string& out) {
  const std::string out_dir = fs::absolute(out).parent_path().string();
  MS_ASSIGN_OR_RETURN(std::string text, SuggestedModelText(model, r.choice, out_dir));
  // The written file must be one the server accepts on N workers.
  MS_ASSIGN_OR_RETURN(ModelFile written, ParseModelFile(text, out_dir), "the suggested file");
  MS_RETURN_IF_ERROR(ValidateModel(written), "the suggested file");
  MS_ASSIGN_OR_RETURN(Mesh mesh, ResolveMesh(written, options.num_workers));
  MS_RETURN_IF_ERROR(TypeModel(written, mesh, options.input_shapes.front()).status(),
                     "the suggested file");
  return WriteText(out, text);
}

int RunSuggest(const CliArgs& args) {
  if (args.Has("model_file") == args.Has("hf_dir")) {
    return UsageError("suggest", kSuggestUsage,
                      absl::InvalidArgumentError("give exactly one of --model_file and --hf_dir"));
  }
  SuggestOptions options;
  absl::StatusOr<int64_t> workers = args.GetInt("workers", 0, 1, 4096);
  absl::StatusOr<int64_t> memory = args.GetInt("memory_per_worker", 0, 0, INT64_MAX);
  absl::StatusOr<std::vector<ShapeSet>> shapes = ParseShapeSets(args.GetAll("input_shape"));
  absl::StatusOr<double> budget = args.GetDouble("max_search_s", options.max_search_s);
  if (budget.ok() && *budget < 0) {
    budget = absl::InvalidArgumentError(absl::StrCat("flag --max_search_s: must be >= 0, got ", *budget));
  }
  for (const absl::Status& s :
       {workers.status(), memory.status(), shapes.status(), budget.status()}) {
    if (!s.ok()) return UsageError("suggest", kSuggestUsage, s);
  }
  options.num_workers = *workers;
  options.memory_per_worker = *memory;
  options.max_search_s = *budget;
  const std::string search = args.Has("search") ? args.Get("search") : "dp";
  if (search != "dp" && search != "descent") {
    return UsageError("suggest", kSuggestUsage,
                      absl::InvalidArgumentError(absl::StrCat(
                          "flag --search: '", search, "' is not dp or descent")));
  }
  if (search == "descent") {  // the search before the DP, for comparison
    options.dp_max_states = 0;
    options.memoize_layers = false;
  }
  options.input_shapes = *std::move(shapes);
  if (args.Has("target")) {
    absl::StatusOr<double> wait_s = args.GetDouble("calibration_wait_s", 30);
    if (!wait_s.ok()) return UsageError("suggest", kSuggestUsage, wait_s.status());
    absl::StatusOr<CostFigures> figures = TargetFigures(args, *wait_s);
    if (!figures.ok()) return Fail("suggest", figures.status());
    options.figures = *figures;
  }
  PrintFigures(options.figures);
  absl::StatusOr<ModelFile> model = args.Has("model_file")
                                        ? LoadModelFile(args.Get("model_file"), /*allow_auto_sharding=*/true)
                                        : ImportForSearch(args.Get("hf_dir"));
  if (!model.ok()) return Fail("suggest", model.status());
  absl::StatusOr<SuggestResult> result = Suggest(*model, options);
  if (!result.ok()) return Fail("suggest", result.status());
  PrintResult(*model, options, *result);
  const std::string out = args.Get("out");
  if (absl::Status s = WriteChoice(*model, options, *result, out); !s.ok()) {
    return Fail("suggest", s);
  }
  std::printf("wrote %s (%s, serves on %lld workers)\n", out.c_str(),
              result->choice.mesh.ToString().c_str(), static_cast<long long>(options.num_workers));
  if (args.Has("json")) {
    Json j = SuggestionJson(result->choice);
    j["model"] = model->name;
    j["workers"] = options.num_workers;
    j["method"] = result->method;
    j["evaluated"] = result->num_evaluated;
    j["search_s"] = result->search_s;
    j["out"] = out;
    j["figures"] = FiguresJson(options.figures);
    j["figures_source"] = options.figures.source;
    j["alternatives"] = Json::array();
    for (const Suggestion& s : result->alternatives) j["alternatives"].push_back(SuggestionJson(s));
    j["baselines"] = Json::array();
    for (const Suggestion& s : result->baselines) j["baselines"].push_back(SuggestionJson(s));
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

MS_REGISTER_COMMAND(FlagCommand{"suggest",
                                kSuggestUsage,
                                WithConnectFlags({{"model_file"},
                                                  {"hf_dir"},
                                                  {"workers", FlagDef::kValue, true},
                                                  {"input_shape", FlagDef::kRepeated, true},
                                                  {"memory_per_worker"},
                                                  {"max_search_s"},
                                                  {"search"},
                                                  {"target"},
                                                  {"calibration_wait_s"},
                                                  {"out", FlagDef::kValue, true},
                                                  {"json", FlagDef::kBool}}),
                                RunSuggest,
                                /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
