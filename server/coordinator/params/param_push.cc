#include "server/coordinator/params/param_push.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/dtype.h"
#include "common/base/logging.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/tensor.h"
#include "server/coordinator/fan_out.h"
#include "server/coordinator/params/stage_sender.h"

namespace meshserve {
namespace {

constexpr int64_t kSlabBytes = 1 << 20;  // route whole rows in about this much

}  // namespace

absl::StatusOr<Box> ParamBox(const ParamDef& param, const std::vector<int64_t>& offset,
                             const std::vector<int64_t>& shape) {
  const size_t rank = param.shape.size();
  if ((!offset.empty() && offset.size() != rank) || (!shape.empty() && shape.size() != rank)) {
    return InvalidArgument("param '", param.name, "' of rank ", rank, ": box offset ",
                           ShapeToString(offset), " shape ", ShapeToString(shape));
  }
  Box box;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t begin = offset.empty() ? 0 : offset[d];
    const int64_t size = shape.empty() ? param.shape[d] - begin : shape[d];
    if (begin < 0 || size < 0 || begin > param.shape[d] || size > param.shape[d] - begin) {
      return InvalidArgument("param '", param.name, "': box offset ", ShapeToString(offset),
                             " shape ", ShapeToString(shape), " out of bounds of shape ",
                             ShapeToString(param.shape));
    }
    box.mutable_dims().push_back(Interval{begin, begin + size});
  }
  return box;
}

ParamPush::ParamPush(PushTarget target) : target_(std::move(target)), start_(absl::Now()) {}

ParamPush::~ParamPush() {
  if (!done_) AbortAll();
  // Drop the pinned placement (held by the target and its callbacks) before
  // the release wakes the control loop, so that a version this push retired
  // can be unloaded at that tick.
  std::function<void()> release = std::move(target_.release);
  target_ = PushTarget();
  if (release) release();
}

void ParamPush::AbortAll() {
  senders_.clear();  // cancels open streams
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
    if (direct_ || session_) {
      return FailedPrecondition("push to model '", model(),
                                "' is direct: its bytes go to the workers, not here");
    }
    if (!chunk.model.empty() && chunk.model != model()) {
      return InvalidArgument("push to model '", model(), "' got a chunk for model '", chunk.model,
                             "'");
    }
    bytes_received_ += static_cast<int64_t>(chunk.data.size());
    if (chunk.byte_offset == 0) {
      MS_RETURN_IF_ERROR(StartBox(chunk));
    } else if (!open_valid_ || chunk.byte_offset != open_.received) {
      return InvalidArgument(
          "push to model '", model(), "': byte_offset ", chunk.byte_offset,
          open_valid_ ? absl::StrCat(" for box ", open_.box.ToString(), " of param '",
                                     open_.param->name, "', expected ", open_.received)
                      : std::string(" continues no box (a box starts at byte_offset 0)"));
    }
    if (open_.received + static_cast<int64_t>(chunk.data.size()) > open_.total_bytes) {
      return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(), ": ",
                             open_.received + chunk.data.size(), " bytes, expected ",
                             open_.total_bytes);
    }
    return Take(std::move(chunk.data));
  }();
  if (!s.ok()) failed_ = s;
  return s;
}

absl::StatusOr<PushPlan> ParamPush::Plan(const std::vector<PushChunk>& boxes) {
  if (!failed_.ok()) return failed_;
  absl::StatusOr<PushPlan> plan = [&]() -> absl::StatusOr<PushPlan> {
    if (done_ || direct_ || session_ || !boxes_.empty()) {
      return FailedPrecondition("push to model '", model(),
                                "': a direct push names all its boxes once, before any data");
    }
    direct_ = true;
    const Placement& p = *target_.placement;
    PushPlan out{p.generation, version(), {}};
    for (size_t i = 0; i < boxes.size(); ++i) {
      const PushChunk& b = boxes[i];
      if (!b.model.empty() && b.model != model()) {
        return InvalidArgument("push to model '", model(), "' got a box for model '", b.model,
                               "'");
      }
      PushChunk box{b.model, b.param, b.offset, b.shape, b.dtype, 0, std::string()};
      MS_RETURN_IF_ERROR(StartBox(box));
      for (const Target& t : open_.targets) {
        auto address = p.worker_addresses.find(t.holder);
        if (address == p.worker_addresses.end()) return Internal("worker ", t.holder, " not placed");
        out.routes.push_back(PushPlan::Route{static_cast<int>(i), t.holder, address->second,
                                             t.piece});
        bytes_to_workers_ += t.piece.NumElements() * DTypeSize(open_.param->dtype);
      }
      open_valid_ = false;
    }
    MS_RETURN_IF_ERROR(CheckCover());
    return out;
  }();
  if (!plan.ok()) failed_ = plan.status();
  return plan;
}

absl::StatusOr<std::vector<PushPlan::Route>> ParamPush::Put(const ParamDef& param,
                                                             const Box& box) {
  if (!failed_.ok()) return failed_;
  if (done_ || direct_ || (!session_ && !params_.empty())) {
    return FailedPrecondition("push to model '", model(), "' is not a push session");
  }
  session_ = true;
  auto cells = cells_.find(param.name);
  if (cells == cells_.end()) {
    MS_ASSIGN_OR_RETURN(std::vector<CellHolders> c, PlacementCells(param, *target_.placement));
    cells = cells_.emplace(param.name, std::move(c)).first;
  }
  const Placement& p = *target_.placement;
  std::vector<PushPlan::Route> routes;
  for (const CellHolders& cell : cells->second) {
    Box piece = Intersect(cell.box, box);
    if (piece.IsEmpty()) continue;
    for (int64_t holder : PieceHolders(param, cell, piece, /*session=*/true)) {
      auto address = p.worker_addresses.find(holder);
      if (address == p.worker_addresses.end()) return Internal("worker ", holder, " not placed");
      routes.push_back(PushPlan::Route{0, holder, address->second, piece});
    }
  }
  std::vector<Box>& seen = boxes_[param.name];
  if (seen.empty()) params_.push_back(param.name);
  if (std::find(seen.begin(), seen.end(), box) == seen.end()) seen.push_back(box);
  for (const PushPlan::Route& r : routes) {
    bytes_to_workers_ += r.piece.NumElements() * DTypeSize(param.dtype);
  }
  return routes;
}

absl::Status ParamPush::Take(std::string data) {
  OpenBox& box = open_;
  box.received += static_cast<int64_t>(data.size());
  const bool complete = box.received == box.total_bytes;
  if (box.total_bytes == 0) {
    open_valid_ = false;
    return absl::OkStatus();
  }
  const int64_t n = static_cast<int64_t>(data.size());
  if (slab_.empty() && n % box.row_bytes == 0 && n > 0) {
    MS_RETURN_IF_ERROR(RouteRows(n / box.row_bytes, data.data(), &data));  // as it came
  } else {
    slab_.append(data);
    const int64_t have = static_cast<int64_t>(slab_.size());
    if (have >= kSlabBytes || complete) {
      const int64_t rows = have / box.row_bytes;
      if (rows > 0) {
        MS_RETURN_IF_ERROR(RouteRows(rows, slab_.data(), nullptr));
        slab_.erase(0, static_cast<size_t>(rows * box.row_bytes));  // a partial row stays
      }
    }
  }
  if (complete) {
    open_valid_ = false;
    slab_.clear();
  }
  return absl::OkStatus();
}

absl::Status ParamPush::RouteRows(int64_t rows, const char* data, std::string* owned) {
  OpenBox& box = open_;
  Box slab = box.box;
  if (slab.rank() > 0) {
    const int64_t begin = box.box.dims()[0].begin + box.rows_routed;
    slab.mutable_dims()[0] = Interval{begin, begin + rows};
  }
  box.rows_routed += rows;
  const int64_t elem = DTypeSize(box.param->dtype);
  const Placement& p = *target_.placement;
  std::vector<std::pair<Box, int64_t>> pieces;  // the slab's part of each target
  for (const Target& t : box.targets) {
    Box piece = Intersect(t.piece, slab);
    if (!piece.IsEmpty()) pieces.emplace_back(std::move(piece), t.holder);
  }
  for (const auto& [piece, holder] : pieces) {
    std::string bytes;
    if (piece == slab) {
      if (owned != nullptr && pieces.size() == 1) {
        bytes = std::move(*owned);  // the chunk's own bytes, not copied
      } else {
        bytes.assign(data, static_cast<size_t>(rows * box.row_bytes));
      }
    } else {
      bytes.resize(static_cast<size_t>(piece.NumElements() * elem));
      Box local = piece;  // piece in the slab's coordinates
      for (int d = 0; d < local.rank(); ++d) {
        local.mutable_dims()[d].begin -= slab.dims()[d].begin;
        local.mutable_dims()[d].end -= slab.dims()[d].begin;
      }
      MS_RETURN_IF_ERROR(ExtractBoxBytes(data, slab.shape(), elem, local, bytes.data()), "param '",
                         box.param->name, "'");
    }
    const int64_t total = static_cast<int64_t>(bytes.size());
    MS_RETURN_IF_ERROR(Stage(holder, StageChunkIr{p.model, p.generation, version(), box.param->name,
                                                  BoxToIr(piece), total, 0, std::move(bytes)}));
  }
  return absl::OkStatus();
}

absl::Status ParamPush::StartBox(PushChunk& chunk) {
  if (open_valid_) {
    return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(), ": got ",
                           open_.received, " of ", open_.total_bytes, " bytes before the next box");
  }
  const ParamDef* param = target_.model->FindParam(chunk.param);
  if (param == nullptr) {
    return NotFound("model '", model(), "' has no param '", chunk.param, "'");
  }
  const std::string where = absl::StrCat("param '", param->name, "'");
  if (chunk.dtype != param->dtype) {
    return InvalidArgument(where, ": dtype ", chunk.dtype ? DTypeName(*chunk.dtype) : "(none)",
                           ", expected ", DTypeName(param->dtype));
  }
  const size_t rank = param->shape.size();
  if (chunk.offset.size() != rank || chunk.shape.size() != rank) {
    return InvalidArgument(where, " of rank ", rank, ": box offset ", ShapeToString(chunk.offset),
                           " shape ", ShapeToString(chunk.shape));
  }
  MS_ASSIGN_OR_RETURN(Box box, ParamBox(*param, chunk.offset, chunk.shape));
  std::vector<Box>& seen = boxes_[param->name];
  for (const Box& other : seen) {
    if (!Intersect(other, box).IsEmpty()) {
      return InvalidArgument(where, ": box ", box.ToString(), " overlaps box ", other.ToString(),
                             " pushed before");
    }
  }
  if (seen.empty()) params_.push_back(param->name);
  seen.push_back(box);
  const int64_t total = box.NumElements() * DTypeSize(param->dtype);
  open_ = OpenBox{param, box, total, 0, total, 0, {}};
  if (rank > 0 && box.dims()[0].size() > 0) open_.row_bytes = total / box.dims()[0].size();
  open_valid_ = true;
  slab_.clear();
  if (box.IsEmpty()) return absl::OkStatus();
  auto cells = cells_.find(param->name);
  if (cells == cells_.end()) {
    MS_ASSIGN_OR_RETURN(std::vector<CellHolders> c, PlacementCells(*param, *target_.placement));
    cells = cells_.emplace(param->name, std::move(c)).first;
  }
  for (const CellHolders& cell : cells->second) {
    const Box piece = Intersect(cell.box, box);
    if (piece.IsEmpty()) continue;
    for (int64_t holder : PieceHolders(*param, cell, piece, /*session=*/false)) {
      open_.targets.push_back(Target{piece, holder});
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> ParamPush::PieceHolders(const ParamDef& param, const CellHolders& cell,
                                             const Box& piece, bool session) {
  if (target_.tee_direct && direct_) {
    std::vector<int64_t> all = cell.primaries;
    for (int64_t id : cell.replicas) {
      if (std::find(all.begin(), all.end(), id) == all.end()) all.push_back(id);
    }
    for (int64_t id : all) assigned_[id] += piece.NumElements() * DTypeSize(param.dtype);
    return all;
  }
  // A session keeps the cell's first holder and fills the whole cell from it.
  const auto key = std::make_pair(param.name, cell.box);
  auto sticky = cell_holder_.find(key);
  if (session && sticky != cell_holder_.end()) return {sticky->second};
  const Box& filled = session ? cell.box : piece;
  const std::vector<int64_t>& candidates =
      cell.primaries.empty() ? cell.replicas : cell.primaries;
  int64_t holder = candidates.front();
  for (int64_t id : candidates) {
    if (assigned_[id] < assigned_[holder]) holder = id;
  }
  assigned_[holder] += filled.NumElements() * DTypeSize(param.dtype);
  const Placement& p = *target_.placement;
  for (const std::vector<int64_t>* group : {&cell.primaries, &cell.replicas}) {
    for (int64_t id : *group) {
      if (id == holder) continue;
      fills_[id].push_back(
          ParamPieceIr{param.name, BoxToIr(filled), holder, p.generation, version()});
    }
  }
  if (session) cell_holder_[key] = holder;
  return {holder};
}

absl::Status ParamPush::Stage(int64_t worker, StageChunkIr chunk) {
  auto it = senders_.find(worker);
  if (it == senders_.end()) {
    MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, target_.client(worker));
    MS_ASSIGN_OR_RETURN(std::unique_ptr<StageParamsWriter> writer,
                        client->StageParams(target_.timeout), "worker ", worker);
    it = senders_.emplace(worker, std::make_unique<StageSender>(worker, std::move(writer))).first;
  }
  bytes_to_workers_ += static_cast<int64_t>(chunk.data.size());
  return it->second->Enqueue(std::move(chunk));
}

absl::Status ParamPush::CloseSenders() {
  absl::Status first;
  for (auto& [id, sender] : senders_) {
    absl::Status s = sender->Close();  // the others keep sending meanwhile
    if (first.ok()) first = s;
  }
  senders_.clear();
  return first;
}

absl::Status ParamPush::CheckCover() const {
  if (open_valid_) {
    return InvalidArgument("param '", open_.param->name, "' box ", open_.box.ToString(),
                           ": stream ended after ", open_.received, " of ", open_.total_bytes,
                           " bytes");
  }
  if (params_.empty()) return InvalidArgument("push to model '", model(), "': no params");
  for (const std::string& name : params_) {
    const ParamDef& param = *target_.model->FindParam(name);
    const Box full = Box::FromShape(param.shape);
    int64_t volume = 0;
    for (const Box& b : boxes_.at(name)) volume += b.NumElements();
    // Disjoint (checked) and inside; a session's boxes may overlap.
    if (!session_ && volume == full.NumElements()) continue;
    std::vector<Box> gap = {full};
    for (const Box& b : boxes_.at(name)) {
      std::vector<Box> rest;
      for (const Box& g : gap) {
        std::vector<Box> left = SubtractBox(g, b);
        rest.insert(rest.end(), left.begin(), left.end());
      }
      gap = std::move(rest);
    }
    int64_t missing = 0;
    for (const Box& g : gap) missing += g.NumElements();
    if (missing == 0) continue;
    return InvalidArgument("param '", name, "': the pushed boxes cover ",
                           full.NumElements() - missing, " of ",
                           full.NumElements(), " elements; box ",
                           gap.empty() ? full.ToString() : gap.front().ToString(), " is missing");
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> ParamPush::Finish(absl::Time deadline) {
  if (!failed_.ok()) return failed_;
  stream_end_ = absl::Now();
  absl::Status s = CheckCover();
  if (s.ok()) {
    s = CloseSenders();
  } else {
    senders_.clear();
  }
  const absl::Time staged = absl::Now();
  PushResult result;
  if (s.ok()) {
    const Placement& p = *target_.placement;
    std::atomic<int64_t> filled{0};
    auto commit = [&]() -> absl::Status {
      const std::vector<int64_t> ids = p.WorkerIds();
      // Every worker's entry exists before the parallel calls read the map
      // (operator[] there inserted from several threads at once: TSan).
      for (int64_t id : ids) fills_[id];
      std::vector<absl::Status> results = ParallelCall(ids, [&](int64_t id) -> absl::Status {
        MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, target_.client(id));
        CommitParamsIr call{p.model, p.generation, p.version, version(), params_, fills_.at(id)};
        MS_ASSIGN_OR_RETURN(CommitResultIr r, client->CommitParams(call, target_.timeout),
                            "CommitParams on worker ", id);
        filled += r.bytes_fetched;
        return absl::OkStatus();
      });
      for (const absl::Status& r : results) MS_RETURN_IF_ERROR(r);
      return absl::OkStatus();
    };
    s = target_.commit_and_switch(commit, deadline);
    result.bytes_filled = filled;
    if ((direct_ || session_) && (absl::IsNotFound(s) || absl::IsInvalidArgument(s) ||
                                  absl::IsFailedPrecondition(s))) {
      // The plan was valid and the workers had the model: the clients'
      // staging did not match it (a piece left out, sent twice or elsewhere,
      // or, in a session, overlapping puts whose bytes differ).
      s = direct_ ? FailedPrecondition("direct push to model '", model(), "' version ",
                                       version(), ": the pieces staged do not match the plan; ",
                                       s.message())
                  : AnnotateStatus(s, "push to model '", model(), "' version ", version(),
                                   ": the workers refused the staged pieces");
    }
  }
  if (!s.ok()) {
    failed_ = s;
    return s;  // the destructor aborts
  }
  done_ = true;
  const absl::Time end = absl::Now();
  MS_LOG(INFO) << (session_ ? "push session" : direct_ ? "direct push" : "push") << " to model '" << model()
               << "' version " << version() << ": "
               << (direct_ || session_ ? bytes_to_workers_ : bytes_received_)
               << (direct_ || session_ ? " bytes staged by the clients in " : " bytes received in ")
               << absl::ToDoubleSeconds(stream_end_ - start_) << " s, staged on "
               << assigned_.size() << " workers at +" << absl::ToDoubleSeconds(staged - start_)
               << " s, committed (" << result.bytes_filled << " bytes filled) at +"
               << absl::ToDoubleSeconds(end - start_) << " s";
  result.version = version();
  result.bytes_received = bytes_received_;
  result.params = params_;
  result.bytes_to_workers = bytes_to_workers_;
  result.seconds = absl::ToDoubleSeconds(end - start_);
  return result;
}

}  // namespace meshserve
