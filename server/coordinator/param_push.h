// A push of new parameter values: one PushParams stream (cluster_service.proto)
// turned into a new version of a model on its current placement.
//
// Path. Add() takes the stream's chunks in order. A chunk with byte_offset 0
// starts a box (it names param, offset, shape and dtype); later chunks carry
// the box's next bytes. Each box is checked as it starts (unknown param:
// kNotFound; dtype not the param's, rank, bounds, a byte length or offset that
// does not fit: kInvalidArgument naming the value) and, once complete,
// against the earlier boxes of its param (an overlap: kInvalidArgument naming
// both). A complete box B is cut by the distinct cells C of its param on the
// placement (param_moves.h: PlacementCells): each B ∩ C goes, in ~1 MiB
// StageParams chunks, to ONE holder h of C (a primary holder, the one with the
// fewest bytes so far), and every other holder of C (replicas, replicated
// shardings) gets the piece B ∩ C from h as a fill in its CommitParams, so
// the client's bytes cross the coordinator -> worker links once.
//
// Finish() checks exact cover (per param named: pairwise-disjoint boxes whose
// volumes sum to the param's; a gap is kInvalidArgument naming the param and
// an uncovered box), ends the stage streams, and hands the commit (CommitParams
// on every worker of the placement, in parallel) to the target's
// commit_and_switch, which holds the coordinator's control lock, refuses with
// kAborted when the model moved since the push began ("membership changed
// during the push; nothing changed"), and switches to version + 1. Any failure
// before the switch, or a push dropped unfinished, sends AbortParams to every
// worker: the old version stays served.
//
// Thread-safety: one thread drives a ParamPush (a stream's reader).
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAM_PUSH_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAM_PUSH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"
#include "server/coordinator/param_moves.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// PushParamsChunk.
struct PushChunk {
  std::string model;
  std::string param;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int dtype = 0;  // tensor.proto DTypeProto
  int64_t byte_offset = 0;
  std::string data;
};

// PushParamsResponse.
struct PushResult {
  int64_t version = 0;
  int64_t bytes_received = 0;
  std::vector<std::string> params;
  int64_t bytes_to_workers = 0;
  int64_t bytes_filled = 0;
  double seconds = 0;
};

// What a push needs from the coordinator.
struct PushTarget {
  std::shared_ptr<const ModelFile> model;
  std::shared_ptr<const Placement> placement;  // current when the push began
  std::function<absl::StatusOr<std::shared_ptr<WorkerClient>>(int64_t worker_id)> client;
  absl::Duration timeout;          // stage streams and commits
  absl::Duration control_timeout;  // aborts
  // Runs `commit` under the control lock and switches to version + 1 when it
  // succeeds (see file comment).
  std::function<absl::Status(const std::function<absl::Status()>& commit)> commit_and_switch;
  std::function<void()> release;  // the push is over (either way)
};

class ParamPush {
 public:
  explicit ParamPush(PushTarget target);
  ~ParamPush();  // aborts unless Finish succeeded; releases
  ParamPush(const ParamPush&) = delete;
  ParamPush& operator=(const ParamPush&) = delete;

  const std::string& model() const { return target_.placement->model; }
  // After an error the push is dead: later calls return that error.
  absl::Status Add(PushChunk chunk);
  absl::StatusOr<PushResult> Finish();

 private:
  struct OpenBox {
    const ParamDef* param = nullptr;
    Box box;
    int64_t total_bytes = 0;
    std::string bytes;
  };
  absl::Status StartBox(PushChunk& chunk);
  absl::Status RouteBox();  // open_ is complete
  absl::Status Stage(int64_t worker, StageChunkIr chunk);
  absl::Status CheckCover() const;
  void AbortAll();
  int64_t version() const { return target_.placement->version + 1; }

  PushTarget target_;
  const absl::Time start_;
  absl::Status failed_;
  bool done_ = false;
  bool open_valid_ = false;
  OpenBox open_;
  int64_t bytes_received_ = 0;
  int64_t bytes_to_workers_ = 0;
  std::vector<std::string> params_;                 // named, in first-seen order
  std::map<std::string, std::vector<Box>> boxes_;   // pushed boxes per param
  std::map<std::string, std::vector<CellHolders>> cells_;
  std::map<int64_t, int64_t> assigned_;             // staged bytes per worker
  std::map<int64_t, std::unique_ptr<StageParamsWriter>> writers_;
  std::map<int64_t, std::vector<ParamPieceIr>> fills_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAM_PUSH_H_
