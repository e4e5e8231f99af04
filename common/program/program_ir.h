// The program IR: plain C++ values for the messages of proto/program.proto
// (Program, Step, TensorSlice) and proto/worker_service.proto (LoadModelRequest,
// WorkerStatusResponse). It is the one program contract: the compiler
// (server/compiler) produces ProgramIr, the coordinator hands it to
// WorkerClient::InstallProgram, and the worker's engine (server/worker) and the
// reference interpreter run it. Only the gRPC edges (GrpcWorkerClient,
// ShardWorker) convert it to and from the wire (program_proto.h).
//
// Why plain values and not the generated messages: the transport-free cores
// (ms_coordinator, ms_compiler, ms_worker_engine) build, validate and run
// programs without protobuf. A step is a std::variant of one struct per kind,
// field for field the Step oneof. The IR is otherwise the wire's shape (boxes
// as begin/end vectors), so that a malformed peer message survives conversion
// and is rejected, with a Status naming the value, where the core types are
// built (ir_conv.h); only the compute op and the dtypes are parsed at the edge
// (compute_op.h; a dtype is DType, std::nullopt where the wire says
// DTYPE_INVALID, and a number tensor.proto does not define is refused there).
//
//   program_ir.h     this header: std, absl::string_view and compute_op.h.
//   compute_op.h     the op table.
//   ir_conv.h        IR <-> core types (Box, DType, Mesh, BoxTensor).
//   compute_step.h   runs one compute step (ms_compute_step).
//   program_proto.h  IR <-> generated messages (ms_program_proto).
//
// tensor.proto's DTypeProto numbers appear only in the conversions
// (ir_conv.cc's DTypeFromProto / DTypeToProto, program_proto.cc).
//
// Thread-safety: plain values.
#ifndef MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_
#define MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/program/compute_op.h"

namespace meshserve {

// Buffer names. Every device hosted by a worker has its own namespace of
// buffers: "param/<param>" is the resident box of a parameter (loaded by
// LoadModel, read-only), "in/<input>" a request's input slice (filled from
// ExecuteRequest), anything else a temporary of one request.
inline constexpr absl::string_view kParamBufferPrefix = "param/";
inline constexpr absl::string_view kInputBufferPrefix = "in/";

inline std::string ParamBuffer(absl::string_view param) {
  return std::string(kParamBufferPrefix) + std::string(param);
}
inline std::string InputBuffer(absl::string_view input) {
  return std::string(kInputBufferPrefix) + std::string(input);
}
inline bool IsParamBuffer(absl::string_view buffer) {
  return absl::StartsWith(buffer, kParamBufferPrefix);
}
// The parameter of a "param/<param>" buffer. Precondition: IsParamBuffer.
inline absl::string_view ParamOfBuffer(absl::string_view buffer) {
  return buffer.substr(kParamBufferPrefix.size());
}

// Half-open [begin[i], end[i]) per dim, unvalidated (BoxFromIr checks it).
struct BoxIr {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
  friend bool operator==(const BoxIr& a, const BoxIr& b) {
    return a.begin == b.begin && a.end == b.end;
  }
  friend bool operator!=(const BoxIr& a, const BoxIr& b) { return !(a == b); }
};

// TensorSlice.
struct SliceIr {
  std::string name;
  int64_t device = 0;
  BoxIr box;
  std::optional<DType> dtype;  // nullopt: unset (BoxTensorFromSlice refuses it)
  std::string data;
};

// The steps of a Program: one struct per message of the Step oneof
// (ComputeStep ... OutputStep), field for field and in the proto's field
// order (so aggregate initialization follows program.proto), with the compute
// op parsed (compute_op.h). StepIr is the oneof.
struct ComputeStepIr {
  ComputeOp op = ComputeOp::kDotGeneral;
  std::vector<std::string> inputs;  // buffer names
  std::string output;               // buffer name
  BoxIr out_box;
  std::optional<DType> out_dtype;  // nullopt: the first input's dtype
  std::vector<int64_t> lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
  std::vector<int64_t> perm;  // transpose: out dim i = in dim perm[i]
  float epsilon = 0;          // rms_norm, layer_norm
  bool partial = false;
  int64_t device = 0;
  float scale = 0;       // softmax, softmax_where: multiplies x first (0: 1)
  bool causal = false;   // softmax, softmax_where: mask k > q (last two dims)
  double theta = 0;      // rope
  int64_t vocab_size = 0;  // embed: ids must lie in [0, vocab_size) (0: unchecked)
  // Each attribute below has one op and one meaning; < 0 counts from the end.
  int64_t positions_axis = 0;  // positions: the dim whose global index is the value
  int64_t rope_seq_axis = 0;   // rope: the dim whose global index is the position
  int64_t softmax_axis = -1;   // softmax, softmax_where: the normalised dim
  float attention_scale = 0;   // attention: multiplies the scores (> 0)
  int64_t cache_layer = 0;       // attention: its layer of the KV cache
  int64_t num_cache_layers = 0;  // attention: the model's attention layers
};

struct SendStepIr {
  std::string buffer;
  BoxIr box;
  int64_t dst_worker = -1;
  int64_t dst_device = -1;
  std::string tag;
  int64_t device = 0;
};

struct RecvStepIr {
  std::string buffer;
  BoxIr box;
  std::string tag;
  bool accumulate = false;
  BoxIr buffer_box;
  std::optional<DType> dtype;  // nullopt: the buffer must exist
  int64_t src_worker = -1;
  int64_t device = 0;
};

struct CopyStepIr {
  std::string src;
  int64_t src_device = 0;
  std::string dst;
  BoxIr box;
  bool accumulate = false;
  BoxIr dst_box;
  std::optional<DType> dtype;  // nullopt: the source's
  int64_t dst_device = -1;
};

struct FreeStepIr {
  std::string buffer;
  int64_t device = 0;
};

struct OutputStepIr {
  std::string buffer;
  BoxIr box;
  std::string output;
  int64_t device = 0;
};

using StepIr = std::variant<ComputeStepIr, SendStepIr, RecvStepIr, CopyStepIr, FreeStepIr,
                            OutputStepIr>;

// The device a step runs on (copy: src_device).
inline int64_t StepDevice(const StepIr& step) {
  return std::visit(
      [](const auto& s) -> int64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(s)>, CopyStepIr>) {
          return s.src_device;
        } else {
          return s.device;
        }
      },
      step);
}

// A buffer of one device: (device, name).
using DeviceBufferIr = std::pair<int64_t, std::string>;

// The buffers a step reads (in order; a copy's source first), the one it
// writes (compute, recv, copy; none for sends and outputs) and the one it
// frees (free steps only). An accumulating recv or copy reads its
// destination too.
struct StepAccess {
  std::vector<DeviceBufferIr> reads;
  std::optional<DeviceBufferIr> writes;
  std::optional<DeviceBufferIr> frees;
};

inline StepAccess AccessOf(const StepIr& step) {
  StepAccess a;
  if (const auto* c = std::get_if<ComputeStepIr>(&step)) {
    for (const std::string& in : c->inputs) a.reads.emplace_back(c->device, in);
    a.writes.emplace(c->device, c->output);
  } else if (const auto* s = std::get_if<SendStepIr>(&step)) {
    a.reads.emplace_back(s->device, s->buffer);
  } else if (const auto* r = std::get_if<RecvStepIr>(&step)) {
    if (r->accumulate) a.reads.emplace_back(r->device, r->buffer);
    a.writes.emplace(r->device, r->buffer);
  } else if (const auto* cp = std::get_if<CopyStepIr>(&step)) {
    a.reads.emplace_back(cp->src_device, cp->src);
    if (cp->accumulate) a.reads.emplace_back(cp->dst_device, cp->dst);
    a.writes.emplace(cp->dst_device, cp->dst);
  } else if (const auto* f = std::get_if<FreeStepIr>(&step)) {
    a.frees.emplace(f->device, f->buffer);
  } else if (const auto* o = std::get_if<OutputStepIr>(&step)) {
    a.reads.emplace_back(o->device, o->buffer);
  }
  return a;
}

struct ProgramIr {
  std::string program_id;
  std::string model;
  int64_t generation = 0;
  int64_t worker = -1;
  std::vector<StepIr> steps;
  // Ascending indices into `steps` of the steps whose values depend on the
  // params alone (program.proto Program.param_only_steps): a run with
  // ParamCacheMode::kUse skips them and reads the buffers they made from what
  // a kFill run of the same program and param version kept.
  std::vector<int64_t> param_only_steps;
};

// What a run does with the param-only steps (worker_service.proto
// ExecuteRequest.param_cache). The coordinator chooses, for every worker of a
// request alike: a kUse run skips sends its peers would otherwise wait for.
enum class ParamCacheMode : int {
  kOff = 0,   // run every step
  kFill = 1,  // run every step; keep the param-only buffers later steps read
  kUse = 2,   // skip the param-only steps; read the kept buffers
};

struct MeshAxisIr {
  std::string name;
  int64_t size = 1;
  std::string type;  // "Explicit" (or ""), "Auto", "Manual"
};

// One box of one param and where to read it (worker_service.proto ParamPiece).
struct ParamPieceIr {
  std::string param;
  BoxIr box;  // global coordinates
  int64_t src_worker = -1;
  int64_t src_generation = 0;
  int64_t src_version = 0;
};

struct LoadModelIr {
  std::string model;
  int64_t generation = 0;
  std::string model_json;
  std::string model_dir;
  std::vector<MeshAxisIr> mesh;
  std::vector<int64_t> devices;
  std::vector<int64_t> device_workers;
  std::map<int64_t, std::string> worker_addresses;
  int64_t version = 1;                   // 0 on the wire is read as 1
  std::vector<int64_t> replica_devices;  // held for durability only
  std::vector<ParamPieceIr> sources;     // see LoadModelRequest.sources
};

// LoadModelResponse.
struct LoadModelResultIr {
  int64_t param_bytes = 0;
  int64_t bytes_fetched = 0;
  int64_t bytes_local = 0;
};

struct HostedModelIr {
  std::string model;
  int64_t generation = 0;
  std::vector<int64_t> devices;
  int64_t param_bytes = 0;
  int64_t version = 1;
  std::vector<int64_t> replica_devices;
  std::vector<MeshAxisIr> mesh;
  std::vector<int64_t> device_workers;
};

// ReadParamRequest.
struct ReadParamIr {
  std::string model;
  int64_t generation = 0;
  int64_t version = 0;
  std::string param;
  BoxIr box;
};

// StageParamChunk.
struct StageChunkIr {
  std::string model;
  int64_t generation = 0;
  int64_t version = 0;
  std::string param;
  BoxIr box;
  int64_t total_bytes = 0;
  int64_t offset = 0;
  std::string data;
  // Non-empty: the chunk's data in order, as views into memory the caller
  // keeps alive for the call (a received message's slices), and `data` is
  // not used.
  std::vector<absl::string_view> data_views;
};

// CommitParamsRequest.
struct CommitParamsIr {
  std::string model;
  int64_t generation = 0;
  int64_t base_version = 0;
  int64_t version = 0;
  std::vector<std::string> params;
  std::vector<ParamPieceIr> fills;
};

// CommitParamsResponse.
struct CommitResultIr {
  int64_t param_bytes = 0;
  int64_t bytes_fetched = 0;
};

struct WorkerStatusIr {
  int64_t worker_id = -1;
  std::string address;  // set by the service (the engine does not know it)
  std::string blas_core;
  std::string blas_config;
  int blas_threads = 0;
  std::vector<HostedModelIr> models;
  int64_t programs = 0;
  int64_t requests_served = 0;
  // The worker's calibration (server/worker/calibration.h; set by the
  // service): 0 / "" until measured.
  double gemm_gflops_one_row = 0;
  double gemm_gflops_small_m = 0;
  double gemm_gflops_large_m = 0;
  double memory_bytes_per_s = 0;
  double hop_ms = 0;  // loopback link: half the median small round trip
  double link_bytes_per_s = 0;
  std::string calibration_kernel;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_PROGRAM_IR_H_
