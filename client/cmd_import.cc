// `meshserve import --hf_dir DIR --out_dir MODELS [--name NAME]
//      [--mesh AXIS=N,...] [--init_from_seed] [--workers N] [--auto_shard]`:
// a Hugging Face GPT-2 or Llama directory as MODELS/NAME.json (hf_import.h),
// then its describe summary as placed on --workers workers (default 4).
// --auto_shard: the layout (mesh factorization, every param's spec, the
// out_shardings) is the one `meshserve suggest` chooses for --workers workers
// at one decode token (input_ids=1,1; the mesh starts as data=1, model=-1
// unless --mesh is given), written over the imported file, so describe and
// the status page show it; other request shapes: `meshserve suggest`.
// Exit codes: 0 written, 1 the checkpoint or config was refused (the error
// names the value), 2 bad flags.
#include <cstdio>
#include <fstream>
#include <string>

#include "client/command.h"
#include "client/hf_import.h"
#include "common/base/status_macros.h"
#include "common/model/model_file.h"
#include "server/suggest/suggest.h"

namespace meshserve {
namespace client {
namespace {

constexpr char kImportUsage[] =
    "import --hf_dir DIR --out_dir MODELS [--name NAME] [--mesh AXIS=N,...] "
    "[--init_from_seed] [--workers N] [--auto_shard]";

// --auto_shard: the search's choice for `workers` at input_ids=1,1, written
// over the imported file (its checkpoint paths stay relative to its folder).
absl::Status AutoShard(const ImportResult& imported, int64_t workers) {
  MS_ASSIGN_OR_RETURN(ModelFile model, LoadModelFile(imported.model_path));
  SuggestOptions options;
  options.num_workers = workers;
  options.input_shapes = {{{"input_ids", {1, 1}}}};
  MS_ASSIGN_OR_RETURN(SuggestResult r, Suggest(model, options), "--auto_shard");
  MS_ASSIGN_OR_RETURN(std::string text,
                      SuggestedModelText(model, r.choice, model.model_dir));
  std::ofstream out(imported.model_path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.good()) {
    return absl::UnavailableError(absl::StrCat("cannot write '", imported.model_path, "'"));
  }
  std::printf("auto_shard on %lld workers (%s, %.3f s): %s, predicted %.3f ms at input_ids=1,1\n",
              static_cast<long long>(workers), r.method.c_str(), r.search_s,
              r.choice.LayoutText().c_str(), r.choice.mix_ms);
  return absl::OkStatus();
}

int RunImport(const CliArgs& args) {
  ImportOptions options;
  options.hf_dir = args.Get("hf_dir");
  options.out_dir = args.Get("out_dir");
  options.name = args.Get("name");
  options.init_from_seed = args.Has("init_from_seed");
  if (args.Has("auto_shard")) options.mesh = {{"data", 1}, {"model", -1}};
  if (args.Has("mesh")) {
    absl::StatusOr<MeshAxes> mesh = ParseMeshAxes(args.Get("mesh"));
    if (!mesh.ok()) return UsageError("import", kImportUsage, mesh.status());
    options.mesh = *std::move(mesh);
  }
  absl::StatusOr<int64_t> workers = args.GetInt("workers", 4, 1, 4096);
  if (!workers.ok()) return UsageError("import", kImportUsage, workers.status());
  absl::StatusOr<ImportResult> result = ImportHfModel(options);
  if (!result.ok()) return Fail("import", result.status());
  std::printf("wrote %s (%s, %lld params)\n", result->model_path.c_str(),
              result->config.architecture.c_str(),
              static_cast<long long>(result->num_params));
  if (args.Has("auto_shard")) {
    if (absl::Status s = AutoShard(*result, *workers); !s.ok()) return Fail("import", s);
  }
  absl::StatusOr<std::string> summary = DescribeImported(*result, *workers);
  if (!summary.ok()) return Fail("import", summary.status());
  std::printf("%s", summary->c_str());
  std::fflush(stdout);
  return 0;
}

MS_REGISTER_COMMAND(FlagCommand{"import",
                                kImportUsage,
                                {{"hf_dir", FlagDef::kValue, true},
                                 {"out_dir", FlagDef::kValue, true},
                                 {"name"},
                                 {"mesh"},
                                 {"init_from_seed", FlagDef::kBool},
                                 {"workers"},
                                 {"auto_shard", FlagDef::kBool}},
                                RunImport,
                                /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
