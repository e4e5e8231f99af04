// RunCompiledPlan (reference_interpreter.h).
#include "server/compiler/testing/reference_interpreter.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/shard_layout.h"
#include "common/tensor/copy_box.h"
#include "common/program/compute_step.h"
#include "common/program/ir_conv.h"
#include "common/tensor/kernels.h"
#include "server/compiler/program_emitter.h"

namespace meshserve {
namespace {

using BufferKey = std::pair<int64_t, std::string>;  // (device, name)

// The buffers a step reads (an accumulating recv or copy: its destination
// too) and the one it writes, for the param cache's bookkeeping.
std::vector<BufferKey> ReadBuffers(const StepIr& step) {
  if (const auto* s = std::get_if<ComputeStepIr>(&step)) {
    std::vector<BufferKey> keys;
    for (const std::string& name : s->inputs) keys.emplace_back(s->device, name);
    return keys;
  }
  if (const auto* s = std::get_if<SendStepIr>(&step)) return {{s->device, s->buffer}};
  if (const auto* s = std::get_if<OutputStepIr>(&step)) return {{s->device, s->buffer}};
  if (const auto* s = std::get_if<RecvStepIr>(&step)) {
    if (s->accumulate) return {{s->device, s->buffer}};
  }
  if (const auto* s = std::get_if<CopyStepIr>(&step)) {
    if (!s->accumulate) return {{s->src_device, s->src}};
    return {{s->src_device, s->src}, {s->dst_device, s->dst}};
  }
  return {};
}

std::optional<BufferKey> WrittenBuffer(const StepIr& step) {
  if (const auto* s = std::get_if<ComputeStepIr>(&step)) return BufferKey(s->device, s->output);
  if (const auto* s = std::get_if<RecvStepIr>(&step)) return BufferKey(s->device, s->buffer);
  if (const auto* s = std::get_if<CopyStepIr>(&step)) return BufferKey(s->dst_device, s->dst);
  return std::nullopt;
}

class Interpreter {
 public:
  Interpreter(const CompiledPlan& compiled, const TypedModel& typed, ParamCacheRun* cache)
      : compiled_(compiled), typed_(typed), cache_(cache) {
    mode_ = cache != nullptr ? cache->mode : ParamCacheMode::kOff;
    for (const auto& [w, p] : compiled_.programs) {
      marked_[w].insert(p.param_only_steps.begin(), p.param_only_steps.end());
    }
    if (mode_ == ParamCacheMode::kFill) {
      cache_->kept.clear();
      cache_->kept_bytes.clear();
    }
    if (mode_ == ParamCacheMode::kUse) {
      cache_->skipped_steps = 0;
      for (const auto& [key, t] : cache_->kept) writers_[key] = kMarkedWriter;
    }
  }

  absl::Status Load(const std::map<std::string, Tensor>& inputs,
                    const std::map<std::string, Tensor>& params) {
    for (const InputSlice& s : compiled_.input_slices) {
      auto it = inputs.find(s.input);
      if (it == inputs.end()) return InvalidArgument("missing input '", s.input, "'");
      BufferKey key(s.device, InputBuffer(s.input));
      MS_ASSIGN_OR_RETURN(buffers_[key], Slice(it->second, s.box));
    }
    for (const ParamDef& p : typed_.model.params) {
      auto it = params.find(p.name);
      if (it == params.end()) return InvalidArgument("missing param '", p.name, "'");
      const ArrayType& t = typed_.TypeOf(p.name);
      for (int64_t d = 0; d < typed_.mesh.num_devices(); ++d) {
        BufferKey key(d, ParamBuffer(p.name));
        MS_ASSIGN_OR_RETURN(buffers_[key],
                            Slice(it->second, ShardBoxForDevice(t.shape, t.sharding, d)));
      }
    }
    if (mode_ == ParamCacheMode::kUse) {
      for (const auto& [key, t] : cache_->kept) buffers_[key] = t;
    }
    return absl::OkStatus();
  }

  absl::Status Run(InterpreterStats* stats) {
    std::map<int64_t, size_t> pc;
    for (const auto& [w, p] : compiled_.programs) pc[w] = 0;
    bool progress = true;
    while (progress) {
      progress = false;
      for (const auto& [w, program] : compiled_.programs) {
        size_t& i = pc[w];
        while (i < program.steps.size()) {
          const bool marked = marked_[w].count(static_cast<int64_t>(i)) > 0;
          if (mode_ == ParamCacheMode::kUse && marked) {
            ++cache_->skipped_steps;
            ++i;
            progress = true;
            continue;
          }
          MS_ASSIGN_OR_RETURN(bool done, RunStep(w, program.steps[i], marked), "worker ", w,
                              " step ", i);
          if (!done) break;
          ++i;
          progress = true;
          ++stats_.num_steps;
          stats_.peak_buffers = std::max<int64_t>(stats_.peak_buffers, buffers_.size());
        }
      }
    }
    for (const auto& [w, program] : compiled_.programs) {
      if (pc[w] < program.steps.size()) {
        const auto* recv = std::get_if<RecvStepIr>(&program.steps[pc[w]]);
        return Internal("deadlock: worker ", w, " waits at step ", pc[w], " (tag ",
                        recv != nullptr ? recv->tag : "?", ")");
      }
    }
    if (!mailbox_.empty()) return Internal("tag ", mailbox_.begin()->first, " never received");
    if (stats != nullptr) *stats = stats_;
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, Tensor>> Outputs() {
    std::map<std::string, Tensor> out;
    for (const std::string& name : typed_.model.outputs) {
      auto it = outputs_.find(name);
      if (it == outputs_.end()) return Internal("output '", name, "' was never produced");
      const ArrayType& t = typed_.TypeOf(name);
      if (covered_[name] != t.NumElements()) {
        return Internal("output '", name, "' pieces cover ", covered_[name], " of ",
                        t.NumElements(), " elements");
      }
      out[name] = std::move(it->second.tensor);
    }
    return out;
  }

 private:
  static absl::StatusOr<BoxTensor> Slice(const Tensor& full, const Box& box) {
    MS_ASSIGN_OR_RETURN(BoxTensor whole, BoxTensor::Wrap(Box::FromShape(full.shape()), full));
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(whole, box));
    MS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromBytes(full.dtype(), box.shape(), bytes));
    return BoxTensor::Wrap(box, std::move(t));
  }

  absl::StatusOr<const BoxTensor*> Get(int64_t device, const std::string& name) {
    auto it = buffers_.find({device, name});
    if (it == buffers_.end()) return NotFound("device ", device, " has no buffer '", name, "'");
    return &it->second;
  }

  absl::StatusOr<BoxTensor*> GetOrCreate(int64_t device, const std::string& name,
                                         const BoxIr& box, std::optional<DType> dtype) {
    auto it = buffers_.find({device, name});
    if (it != buffers_.end()) return &it->second;
    if (!dtype.has_value()) {
      return InvalidArgument("device ", device, " has no buffer '", name,
                             "' and the step gives no dtype to create it");
    }
    MS_ASSIGN_OR_RETURN(BoxTensor t, BoxTensor::Create(*dtype, UncheckedBoxFromIr(box)));
    return &(buffers_[{device, name}] = std::move(t));
  }

  // Runs one step (false: a Recv's tag has not been sent yet), keeping, in a
  // kFill run, what an unmarked step reads of the marked steps' buffers.
  absl::StatusOr<bool> RunStep(int64_t worker, const StepIr& step, bool marked) {
    if (mode_ == ParamCacheMode::kFill && !marked) {
      for (const BufferKey& key : ReadBuffers(step)) {
        auto writers = writers_.find(key);
        auto it = buffers_.find(key);
        if (writers == writers_.end() || writers->second != kMarkedWriter) continue;
        if (it == buffers_.end() || cache_->kept.count(key) > 0) continue;
        cache_->kept.emplace(key, it->second);
        cache_->kept_bytes[worker] += it->second.tensor.NumBytes();
      }
    }
    MS_ASSIGN_OR_RETURN(bool done, std::visit(StepRunner{this, worker}, step));
    std::optional<BufferKey> written = WrittenBuffer(step);
    if (done && mode_ != ParamCacheMode::kOff && written.has_value()) {
      int& seen = writers_[*written];
      seen |= marked ? kMarkedWriter : kUnmarkedWriter;
      if (seen == (kMarkedWriter | kUnmarkedWriter)) {
        return Internal("buffer '", written->second, "' on device ", written->first,
                        " is written by marked and unmarked steps");
      }
    }
    return done;
  }

  // One Run per step kind; false when a Recv's tag has not been sent yet.
  struct StepRunner {
    Interpreter* interp;
    int64_t worker;
    template <typename Step>
    absl::StatusOr<bool> operator()(const Step& s) const {
      return interp->Run(worker, s);
    }
  };

  absl::StatusOr<bool> Run(int64_t, const ComputeStepIr& s) {
    std::vector<const BoxTensor*> in;
    for (const std::string& name : s.inputs) {
      MS_ASSIGN_OR_RETURN(const BoxTensor* t, Get(s.device, name));
      in.push_back(t);
    }
    MS_ASSIGN_OR_RETURN(BoxTensor out, RunComputeStep(s, in));
    buffers_[{s.device, s.output}] = std::move(out);
    return true;
  }

  absl::StatusOr<bool> Run(int64_t worker, const SendStepIr& s) {
    MS_ASSIGN_OR_RETURN(const BoxTensor* src, Get(s.device, s.buffer));
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*src, UncheckedBoxFromIr(s.box)));
    if (mailbox_.count(s.tag) || used_tags_.count(s.tag)) {
      return Internal("tag ", s.tag, " used twice");
    }
    used_tags_[s.tag] = true;
    if (s.dst_worker != worker) stats_.network_bytes += bytes.size();
    mailbox_[s.tag] = std::move(bytes);
    return true;
  }

  absl::StatusOr<bool> Run(int64_t, const RecvStepIr& s) {
    auto it = mailbox_.find(s.tag);
    if (it == mailbox_.end()) return false;
    MS_ASSIGN_OR_RETURN(BoxTensor * dst, GetOrCreate(s.device, s.buffer, s.buffer_box, s.dtype));
    MS_RETURN_IF_ERROR(InsertBox(dst, UncheckedBoxFromIr(s.box), it->second, s.accumulate),
                       "recv ", s.tag);
    mailbox_.erase(it);
    return true;
  }

  absl::StatusOr<bool> Run(int64_t, const CopyStepIr& s) {
    MS_ASSIGN_OR_RETURN(const BoxTensor* src, Get(s.src_device, s.src));
    BoxTensor src_copy = *src;  // GetOrCreate may rehash
    MS_ASSIGN_OR_RETURN(BoxTensor * dst, GetOrCreate(s.dst_device, s.dst, s.dst_box, s.dtype));
    if (src_copy.tensor.dtype() != dst->tensor.dtype()) {
      MS_ASSIGN_OR_RETURN(src_copy.tensor, ConvertDType(src_copy.tensor, dst->tensor.dtype()));
    }
    MS_RETURN_IF_ERROR(CopyBox(src_copy, dst, UncheckedBoxFromIr(s.box), s.accumulate), "copy");
    return true;
  }

  absl::StatusOr<bool> Run(int64_t, const FreeStepIr& s) {
    buffers_.erase({s.device, s.buffer});
    return true;
  }

  absl::StatusOr<bool> Run(int64_t, const OutputStepIr& s) {
    MS_ASSIGN_OR_RETURN(const BoxTensor* src, Get(s.device, s.buffer));
    MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*src, UncheckedBoxFromIr(s.box)));
    const ArrayType& t = typed_.TypeOf(s.output);
    auto it = outputs_.find(s.output);
    if (it == outputs_.end()) {
      MS_ASSIGN_OR_RETURN(BoxTensor full,
                          BoxTensor::Create(src->tensor.dtype(), Box::FromShape(t.shape)));
      it = outputs_.emplace(s.output, std::move(full)).first;
    }
    MS_RETURN_IF_ERROR(InsertBox(&it->second, UncheckedBoxFromIr(s.box), bytes, false));
    covered_[s.output] += UncheckedBoxFromIr(s.box).NumElements();
    return true;
  }

  static constexpr int kMarkedWriter = 1, kUnmarkedWriter = 2;

  const CompiledPlan& compiled_;
  const TypedModel& typed_;
  ParamCacheRun* cache_;
  ParamCacheMode mode_;
  std::map<int64_t, std::set<int64_t>> marked_;  // by worker: param_only_steps
  std::map<BufferKey, int> writers_;             // kMarkedWriter | kUnmarkedWriter
  std::map<BufferKey, BoxTensor> buffers_;
  std::map<std::string, std::string> mailbox_;
  std::map<std::string, bool> used_tags_;
  std::map<std::string, BoxTensor> outputs_;
  std::map<std::string, int64_t> covered_;
  InterpreterStats stats_;
};

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> RunCompiledPlan(
    const CompiledPlan& compiled, const TypedModel& typed,
    const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& params,
    InterpreterStats* stats, ParamCacheRun* cache) {
  Interpreter interp(compiled, typed, cache);
  MS_RETURN_IF_ERROR(interp.Load(inputs, params));
  MS_RETURN_IF_ERROR(interp.Run(stats));
  return interp.Outputs();
}

}  // namespace meshserve
