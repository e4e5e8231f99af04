// Where held cells' values come from besides the checkpoint: pieces of this
// worker's own resident versions (copied, or shared when a piece is a whole
// identical cell) and of peers (ReadParam, peers in parallel), for
// LoadModelRequest.sources (model_loader.h); also the fetch and the per-peer
// fan-out used by CommitParams' fills (model_store.h).
//
// Thread-safety: free functions; FillFromSources and RunPerPeer run their
// peers' jobs at once on the shared executor (ParallelFor) and return when
// all have ended.
#ifndef MESHSERVE_SERVER_WORKER_PARAMS_PARAM_SOURCES_H_
#define MESHSERVE_SERVER_WORKER_PARAMS_PARAM_SOURCES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

// What loading a model's params needs besides the request.
struct LoadContext {
  int64_t worker_id = -1;  // -1: not known yet (learnt from the devices)
  PeerTransport* transport = nullptr;  // remote pieces; may be null
  absl::Duration read_timeout = absl::Minutes(5);
  // This worker's resident (request.model, generation, version) (version 0:
  // the newest), for local pieces; null when nothing is resident.
  std::function<std::shared_ptr<const LoadedModel>(int64_t generation, int64_t version)>
      find_resident;
};

// A held cell whose values come from LoadModelRequest.sources.
struct SourcedCell {
  std::string param;
  DType dtype = DType::kFloat32;
  Box box;
  std::vector<const ParamPieceIr*> pieces;  // tile `box` (CheckTiling)
  std::shared_ptr<const BoxTensor> values;  // set by FillFromSources
};

// Fills every cell from its pieces: a local piece (src_worker == worker_id)
// from this worker's resident (model, src_generation, src_version) held cell
// containing it (sharing the buffer when the piece is the whole cell and that
// cell is identical), a remote one with ReadParam (peers in parallel).
// Counts bytes_fetched and bytes_local into `result`.
// \error kNotFound for a local source that is not resident or holds no cell
//   containing the piece; kUnavailable without a transport; FetchBoxInto's.
absl::Status FillFromSources(const std::string& model, int64_t worker_id,
                             const LoadContext& context, std::vector<SourcedCell>* cells,
                             LoadModelResultIr* result);

// Checks that the pieces meeting `cell` lie inside it and tile it exactly.
// \error kInvalidArgument naming the param, the cell and the piece.
absl::Status CheckTiling(absl::string_view param, const Box& cell,
                         const std::vector<const ParamPieceIr*>& pieces);

// Reads request.box from peer `worker` (PeerTransport::ReadParam) into `dst`
// (which holds a box containing it, of the param's dtype). Returns the bytes.
// \error kInvalidArgument for a dtype or byte count that differs from dst's,
//   chunks out of order; the transport's errors.
absl::StatusOr<int64_t> FetchBoxInto(PeerTransport* transport, int64_t worker,
                                     const ReadParamIr& request, absl::Time deadline,
                                     BoxTensor* dst);

// Runs `jobs` (peer worker -> its work): the jobs of one peer in order,
// different peers in parallel, and `meanwhile` (when set) at the same time,
// all through ParallelFor (common/base/parallel_for.h); returns when all have
// ended, with meanwhile's error first, then the first peer's.
absl::Status RunPerPeer(std::vector<std::pair<int64_t, std::function<absl::Status()>>> jobs,
                        const std::function<absl::Status()>& meanwhile = nullptr);

// The bytes of `box` of a held cell: a view into it when `box` is the whole
// cell, else a copy.
absl::StatusOr<ParamBytes> CellBytes(const std::shared_ptr<const BoxTensor>& cell,
                                     const Box& box);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PARAMS_PARAM_SOURCES_H_
