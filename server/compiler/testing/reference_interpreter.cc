// RunCompiledModel (compiler_interpreter.h).
#include "server/compiler/testing/reference_interpreter.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/shard_layout.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/kernels.h"
#include "server/compiler/program_emitter.h"

namespace meshserve {
namespace {

absl::StatusOr<DType> FromWire(int wire) {
  switch (wire) {
    case 1: return DType::kFloat32;
    case 2: return DType::kBFloat16;
    case 3: return DType::kInt32;
    case 4: return DType::kInt64;
    case 5: return DType::kFloat16;
    case 6: return DType::kFloat64;
  }
  return InvalidArgument("unsupported wire dtype ", wire);
}

using BufferKey = std::pair<int64_t, std::string>;  // (device, name)

class Interpreter {
 public:
  Interpreter(const CompiledModel& compiled, const TypedModel& typed)
      : compiled_(compiled), typed_(typed) {}

  absl::Status Load(const std::map<std::string, Tensor>& inputs,
                    const std::map<std::string, Tensor>& params) {
    for (const InputSlice& s : compiled_.input_slices) {
      auto it = inputs.find(s.input);
      if (it == inputs.end()) return InvalidArgument("missing input '", s.input, "'");
      BufferKey key(s.device, "in/" + s.input);
      MS_ASSIGN_OR_RETURN(buffers_[key], Slice(it->second, s.box));
    }
    for (const ParamDef& p : typed_.model.params) {
      auto it = params.find(p.name);
      if (it == params.end()) return InvalidArgument("missing param '", p.name, "'");
      const ArrayType& t = typed_.TypeOf(p.name);
      for (int64_t d = 0; d < typed_.mesh.num_devices(); ++d) {
        BufferKey key(d, "param/" + p.name);
        MS_ASSIGN_OR_RETURN(buffers_[key],
                            Slice(it->second, ShardBoxForDevice(t.shape, t.sharding, d)));
      }
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
          MS_ASSIGN_OR_RETURN(bool done, RunStep(w, program.steps[i]),
                              "worker ", w, " step ", i);
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
        return Internal("deadlock: worker ", w, " waits at step ", pc[w], " (tag ",
                        program.steps[pc[w]].tag, ")");
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
                                         const BoxIr& box, int dtype) {
    auto it = buffers_.find({device, name});
    if (it != buffers_.end()) return &it->second;
    MS_ASSIGN_OR_RETURN(DType dt, FromWire(dtype));
    MS_ASSIGN_OR_RETURN(BoxTensor t, BoxTensor::Create(dt, UncheckedBoxFromIr(box)));
    return &(buffers_[{device, name}] = std::move(t));
  }

  absl::StatusOr<bool> RunStep(int64_t worker, const StepIr& s) {
    switch (s.kind) {
      case StepIr::Kind::kCompute:
        MS_RETURN_IF_ERROR(Compute(s), "compute ", s.op, " -> ", s.output);
        return true;
      case StepIr::Kind::kSend: {
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
      case StepIr::Kind::kRecv: {
        auto it = mailbox_.find(s.tag);
        if (it == mailbox_.end()) return false;
        MS_ASSIGN_OR_RETURN(BoxTensor * dst, GetOrCreate(s.device, s.buffer, s.buffer_box, s.dtype));
        MS_RETURN_IF_ERROR(InsertBox(dst, UncheckedBoxFromIr(s.box), it->second, s.accumulate),
                           "recv ", s.tag);
        mailbox_.erase(it);
        return true;
      }
      case StepIr::Kind::kCopy: {
        MS_ASSIGN_OR_RETURN(const BoxTensor* src, Get(s.device, s.buffer));
        BoxTensor src_copy = *src;  // GetOrCreate may rehash
        MS_ASSIGN_OR_RETURN(BoxTensor * dst, GetOrCreate(s.dst_device, s.dst, s.buffer_box, s.dtype));
        if (src_copy.tensor.dtype() != dst->tensor.dtype()) {
          MS_ASSIGN_OR_RETURN(src_copy.tensor, ConvertDType(src_copy.tensor, dst->tensor.dtype()));
        }
        MS_RETURN_IF_ERROR(CopyBox(src_copy, dst, UncheckedBoxFromIr(s.box), s.accumulate), "copy");
        return true;
      }
      case StepIr::Kind::kFree:
        buffers_.erase({s.device, s.buffer});
        return true;
      case StepIr::Kind::kOutput: {
        MS_ASSIGN_OR_RETURN(const BoxTensor* src, Get(s.device, s.buffer));
        MS_ASSIGN_OR_RETURN(std::string bytes, ExtractBox(*src, UncheckedBoxFromIr(s.box)));
        const ArrayType& t = typed_.TypeOf(s.output);
        auto it = outputs_.find(s.output);
        if (it == outputs_.end()) {
          MS_ASSIGN_OR_RETURN(BoxTensor full, BoxTensor::Create(src->tensor.dtype(),
                                                                Box::FromShape(t.shape)));
          it = outputs_.emplace(s.output, std::move(full)).first;
        }
        MS_RETURN_IF_ERROR(InsertBox(&it->second, UncheckedBoxFromIr(s.box), bytes, false));
        covered_[s.output] += UncheckedBoxFromIr(s.box).NumElements();
        return true;
      }
      case StepIr::Kind::kNone:
        break;
    }
    return Internal("unknown step kind");
  }

  absl::Status Compute(const StepIr& s) {
    std::vector<const BoxTensor*> in;
    for (const std::string& name : s.inputs) {
      MS_ASSIGN_OR_RETURN(const BoxTensor* t, Get(s.device, name));
      in.push_back(t);
    }
    MS_ASSIGN_OR_RETURN(DType out_dtype, FromWire(s.out_dtype));
    if (s.partial) out_dtype = DType::kFloat32;
    Box out_box = UncheckedBoxFromIr(s.out_box);
    auto need = [&](size_t n) -> absl::Status {
      if (in.size() != n) return InvalidArgument(s.op, " needs ", n, " inputs");
      return absl::OkStatus();
    };
    absl::StatusOr<Tensor> r = InvalidArgument("unknown op ", s.op);
    const std::string& op = s.op;
    if (op == "dot_general") {
      MS_RETURN_IF_ERROR(need(2));
      r = DotGeneral(in[0]->tensor, in[1]->tensor, s.lhs_contracting, s.rhs_contracting,
                     s.lhs_batch, s.rhs_batch, out_dtype);
    } else if (op == "add" || op == "mul") {
      MS_RETURN_IF_ERROR(need(2));
      r = op == "add" ? Add(in[0]->tensor, in[1]->tensor, out_dtype)
                      : Mul(in[0]->tensor, in[1]->tensor, out_dtype);
    } else if (op == "relu") {
      r = Relu(in[0]->tensor, out_dtype);
    } else if (op == "gelu") {
      r = Gelu(in[0]->tensor, out_dtype);
    } else if (op == "silu") {
      r = Silu(in[0]->tensor, out_dtype);
    } else if (op == "tanh") {
      r = Tanh(in[0]->tensor, out_dtype);
    } else if (op == "rms_norm") {
      MS_RETURN_IF_ERROR(need(2));
      r = RmsNorm(in[0]->tensor, in[1]->tensor, s.epsilon, out_dtype);
    } else if (op == "layer_norm") {
      MS_RETURN_IF_ERROR(need(3));
      r = LayerNorm(in[0]->tensor, in[1]->tensor, in[2]->tensor, s.epsilon, out_dtype);
    } else if (op == "softmax") {
      r = Softmax(in[0]->tensor, s.perm.empty() ? -1 : s.perm[0], out_dtype);
    } else if (op == "reshape") {
      r = Reshape(in[0]->tensor, out_box.shape());
    } else if (op == "transpose") {
      r = Transpose(in[0]->tensor, s.perm);
    } else if (op == "embed") {
      MS_RETURN_IF_ERROR(need(2));
      r = Embed(in[0]->tensor, *in[1], out_dtype);
    }
    if (!r.ok()) return r.status();
    if (r->shape() != out_box.shape()) {
      return InvalidArgument(op, " produced ", ShapeToString(r->shape()), " for out_box ",
                             out_box.ToString());
    }
    BufferKey key(s.device, s.output);
    MS_ASSIGN_OR_RETURN(buffers_[key], BoxTensor::Wrap(out_box, *std::move(r)));
    return absl::OkStatus();
  }

  const CompiledModel& compiled_;
  const TypedModel& typed_;
  std::map<BufferKey, BoxTensor> buffers_;
  std::map<std::string, std::string> mailbox_;
  std::map<std::string, bool> used_tags_;
  std::map<std::string, BoxTensor> outputs_;
  std::map<std::string, int64_t> covered_;
  InterpreterStats stats_;
};

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> RunCompiledModel(
    const CompiledModel& compiled, const TypedModel& typed,
    const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& params,
    InterpreterStats* stats) {
  Interpreter interp(compiled, typed);
  MS_RETURN_IF_ERROR(interp.Load(inputs, params));
  MS_RETURN_IF_ERROR(interp.Run(stats));
  return interp.Outputs();
}

}  // namespace meshserve
