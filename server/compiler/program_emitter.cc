// ProgramEmitter (program_emitter.h): turns planner transfers into steps.
#include "server/compiler/program_emitter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/sharding/shard_layout.h"

namespace meshserve {

Box Placed::BoxFor(int64_t device) const {
  return ShardBoxForDevice(shape, sharding, device);
}

NamedSharding ShardingOf(const Mesh& mesh, int rank, std::vector<PartitionSpec::Entry> entries,
                         std::vector<std::string> unreduced) {
  entries.resize(std::max<size_t>(entries.size(), rank));
  return NamedSharding::UncheckedCreate(mesh,
                                        PartitionSpec(std::move(entries), std::move(unreduced)));
}

NamedSharding Reduced(const NamedSharding& s) {
  return NamedSharding::UncheckedCreate(s.mesh(), PartitionSpec(s.spec().entries()));
}

namespace {

// Whether `dst` puts on every device the box src already holds there, with the
// same unreduced axes: e.g. P(None, 'model') and P() when 'model' has size 1.
// Resharding between such layouts moves nothing (no copy of a 64 MiB weight).
bool SameLayout(const Placed& src, const NamedSharding& dst) {
  if (src.sharding == dst) return true;
  if (src.sharding.spec().unreduced() != dst.spec().unreduced()) return false;
  for (int64_t d = 0; d < src.sharding.mesh().num_devices(); ++d) {
    if (!(src.BoxFor(d) == ShardBoxForDevice(src.shape, dst, d))) return false;
  }
  return true;
}

}  // namespace

ProgramEmitter::ProgramEmitter(Mesh mesh, std::vector<int64_t> device_workers,
                               std::string program_id)
    : mesh_(std::move(mesh)),
      device_workers_(std::move(device_workers)),
      program_id_(std::move(program_id)) {
  for (int64_t w : device_workers_) {
    ProgramIr& p = programs_[w];
    p.program_id = program_id_;
    p.worker = w;
  }
}

std::string ProgramEmitter::NewBuffer(absl::string_view hint) {
  std::string name = absl::StrCat("t", next_buffer_++, "/", hint);
  temporaries_.push_back(name);
  return name;
}

std::string ProgramEmitter::NewTag() { return absl::StrCat(program_id_, "/", next_tag_++); }

absl::StatusOr<ProgramEmitter::Cost> ProgramEmitter::PlanCost(const Placed& src,
                                                              const NamedSharding& dst) const {
  Cost cost;
  if (SameLayout(src, dst)) return cost;
  ReshardEndpoint from{src.sharding, device_workers_};
  ReshardEndpoint to{dst, device_workers_};
  MS_ASSIGN_OR_RETURN(ReshardPlan plan,
                      ComputeReshardPlan(src.shape, src.dtype, from, to, reshard_options_));
  cost.network_bytes = plan.bytes_moved;
  // Over the plan's groups, without expanding it into Transfers.
  for (const TransferGroup& g : plan.groups) {
    int64_t crossing = 0;
    if (IsNetworkTransfer(g.kind)) {
      crossing = g.size();
    } else if (g.kind == TransferKind::kLocalCopy) {
      for (int64_t i = g.dst_begin; i < g.dst_end; ++i) {
        crossing += plan.group_dst_devices[i] != g.src_device ? 1 : 0;
      }
    }
    cost.device_bytes += crossing * g.box.NumElements() * DTypeSize(src.dtype);
  }
  return cost;
}

absl::StatusOr<Placed> ProgramEmitter::Reshard(const Placed& src, const NamedSharding& dst,
                                               DType dst_dtype, absl::string_view value,
                                               absl::string_view purpose,
                                               LayerPlanInfo* info) {
  if (src.sharding == dst) return src;
  if (src.dtype == dst_dtype && SameLayout(src, dst)) {
    Placed same = src;  // the same buffer, named by the requested sharding
    same.sharding = dst;
    return same;
  }
  ReshardEndpoint from{src.sharding, device_workers_};
  ReshardEndpoint to{dst, device_workers_};
  MS_ASSIGN_OR_RETURN(ReshardPlan plan,
                      ComputeReshardPlan(src.shape, src.dtype, from, to, reshard_options_),
                      "resharding '", value, "' from ", src.sharding.spec().ToString(), " to ",
                      dst.spec().ToString());
  Placed out;
  out.buffer = NewBuffer(value);
  out.shape = src.shape;
  out.sharding = dst;
  out.dtype = dst.spec().unreduced().empty() ? dst_dtype : DType::kFloat32;
  for (const Transfer& t : plan.Transfers()) EmitTransfer(t, src, out);
  if (info != nullptr) {
    CollectiveInfo c;
    c.value = std::string(value);
    c.purpose = std::string(purpose);
    c.pattern = plan.pattern;
    c.from = src.sharding.spec().ToString();
    c.to = dst.spec().ToString();
    c.bytes = plan.bytes_moved;
    c.rounds = plan.num_rounds;
    info->bytes_moved += c.bytes;
    info->collectives.push_back(std::move(c));
  }
  return out;
}

void ProgramEmitter::EmitTransfer(const Transfer& t, const Placed& src, const Placed& dst) {
  const Box dst_box = dst.BoxFor(t.dst_device);
  const DType dst_dtype = dst.dtype;
  auto local_copy = [&](const std::string& from, int64_t from_device, bool accumulate,
                        const std::string& to, int64_t to_device, const Box& to_box, DType dtype) {
    Append(WorkerOf(from_device), CopyStepIr{from, from_device, to, BoxToIr(t.box), accumulate,
                                             BoxToIr(to_box), dtype, to_device});
  };
  switch (t.kind) {
    case TransferKind::kLocalForward:
      local_copy(dst.buffer, t.src_device, false, dst.buffer, t.dst_device, dst_box, dst_dtype);
      return;
    case TransferKind::kLocalCopy:
      local_copy(src.buffer, t.src_device, false, dst.buffer, t.dst_device, dst_box, dst_dtype);
      for (int64_t a : t.src_addends) {
        local_copy(src.buffer, a, true, dst.buffer, t.dst_device, dst_box, dst_dtype);
      }
      return;
    case TransferKind::kForward: {  // a finished destination box, to another worker
      std::string tag = NewTag();
      Append(t.src_worker,
             SendStepIr{dst.buffer, BoxToIr(t.box), t.dst_worker, t.dst_device, tag, t.src_device});
      Append(t.dst_worker, RecvStepIr{dst.buffer, BoxToIr(t.box), tag, /*accumulate=*/false,
                                      BoxToIr(dst_box), dst_dtype, t.src_worker, t.dst_device});
      return;
    }
    case TransferKind::kCopy:
    case TransferKind::kReduce: {
      std::string payload = src.buffer;
      if (!t.src_addends.empty()) {
        // Pre-add the sender's partial sums into one temporary box.
        payload = NewBuffer("presum");
        local_copy(src.buffer, t.src_device, false, payload, t.src_device, t.box, src.dtype);
        for (int64_t a : t.src_addends) {
          local_copy(src.buffer, a, true, payload, t.src_device, t.box, src.dtype);
        }
      }
      std::string tag = NewTag();
      Append(t.src_worker,
             SendStepIr{payload, BoxToIr(t.box), t.dst_worker, t.dst_device, tag, t.src_device});
      Append(t.dst_worker, RecvStepIr{dst.buffer, BoxToIr(t.box), tag,
                                      /*accumulate=*/t.kind == TransferKind::kReduce,
                                      BoxToIr(dst_box), dst_dtype, t.src_worker, t.dst_device});
      return;
    }
  }
}

void ProgramEmitter::ComputeEverywhere(const Placed& out,
                                       const std::function<ComputeStepIr(int64_t)>& make) {
  for (int64_t d = 0; d < num_devices(); ++d) {
    Box box = out.BoxFor(d);
    if (box.IsEmpty()) continue;
    ComputeStepIr step = make(d);
    step.device = d;
    step.output = out.buffer;
    step.out_box = BoxToIr(box);
    step.out_dtype = out.dtype;
    step.partial = out.partial();
    programs_[WorkerOf(d)].steps.push_back(std::move(step));
  }
}

void ProgramEmitter::AddOutput(int64_t device, const std::string& buffer, const Box& box,
                               const std::string& output) {
  Append(WorkerOf(device), OutputStepIr{buffer, BoxToIr(box), output, device});
}

void ProgramEmitter::Free(const std::string& buffer) {
  for (int64_t d = 0; d < num_devices(); ++d) {
    Append(WorkerOf(d), FreeStepIr{buffer, d});
  }
}

void ProgramEmitter::FreeTemporaries(const std::vector<std::string>& keep) {
  for (const std::string& t : temporaries_) {
    if (std::find(keep.begin(), keep.end(), t) == keep.end()) Free(t);
  }
  temporaries_.clear();
}

}  // namespace meshserve
