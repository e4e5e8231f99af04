// PrepareDecode (program_run.h): what a generation step's run
// needs besides its program: the step's layout over the program's buckets,
// the caches forked and the sequences released before it (in that order),
// and the device's KV caches.
#include <map>
#include <memory>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/decode_kernels.h"
#include "server/worker/program_run.h"

namespace meshserve {
namespace {

// The layout and the caches one run uses. The run's steps are sequential, so
// `held` needs no lock; it keeps each cache alive while the run uses it.
struct OwnedDecode {
  DecodeLayout layout;
  DecodeState state;
  std::map<int64_t, std::shared_ptr<KvCache>> held;
};

// The program's buckets: token slots (its [1, T] input) and sampled rows (its
// select_rows step).
absl::Status ProgramBuckets(const ProgramIr& program, const std::vector<SliceIr>& inputs,
                            int64_t* token_slots, int64_t* rows) {
  *token_slots = 0;
  *rows = 0;
  for (const SliceIr& in : inputs) {
    if (in.box.begin.size() == 2 && in.box.end.size() == 2) {
      *token_slots = in.box.end[1] - in.box.begin[1];
      break;
    }
  }
  for (const StepIr& step : program.steps) {
    const auto* c = std::get_if<ComputeStepIr>(&step);
    if (c != nullptr && c->op == ComputeOp::kSelectRows && c->out_box.end.size() == 3) {
      *rows = c->out_box.end[1] - c->out_box.begin[1];
      break;
    }
  }
  if (*token_slots < 1 || *rows < 1) {
    return InvalidArgument("program '", program.program_id,
                           "' is not a generation program (no [1, T] input or select_rows step)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DecodeState>> PrepareDecode(
    const ProgramIr& program, const LoadedModel& model, const std::vector<SliceIr>& inputs,
    DecodeStepIr step, KvCacheStore* store) {
  if (store == nullptr) return FailedPrecondition("this worker has no KV cache (--kv_cache_bytes 0)");
  int64_t token_slots = 0, rows = 0;
  MS_RETURN_IF_ERROR(ProgramBuckets(program, inputs, &token_slots, &rows));
  auto owned = std::make_shared<OwnedDecode>();
  MS_ASSIGN_OR_RETURN(owned->layout, DecodeLayout::Create(std::move(step), token_slots, rows));
  const DecodeStepIr& checked = owned->layout.step();
  // Forks before releases (a source freed in this step is copied first).
  for (const DecodeForkIr& fork : checked.forks) {
    MS_RETURN_IF_ERROR(
        store->Fork(model.model, model.generation, fork.src, fork.dsts, fork.num_tokens),
        "decode step ", checked.step);
  }
  store->Release(model.model, model.generation, checked.release);
  owned->state.layout = &owned->layout;
  owned->state.positions = SlotPositions(owned->layout);
  const int64_t num_devices = static_cast<int64_t>(model.devices.size());
  OwnedDecode* raw = owned.get();
  owned->state.cache = [raw, store, name = model.model, generation = model.generation,
                        num_devices](int64_t device, int64_t num_layers, int64_t kv_heads,
                                     int64_t head_dim) -> absl::StatusOr<KvCache*> {
    auto it = raw->held.find(device);
    if (it != raw->held.end()) return it->second.get();
    MS_ASSIGN_OR_RETURN(std::shared_ptr<KvCache> cache,
                        store->GetOrCreate(name, generation, device, num_devices, num_layers,
                                           kv_heads, head_dim));
    return raw->held.emplace(device, std::move(cache)).first->second.get();
  };
  return std::shared_ptr<const DecodeState>(owned, &owned->state);
}

}  // namespace meshserve
