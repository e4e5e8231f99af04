// A push of new parameter values: one PushParams stream (cluster_service.proto)
// turned into a new version of a model on its current placement.
//
// Path. Add() takes the stream's chunks in order. A chunk with byte_offset 0
// starts a box (it names param, offset, shape and dtype); later chunks carry
// the box's next bytes. Each box is checked as it starts (unknown param:
// kNotFound; dtype not the param's, rank, bounds: kInvalidArgument naming the
// value; an overlap with an earlier box of its param: kInvalidArgument naming
// both) and each chunk as it arrives (a byte length or offset that does not
// fit). A box B is cut by the distinct cells C of its param on the placement
// (param_moves.h: PlacementCells); when B starts, each B ∩ C gets ONE holder
// h of C (a primary holder, the one with the fewest bytes so far), and every
// other holder of C (replicas, replicated shardings) gets the piece B ∩ C
// from h as a fill in its CommitParams, so the client's bytes cross the
// coordinator -> worker links once.
//
// Streaming. A box is not buffered whole: its bytes are routed as soon as
// whole rows (along dim 0) of about kSlabBytes have arrived (a chunk of whole
// rows is routed as it is); the rows' part of each B ∩ C goes to its holder
// as one StageParams chunk of its own box. Each worker's StageParams stream is
// written by its own thread from a bounded queue, so the streams to all
// workers and the reading of the client's stream run at the same time.
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
// Direct push (PushDirect). Plan() takes every box of the push at once (no
// data), checks them as above plus the exact cover, and returns the routes:
// one per B ∩ C and holder of C (PushTarget::tee_direct, the default: the
// client tees each piece to every holder while it streams, so the commit has
// no fills left to fetch after the last byte; otherwise one holder h chosen
// as above and fills from it at commit). The client then stages each piece
// itself (StageParams), so no byte passes the coordinator; Finish() commits
// as above (the workers check at CommitParams that every cell is staged
// exactly once, so a piece the client left out fails the commit and nothing
// changes). Add() is refused on a planned push.
//
// Session push (push_sessions.h). Put() takes one box at a time, from any
// number of ranks, with no data: overlaps are allowed (the holder compares
// the bytes). Each held cell C gets its holder h at the first put that meets
// it (a primary, the one with the fewest cell bytes so far) and keeps it, so
// every put of C, from any rank, routes B ∩ C to the same h; every other
// holder of C gets the whole cell from h as a fill at commit. Finish checks
// the cover at least once (every element of every param put lies in some
// box) and commits as above. Add() and Plan() are refused on it.
//
// Thread-safety: one thread drives a ParamPush (a stream's reader).
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PUSH_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PUSH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/params/stage_sender.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// PushParamsChunk.
struct PushChunk {
  std::string model;
  std::string param;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  std::optional<DType> dtype;  // a box's first chunk: the param's
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
  // succeeds (see file comment); `deadline` (Finish's) bounds its wait for
  // the version bound, besides the one the push began with.
  std::function<absl::Status(const std::function<absl::Status()>& commit, absl::Time deadline)>
      commit_and_switch;
  std::function<void()> release;  // the push is over (either way)
  // A direct push routes each piece to every holder of its cell (the client
  // tees its bytes while it streams) instead of one holder and fills from it
  // at commit (see the top). Relayed and session pushes always fill.
  bool tee_direct = true;
};

// The box `offset` + `shape` of `param` (empty offset: the origin; empty
// shape: the rest of the param from offset).
// \error kInvalidArgument naming rank or bounds and the param's shape.
absl::StatusOr<Box> ParamBox(const ParamDef& param, const std::vector<int64_t>& offset,
                             const std::vector<int64_t>& shape);

// A direct push's routes (Plan).
struct PushPlan {
  struct Route {
    int box = 0;  // index into Plan's boxes
    int64_t worker = -1;
    std::string address;
    Box piece;  // global coordinates, inside the box and one held cell
  };
  int64_t generation = 0;
  int64_t version = 0;
  std::vector<Route> routes;
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
  // Direct push (see the top); the boxes' byte_offset and data are ignored.
  absl::StatusOr<PushPlan> Plan(const std::vector<PushChunk>& boxes);
  // Session push (see the top): `box` of `param` (a param of model_file(),
  // inside it), routed; a failed Put leaves the push as it was.
  absl::StatusOr<std::vector<PushPlan::Route>> Put(const ParamDef& param, const Box& box);
  // `deadline`: the committing call's (a session's commit is another call
  // than its begin); infinite: the one BeginPush was given.
  absl::StatusOr<PushResult> Finish(absl::Time deadline = absl::InfiniteFuture());

  const PushTarget& target() const { return target_; }
  const ModelFile& model_file() const { return *target_.model; }
  int64_t generation() const { return target_.placement->generation; }
  int64_t version() const { return target_.placement->version + 1; }

 private:
  struct Target {
    Box piece;  // B ∩ C
    int64_t holder = -1;
  };
  struct OpenBox {
    const ParamDef* param = nullptr;
    Box box;
    int64_t total_bytes = 0;
    int64_t received = 0;
    int64_t row_bytes = 0;    // of one row along dim 0 (the whole box at rank 0)
    int64_t rows_routed = 0;  // rows already staged
    std::vector<Target> targets;
  };
  absl::Status StartBox(PushChunk& chunk);
  absl::Status Take(std::string data);
  // Routes rows [rows_routed, rows_routed + rows) of open_ held in `data`;
  // `owned` (data's string, or null) may be moved into a chunk.
  absl::Status RouteRows(int64_t rows, const char* data, std::string* owned);
  absl::Status Stage(int64_t worker, StageChunkIr chunk);
  absl::Status CloseSenders();
  absl::Status CheckCover() const;
  void AbortAll();
  // The holders `piece` of `cell` is staged on: every holder for a teed
  // direct push, else one, the primary with the fewest bytes so far, with
  // fills of the piece recorded for the others; `session`: the cell's first
  // holder, chosen at its first put with fills of the whole cell.
  std::vector<int64_t> PieceHolders(const ParamDef& param, const CellHolders& cell,
                                    const Box& piece, bool session);

  PushTarget target_;
  const absl::Time start_;
  absl::Time stream_end_;
  absl::Status failed_;
  bool done_ = false;
  bool direct_ = false;  // planned: the client stages the bytes
  bool session_ = false;  // Put: boxes may overlap, each cell has one holder
  bool open_valid_ = false;
  OpenBox open_;
  int64_t bytes_received_ = 0;
  int64_t bytes_to_workers_ = 0;
  std::vector<std::string> params_;                 // named, in first-seen order
  std::map<std::string, std::vector<Box>> boxes_;   // pushed boxes per param
  std::map<std::string, std::vector<CellHolders>> cells_;
  std::map<int64_t, int64_t> assigned_;             // staged bytes per worker
  std::string slab_;  // bytes of open_ past its routed rows (reused)
  std::map<int64_t, std::unique_ptr<StageSender>> senders_;
  std::map<int64_t, std::vector<ParamPieceIr>> fills_;
  std::map<std::pair<std::string, Box>, int64_t> cell_holder_;  // (param, cell): session's
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PUSH_H_
