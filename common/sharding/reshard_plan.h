// The resharding planner: which boxes move between which devices and workers
// to turn an array laid out by one NamedSharding into the same array laid out
// by another (jax.reshard / jax.device_put between shardings, or a cross-mesh
// move when a model is scaled from one set of workers to another).
//
// ## Inputs
// A global shape and dtype, a source and a destination ReshardEndpoint: a
// NamedSharding (mesh + spec) plus the worker of every device of that mesh
// (device_workers[d]; several devices may share a worker). The two meshes may
// differ in axes, shape and size. The source spec may carry unreduced axes U_s:
// devices that differ only along U_s hold partial sums whose total is the
// value. The destination may keep a subset U_d of them (same names and sizes).
//
// ## Notation
// For an element e and a partial index g (the device's mixed-radix coordinate
// over U_s, G = prod of U_s sizes, G = 1 for a reduced source):
//   Hold_W(e)   = partial indices g that some source device on worker W holds
//                 at e (for a reduced source: {0} or {}).
//   Need(D, e)  = for a destination device D whose box contains e, the partial
//                 indices whose sum D must hold: all g whose U_d coordinates
//                 equal D's (all G of them when U_d is empty).
// A destination worker W needs, per element e and per distinct Need set N of
// its devices containing e, the sum over N. It lacks M = N \ Hold_W(e).
//
// ## Cost model and lower bound
// Bytes are counted at worker granularity: a transfer between two devices of
// one worker is free. Every network message goes directly from a source
// worker S to W and carries, per element, the sum of any subset of Hold_S(e)
// (a sender holding several partials pre-adds them). So W must receive, per
// element and Need set, at least cover_W(e) messages, where
//   cover_W(e) = the least number of workers S != W whose Hold_S(e) together
//                contain M   (0 when M is empty, 1 for a reduced source that W
//                             lacks).
//   lower_bound_bytes = dtype_size * sum over W, e, N of cover_W(e).
// For a reduced source this is exactly "the elements W needs and does not
// hold, once each". It is a bound for direct (single-hop) schedules only: a
// two-phase all-reduce (below) moves fewer bytes when many workers need the
// same sum.
//
// ## All-reduce: direct or two-phase (AllReduceForm)
// An all-reduce here: same mesh and workers, the destination spec is the
// source's entries with no unreduced axes, so every device keeps its box B
// and needs the sum of all G partials over it. Per shard tuple, let k be the
// workers holding B. The direct form (above) makes every worker send its
// (pre-added) partials to each of the others: k(k-1) messages per element, one
// round; each worker sends (k-1)|B|. The two-phase form cuts B into k chunks
// along its longest dim (fewer when that dim is shorter than k); chunk c's
// owner (the c-th worker) adds the other workers' partials of c into its
// device (reduce-scatter, round 1), then sends the finished chunk to the other
// k-1 workers (kForward, all-gather, round 2): 2(k-1) messages per element,
// each worker sending 2(k-1)/k |B|. It applies when the workers' partial sets
// are disjoint (no partial held by two workers: the usual layout); then
// 2(k-1) per element is a lower bound for *any* schedule whose messages carry
// one (combined) value per element (one-way gossip: before the first worker
// knows the sum, k-1 messages must have joined the k workers' inputs; after
// it, each of the other k-1 must still receive one), so the two-phase plan's
//   lower_bound_bytes = dtype_size * sum over shard tuples of 2(k-1)|B|.
// The choice (AllReduceForm::kAuto) is by CollectiveCostModel: the form with
// the smaller max-per-worker bytes / link bandwidth + rounds * hop latency.
//
// ## Guarantees of ComputeReshardPlan
//   * bytes_moved == lower_bound_bytes (of the plan's form), always.
//   * W never receives over the network an element it holds; each lacking
//     element arrives once per Need set (then is forwarded locally to the other
//     devices of W that need it).
//   * Executing the transfers in order on per-device buffers (source buffers
//     read-only, destination buffers start uninitialised) leaves every
//     destination device holding exactly its box (see TransferKind).
//   * Among source workers holding a piece, the least-loaded (bytes sent so
//     far) is chosen, so replicas share the load.
//
// ## Algorithm (cf. XLA spmd Reshard: a dispatcher, one strategy per pattern)
//   PlanNoOp         same mesh, spec and workers: identity copies.
//   PlanSliceLocal   same mesh and workers, each device's new box lies in its
//                    old box: one local slice per device.
//   PlanTwoPhaseAllReduce  an all-reduce with disjoint holders, when the
//                    cost model (or ReshardOptions) prefers it to the generic
//                    plan: reduce-scatter then all-gather (above).
//   PlanByBoxIntersection (generic fallback, handles everything): per dim,
//                    merge the source and destination shard intervals (the
//                    source shards overlapping one destination shard are an
//                    interval of shard indices); every overlapping pair of
//                    shard tuples gives one box whose holders and needers are
//                    the devices of those tuples. Per (box, destination worker,
//                    Need set): local part first, then a minimum cover of the
//                    missing partials by remote workers, then local forwards.
//   Cost: O(devices * axes + P * (h + n)) where P <= prod_i (Ks_i + Kd_i - 1)
//   is the number of overlapping shard-tuple pairs, h the holders of a source
//   tuple and n the needers of a destination tuple; never devices^2 * rank
//   unless the output itself has that many transfers (an all-gather to 1024
//   devices has about a million). Transfers that differ only in their
//   destination are stored as one TransferGroup plus a 4-byte device id each.
//   The pattern is classified after planning (see ReshardPlan::pattern).
//
// Thread-safety: pure functions over values.
#ifndef MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_H_
#define MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/sharding/box.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// One side of a reshard: the layout and where each mesh device lives.
struct ReshardEndpoint {
  NamedSharding sharding;
  // Worker id of every device of sharding.mesh(), indexed by device id.
  std::vector<int64_t> device_workers;
};

// Identity workers: device d lives on worker d.
std::vector<int64_t> OneWorkerPerDevice(const Mesh& mesh);

enum class TransferKind {
  // Network. dst[box] = sum of src buffers (src_device + src_addends).
  kCopy,
  // Network. dst[box] += sum of src buffers (src_device + src_addends).
  kReduce,
  // Same worker, 0 bytes. dst[box] = sum of src buffers (src_device +
  // src_addends); src_device is a *source*-mesh device.
  kLocalCopy,
  // Same worker, 0 bytes, after the receive. dst[box] = the buffer of
  // *destination*-mesh device src_device over box (already complete).
  kLocalForward,
  // Network, after the sender's receives. dst[box] = the buffer of
  // *destination*-mesh device src_device (on src_worker) over box, already
  // complete: the all-gather phase of a two-phase all-reduce.
  kForward,
};

// "copy", "reduce", "local_copy", "local_forward", "forward".
absl::string_view TransferKindName(TransferKind kind);
bool IsNetworkTransfer(TransferKind kind);

struct Transfer {
  TransferKind kind = TransferKind::kCopy;
  int64_t src_device = 0;  // source-mesh device (destination-mesh for kLocalForward)
  int64_t src_worker = 0;
  int64_t dst_device = 0;  // destination-mesh device
  int64_t dst_worker = 0;
  Box box;  // global coordinates, never empty
  // Further source-mesh devices on src_worker whose partial sums over box are
  // added to src_device's before sending (unreduced sources only).
  std::vector<int64_t> src_addends;

  // box elements * dtype size for network kinds, else 0.
  int64_t Bytes(DType dtype) const;
  // "copy w0/d0 -> w1/d3 [0:4, 0:8]" (+ " +d2,d5" for addends).
  std::string ToString() const;

  friend bool operator==(const Transfer& a, const Transfer& b) {
    return a.kind == b.kind && a.src_device == b.src_device &&
           a.src_worker == b.src_worker && a.dst_device == b.dst_device &&
           a.dst_worker == b.dst_worker && a.box == b.box &&
           a.src_addends == b.src_addends;
  }
  friend std::ostream& operator<<(std::ostream& os, const Transfer& t) {
    return os << t.ToString();
  }
};

// Consecutive transfers of a plan that differ only in their destination
// device: the transfers
//   {kind, src_device, src_worker, d, dst_workers[d], box, src_addends}
// for d in ReshardPlan::group_dst_devices[dst_begin, dst_end), in that order.
// A piece fanned out to many devices (a full all-gather sends every shard to
// every other device) is one group, so the plan's memory grows with its
// distinct pieces plus one 4-byte id per destination, not with a Transfer per
// edge (1024 devices: 4 MiB instead of ~140 MiB).
struct TransferGroup {
  TransferKind kind = TransferKind::kCopy;
  int64_t src_device = 0;  // as Transfer::src_device
  int64_t src_worker = 0;
  Box box;  // global coordinates, never empty
  std::vector<int64_t> src_addends;
  int64_t dst_begin = 0;  // range in ReshardPlan::group_dst_devices
  int64_t dst_end = 0;

  int64_t size() const { return dst_end - dst_begin; }
};

// How an all-reduce is carried out (see "All-reduce" in the file comment).
enum class AllReduceForm {
  kAuto,      // the cheaper by CollectiveCostModel (ties: direct)
  kDirect,    // every partial straight to every worker needing it: 1 round
  kTwoPhase,  // reduce-scatter then all-gather where it applies: 2 rounds
};

// The time model the planner chooses a collective's form by:
//   seconds = max over workers of max(bytes sent, bytes received)
//               / link_bytes_per_s + rounds * hop_s.
// The one place for these constants; defaults as server/suggest/cost_figures.h
// (loopback gRPC on 2-core SkylakeX workers: ~1.7 GB/s per sending worker,
// ~0.2 ms a round of peer messages). A calibration (issue 35 item 2) fills
// them through ReshardOptions.
struct CollectiveCostModel {
  double link_bytes_per_s = 1.7e9;
  double hop_s = 0.2e-3;

  double Seconds(int64_t max_worker_bytes, int64_t num_rounds) const {
    return static_cast<double>(max_worker_bytes) / link_bytes_per_s +
           static_cast<double>(num_rounds) * hop_s;
  }
};

struct ReshardOptions {
  AllReduceForm all_reduce = AllReduceForm::kAuto;
  CollectiveCostModel cost;
};

struct ReshardPlan {
  // The transfers in execution order, run-length grouped (see TransferGroup):
  // every write into a destination box that is later reduced into or
  // forwarded comes first. Transfers() expands them.
  std::vector<TransferGroup> groups;
  std::vector<int32_t> group_dst_devices;  // meshes have < 2^31 devices
  // Worker of every destination-mesh device (the destination endpoint's
  // device_workers).
  std::vector<int64_t> dst_workers;
  int64_t bytes_moved = 0;
  int64_t lower_bound_bytes = 0;
  // Max over workers of max(bytes sent, bytes received) over the network.
  int64_t max_worker_bytes = 0;
  // Rounds of peer messages: 0 (local only), 1 (direct), 2 (two-phase).
  int64_t num_rounds = 0;
  // The collective this is: "no-op", "local slice" (only local transfers),
  // "all-gather", "all-to-all", "reduce-scatter", "all-reduce" (direct),
  // kTwoPhaseAllReducePattern, "general point-to-point" (incl. every
  // cross-mesh or cross-worker-map plan).
  std::string pattern;
  // The strategy function that produced it ("PlanNoOp", "PlanSliceLocal",
  // "PlanTwoPhaseAllReduce", "PlanByBoxIntersection").
  std::string strategy;

  // Appends one transfer to dst_device (on dst_workers[dst_device]); it joins
  // the last group when only the destination differs.
  void AddTransfer(TransferKind kind, int64_t src_device, int64_t src_worker,
                   int64_t dst_device, const Box& box,
                   absl::Span<const int64_t> src_addends = {});

  int64_t NumTransfers() const {
    return static_cast<int64_t>(group_dst_devices.size());
  }
  int64_t NumNetworkTransfers() const;
  // The i-th transfer of group g.
  Transfer GroupTransfer(const TransferGroup& g, int64_t i) const;
  // Every transfer, expanded, in execution order (NumTransfers() of them).
  std::vector<Transfer> Transfers() const;
};

inline constexpr absl::string_view kTwoPhaseAllReducePattern =
    "all-reduce (reduce-scatter + all-gather)";

// Plans the reshard (see the file comment).
// \error kInvalidArgument naming the value: a spec whose length is not
//   shape.size() (rank mismatch), an axis not in its mesh, a negative dim,
//   device_workers whose length is not the mesh's device count, a destination
//   unreduced axis that is not an unreduced source axis of the same size.
// \error kUnimplemented when the source has more than 64 partial sums.
absl::StatusOr<ReshardPlan> ComputeReshardPlan(absl::Span<const int64_t> shape,
                                               DType dtype,
                                               const ReshardEndpoint& src,
                                               const ReshardEndpoint& dst,
                                               const ReshardOptions& options = {});

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_RESHARD_PLAN_H_
