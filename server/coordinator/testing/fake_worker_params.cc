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
  std::string& buffer = s.boxes[{chunk.param, box}];
  if (buffer.empty()) buffer.resize(static_cast<size_t>(chunk.total_bytes));
  if (static_cast<int64_t>(buffer.size()) != chunk.total_bytes || chunk.offset < 0 ||
      chunk.offset + static_cast<int64_t>(chunk.data.size()) > chunk.total_bytes) {
    return InvalidArgument("fake worker ", worker_id_, ": chunk at ", chunk.offset,
                           " does not fit box ", box.ToString());
  }
  std::memcpy(buffer.data() + chunk.offset, chunk.data.data(), chunk.data.size());
  s.received[{chunk.param, box}] += static_cast<int64_t>(chunk.data.size());
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
      int64_t covered = 0;
      for (const auto& [key, bytes] : s->second.boxes) {
        const Box part = Intersect(key.second, box);
        if (key.first != call.param || part.IsEmpty()) continue;
        MS_ASSIGN_OR_RETURN(Tensor t,
                            Tensor::FromBytes(param->dtype, key.second.shape(), bytes));
        MS_RETURN_IF_ERROR(CopyBox(BoxTensor{key.second, std::move(t)}, &out, part, false));
        covered += part.NumElements();
      }
      if (covered == box.NumElements() && !box.IsEmpty()) {
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
  int64_t volume = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    volume += pieces[i].first.NumElements();
    for (size_t j = 0; j < i; ++j) {
      if (!Intersect(pieces[i].first, pieces[j].first).IsEmpty()) {
        return InvalidArgument("fake worker ", worker_id_, ": pieces ",
                               pieces[i].first.ToString(), " and ", pieces[j].first.ToString(),
                               " of param '", param.name, "' overlap");
      }
    }
  }
  if (volume != cell.NumElements()) {
    return InvalidArgument("fake worker ", worker_id_, ": pieces of param '", param.name,
                           "' cover ", volume, " of the ", cell.NumElements(),
                           " elements of cell ", cell.ToString());
  }
  BoxTensor out{cell, Tensor::Zeros(param.dtype, cell.shape())};
  for (const auto& [box, bytes] : pieces) {
    MS_RETURN_IF_ERROR(InsertBox(&out, box, bytes, /*accumulate=*/false), "param '",
                       param.name, "'");
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
        if (key.first != name || Intersect(key.second, cell).IsEmpty()) continue;
        if (staging.received[key] != static_cast<int64_t>(data.size())) {
          return InvalidArgument("fake worker: staged box ", key.second.ToString(),
                                 " incomplete");
        }
        pieces.push_back({key.second, data});
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
