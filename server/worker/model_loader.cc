// BuildLoadedModel (model_loader.h): parse the model, compute the held cells
// of each param (the distinct boxes of the devices and replica devices), take
// them from `sources` (param_sources.h) or read them (each the box +
// from_offset of its source tensor `from` in the checkpoint: checkpoint.h) or
// initialize them.
#include "server/worker/model_loader.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/model_file.h"
#include "common/program/ir_conv.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/shard_layout.h"
#include "common/tensor/initializers.h"
#include "common/tensor/checkpoint.h"

namespace meshserve {

namespace {

// The mesh of the request must be the model's mesh with any -1 resolved.
absl::Status CheckMeshMatchesModel(const ModelFile& model, const Mesh& mesh) {
  bool ok = static_cast<int>(model.mesh_axes.size()) == mesh.num_axes();
  for (int i = 0; ok && i < mesh.num_axes(); ++i) {
    const auto& [name, size] = model.mesh_axes[i];
    ok = name == mesh.axis(i).name && (size == -1 || size == mesh.axis(i).size);
  }
  if (ok) return absl::OkStatus();
  std::vector<std::string> axes;
  for (const auto& [name, size] : model.mesh_axes) axes.push_back(absl::StrCat(name, "=", size));
  return InvalidArgument("mesh ", mesh.ToString(), " does not match the model's mesh {",
                         absl::StrJoin(axes, ", "), "}");
}

// Validates devices/device_workers; returns the worker id of the hosted devices.
absl::StatusOr<int64_t> CheckPlacement(const LoadModelIr& request, const Mesh& mesh,
                                       int64_t worker_id) {
  const int64_t n = mesh.num_devices();
  if (static_cast<int64_t>(request.device_workers.size()) != n) {
    return InvalidArgument("device_workers has ", request.device_workers.size(),
                           " entries but mesh ", mesh.ToString(), " has ", n, " devices");
  }
  if (request.devices.empty() && request.replica_devices.empty()) {
    return InvalidArgument("no devices to host or hold");
  }
  for (int64_t device : request.replica_devices) {
    if (device < 0 || device >= n) {
      return OutOfRange("replica device ", device, " is outside mesh ", mesh.ToString(), " (",
                        n, " devices)");
    }
  }
  absl::flat_hash_set<int64_t> seen;
  int64_t owner = request.devices.empty() ? worker_id : -1;
  if (owner < 0 && request.devices.empty()) {
    return InvalidArgument("only replica devices and this worker's id is not known yet");
  }
  for (int64_t device : request.devices) {
    if (device < 0 || device >= n) {
      return OutOfRange("device ", device, " is outside mesh ", mesh.ToString(), " (",
                        n, " devices)");
    }
    if (!seen.insert(device).second) return InvalidArgument("device ", device, " listed twice");
    const int64_t w = request.device_workers[device];
    if (owner == -1) owner = w;
    if (w != owner) {
      return InvalidArgument("hosted devices map to different workers (", owner, " and ", w,
                             " for device ", device, ")");
    }
  }
  if (worker_id >= 0 && owner != worker_id) {
    return InvalidArgument("device_workers assigns the hosted devices to worker ", owner,
                           " but this is worker ", worker_id);
  }
  return owner;
}

// Where `param` lives in the checkpoint: its source tensor's entry, after
// checking the box [from_offset, from_offset + shape) lies inside it; nullptr
// when the param names no source and the checkpoint lacks it (initialized).
absl::StatusOr<const SafetensorsFile::Entry*> FindSource(const ParamDef& param,
                                                         const Checkpoint* checkpoint) {
  const SafetensorsFile::Entry* entry =
      checkpoint != nullptr ? checkpoint->Find(param.from) : nullptr;
  if (entry == nullptr) {
    if (!param.has_from) return nullptr;
    return InvalidArgument("from '", param.from, "': checkpoint ",
                           checkpoint != nullptr ? checkpoint->description() : "(none)",
                           " has no such tensor");
  }
  bool whole = !param.has_from;
  for (int64_t o : param.from_offset) whole &= (o == 0);
  if (whole && entry->shape != param.shape) {
    return InvalidArgument("checkpoint ", checkpoint->description(), " has '", param.from,
                           "' with shape ", ShapeToString(entry->shape),
                           " but the model declares ", ShapeToString(param.shape));
  }
  bool inside = entry->shape.size() == param.shape.size();
  for (size_t i = 0; inside && i < param.shape.size(); ++i) {
    inside = param.from_offset[i] + param.shape[i] <= entry->shape[i];
  }
  if (!inside) {
    return InvalidArgument("from '", param.from, "' ", ShapeToString(entry->shape),
                           ": the box at from_offset ", ShapeToString(param.from_offset),
                           " of shape ", ShapeToString(param.shape), " is not inside it");
  }
  return entry;
}

// The values of `box` of `param`: box + from_offset of its source tensor when
// the checkpoint has it, else initialized.
absl::StatusOr<Tensor> MaterializeBox(const ModelFile& model, const ParamDef& param,
                                      const Checkpoint* checkpoint, const Box& box) {
  MS_ASSIGN_OR_RETURN(const SafetensorsFile::Entry* entry, FindSource(param, checkpoint));
  if (entry == nullptr) {
    return InitializeBox(InitSpec::FromParam(param), model.seed, param.name, param.shape,
                         box, param.dtype);
  }
  Box source = box;
  for (int i = 0; i < source.rank(); ++i) {
    source[i].begin += param.from_offset[i];
    source[i].end += param.from_offset[i];
  }
  return checkpoint->ReadBox(param.from, source, param.dtype);
}


// Validates `sources` against the model; returns them by param.
absl::StatusOr<absl::flat_hash_map<std::string, std::vector<const ParamPieceIr*>>>
GroupSources(const std::vector<ParamPieceIr>& sources, const ModelFile& model) {
  absl::flat_hash_map<std::string, std::vector<const ParamPieceIr*>> by_param;
  for (const ParamPieceIr& piece : sources) {
    const ParamDef* param = nullptr;
    for (const ParamDef& p : model.params) {
      if (p.name == piece.param) param = &p;
    }
    if (param == nullptr) {
      return InvalidArgument("source piece ", BoxIrToString(piece.box), " names param '",
                             piece.param, "' which the model does not have");
    }
    MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(piece.box), "source piece of param '",
                        piece.param, "'");
    if (box.rank() != static_cast<int>(param->shape.size())) {
      return InvalidArgument("source piece ", box.ToString(), " of param '", piece.param,
                             "' has rank ", box.rank(), " but the param has shape ",
                             ShapeToString(param->shape));
    }
    by_param[piece.param].push_back(&piece);
  }
  return by_param;
}

// The sorted, deduplicated `devices`.
std::vector<int64_t> SortedUnique(std::vector<int64_t> devices) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

using CellsByParam =
    absl::flat_hash_map<std::string, std::map<Box, std::shared_ptr<const BoxTensor>>>;

// Sets model->held from `cells` and points each hosted device's params at them.
absl::Status SetHeldCells(const ModelFile& model, CellsByParam cells, LoadedModel* loaded) {
  for (const ParamDef& param : model.params) {
    HeldParam& held = loaded->held[param.name];
    held.dtype = param.dtype;
    held.shape = param.shape;
    for (auto& [box, values] : cells[param.name]) held.cells.push_back(values);
    MS_ASSIGN_OR_RETURN(NamedSharding sharding,
                        NamedSharding::Create(loaded->mesh, param.sharding,
                                              static_cast<int>(param.shape.size())));
    for (int64_t device : loaded->devices) {
      MS_ASSIGN_OR_RETURN(Box box, CheckedShardBoxForDevice(param.shape, sharding, device));
      loaded->params[device][param.name] = cells[param.name].at(box);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BuiltModel> BuildLoadedModel(const LoadModelIr& request,
                                            const LoadContext& context) {
  const std::string where =
      absl::StrCat("model '", request.model, "' generation ", request.generation);
  if (request.version < 0) return InvalidArgument(where, ": version ", request.version, " < 0");
  MS_ASSIGN_OR_RETURN(ModelFile model, ParseModelFile(request.model_json, request.model_dir),
                      where);
  if (model.name != request.model) {
    return InvalidArgument(where, ": the model file is named '", model.name, "'");
  }
  MS_ASSIGN_OR_RETURN(Mesh mesh, MeshFromIr(request.mesh), where);
  MS_RETURN_IF_ERROR(CheckMeshMatchesModel(model, mesh), where);
  auto loaded = std::make_shared<LoadedModel>();
  MS_ASSIGN_OR_RETURN(loaded->worker_id, CheckPlacement(request, mesh, context.worker_id),
                      where);
  loaded->model = request.model;
  loaded->generation = request.generation;
  loaded->version = request.version == 0 ? 1 : request.version;
  loaded->mesh = mesh;
  loaded->devices = SortedUnique(request.devices);
  loaded->replica_devices = SortedUnique(request.replica_devices);
  loaded->device_workers = request.device_workers;
  MS_ASSIGN_OR_RETURN(auto sources, GroupSources(request.sources, model), where);

  std::optional<Checkpoint> checkpoint;
  if (!model.checkpoints.empty()) {
    MS_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(model.checkpoints), where);
  }
  for (int64_t device : loaded->devices) loaded->params[device];  // hosted, maybe no params
  std::vector<int64_t> held_devices = loaded->devices;
  held_devices.insert(held_devices.end(), loaded->replica_devices.begin(),
                      loaded->replica_devices.end());
  // param -> cell -> values; the cells of `sourced` are filled below.
  CellsByParam cells;
  std::vector<SourcedCell> sourced;
  for (const ParamDef& param : model.params) {
    MS_ASSIGN_OR_RETURN(
        NamedSharding sharding,
        NamedSharding::Create(mesh, param.sharding, static_cast<int>(param.shape.size())),
        where, ": param '", param.name, "'");
    std::map<Box, std::shared_ptr<const BoxTensor>>& by_box = cells[param.name];
    for (int64_t device : held_devices) {
      MS_ASSIGN_OR_RETURN(Box box, CheckedShardBoxForDevice(param.shape, sharding, device),
                          where, ": param '", param.name, "'");
      if (by_box.count(box) > 0) continue;
      std::shared_ptr<const BoxTensor>& shared = by_box[box];
      std::vector<const ParamPieceIr*> pieces;
      for (const ParamPieceIr* piece : sources[param.name]) {
        if (!Intersect(UncheckedBoxFromIr(piece->box), box).IsEmpty()) pieces.push_back(piece);
      }
      if (!pieces.empty()) {
        MS_RETURN_IF_ERROR(CheckTiling(param.name, box, pieces), where);
        sourced.push_back(SourcedCell{param.name, param.dtype, box, std::move(pieces)});
        continue;
      }
      MS_ASSIGN_OR_RETURN(
          Tensor values, MaterializeBox(model, param, checkpoint ? &*checkpoint : nullptr, box),
          where, ": param '", param.name, "' box ", box.ToString());
      MS_ASSIGN_OR_RETURN(BoxTensor tensor, BoxTensor::Wrap(box, std::move(values)));
      shared = std::make_shared<const BoxTensor>(std::move(tensor));
    }
  }
  BuiltModel built;
  MS_RETURN_IF_ERROR(
      FillFromSources(request.model, loaded->worker_id, context, &sourced, &built.result), where);
  for (SourcedCell& cell : sourced) cells[cell.param][cell.box] = std::move(cell.values);
  MS_RETURN_IF_ERROR(SetHeldCells(model, std::move(cells), loaded.get()), where);
  loaded->param_bytes = DistinctHeldBytes(*loaded);
  built.result.param_bytes = loaded->param_bytes;
  built.model = std::move(loaded);
  return built;
}

}  // namespace meshserve
