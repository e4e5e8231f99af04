#include "server/coordinator/param_push.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/dtype.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {
namespace {

constexpr int64_t kStageChunkBytes = 1 << 20;

std::string Dims(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

ParamPush::ParamPush(PushTarget target) : target_(std::move(target)), start_(absl::Now()) {}

ParamPush::~ParamPush() {
  if (!done_) AbortAll();
  if (target_.release) target_.release();
}

void ParamPush::AbortAll() {
  for (auto& [id, writer] : writers_) writer.reset();  // cancels open streams
  writers_.clear();
  const Placement& p = *target_.placement;
  ParallelCall(p.WorkerIds(), [&](int64_t id) {
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = target_.client(id);
    if (!client.ok()) return client.status();
    return (*client)->AbortParams(p.model, p.generation, version(), target_.control_timeout);
  });
}

absl::Status ParamPush::Add(PushChunk chunk) {
  if (!failed_.ok()) return failed_;
  absl::Status s = [&]() -> absl::Status {
    if (done_) return FailedPrecondition("push to model '", model(), "' already finished");
    if (!chunk.model.empty() && chunk.model != model()) {
      return InvalidArgument("push to model '", model(), "' got a chunk for model '",
                             chunk.model, "'");
    }
    bytes_received_ += static_cast<int64_t>(chunk.data.size());
    if (chunk.byte_offset == 0) {
      MS_RETURN_IF_ERROR(StartBox(chunk));
    } else if (!open_valid_ ||
               chunk.byte_offset != static_cast<int64_t>(open_.bytes.size())) {
      return InvalidArgument(
          "push to model '", model(), "': byte_offset ", chunk.byte_offset,
          open_valid_ ? absl::StrCat(" for box ", open_.box.ToString(), " of param '",
                                     open_.param->name, "', expected ", open_.bytes.size())
                      : std::string(" continues no box (a box starts at byte_offset 0)"));
    }
    if (static_cast<int64_t>(open_.bytes.size() + chunk.data.size()) > open_.total_bytes) {
      return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(),
                             ": ", open_.bytes.size() + chunk.data.size(), " bytes, expected ",
                             open_.total_bytes);
    }
    open_.bytes.append(chunk.data);
    if (static_cast<int64_t>(open_.bytes.size()) == open_.total_bytes) return RouteBox();
    return absl::OkStatus();
  }();
  if (!s.ok()) failed_ = s;
  return s;
}

absl::Status ParamPush::StartBox(PushChunk& chunk) {
  if (open_valid_) {
    return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(),
                           ": got ", open_.bytes.size(), " of ", open_.total_bytes,
                           " bytes before the next box");
  }
  const ParamDef* param = target_.model->FindParam(chunk.param);
  if (param == nullptr) {
    return NotFound("model '", model(), "' has no param '", chunk.param, "'");
  }
  const std::string where = absl::StrCat("param '", param->name, "'");
  if (chunk.dtype != DTypeToProto(param->dtype)) {
    absl::StatusOr<DType> got = DTypeFromProto(chunk.dtype);
    return InvalidArgument(where, ": dtype ",
                           got.ok() ? std::string(DTypeName(*got))
                                    : absl::StrCat("(wire ", chunk.dtype, ")"),
                           ", expected ", DTypeName(param->dtype));
  }
  const size_t rank = param->shape.size();
  if (chunk.offset.size() != rank || chunk.shape.size() != rank) {
    return InvalidArgument(where, " of rank ", rank, ": box offset ", Dims(chunk.offset),
                           " shape ", Dims(chunk.shape));
  }
  Box box;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t begin = chunk.offset[d];
    const int64_t size = chunk.shape[d];
    if (begin < 0 || size < 0 || begin > param->shape[d] || size > param->shape[d] - begin) {
      return InvalidArgument(where, ": box offset ", Dims(chunk.offset), " shape ",
                             Dims(chunk.shape), " out of bounds of shape ",
                             Dims(param->shape));
    }
    box.mutable_dims().push_back(Interval{begin, begin + size});
  }
  open_ = OpenBox{param, box, box.NumElements() * DTypeSize(param->dtype), {}};
  open_.bytes.reserve(static_cast<size_t>(open_.total_bytes));
  open_valid_ = true;
  if (!boxes_.count(param->name)) params_.push_back(param->name);
  return absl::OkStatus();
}

absl::Status ParamPush::RouteBox() {
  open_valid_ = false;
  OpenBox box = std::move(open_);
  const std::string& name = box.param->name;
  std::vector<Box>& seen = boxes_[name];
  for (const Box& other : seen) {
    if (!Intersect(other, box.box).IsEmpty()) {
      return InvalidArgument("param '", name, "': box ", box.box.ToString(), " overlaps box ",
                             other.ToString(), " pushed before");
    }
  }
  seen.push_back(box.box);
  if (box.box.IsEmpty()) return absl::OkStatus();
  auto cells = cells_.find(name);
  if (cells == cells_.end()) {
    MS_ASSIGN_OR_RETURN(std::vector<CellHolders> c,
                        PlacementCells(*box.param, *target_.placement));
    cells = cells_.emplace(name, std::move(c)).first;
  }
  MS_ASSIGN_OR_RETURN(Tensor tensor,
                      Tensor::FromBytes(box.param->dtype, box.box.shape(), box.bytes));
  const BoxTensor pushed{box.box, std::move(tensor)};
  box.bytes.clear();
  const Placement& p = *target_.placement;
  for (const CellHolders& cell : cells->second) {
    const Box piece = Intersect(cell.box, box.box);
    if (piece.IsEmpty()) continue;
    const std::vector<int64_t>& candidates =
        cell.primaries.empty() ? cell.replicas : cell.primaries;
    int64_t holder = candidates.front();
    for (int64_t id : candidates) {
      if (assigned_[id] < assigned_[holder]) holder = id;
    }
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(pushed, piece));
    const int64_t total = static_cast<int64_t>(bytes.size());
    assigned_[holder] += total;
    for (int64_t offset = 0; offset < total || offset == 0; offset += kStageChunkBytes) {
      StageChunkIr chunk{p.model, p.generation, version(), name, BoxToIr(piece), total,
                         offset, bytes.substr(static_cast<size_t>(offset),
                                              static_cast<size_t>(kStageChunkBytes))};
      MS_RETURN_IF_ERROR(Stage(holder, std::move(chunk)));
      if (total == 0) break;
    }
    for (const std::vector<int64_t>* group : {&cell.primaries, &cell.replicas}) {
      for (int64_t id : *group) {
        if (id == holder) continue;
        fills_[id].push_back(ParamPieceIr{name, BoxToIr(piece), holder, p.generation,
                                          version()});
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParamPush::Stage(int64_t worker, StageChunkIr chunk) {
  auto it = writers_.find(worker);
  if (it == writers_.end()) {
    MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, target_.client(worker));
    MS_ASSIGN_OR_RETURN(std::unique_ptr<StageParamsWriter> writer,
                        client->StageParams(target_.timeout), "worker ", worker);
    it = writers_.emplace(worker, std::move(writer)).first;
  }
  bytes_to_workers_ += static_cast<int64_t>(chunk.data.size());
  return AnnotateStatus(it->second->Write(std::move(chunk)), "staging on worker ", worker);
}

absl::Status ParamPush::CheckCover() const {
  if (open_valid_) {
    return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(),
                           ": stream ended after ", open_.bytes.size(), " of ",
                           open_.total_bytes, " bytes");
  }
  if (params_.empty()) return InvalidArgument("push to model '", model(), "': no params");
  for (const std::string& name : params_) {
    const ParamDef& param = *target_.model->FindParam(name);
    const Box full = Box::FromShape(param.shape);
    int64_t volume = 0;
    for (const Box& b : boxes_.at(name)) volume += b.NumElements();
    if (volume == full.NumElements()) continue;  // disjoint (checked) and inside
    std::vector<Box> gap = {full};
    for (const Box& b : boxes_.at(name)) {
      std::vector<Box> rest;
      for (const Box& g : gap) {
        std::vector<Box> left = SubtractBox(g, b);
        rest.insert(rest.end(), left.begin(), left.end());
      }
      gap = std::move(rest);
    }
    return InvalidArgument("param '", name, "': the pushed boxes cover ", volume, " of ",
                           full.NumElements(), " elements; box ",
                           gap.empty() ? full.ToString() : gap.front().ToString(),
                           " is missing");
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> ParamPush::Finish() {
  if (!failed_.ok()) return failed_;
  absl::Status s = CheckCover();
  for (auto& [id, writer] : writers_) {
    if (!s.ok()) break;
    s = AnnotateStatus(writer->Finish().status(), "staging on worker ", id);
  }
  writers_.clear();
  PushResult result;
  if (s.ok()) {
    const Placement& p = *target_.placement;
    std::atomic<int64_t> filled{0};
    auto commit = [&]() -> absl::Status {
      const std::vector<int64_t> ids = p.WorkerIds();
      std::vector<absl::Status> results = ParallelCall(ids, [&](int64_t id) -> absl::Status {
        MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, target_.client(id));
        CommitParamsIr call{p.model, p.generation, p.version, version(), params_, fills_[id]};
        MS_ASSIGN_OR_RETURN(CommitResultIr r, client->CommitParams(call, target_.timeout),
                            "CommitParams on worker ", id);
        filled += r.bytes_fetched;
        return absl::OkStatus();
      });
      for (const absl::Status& r : results) MS_RETURN_IF_ERROR(r);
      return absl::OkStatus();
    };
    s = target_.commit_and_switch(commit);
    result.bytes_filled = filled;
  }
  if (!s.ok()) {
    failed_ = s;
    return s;  // the destructor aborts
  }
  done_ = true;
  result.version = version();
  result.bytes_received = bytes_received_;
  result.params = params_;
  result.bytes_to_workers = bytes_to_workers_;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  return result;
}

}  // namespace meshserve
