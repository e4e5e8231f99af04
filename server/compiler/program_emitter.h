// The compiler's program builder: per-worker step lists in one global order,
// buffers, tags, and layout changes through the resharding planner.
//
// A Placed value is one logical array laid out on the mesh: every device d
// holds ShardBoxForDevice(shape, sharding, d) of it in buffer `buffer` (an
// unreduced sharding means float32 partial sums).
//
// Thread-safety: not thread-safe (one per compilation).
#ifndef MESHSERVE_SERVER_COMPILER_PROGRAM_EMITTER_H_
#define MESHSERVE_SERVER_COMPILER_PROGRAM_EMITTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/program/ir_conv.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/reshard_plan.h"
#include "server/compiler/compiler.h"

namespace meshserve {

struct Placed {
  std::string buffer;
  std::vector<int64_t> shape;
  NamedSharding sharding;
  DType dtype = DType::kFloat32;  // float32 whenever unreduced

  bool partial() const { return !sharding.spec().unreduced().empty(); }
  Box BoxFor(int64_t device) const;
};

// The sharding with `entries` (padded to `rank`) and `unreduced` (mesh order).
NamedSharding ShardingOf(const Mesh& mesh, int rank, std::vector<PartitionSpec::Entry> entries,
                         std::vector<std::string> unreduced = {});
// The same sharding without unreduced axes.
NamedSharding Reduced(const NamedSharding& s);

class ProgramEmitter {
 public:
  ProgramEmitter(Mesh mesh, std::vector<int64_t> device_workers, std::string program_id);

  const Mesh& mesh() const { return mesh_; }
  int64_t num_devices() const { return mesh_.num_devices(); }
  int64_t WorkerOf(int64_t device) const { return device_workers_[device]; }

  // A fresh temporary buffer name "t<n>/<hint>", recorded for FreeTemporaries.
  std::string NewBuffer(absl::string_view hint);
  std::string NewTag();

  struct Cost {
    int64_t network_bytes = 0;  // the planner's bytes_moved (worker granularity)
    int64_t device_bytes = 0;   // bytes crossing devices, same worker or not
  };
  // The cost of laying src out as `dst` (no steps emitted).
  // \error the planner's errors (e.g. dst unreduced axes not in src's).
  absl::StatusOr<Cost> PlanCost(const Placed& src, const NamedSharding& dst) const;

  // Lays src out as `dst` (same value): returns src itself (named by `dst`)
  // when the layouts are equal or put the same box on every device (axes of
  // size 1; with dst_dtype == src's), else emits the plan's steps into a new buffer of `dst_dtype`
  // (float32 when dst is unreduced). Records a CollectiveInfo into `info`.
  absl::StatusOr<Placed> Reshard(const Placed& src, const NamedSharding& dst, DType dst_dtype,
                                 absl::string_view value, absl::string_view purpose,
                                 LayerPlanInfo* info);

  // For every device with a non-empty box of `out`: `make(device)` returns a
  // compute step (op, inputs and op fields); output, out_box, out_dtype,
  // partial and device are filled here.
  void ComputeEverywhere(const Placed& out, const std::function<ComputeStepIr(int64_t)>& make);
  void AddOutput(int64_t device, const std::string& buffer, const Box& box,
                 const std::string& output);
  // Frees `buffer` on every device.
  void Free(const std::string& buffer);
  // Frees the temporaries created since the last call, except those in `keep`.
  void FreeTemporaries(const std::vector<std::string>& keep);

  std::map<int64_t, ProgramIr> TakePrograms() { return std::move(programs_); }

  // The planner's options for every later Reshard and PlanCost (default: the
  // all-reduce form chosen by the default cost model).
  void set_reshard_options(const ReshardOptions& options) { reshard_options_ = options; }

 private:
  void Append(int64_t worker, StepIr step) { programs_[worker].steps.push_back(std::move(step)); }
  void EmitTransfer(const Transfer& t, const Placed& src, const Placed& dst);

  Mesh mesh_;
  std::vector<int64_t> device_workers_;
  std::string program_id_;
  int64_t next_buffer_ = 0;
  int64_t next_tag_ = 0;
  std::vector<std::string> temporaries_;
  std::map<int64_t, ProgramIr> programs_;
  ReshardOptions reshard_options_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_PROGRAM_EMITTER_H_
