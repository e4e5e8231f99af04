// How the coordinator talks to a worker: an abstract WorkerClient over plain
// C++ messages mirroring proto/worker_service.proto, implemented by
// GrpcWorkerClient (grpc_worker_client.h) and by FakeWorkerClient
// (fake_worker_client.h, tests).
//
// Why plain structs and not the generated protos: proto/tensor.proto's package
// `meshserve` generates `meshserve::Box` and `meshserve::DType`, which collide
// with the core `meshserve::Box` (common/sharding/box.h) and `meshserve::DType`
// (common/base/dtype.h) in any translation unit that includes both. So this
// header includes neither side: boxes are begin/end vectors, dtypes the wire
// enum's numbers (tensor.proto DType: FLOAT32 = 1 ... BOOL = 9), and a compiled
// Program travels as its serialized bytes. Only grpc_worker_client.cc sees the
// generated classes.
//
// Every call takes a timeout (<= 0: none). Implementations return
// kUnavailable when the worker cannot be reached and kDeadlineExceeded when
// the timeout expires; other codes come from the worker.
//
// Thread-safety: implementations must be thread-safe (many requests call
// Execute at once).
#ifndef MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_
#define MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshserve {

struct WireBox {
  std::vector<int64_t> begin, end;
  friend bool operator==(const WireBox& a, const WireBox& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

struct WireSlice {
  std::string name;
  int64_t device = 0;
  WireBox box;
  int32_t dtype = 0;  // tensor.proto DType number
  std::string data;
};

struct WireMeshAxis {
  std::string name;
  int64_t size = 1;
  std::string type;  // "Explicit", "Auto", "Manual"
};

struct LoadModelCall {
  std::string model;
  int64_t generation = 0;
  std::string model_json;
  std::string model_dir;
  std::vector<WireMeshAxis> mesh;
  std::vector<int64_t> devices;
  std::vector<int64_t> device_workers;
  std::map<int64_t, std::string> worker_addresses;
};

struct ExecuteCall {
  std::string program_id;
  std::string request_id;
  std::vector<WireSlice> inputs;
  int64_t deadline_ms = 0;
};

struct ExecuteResult {
  std::vector<WireSlice> outputs;
};

struct WorkerStatusResult {
  int64_t worker_id = -1;
  std::string address;
  std::string blas_core;
  std::string blas_config;
  int32_t blas_threads = 0;
  struct HostedModel {
    std::string model;
    int64_t generation = 0;
    std::vector<int64_t> devices;
    int64_t param_bytes = 0;
  };
  std::vector<HostedModel> models;
  int64_t programs = 0;
  int64_t requests_served = 0;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // Returns the param bytes now resident.
  virtual absl::StatusOr<int64_t> LoadModel(const LoadModelCall& call,
                                            absl::Duration timeout) = 0;
  // generation -1: every generation.
  virtual absl::Status UnloadModel(const std::string& model, int64_t generation,
                                   absl::Duration timeout) = 0;
  // `serialized_program` is a meshserve.Program message.
  virtual absl::Status InstallProgram(const std::string& serialized_program,
                                      absl::Duration timeout) = 0;
  virtual absl::StatusOr<ExecuteResult> Execute(const ExecuteCall& call,
                                                absl::Duration timeout) = 0;
  virtual absl::Status Cancel(const std::string& request_id,
                              const std::string& reason,
                              absl::Duration timeout) = 0;
  virtual absl::StatusOr<WorkerStatusResult> Status(absl::Duration timeout) = 0;
};

// Makes (or reuses) the client for a worker id at `address`.
using WorkerClientFactory = std::function<absl::StatusOr<std::shared_ptr<WorkerClient>>(
    int64_t worker_id, const std::string& address)>;

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_WORKER_CLIENT_H_
