// FakeWorkerClient's parameter state: materialised values, ReadParam,
// StageParams, CommitParams, AbortParams (fake_worker_client.h).
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/testing/fake_worker_client.h"

namespace meshserve {

std::string FakeParamBytes(const ParamDef& param, const Box& box) {
  const int64_t elem = DTypeSize(param.dtype);
  const int64_t base = 1000 * static_cast<int64_t>(std::hash<std::string>()(param.name) % 7);
  std::string out;
  out.reserve(static_cast<size_t>(box.NumElements() * elem));
  const int rank = box.rank();
  std::vector<int64_t> index(rank);
  for (int d = 0; d < rank; ++d) index[d] = box[d].begin;
  if (box.IsEmpty()) return out;
  while (true) {
    int64_t flat = 0;
    for (int d = 0; d < rank; ++d) flat = flat * param.shape[d] + index[d];
    const int64_t v = base + flat % 997;
    char bytes[8] = {0};
    if (param.dtype == DType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(bytes, &f, 4);
    } else {
      std::memcpy(bytes, &v, 8);
    }
    out.append(bytes, static_cast<size_t>(std::min<int64_t>(elem, 8)));
    int d = rank - 1;
    while (d >= 0 && ++index[d] == box[d].end) {
      index[d] = box[d].begin;
      --d;
    }
    if (d < 0) break;
  }
  return out;
}

class FakeStageWriter : public StageParamsWriter {
 public:
  explicit FakeStageWriter(FakeWorkerClient* worker) : worker_(worker) {}
  absl::Status Write(StageChunkIr chunk) override {
    if (!status_.ok()) return status_;
    absl::StatusOr<int64_t> n = worker_->Stage(std::move(chunk));
    if (!n.ok()) status_ = n.status();
    if (n.ok()) bytes_ += *n;
    return status_;
  }
  absl::StatusOr<int64_t> Finish() override {
    if (!status_.ok()) return status_;
    return bytes_;
  }

 private:
  FakeWorkerClient* const worker_;
  absl::Status status_;
  int64_t bytes_ = 0;
};

absl::StatusOr<std::unique_ptr<StageParamsWriter>> FakeWorkerClient::StageParams(
    absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  return std::unique_ptr<StageParamsWriter>(std::make_unique<FakeStageWriter>(this));
}

absl::StatusOr<int64_t> FakeWorkerClient::Stage(StageChunkIr chunk) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  const Resident* r = AnyResident(chunk.model, chunk.generation);
  if (r == nullptr) {
    return FailedPrecondition("fake worker ", worker_id_, ": stage to unloaded model '",
                              chunk.model, "' generation ", chunk.generation);
  }
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(chunk.box));
  auto cells = r->cells.find(chunk.param);
  bool inside = false;
  if (cells != r->cells.end()) {
    for (const auto& [cell, bytes] : cells->second) inside = inside || cell.Contains(box);
  }
  if (!inside) {
    return InvalidArgument("fake worker ", worker_id_, ": staged box ", box.ToString(),
                           " of param '", chunk.param, "' is in no held cell");
  }
  Staging& s = staging_[{chunk.model, chunk.generation, chunk.version}];
  // A chunk at offset 0 of a box whose last copy is complete starts a copy.
  int copy = 0;
  while (s.boxes.count({chunk.param, box, copy + 1}) > 0) ++copy;
  const StagedKey last{chunk.param, box, copy};
  if (chunk.offset == 0 && s.boxes.count(last) > 0 &&
      s.received[last] == static_cast<int64_t>(s.boxes[last].size())) {
    ++copy;
  }
  const StagedKey key{chunk.param, box, copy};
  std::string& buffer = s.boxes[key];
  if (buffer.empty()) buffer.resize(static_cast<size_t>(chunk.total_bytes));
  if (static_cast<int64_t>(buffer.size()) != chunk.total_bytes || chunk.offset < 0 ||
      chunk.offset + static_cast<int64_t>(chunk.data.size()) > chunk.total_bytes) {
    return InvalidArgument("fake worker ", worker_id_, ": chunk at ", chunk.offset,
                           " does not fit box ", box.ToString());
  }
  std::memcpy(buffer.data() + chunk.offset, chunk.data.data(), chunk.data.size());
  s.received[key] += static_cast<int64_t>(chunk.data.size());
  staged_bytes_ += static_cast<int64_t>(chunk.data.size());
  return static_cast<int64_t>(chunk.data.size());
}

absl::StatusOr<std::string> FakeWorkerClient::ReadParam(const ReadParamIr& call,
                                                        absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(call.box));
  auto r = residents_.find({call.model, call.generation, call.version});
  if (r != residents_.end()) return ReadCells(r->second, call.param, box);
  auto s = staging_.find({call.model, call.generation, call.version});
  const Resident* any = AnyResident(call.model, call.generation);
  if (s != staging_.end() && any != nullptr) {
    // The box may span several staged boxes (a push streams a box in row
    // slabs): assemble it from every staged box it meets.
    const ParamDef* param = any->model->FindParam(call.param);
    if (param != nullptr) {
      BoxTensor out{box, Tensor::Zeros(param->dtype, box.shape())};
      // Staged boxes may overlap (copies are compared at commit).
      std::vector<Box> uncovered = {box};
      for (const auto& [key, bytes] : s->second.boxes) {
        const Box& staged = std::get<1>(key);
        const Box part = Intersect(staged, box);
        if (std::get<0>(key) != call.param || part.IsEmpty()) continue;
        MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(param->dtype, staged.shape(), bytes));
        MS_RETURN_IF_ERROR(CopyBox(BoxTensor{staged, std::move(t)}, &out, part, false));
        std::vector<Box> rest;
        for (const Box& u : uncovered) {
          for (Box& r : SubtractBox(u, staged)) rest.push_back(std::move(r));
        }
        uncovered = std::move(rest);
      }
      if (uncovered.empty() && !box.IsEmpty()) {
        return std::string(out.tensor.raw_data(), static_cast<size_t>(out.tensor.NumBytes()));
      }
    }
  }
  return NotFound("fake worker ", worker_id_, ": no held box of param '", call.param,
                  "' of model '", call.model, "' generation ", call.generation, " version ",
                  call.version, " contains ", box.ToString());
}

absl::StatusOr<std::string> FakeWorkerClient::Assemble(
    const ParamDef& param, const Box& cell,
    const std::vector<std::pair<Box, std::string>>& pieces) {
  // Pieces may overlap (puts of a replicated param by several ranks, a tied
  // twin) when their bytes over the overlap are identical, as on a worker.
  BoxTensor out{cell, Tensor::Zeros(param.dtype, cell.shape())};
  std::vector<Box> uncovered = {cell};
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& [box, bytes] = pieces[i];
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(param.dtype, box.shape(), bytes));
    const BoxTensor piece{box, std::move(t)};
    for (size_t j = 0; j < i; ++j) {
      const Box overlap = Intersect(box, pieces[j].first);
      if (overlap.IsEmpty()) continue;
      BoxTensor mine{overlap, Tensor::Zeros(param.dtype, overlap.shape())};
      BoxTensor theirs{overlap, Tensor::Zeros(param.dtype, overlap.shape())};
      MS_RETURN_IF_ERROR(CopyBox(piece, &mine, overlap, false));
      MS_RETURN_IF_ERROR(CopyBox(out, &theirs, overlap, false));
      if (std::memcmp(mine.tensor.raw_data(), theirs.tensor.raw_data(),
                      static_cast<size_t>(mine.tensor.NumBytes())) != 0) {
        return InvalidArgument("fake worker ", worker_id_, ": pieces ", box.ToString(),
                               " and ", pieces[j].first.ToString(), " of param '", param.name,
                               "' overlap with different bytes");
      }
    }
    MS_RETURN_IF_ERROR(InsertBox(&out, box, bytes, /*accumulate=*/false), "param '",
                       param.name, "'");
    std::vector<Box> rest;
    for (const Box& u : uncovered) {
      for (Box& r : SubtractBox(u, box)) rest.push_back(std::move(r));
    }
    uncovered = std::move(rest);
  }
  if (!uncovered.empty()) {
    return InvalidArgument("fake worker ", worker_id_, ": pieces of param '", param.name,
                           "' leave ", uncovered.front().ToString(), " of cell ",
                           cell.ToString(), " uncovered");
  }
  return std::string(out.tensor.raw_data(), static_cast<size_t>(out.tensor.NumBytes()));
}

absl::StatusOr<CommitResultIr> FakeWorkerClient::CommitParams(const CommitParamsIr& call,
                                                              absl::Duration) {
  Resident next;
  Staging staging;
  {
    absl::MutexLock lock(&mu_);
    MS_RETURN_IF_ERROR(CheckUp());
    commit_calls_.push_back(call);
    if (!commit_failure_.ok()) {
      absl::Status s = commit_failure_;
      commit_failure_ = absl::OkStatus();
      return s;
    }
    auto base = residents_.find({call.model, call.generation, call.base_version});
    if (base == residents_.end()) {
      return FailedPrecondition("fake worker ", worker_id_, ": base version ",
                                call.base_version, " of '", call.model, "' not resident");
    }
    next = base->second;
    auto s = staging_.find({call.model, call.generation, call.version});
    if (s != staging_.end()) staging = s->second;
  }
  CommitResultIr result;
  std::vector<std::tuple<std::string, Box, std::string>> fetched;
  for (const ParamPieceIr& fill : call.fills) {
    MS_ASSIGN_OR_RETURN(std::string bytes, ReadPeer(call.model, fill), "fill");
    result.bytes_fetched += static_cast<int64_t>(bytes.size());
    fetched.emplace_back(fill.param, UncheckedBoxFromIr(fill.box), std::move(bytes));
  }
  for (const std::string& name : call.params) {
    const ParamDef* param = next.model->FindParam(name);
    if (param == nullptr) return NotFound("fake worker: unknown param '", name, "'");
    for (auto& [cell, bytes] : next.cells[name]) {
      std::vector<std::pair<Box, std::string>> pieces;
      for (const auto& [key, data] : staging.boxes) {
        const Box& staged = std::get<1>(key);
        if (std::get<0>(key) != name || Intersect(staged, cell).IsEmpty()) continue;
        if (staging.received[key] != static_cast<int64_t>(data.size())) {
          return InvalidArgument("fake worker: staged box ", staged.ToString(), " incomplete");
        }
        pieces.push_back({staged, data});
      }
      for (const auto& [p, box, data] : fetched) {
        if (p == name && !Intersect(box, cell).IsEmpty()) pieces.push_back({box, data});
      }
      MS_ASSIGN_OR_RETURN(std::string assembled, Assemble(*param, cell, pieces));
      bytes = std::make_shared<const std::string>(std::move(assembled));
    }
  }
  next.load.version = call.version;
  absl::MutexLock lock(&mu_);
  result.param_bytes = ResidentBytes(next);
  residents_[{call.model, call.generation, call.version}] = std::move(next);
  return result;
}

absl::Status FakeWorkerClient::AbortParams(const std::string& model, int64_t generation,
                                           int64_t version, absl::Duration) {
  absl::MutexLock lock(&mu_);
  MS_RETURN_IF_ERROR(CheckUp());
  ++abort_calls_;
  staging_.erase({model, generation, version});
  residents_.erase({model, generation, version});
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeWorkerClient::ReadCells(const Resident& r,
                                                        const std::string& name,
                                                        const Box& box) {
  const ParamDef* param = r.model->FindParam(name);
  auto cells = r.cells.find(name);
  if (param != nullptr && cells != r.cells.end()) {
    for (const auto& [cell, bytes] : cells->second) {
      if (!cell.Contains(box)) continue;
      MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(param->dtype, cell.shape(), *bytes));
      return ExtractBox(BoxTensor{cell, std::move(t)}, box);
    }
  }
  return NotFound("fake worker: no held box of param '", name, "' of model '", r.load.model,
                  "' generation ", r.load.generation, " version ", r.load.version,
                  " contains ", box.ToString());
}

int64_t FakeWorkerClient::ResidentBytes(const Resident& r) {
  int64_t n = 0;
  for (const auto& [param, cells] : r.cells) {
    for (const auto& [box, bytes] : cells) n += static_cast<int64_t>(bytes->size());
  }
  return n;
}

}  // namespace meshserve
