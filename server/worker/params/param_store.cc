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
#include "common/sharding/box.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/worker/params/box_overlap.h"

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

absl::Status Difference(absl::string_view param, const Box& box, const Box& other,
                        const std::vector<int64_t>& at) {
  return InvalidArgument("param '", param, "': overlapping puts differ: box ", box.ToString(),
                         " and box ", other.ToString(), " first differ at element [",
                         absl::StrJoin(at, ", "), "]");
}

}  // namespace

void ParamStore::Place(Staging* staging, absl::string_view param, DType dtype, Cell* cell,
                       const Box& box, const char* bytes) {
  const int64_t elem = DTypeSize(dtype);
  const Box& cell_box = cell->values->box;
  char* buffer = cell->values->tensor.raw_data();
  // The staged part of `box`, each element compared once: the overlap with
  // staged box i minus its overlaps with boxes 0..i-1.
  std::vector<Box> seen;
  bool differs = false;
  for (const Box& other : cell->staged) {
    const Box overlap = Intersect(other, box);
    if (overlap.IsEmpty()) continue;
    for (const Box& piece : Uncovered(overlap, seen)) {
      std::optional<std::vector<int64_t>> at =
          FirstDifference(bytes, box, buffer, cell_box, piece, elem);
      if (!at.has_value()) continue;
      differs = true;
      if (staging->conflict.ok()) staging->conflict = Difference(param, box, other, *at);
      break;
    }
    if (differs) break;
    seen.push_back(overlap);
  }
  for (const Box& piece : Uncovered(box, cell->staged)) {
    CopyRegion(bytes, box, buffer, cell_box, piece, elem);
  }
  cell->staged.push_back(box);
}

void ParamStore::Complete(Staging* staging, absl::string_view param, DType dtype, Cell* cell,
                          const Box& box, absl::string_view bytes) {
  if (cell->direct_pending) {
    cell->waiting.emplace_back(box, std::string(bytes));
    return;
  }
  Place(staging, param, dtype, cell, box, bytes.data());
}

void ParamStore::CompareRange(Staging* staging, absl::string_view param, DType dtype,
                              const Cell& cell, const Box& box, absl::string_view bytes,
                              int64_t offset) {
  if (!staging->conflict.ok()) return;  // the first difference is the one named
  std::optional<std::vector<int64_t>> at = FirstDifferenceInRange(
      bytes, offset, box, cell.values->tensor.raw_data(), cell.values->box, DTypeSize(dtype));
  if (!at.has_value()) return;
  Box element = box;
  for (int d = 0; d < element.rank(); ++d) element[d] = Interval{(*at)[d], (*at)[d] + 1};
  for (const Box& other : cell.staged) {
    if (!other.Contains(element)) continue;
    staging->conflict = Difference(param, box, other, *at);
    return;
  }
}

void ParamStore::FinishDirect(Staging* staging, absl::string_view param, DType dtype,
                              Cell* cell) {
  cell->direct_pending = false;
  cell->staged.push_back(cell->values->box);  // nothing else was staged meanwhile
  for (const auto& [box, bytes] : cell->waiting) {
    Place(staging, param, dtype, cell, box, bytes.data());
  }
  cell->waiting.clear();
}

absl::StatusOr<ParamStore::Puts::iterator> ParamStore::FindPut(Puts* puts,
                                                              const std::string& param,
                                                              const Box& box, int64_t offset,
                                                              absl::string_view what) {
  auto put = puts->end();
  std::vector<int64_t> received;
  const auto [first, last] = puts->equal_range({param, box});
  for (auto it = first; it != last; ++it) {
    if (it->second.received == offset) put = it;  // an empty put at 0 is continued too
    received.push_back(it->second.received);
  }
  if (put != puts->end() || offset == 0) return put;
  if (received.empty()) {
    return InvalidArgument(what, ": first chunk at offset ", offset, " (expected 0)");
  }
  return InvalidArgument(what, ": chunk at offset ", offset, " but ",
                         absl::StrJoin(received, " or "), " bytes have arrived");
}

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
  MS_ASSIGN_OR_RETURN(auto assembly,
                      FindPut(&staging.assembling, chunk.param, box, chunk.offset, what));
  Cell* cell = nullptr;
  if (assembly == staging.assembling.end()) {
    // Everything is checked before anything is created: a refused chunk
    // leaves no trace.
    if (found == staging_.end()) found = staging_.emplace(key, std::move(fresh)).first;
    Staging& live = found->second;
    cell = &live.cells[chunk.param][cell_box];
    MS_RETURN_IF_ERROR(Allocate(*held, cell_box, cell), what);
    if (n == expected) {  // a whole box in one chunk: no assembly
      std::string joined;
      if (parts.size() > 1) joined = absl::StrJoin(parts, "");
      Complete(&live, chunk.param, held->dtype, cell, box, parts.size() > 1 ? joined : parts[0]);
      return n;
    }
    Assembly a;
    a.cell = cell_box;
    a.direct = box == cell_box && cell->staged.empty() && !cell->direct_pending;
    a.compare_only = !a.direct && !cell->direct_pending &&
                     UncoveredElements(box, cell->staged) == 0;
    if (a.direct) cell->direct_pending = true;
    if (!a.direct && !a.compare_only) a.bytes.reserve(expected);
    assembly = live.assembling.emplace(std::make_pair(chunk.param, box), std::move(a));
  } else {
    cell = &found->second.cells[chunk.param][cell_box];
  }
  Assembly& a = assembly->second;
  for (absl::string_view part : a.compare_only ? parts : std::vector<absl::string_view>()) {
    CompareRange(&found->second, chunk.param, held->dtype, *cell, box, part, a.received);
    a.received += static_cast<int64_t>(part.size());
  }
  if (!a.compare_only) {
    AppendParts(parts, a.direct ? cell->values->tensor.raw_data() + a.received : nullptr,
                &a.bytes);
    a.received += n;
  }
  if (a.received == expected) {
    if (a.direct) {
      FinishDirect(&found->second, chunk.param, held->dtype, cell);
    } else if (a.compare_only) {
      cell->staged.push_back(box);  // every element was staged before
    } else {
      Complete(&found->second, chunk.param, held->dtype, cell, box, a.bytes);
    }
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
    where.push_back(std::move(located));
  }
  if (found == staging_.end()) found = staging_.emplace(key, std::move(fresh)).first;
  for (size_t i = 0; i < boxes.size(); ++i) {
    auto& [param, tensor] = boxes[i];
    Cell& cell = found->second.cells[param][where[i].second];
    const Box box = tensor.box;
    if (cell.values == nullptr && box == where[i].second) {
      cell.values = std::make_shared<BoxTensor>(std::move(tensor));  // no copy
      cell.staged.push_back(box);
      continue;
    }
    MS_RETURN_IF_ERROR(Allocate(*where[i].first, where[i].second, &cell));
    Complete(&found->second, param, where[i].first->dtype, &cell, box,
             tensor.tensor.bytes());
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
  if (staging != nullptr && !staging->conflict.ok()) {
    return InvalidArgument("commit of ", KeyString(key), ": ", staging->conflict.message());
  }
  for (const std::string& name : names) {
    for (const auto& held_cell : base.held.at(name).cells) {
      const Cell* cell = cell_of(name, held_cell->box);
      const std::vector<Box> missing =
          cell == nullptr ? Uncovered(held_cell->box, {})
                          : Uncovered(held_cell->box, cell->staged);
      if (!missing.empty()) {
        int64_t num_missing = 0;
        for (const Box& box : missing) num_missing += box.NumElements();
        return InvalidArgument("commit of ", KeyString(key), ": param '", name, "' cell ",
                               held_cell->box.ToString(), ": ", num_missing, " of ",
                               held_cell->box.NumElements(), " elements missing (",
                               missing.front().ToString(), " is not staged)");
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
  if (!staging.conflict.ok()) {
    return FailedPrecondition(KeyString(key), ": ", staging.conflict.message());
  }
  const int64_t covered =
      cell == nullptr ? 0 : box.NumElements() - UncoveredElements(box, cell->staged);
  if (covered != box.NumElements() || (cell == nullptr && !box.IsEmpty())) {
    return FailedPrecondition("param '", param, "' box ", box.ToString(), " of ",
                              KeyString(key), ": only ", covered, " of ", box.NumElements(),
                              " elements are staged");
  }
  ParamBytes out;
  out.dtype = located->first->dtype;
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
