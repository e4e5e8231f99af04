// Parameters as state: where each parameter box lives and how a new placement
// gets its boxes from the old holders (a scale step moves shards worker to
// worker instead of re-reading the checkpoint or re-creating from the seed).
//
// Notation. A param p has shape S and sharding spec P. On a placement with
// mesh M, worker w holds the *cells* of p: the distinct boxes
// ShardBoxForDevice(S, NamedSharding(M, P), d) over its devices and replica
// devices (placement.h). The cells of one sharding are pairwise equal or
// disjoint (a grid), so a worker's cells are disjoint.
//
// PlanParamMoves(model, old, next, pushed) gives, for every worker w of
// `next` and every cell C of w, pieces (ParamPieceIr) that tile C exactly:
//   1. local first: C ∩ L for each old cell L that w itself held;
//   2. then, for the rest, C ∩ B for each old cell B of a live holder, read
//      from the holder of B that has served the fewest bytes so far (ties:
//      lowest id);
//   3. a rest no live holder covers: if the model was never pushed, the whole
//      cell C gets no pieces (the worker reads it from the checkpoint or the
//      seed, as at first load); if it was pushed the plan fails with
//      kDataLoss "param X box B lost with worker W; version V cannot be
//      rebuilt" (serving re-initialised weights would be wrong).
// Stats (bytes = elements * DTypeSize): bytes_local (pieces from w itself),
// bytes_moved (pieces from other workers), bytes_initialized (cells with no
// pieces), lower_bound_bytes = Σ over covered cells of |C| − |C ∩ ∪ L_w|
// (what the new holders lacked). Because each piece of step 2 covers elements
// w lacked exactly once, bytes_moved == lower_bound_bytes, and
// bytes_local + bytes_moved + bytes_initialized == Σ_w Σ_C |C|.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_MOVES_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_MOVES_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_file.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "common/sharding/mesh.h"
#include "server/coordinator/placement.h"

namespace meshserve {

// What one worker holds of a model: from the old placement, or (after a
// coordinator restart) from the worker's Status report.
struct ParamHolding {
  int64_t worker_id = -1;
  int64_t generation = 0;
  int64_t version = 1;
  Mesh mesh;
  std::vector<int64_t> devices;
  std::vector<int64_t> replica_devices;
  bool live = true;  // false: a dead worker's (only named when a box is lost)
};

struct ParamMoveStats {
  int64_t bytes_moved = 0;
  int64_t lower_bound_bytes = 0;
  int64_t bytes_local = 0;
  int64_t bytes_initialized = 0;
};

struct ParamMovePlan {
  // Every worker of the new placement has an entry (maybe empty).
  std::map<int64_t, std::vector<ParamPieceIr>> sources;
  ParamMoveStats stats;
};

// The holdings of `placement`'s workers (live = true for all).
std::vector<ParamHolding> HoldingsOf(const Placement& placement);

// \error kInvalidArgument when a param's sharding does not fit a mesh;
//   kDataLoss for a lost box of a pushed model (file comment).
absl::StatusOr<ParamMovePlan> PlanParamMoves(const ModelFile& model,
                                             const std::vector<ParamHolding>& old,
                                             const Placement& next, bool pushed);

// The distinct cells of `param` on mesh over `devices` (sorted).
absl::StatusOr<std::vector<Box>> HeldCells(const ParamDef& param, const Mesh& mesh,
                                           const std::vector<int64_t>& devices);

// One distinct cell of a placement and the workers that hold it: `primaries`
// hold it for programs, `replicas` only as copies (each ascending).
struct CellHolders {
  Box box;
  std::vector<int64_t> primaries;
  std::vector<int64_t> replicas;
};
// Every distinct cell of `param` on `placement`, sorted by box.
absl::StatusOr<std::vector<CellHolders>> PlacementCells(const ParamDef& param,
                                                        const Placement& placement);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_MOVES_H_
