// Building one resident version from a LoadModelRequest (ModelStore::Load,
// model_store.h): parse and check the model JSON (common/model/model_file.h)
// and the placement, compute the held cells of each param (the distinct
// boxes of the devices and replica devices: ShardBoxForDevice of the param's
// NamedSharding), and fill each cell from `sources` (param_sources.h), else
// from the checkpoint (SafetensorsFile::ReadBox: only that box's bytes), else
// InitializeBox with the model's seed.
//
// Thread-safety: a pure function of the request and the context's lookups.
#ifndef MESHSERVE_SERVER_WORKER_MODEL_LOADER_H_
#define MESHSERVE_SERVER_WORKER_MODEL_LOADER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/program/program_ir.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/params/param_sources.h"

namespace meshserve {

struct BuiltModel {
  std::shared_ptr<const LoadedModel> model;
  LoadModelResultIr result;
};

// Parses, validates and loads (see WorkerEngine::LoadModel for the errors).
absl::StatusOr<BuiltModel> BuildLoadedModel(const LoadModelIr& request,
                                            const LoadContext& context);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_MODEL_LOADER_H_
