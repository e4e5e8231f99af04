// Plain C++ mirrors of the worker's wire messages (proto/program.proto,
// proto/worker_service.proto), used inside the worker.
//
// Why a mirror: proto/tensor.proto declares `package meshserve` with a message
// `Box` and an enum `DType`, which the protobuf compiler turns into
// meshserve::Box and meshserve::DType: the same names as the core types in
// common/sharding/box.h and common/base/dtype.h. No translation unit can include
// both. So the worker is layered:
//   - worker_ir_proto.cc    includes the .pb.h files and this header only and
//                           converts proto <-> IR (never naming the proto Box /
//                           DType types, so it keeps compiling if tensor.proto
//                           renames them to BoxProto / DTypeProto);
//   - worker_engine.cc      includes the core types and this header only;
//   - shard_worker.h        the proto-facing API (forward-declared messages).
// This header includes neither.
//
// dtype fields hold tensor.proto's DType numbers (kWireFloat32 == FLOAT32 == 1,
// ...); worker_ir_proto.cc static_asserts that they match.
//
// Thread-safety: plain values.
#ifndef MESHSERVE_SERVER_WORKER_WORKER_IR_H_
#define MESHSERVE_SERVER_WORKER_WORKER_IR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshserve {

// tensor.proto's DType enum values.
enum WireDType : int {
  kWireInvalid = 0,
  kWireFloat32 = 1,
  kWireBFloat16 = 2,
  kWireInt32 = 3,
  kWireInt64 = 4,
  kWireFloat16 = 5,
  kWireFloat64 = 6,
  kWireInt8 = 7,
  kWireUInt8 = 8,
  kWireBool = 9,
};

struct BoxIr {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
};

// TensorSlice.
struct SliceIr {
  std::string name;
  int64_t device = 0;
  BoxIr box;
  int dtype = kWireInvalid;
  std::string data;
};

// One Step of a Program, flattened (fields unused by a kind stay default).
struct StepIr {
  enum class Kind { kNone, kCompute, kSend, kRecv, kCopy, kFree, kOutput };
  Kind kind = Kind::kNone;
  // The device the step runs on: compute/send/recv/free/output `device`,
  // copy `src_device`.
  int64_t device = 0;

  // compute
  std::string op;
  std::vector<std::string> inputs;
  std::string output;  // compute: buffer; output step: the output's name
  BoxIr out_box;
  int out_dtype = kWireInvalid;
  std::vector<int64_t> lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
  std::vector<int64_t> perm;
  float epsilon = 0;
  bool partial = false;

  // send / recv / copy / free / output
  std::string buffer;  // copy: src
  BoxIr box;
  std::string tag;
  int64_t dst_worker = -1;
  int64_t dst_device = -1;  // send and copy
  int64_t src_worker = -1;  // recv
  bool accumulate = false;
  BoxIr buffer_box;  // recv: buffer_box; copy: dst_box
  int dtype = kWireInvalid;
  std::string dst;  // copy
};

struct ProgramIr {
  std::string program_id;
  std::string model;
  int64_t generation = 0;
  int64_t worker = -1;
  std::vector<StepIr> steps;
};

struct MeshAxisIr {
  std::string name;
  int64_t size = 1;
  std::string type;  // "Explicit" (or ""), "Auto", "Manual"
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
};

struct HostedModelIr {
  std::string model;
  int64_t generation = 0;
  std::vector<int64_t> devices;
  int64_t param_bytes = 0;
};

struct WorkerStatusIr {
  int64_t worker_id = -1;
  std::string blas_core;
  std::string blas_config;
  int blas_threads = 0;
  std::vector<HostedModelIr> models;
  int64_t programs = 0;
  int64_t requests_served = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_WORKER_IR_H_
