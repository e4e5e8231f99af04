#include "server/worker/params/param_store.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"

namespace meshserve {

namespace {

std::string KeyString(const ParamStore::Key& key) {
  return absl::StrCat("model '", std::get<0>(key), "' generation ", std::get<1>(key),
                      " version ", std::get<2>(key));
}

}  // namespace

absl::StatusOr<std::pair<const HeldParam*, Box>> ParamStore::Locate(const Staging& staging,
                                                                    absl::string_view param,
                                                                    const Box& box) {
  auto it = staging.geometry->held.find(param);
  if (it == staging.geometry->held.end()) {
    return InvalidArgument("unknown param '", param, "' of ", staging.geometry->Name());
  }
  const HeldParam& held = it->second;
  if (box.rank() != static_cast<int>(held.shape.size())) {
    return InvalidArgument("box ", box.ToString(), " of param '", param, "' has rank ",
                           box.rank(), " but the param has shape ", ShapeToString(held.shape));
  }
  const int i = held.CellContaining(box);
  if (i < 0) {
    return InvalidArgument("box ", box.ToString(), " of param '", param,
                           "' is not inside one held cell of this worker (held: ",
                           held.CellsString(), ")");
  }
  return std::make_pair(&held, held.cells[i]->box);
}

absl::Status ParamStore::CheckNoOverlap(absl::string_view param, const Cell& cell,
                                        const Box& box) {
  for (const std::vector<Box>* boxes : {&cell.staged, &cell.pending}) {
    for (const Box& other : *boxes) {
      if (!Intersect(other, box).IsEmpty()) {
        return InvalidArgument("param '", param, "': box ", box.ToString(), " overlaps box ",
                               other.ToString(), boxes == &cell.staged ? " already staged"
                                                                       : " being staged");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParamStore::Allocate(const HeldParam& held, const Box& cell_box, Cell* cell) {
  if (cell->values != nullptr) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(Tensor values, Tensor::CreateUninitialized(held.dtype, cell_box.shape()),
                      "staging cell ", cell_box.ToString());
  MS_ASSIGN_OR_RETURN(BoxTensor wrapped, BoxTensor::Wrap(cell_box, std::move(values)));
  cell->values = std::make_shared<BoxTensor>(std::move(wrapped));
  return absl::OkStatus();
}

namespace {

// Copies `parts` in order to `dst` when it is set, else appends them to *out.
void AppendParts(const std::vector<absl::string_view>& parts, char* dst, std::string* out) {
  for (absl::string_view part : parts) {
    if (dst == nullptr) {
      out->append(part.data(), part.size());
    } else if (!part.empty()) {
      std::memcpy(dst, part.data(), part.size());
      dst += part.size();
    }
  }
}

}  // namespace

absl::StatusOr<int64_t> ParamStore::Stage(const StageChunkIr& chunk,
                                          std::shared_ptr<const LoadedModel> geometry) {
  const Key key(chunk.model, chunk.generation, chunk.version);
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(chunk.box), "param '", chunk.param, "'");
  absl::MutexLock lock(&mu_);
  auto found = staging_.find(key);
  Staging fresh;
  fresh.geometry = std::move(geometry);
  Staging& staging = found != staging_.end() ? found->second : fresh;
  MS_ASSIGN_OR_RETURN(auto located, Locate(staging, chunk.param, box));
  const auto& [held, cell_box] = located;
  const int64_t expected = box.NumElements() * DTypeSize(held->dtype);
  const std::string what = absl::StrCat("param '", chunk.param, "' box ", box.ToString());
  if (chunk.total_bytes != expected) {
    return InvalidArgument(what, ": total_bytes ", chunk.total_bytes, " but ",
                           box.NumElements(), " ", DTypeName(held->dtype), " elements are ",
                           expected, " bytes");
  }
  const std::vector<absl::string_view> own = {chunk.data};
  const std::vector<absl::string_view>& parts = chunk.data_views.empty() ? own : chunk.data_views;
  int64_t n = 0;
  for (absl::string_view part : parts) n += static_cast<int64_t>(part.size());
  if (chunk.offset < 0 || chunk.offset + n > expected) {
    return InvalidArgument(what, ": chunk [", chunk.offset, ", ", chunk.offset + n,
                           ") is outside its ", expected, " bytes");
  }
  auto assembly = staging.assembling.find({chunk.param, box});
  Cell* cell = nullptr;
  if (assembly == staging.assembling.end()) {
    if (chunk.offset != 0) {
      return InvalidArgument(what, ": first chunk at offset ", chunk.offset,
                             " (expected 0)");
    }
    // Checked before anything is created, so a refused chunk leaves no trace.
    auto param_cells = staging.cells.find(chunk.param);
    if (param_cells != staging.cells.end()) {
      auto c = param_cells->second.find(cell_box);
      if (c != param_cells->second.end()) {
        MS_RETURN_IF_ERROR(CheckNoOverlap(chunk.param, c->second, box));
      }
    }
    if (found == staging_.end()) found = staging_.emplace(key, std::move(fresh)).first;
    Staging& live = found->second;
    cell = &live.cells[chunk.param][cell_box];
    MS_RETURN_IF_ERROR(Allocate(*held, cell_box, cell), what);
    if (n == expected && box != cell_box) {  // a whole box in one chunk: no assembly
      std::string joined;
      if (parts.size() > 1) joined = absl::StrJoin(parts, "");
      MS_RETURN_IF_ERROR(
          InsertBox(cell->values.get(), box, parts.size() > 1 ? joined : parts[0], false), what);
      cell->staged.push_back(box);
      cell->staged_elements += box.NumElements();
      return n;
    }
    cell->pending.push_back(box);
    Assembly a;
    a.cell = cell_box;
    if (box != cell_box) a.bytes.reserve(expected);
    assembly = live.assembling.emplace(std::make_pair(chunk.param, box), std::move(a)).first;
  } else {
    if (chunk.offset != assembly->second.received) {
      return InvalidArgument(what, ": chunk at offset ", chunk.offset, " but ",
                             assembly->second.received, " bytes have arrived");
    }
    cell = &found->second.cells[chunk.param][cell_box];
  }
  Assembly& a = assembly->second;
  AppendParts(parts, box == cell_box ? cell->values->tensor.raw_data() + a.received : nullptr,
              &a.bytes);
  a.received += n;
  if (a.received == expected) {
    if (box != cell_box) MS_RETURN_IF_ERROR(InsertBox(cell->values.get(), box, a.bytes, false));
    cell->pending.erase(std::find(cell->pending.begin(), cell->pending.end(), box));
    cell->staged.push_back(box);
    cell->staged_elements += box.NumElements();
    found->second.assembling.erase(assembly);
  }
  return n;
}

absl::Status ParamStore::StageBoxes(const Key& key, std::shared_ptr<const LoadedModel> geometry,
                                    std::vector<std::pair<std::string, BoxTensor>> boxes) {
  absl::MutexLock lock(&mu_);
  auto found = staging_.find(key);
  Staging fresh;
  fresh.geometry = std::move(geometry);
  Staging& staging = found != staging_.end() ? found->second : fresh;
  std::vector<std::pair<const HeldParam*, Box>> where;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const auto& [param, tensor] = boxes[i];
    MS_ASSIGN_OR_RETURN(auto located, Locate(staging, param, tensor.box));
    if (tensor.tensor.dtype() != located.first->dtype) {
      return InvalidArgument("param '", param, "' box ", tensor.box.ToString(), " is ",
                             DTypeName(tensor.tensor.dtype()), " but the param is ",
                             DTypeName(located.first->dtype));
    }
    auto param_cells = staging.cells.find(param);
    if (param_cells != staging.cells.end()) {
      auto c = param_cells->second.find(located.second);
      if (c != param_cells->second.end()) {
        MS_RETURN_IF_ERROR(CheckNoOverlap(param, c->second, tensor.box));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (boxes[j].first == param && !Intersect(boxes[j].second.box, tensor.box).IsEmpty()) {
        return InvalidArgument("param '", param, "': fills ", boxes[j].second.box.ToString(),
                               " and ", tensor.box.ToString(), " overlap");
      }
    }
    where.push_back(std::move(located));
  }
  if (found == staging_.end()) found = staging_.emplace(key, std::move(fresh)).first;
  for (size_t i = 0; i < boxes.size(); ++i) {
    auto& [param, tensor] = boxes[i];
    Cell& cell = found->second.cells[param][where[i].second];
    const Box box = tensor.box;
    if (cell.values == nullptr && box == where[i].second) {
      cell.values = std::make_shared<BoxTensor>(std::move(tensor));  // no copy
    } else {
      MS_RETURN_IF_ERROR(Allocate(*where[i].first, where[i].second, &cell));
      MS_RETURN_IF_ERROR(CopyBox(tensor, cell.values.get(), box, false));
    }
    cell.staged.push_back(box);
    cell.staged_elements += box.NumElements();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const LoadedModel>> ParamStore::Commit(
    const Key& key, const LoadedModel& base, int64_t version,
    const std::vector<std::string>& params) {
  absl::MutexLock lock(&mu_);
  auto found = staging_.find(key);
  Staging* staging = found == staging_.end() ? nullptr : &found->second;
  std::set<std::string> names(params.begin(), params.end());
  for (const std::string& name : names) {
    if (!base.held.contains(name)) {
      return InvalidArgument("commit of ", KeyString(key), ": unknown param '", name, "'");
    }
  }
  if (staging != nullptr) {
    for (const auto& [name, cells] : staging->cells) {
      if (names.count(name) == 0) {
        return InvalidArgument("commit of ", KeyString(key), ": param '", name,
                               "' is staged but not in params");
      }
    }
  }
  auto cell_of = [&](const std::string& name, const Box& box) -> Cell* {
    if (staging == nullptr) return nullptr;
    auto p = staging->cells.find(name);
    if (p == staging->cells.end()) return nullptr;
    auto c = p->second.find(box);
    return c == p->second.end() ? nullptr : &c->second;
  };
  for (const std::string& name : names) {
    for (const auto& held_cell : base.held.at(name).cells) {
      const Cell* cell = cell_of(name, held_cell->box);
      const int64_t staged = cell == nullptr ? 0 : cell->staged_elements;
      if (staged != held_cell->box.NumElements()) {
        return InvalidArgument("commit of ", KeyString(key), ": param '", name, "' cell ",
                               held_cell->box.ToString(), ": ",
                               held_cell->box.NumElements() - staged, " of ",
                               held_cell->box.NumElements(), " elements missing");
      }
    }
  }
  auto out = std::make_shared<LoadedModel>(base);
  out->version = version;
  for (const std::string& name : names) {
    absl::flat_hash_map<Box, std::shared_ptr<const BoxTensor>> by_box;
    for (std::shared_ptr<const BoxTensor>& held_cell : out->held.at(name).cells) {
      Cell* cell = cell_of(name, held_cell->box);
      // An empty cell may never have been touched: keep the base's.
      if (cell != nullptr && cell->values != nullptr) held_cell = std::move(cell->values);
      by_box[held_cell->box] = held_cell;
    }
    for (auto& [device, device_params] : out->params) {
      auto p = device_params.find(name);
      if (p != device_params.end()) p->second = by_box.at(p->second->box);
    }
  }
  out->param_bytes = DistinctHeldBytes(*out);
  if (staging != nullptr) staging_.erase(found);
  return std::shared_ptr<const LoadedModel>(std::move(out));
}

absl::StatusOr<ParamBytes> ParamStore::Read(const Key& key, absl::string_view param,
                                            const BoxIr& box_ir) const {
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(box_ir), "param '", param, "'");
  absl::MutexLock lock(&mu_);
  auto found = staging_.find(key);
  if (found == staging_.end()) return NotFound(KeyString(key), " has no staging here");
  const Staging& staging = found->second;
  if (!staging.geometry->held.contains(param)) {
    return NotFound("unknown param '", param, "' of ", KeyString(key));
  }
  absl::StatusOr<std::pair<const HeldParam*, Box>> located = Locate(staging, param, box);
  if (!located.ok()) return OutOfRange(located.status().message());
  const Cell* cell = nullptr;
  auto p = staging.cells.find(param);
  if (p != staging.cells.end()) {
    auto c = p->second.find(located->second);
    if (c != p->second.end()) cell = &c->second;
  }
  int64_t covered = 0;
  if (cell != nullptr) {
    for (const Box& staged : cell->staged) covered += Intersect(staged, box).NumElements();
  }
  if (covered != box.NumElements() || (cell == nullptr && !box.IsEmpty())) {
    return FailedPrecondition("param '", param, "' box ", box.ToString(), " of ",
                              KeyString(key), ": only ", covered, " of ", box.NumElements(),
                              " elements are staged");
  }
  ParamBytes out;
  out.dtype = DTypeToProto(located->first->dtype);
  if (cell == nullptr || cell->values == nullptr) return out;  // an empty box
  return CellBytes(cell->values, box);
}

bool ParamStore::Contains(const Key& key) const {
  absl::MutexLock lock(&mu_);
  return staging_.count(key) > 0;
}

int ParamStore::Drop(absl::string_view model, int64_t generation, int64_t version) {
  absl::MutexLock lock(&mu_);
  int dropped = 0;
  for (auto it = staging_.begin(); it != staging_.end();) {
    const auto& [m, g, v] = it->first;
    if (m == model && (generation == -1 || g == generation) && (version == 0 || v == version)) {
      it = staging_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace meshserve
