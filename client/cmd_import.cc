// `meshserve import --hf_dir DIR --out_dir MODELS [--name NAME]
//      [--mesh AXIS=N,...] [--init_from_seed] [--workers N]`:
// a Hugging Face GPT-2 or Llama directory as MODELS/NAME.json (hf_import.h),
// then its describe summary as placed on --workers workers (default 4).
// Exit codes: 0 written, 1 the checkpoint or config was refused (the error
// names the value), 2 bad flags.
#include <cstdio>

#include "client/command.h"
#include "client/hf_import.h"

namespace meshserve {
namespace client {
namespace {

constexpr char kImportUsage[] =
    "import --hf_dir DIR --out_dir MODELS [--name NAME] [--mesh AXIS=N,...] "
    "[--init_from_seed] [--workers N]";

int RunImport(const CliArgs& args) {
  ImportOptions options;
  options.hf_dir = args.Get("hf_dir");
  options.out_dir = args.Get("out_dir");
  options.name = args.Get("name");
  options.init_from_seed = args.Has("init_from_seed");
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
                                 {"workers"}},
                                RunImport,
                                /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
