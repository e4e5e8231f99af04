// Box pulls (issue 34): a box of a param or of an imported checkpoint tensor
// (tensor_names.h) at a version, planned for the client to read straight
// from the holders (PlanPull / EndPull), or streamed through the coordinator
// with bounded memory (PullBox: PullParams with offset / shape / version).
//
// Planning. The name and box resolve to param pieces (ResolveTensorBox);
// each piece is cut by the param's cells on the placement of the version
// (PlacementCells), and each cut goes to ONE live holder: primaries and
// replicas alike, the one with the fewest bytes of this plan so far (the
// client reads them in parallel). A pull plan's pieces tile the box:
// dst_offset is the cut's offset inside the box, box its global coordinates
// in the param (inside one cell, so one ReadParam reads it).
//
// Versions. 0 is the current one. A lease (PlanPull) keeps the placement it
// read pinned (the shared_ptr a request also holds, so PlacementManager does
// not unload it and counts it as held) until EndPull or lease_s passes; a
// later plan or PullBox of that version finds it through the lease. Any other
// version is found (a) among the placements this object saw while some pin
// on them still lives, else (b) when PlacementManager lists it as held (some
// sequence holds it): it is then resident on the current layout (a push
// keeps the layout; a scale step carries held versions), read unpinned. Else
// kNotFound naming the version and the held ones.
//
// PullBox streams the box in row-major order as slabs of at most
// chunk_bytes (a run of whole rows of the innermost dims that fit): each slab
// is assembled from ReadParam of its cuts (one live holder each, falling back
// to the others) and sent as one chunk; memory is one slab plus one read.
//
// Thread-safety: thread-safe; mu_ is a leaf lock, never held during an RPC.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PULL_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PULL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"
#include "common/model/model_file.h"
#include "common/sharding/box.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

// What a pull reads through (the Coordinator wires PlacementManager,
// WorkerRegistry and WorkerConnections; tests wire fakes).
struct PullSource {
  // A servable model (kNotFound / kFailedPrecondition otherwise).
  std::function<absl::StatusOr<std::shared_ptr<const ModelFile>>(const std::string&)> model;
  // The current placement (null: not placed).
  std::function<std::shared_ptr<const Placement>(const std::string&)> current;
  // Versions some sequence or request holds -> holders (ModelStatus).
  std::function<std::map<int64_t, int64_t>(const std::string&)> held_versions;
  // A reference that keeps a retired version from being unloaded while held
  // (null: none to hold; may be unset).
  std::function<std::shared_ptr<const void>(const std::string&, int64_t)> pin;
  std::function<bool(int64_t worker_id)> alive;
  std::function<absl::StatusOr<std::shared_ptr<WorkerClient>>(int64_t worker_id,
                                                              const std::string& address)>
      client;
};

struct PullOptions {
  absl::Duration lease = absl::Seconds(60);
  int max_leases = 4096;  // active leases over all models
  absl::Duration read_timeout = absl::Seconds(60);
  int64_t chunk_bytes = 1 << 20;
  std::function<absl::Time()> now = [] { return absl::Now(); };
  bool expiry_thread = true;  // false: leases expire only in ExpireLeases (tests)
};

struct BoxPullRequest {
  std::string model;
  std::string name;              // param or checkpoint tensor name
  std::vector<int64_t> offset;   // empty: origin
  std::vector<int64_t> shape;    // empty: the whole tensor from offset
  int64_t version = 0;           // 0: current
};

struct PullPlanPiece {
  std::string param;
  std::vector<int64_t> dst_offset;  // inside the pulled box
  Box box;                          // global coordinates in the param
  int64_t worker_id = -1;
  std::string address;
};

struct PullPlan {
  std::string lease_id;
  double lease_s = 0;
  int64_t generation = 0;
  int64_t version = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // of the pulled box
  std::vector<PullPlanPiece> pieces;
};

// One chunk of PullBox: the first sets shape, dtype, total_bytes, version.
struct BoxPullChunk {
  std::string name;  // as asked
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int64_t total_bytes = 0;
  int64_t byte_offset = 0;
  std::string data;
  int64_t version = 0;
  bool first = false;
};

class ParamPulls {
 public:
  ParamPulls(PullSource source, PullOptions options);
  ~ParamPulls();  // stops the expiry thread and drops every lease
  ParamPulls(const ParamPulls&) = delete;
  ParamPulls& operator=(const ParamPulls&) = delete;

  // Plans the pull and opens a lease on its version.
  // \error as ResolveTensorBox; kNotFound for an ignored checkpoint tensor
  //   (the server holds no bytes of it) and for a version not held (naming
  //   it and the held ones); kFailedPrecondition for elements of the box no
  //   param reads or pieces of different dtypes; kUnavailable when the model
  //   is not placed or a cell has no live holder; kResourceExhausted at
  //   options.max_leases leases; kInvalidArgument for a version < 0.
  absl::StatusOr<PullPlan> PlanPull(const BoxPullRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the lease. \error kNotFound naming it when it is not active (ended,
  //   expired, or of another model).
  absl::Status EndPull(const std::string& model, const std::string& lease_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Streams the box (see file comment). A sink error stops the pull.
  // \error as PlanPull (no lease is opened), or a read's.
  absl::Status PullBox(const BoxPullRequest& request,
                       const std::function<absl::Status(BoxPullChunk)>& sink)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops leases older than options.lease (the expiry thread calls it).
  void ExpireLeases() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t active_leases() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Lease {
    std::string model;
    std::shared_ptr<const Placement> placement;
    absl::Time expires;
  };
  // A resolved box on the placement of its version: one cut per piece and cell.
  struct Cut {
    std::string param;
    Box box;                          // in the param
    std::vector<int64_t> dst_offset;  // in the requested box
    std::vector<int64_t> holders;     // live first: primaries, then replicas
  };
  struct Planned {
    std::shared_ptr<const Placement> placement;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    std::vector<Cut> cuts;
  };

  absl::StatusOr<Planned> Plan(const BoxPullRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<const Placement>> PlacementAt(const std::string& model,
                                                              int64_t version)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The bytes of `inter` (a part of cut's region, box coordinates), row-major,
  // from the first live holder that answers.
  absl::StatusOr<std::string> ReadCut(const Planned& planned, const Cut& cut, const Box& inter);
  void ExpiryLoop();

  const PullSource source_;
  const PullOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // Placements seen, by (model, version), while something pins them.
  std::map<std::pair<std::string, int64_t>, std::weak_ptr<const Placement>> seen_
      ABSL_GUARDED_BY(mu_);
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread expiry_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PARAM_PULL_H_
