// The push staging of one worker: the new values of params being pushed
// (StageParams, CommitParams' fills) before CommitParams makes them a resident
// version (ModelStore, server/worker/model_store.h).
//
// A staging is keyed by (model, generation, version). Its geometry (held cells
// and dtypes) is the newest resident version of (model, generation) when it
// was created; only the cells that some chunk touched are allocated (so it
// holds only the cells of the params being pushed). Per cell it tracks the
// staged boxes (complete, pairwise disjoint) and the boxes still being
// assembled.
//
// A chunk is a byte range [offset, offset + len) of `box` (row-major, the
// param's dtype): the chunks of one box come in order (offset 0 first, each
// starting where the last ended, possibly over several StageParams streams).
// A box that is a whole cell, or that comes in one chunk, is written straight
// into the cell's buffer; other boxes are assembled and then copied in once
// complete.
//
// Commit: every held cell of every committed param must be fully staged; the
// result is the base version with those params' cells replaced by the staged
// buffers (moved, not copied) and everything else shared.
//
// Thread-safety: thread-safe (one mutex; chunk copies run under it).
#ifndef MESHSERVE_SERVER_WORKER_PARAMS_PARAM_STORE_H_
#define MESHSERVE_SERVER_WORKER_PARAMS_PARAM_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"
#include "server/worker/params/loaded_model.h"
#include "server/worker/peer_transport.h"

namespace meshserve {

class ParamStore {
 public:
  using Key = std::tuple<std::string, int64_t, int64_t>;  // model, generation, version

  // Stages one chunk (see the top); `geometry` is used when this chunk creates
  // the staging. Returns the chunk's data bytes.
  // \error kInvalidArgument naming the value: unknown param, bad box, box not
  //   inside one held cell, total_bytes != box bytes, offset/length outside
  //   the box or out of order. An overlap is not an error here (see the top).
  absl::StatusOr<int64_t> Stage(const StageChunkIr& chunk,
                                std::shared_ptr<const LoadedModel> geometry);

  // Stages whole boxes of params at once (CommitParams' fills): all or none.
  // Fills may overlap each other and staged boxes (same rule as puts).
  // \error as Stage, and kInvalidArgument for a dtype other than the param's.
  absl::Status StageBoxes(const Key& key, std::shared_ptr<const LoadedModel> geometry,
                          std::vector<std::pair<std::string, BoxTensor>> boxes);

  // `base` with every held cell of `params` replaced by the staged buffers, as
  // `version`; drops the staging. Nothing changes on an error.
  // \error kInvalidArgument: unknown param, a held cell of `params` not fully
  //   covered (naming param, cell, the elements missing and an uncovered
  //   box), a staged param not in `params`, overlapping puts that differ
  //   (naming param, both boxes and the first differing element).
  absl::StatusOr<std::shared_ptr<const LoadedModel>> Commit(
      const Key& key, const LoadedModel& base, int64_t version,
      const std::vector<std::string>& params);

  // The bytes of `box` of `param` in the staging of `key`: the cell's own
  // buffer when `box` is the cell (no copy; the staged bytes no longer change),
  // else a copy.
  // \error kNotFound when `key` has no staging or the param is unknown;
  //   kOutOfRange when the box is not inside one held cell; kFailedPrecondition
  //   when it is not fully staged or the staging holds differing puts;
  //   kInvalidArgument for a bad box.
  absl::StatusOr<ParamBytes> Read(const Key& key, absl::string_view param,
                                  const BoxIr& box) const;

  bool Contains(const Key& key) const;
  // Drops the stagings of `model` matching generation (-1: all) and version
  // (0: all). Returns how many.
  int Drop(absl::string_view model, int64_t generation, int64_t version);

 private:
  struct Cell {
    std::shared_ptr<BoxTensor> values;  // allocated at first touch; Read shares it
    std::vector<Box> staged;            // complete; may overlap (identical bytes)
    bool direct_pending = false;        // the whole cell is being written into values
    std::vector<std::pair<Box, std::string>> waiting;  // complete while direct_pending
  };
  struct Assembly {  // a put of a box whose chunks are arriving
    Box cell;
    int64_t received = 0;
    bool direct = false;        // written straight into the cell's buffer
    bool compare_only = false;  // over staged elements only: compared as it arrives
    std::string bytes;          // unused when direct or compare_only
  };
  using Puts = std::multimap<std::pair<std::string, Box>, Assembly>;
  struct Staging {
    std::shared_ptr<const LoadedModel> geometry;
    absl::flat_hash_map<std::string, std::map<Box, Cell>> cells;
    Puts assembling;
    absl::Status conflict;  // the first difference between overlapping puts
  };
  // The held param and the cell containing `box` of `staging`'s geometry.
  static absl::StatusOr<std::pair<const HeldParam*, Box>> Locate(const Staging& staging,
                                                                 absl::string_view param,
                                                                 const Box& box);
  static absl::Status Allocate(const HeldParam& held, const Box& cell_box, Cell* cell);
  // The put of `box` a chunk at `offset` continues: one whose received bytes
  // equal the offset; end() for a new put (offset 0).
  static absl::StatusOr<Puts::iterator> FindPut(Puts* puts, const std::string& param,
                                                const Box& box, int64_t offset,
                                                absl::string_view what);
  // A complete put `box` of `param` (`bytes` row-major): waits while the cell
  // is being written directly, else Place.
  static void Complete(Staging* staging, absl::string_view param, DType dtype, Cell* cell,
                       const Box& box, absl::string_view bytes);
  // Compares `bytes` over the staged part of `box`, writes the rest, records
  // a difference in staging->conflict, and marks `box` staged.
  static void Place(Staging* staging, absl::string_view param, DType dtype, Cell* cell,
                    const Box& box, const char* bytes);
  // Compares `bytes`, bytes [offset, ...) of a compare-only put of `box`,
  // with the staged bytes; records a difference in staging->conflict.
  static void CompareRange(Staging* staging, absl::string_view param, DType dtype,
                           const Cell& cell, const Box& box, absl::string_view bytes,
                           int64_t offset);
  // The direct put of `cell` completed: stage it and place the waiting boxes.
  static void FinishDirect(Staging* staging, absl::string_view param, DType dtype, Cell* cell);

  mutable absl::Mutex mu_;
  std::map<Key, Staging> staging_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PARAMS_PARAM_STORE_H_
