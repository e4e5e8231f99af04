// Where held cells' values come from besides the checkpoint: pieces of this
// worker's own resident versions (copied or shared) and of peers (ReadParam),
// for LoadModelRequest.sources; also the fetch used by CommitParams' fills.
#include "server/worker/params/param_sources.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/parallel_for.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"

namespace meshserve {

absl::Status CheckTiling(absl::string_view param, const Box& cell,
                         const std::vector<const ParamPieceIr*>& pieces) {
  const std::string where = absl::StrCat("param '", param, "' cell ", cell.ToString(), ": ");
  int64_t elements = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Box a = UncheckedBoxFromIr(pieces[i]->box);
    if (!cell.Contains(a)) {
      return InvalidArgument(where, "source piece ", a.ToString(), " (from worker ",
                             pieces[i]->src_worker, ") is not inside the cell");
    }
    for (size_t j = 0; j < i; ++j) {
      const Box b = UncheckedBoxFromIr(pieces[j]->box);
      if (!Intersect(a, b).IsEmpty()) {
        return InvalidArgument(where, "source pieces ", b.ToString(), " and ", a.ToString(),
                               " overlap");
      }
    }
    elements += a.NumElements();
  }
  if (elements != cell.NumElements()) {
    return InvalidArgument(where, "source pieces cover ", elements, " of ", cell.NumElements(),
                           " elements (a gap)");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FetchBoxInto(PeerTransport* transport, int64_t worker,
                                     const ReadParamIr& request, absl::Time deadline,
                                     BoxTensor* dst) {
  const std::string what =
      absl::StrCat("param '", request.param, "' box ", BoxIrToString(request.box), " of worker ",
                   worker, " (generation ", request.generation, " version ", request.version, ")");
  if (transport == nullptr) return Unavailable(what, ": no peer transport");
  MS_ASSIGN_OR_RETURN(Box box, BoxFromIr(request.box), what);
  if (!dst->box.Contains(box)) {
    return Internal(what, ": not inside the destination ", dst->box.ToString());
  }
  const int64_t expected = box.NumElements() * DTypeSize(dst->tensor.dtype());
  const bool whole = box == dst->box;  // chunks go straight into dst
  // Otherwise assembled in a tensor (a reused buffer for big boxes, tensor.cc).
  Tensor assembled;
  int64_t received = 0;
  absl::Status status = transport->ReadParam(
      worker, request, deadline, [&](const ParamChunkView& chunk) -> absl::Status {
        if (chunk.dtype != dst->tensor.dtype()) {
          return InvalidArgument("chunk dtype ",
                                 chunk.dtype ? DTypeName(*chunk.dtype) : "(not given)",
                                 " but the param is ",
                                 DTypeName(dst->tensor.dtype()));
        }
        if (chunk.total_bytes != expected) {
          return InvalidArgument("total_bytes ", chunk.total_bytes, " but the box has ", expected);
        }
        const int64_t n = static_cast<int64_t>(chunk.data.size());
        if (chunk.offset != received || received + n > expected) {
          return InvalidArgument("chunk at offset ", chunk.offset, " of ", n,
                                 " bytes; expected offset ", received, " of ", expected);
        }
        if (!whole && assembled.NumBytes() != expected) {
          MS_ASSIGN_OR_RETURN(assembled,
                              Tensor::CreateUninitialized(dst->tensor.dtype(), box.shape()));
        }
        char* into = whole ? dst->tensor.raw_data() : assembled.raw_data();
        if (n > 0) std::memcpy(into + received, chunk.data.data(), n);
        received += n;
        return absl::OkStatus();
      });
  MS_RETURN_IF_ERROR(status, what);
  if (received != expected) {
    return InvalidArgument(what, ": the stream ended after ", received, " of ", expected, " bytes");
  }
  if (!whole && expected > 0) {
    MS_RETURN_IF_ERROR(InsertBox(dst, box, assembled.bytes(), false), what);
  }
  return received;
}

absl::Status RunPerPeer(std::vector<std::pair<int64_t, std::function<absl::Status()>>> jobs,
                        const std::function<absl::Status()>& meanwhile) {
  std::map<int64_t, std::vector<std::function<absl::Status()>>> by_peer;
  for (auto& [peer, job] : jobs) by_peer[peer].push_back(std::move(job));
  // Slot 0 is meanwhile's (when set), so its error comes first.
  std::vector<std::vector<std::function<absl::Status()>>*> lists;
  if (meanwhile) lists.push_back(nullptr);
  for (auto& [peer, list] : by_peer) lists.push_back(&list);
  std::vector<absl::Status> statuses(lists.size());
  ParallelFor(lists.size(), [&](size_t i) {
    if (lists[i] == nullptr) {
      statuses[i] = meanwhile();
      return;
    }
    for (auto& job : *lists[i]) {
      statuses[i] = job();
      if (!statuses[i].ok()) return;
    }
  });
  for (absl::Status& status : statuses) MS_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::StatusOr<ParamBytes> CellBytes(const std::shared_ptr<const BoxTensor>& cell, const Box& box) {
  ParamBytes out;
  out.dtype = cell->tensor.dtype();
  if (box == cell->box) {
    out.bytes = cell->tensor.bytes();
    out.keep_alive = cell;
    return out;
  }
  // Into a tensor, not a string: big tensor buffers are reused (tensor.cc)
  // instead of being fresh memory for every read.
  MS_ASSIGN_OR_RETURN(Tensor part, Tensor::CreateUninitialized(cell->tensor.dtype(), box.shape()));
  MS_ASSIGN_OR_RETURN(BoxTensor wrapped, BoxTensor::Wrap(box, std::move(part)));
  MS_RETURN_IF_ERROR(CopyBox(*cell, &wrapped, box, false));
  auto owned = std::make_shared<const BoxTensor>(std::move(wrapped));
  out.bytes = owned->tensor.bytes();
  out.keep_alive = std::move(owned);
  return out;
}

namespace {

// The timeline of one load from sources (docs/PARAMETERS.md, "Benchmark").
void LogSourced(const std::string& model, const LoadModelResultIr& result, absl::Duration buffers,
                absl::Duration local_copies, absl::Time reads) {
  MS_LOG(INFO) << "model '" << model << "' from sources: " << result.bytes_fetched
               << " bytes from peers, " << result.bytes_local << " local; buffers "
               << absl::ToDoubleSeconds(buffers) << " s, then peer reads "
               << absl::ToDoubleSeconds(absl::Now() - reads) << " s with the local copies "
               << absl::ToDoubleSeconds(local_copies) << " s meanwhile";
}

// This worker's resident versions named by local source pieces, by
// (generation, version).
using LocalSources = std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const LoadedModel>>;

absl::StatusOr<std::shared_ptr<const LoadedModel>> FindLocalSource(const std::string& model,
                                                                   const LoadContext& context,
                                                                   const ParamPieceIr& piece,
                                                                   LocalSources* found) {
  const auto key = std::make_pair(piece.src_generation, piece.src_version);
  auto it = found->find(key);
  if (it == found->end()) {
    std::shared_ptr<const LoadedModel> resident;
    if (context.find_resident) resident = context.find_resident(key.first, key.second);
    it = found->emplace(key, std::move(resident)).first;
  }
  if (it->second == nullptr) {
    return NotFound("source piece ", BoxIrToString(piece.box), " of param '", piece.param,
                    "': model '", model, "' generation ", piece.src_generation, " version ",
                    piece.src_version, " is not resident on this worker");
  }
  return it->second;
}

// A piece of a cell copied from this worker's own resident version.
struct LocalCopy {
  std::shared_ptr<const BoxTensor> src;
  BoxTensor* dst;
  Box box;
  std::string param;
};

// Copies the local pieces (RunPerPeer runs this while the peers' reads run:
// the pieces of a cell are disjoint, CheckTiling, so the two write different
// bytes; a worker with local pieces, an old worker in a scale step, used to
// copy them all before its first read, and was the step's last). Sets
// *took to the copies' time.
absl::Status CopyLocalPieces(const std::vector<LocalCopy>& copies, absl::Duration* took) {
  const absl::Time start = absl::Now();
  for (const LocalCopy& copy : copies) {
    MS_RETURN_IF_ERROR(CopyBox(*copy.src, copy.dst, copy.box, false), "param '", copy.param,
                       "' source piece ", copy.box.ToString());
  }
  *took = absl::Now() - start;
  return absl::OkStatus();
}

}  // namespace

absl::Status FillFromSources(const std::string& model, int64_t worker_id,
                             const LoadContext& context, std::vector<SourcedCell>* cells,
                             LoadModelResultIr* result) {
  LocalSources local;  // looked up once each
  auto local_source = [&](const ParamPieceIr& piece) {
    return FindLocalSource(model, context, piece, &local);
  };
  const absl::Time deadline = absl::Now() + context.read_timeout;
  std::atomic<int64_t> fetched{0};
  std::vector<std::pair<int64_t, std::function<absl::Status()>>> remote;
  std::vector<std::shared_ptr<BoxTensor>> filling(cells->size());
  std::vector<LocalCopy> copies;  // pieces of this worker's resident versions
  for (size_t c = 0; c < cells->size(); ++c) {
    SourcedCell& cell = (*cells)[c];
    const ParamPieceIr& first = *cell.pieces.front();
    if (cell.pieces.size() == 1 && first.src_worker == worker_id &&
        UncheckedBoxFromIr(first.box) == cell.box) {
      MS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> src, local_source(first));
      auto held = src->held.find(cell.param);
      const int i = held == src->held.end() ? -1 : held->second.CellContaining(cell.box);
      if (i >= 0 && held->second.cells[i]->box == cell.box &&
          held->second.cells[i]->tensor.dtype() == cell.dtype) {
        cell.values = held->second.cells[i];  // zero copy
        result->bytes_local += cell.values->tensor.NumBytes();
        continue;
      }
    }
    MS_ASSIGN_OR_RETURN(Tensor values, Tensor::CreateUninitialized(cell.dtype, cell.box.shape()),
                        "param '", cell.param, "' cell ", cell.box.ToString());
    MS_ASSIGN_OR_RETURN(BoxTensor wrapped, BoxTensor::Wrap(cell.box, std::move(values)));
    filling[c] = std::make_shared<BoxTensor>(std::move(wrapped));
    BoxTensor* dst = filling[c].get();
    for (const ParamPieceIr* piece : cell.pieces) {
      const Box box = UncheckedBoxFromIr(piece->box);
      if (piece->src_worker != worker_id) {
        ReadParamIr read{model, piece->src_generation, piece->src_version, piece->param,
                         piece->box};
        remote.emplace_back(piece->src_worker, [&context, &fetched, read = std::move(read),
                                                worker = piece->src_worker, deadline, dst]() {
          MS_ASSIGN_OR_RETURN(int64_t bytes,
                              FetchBoxInto(context.transport, worker, read, deadline, dst));
          fetched += bytes;
          return absl::OkStatus();
        });
        continue;
      }
      MS_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> src, local_source(*piece));
      auto held = src->held.find(cell.param);
      const int i = held == src->held.end() ? -1 : held->second.CellContaining(box);
      if (i < 0) {
        return NotFound("source piece ", box.ToString(), " of param '", cell.param,
                        "': ", src->Name(), " holds no cell containing it here");
      }
      copies.push_back(LocalCopy{held->second.cells[i], dst, box, cell.param});
      result->bytes_local += box.NumElements() * DTypeSize(cell.dtype);
    }
  }
  const absl::Time reads = absl::Now();
  const bool any_remote = !remote.empty();
  absl::Duration local_copies;
  MS_RETURN_IF_ERROR(RunPerPeer(std::move(remote),
                                [&]() { return CopyLocalPieces(copies, &local_copies); }));
  result->bytes_fetched += fetched.load();
  if (any_remote) {
    LogSourced(model, *result, reads - (deadline - context.read_timeout), local_copies, reads);
  }
  for (size_t c = 0; c < cells->size(); ++c) {
    if (filling[c] != nullptr) (*cells)[c].values = std::move(filling[c]);
  }
  return absl::OkStatus();
}

}  // namespace meshserve
