// Helpers of a program run (program_run.cc) defined in program_steps.cc:
// the compute-time metric, the device check, the request's input buffers and
// the converting insert of a received or copied box.
//
// Thread-safety: ComputeSeconds is the registry's (thread-safe) counter; the
// others write only their output arguments.
#ifndef MESHSERVE_SERVER_WORKER_PROGRAM_STEPS_H_
#define MESHSERVE_SERVER_WORKER_PROGRAM_STEPS_H_

#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/dtype.h"
#include "common/metrics/metric_registry.h"
#include "common/sharding/box.h"
#include "common/tensor/tensor.h"
#include "server/worker/program_run.h"

namespace meshserve {

// Time in compute steps by op, on the worker's /metrics (op="dot_general" is
// its GEMM time). Registered at start-up, so /metrics lists the family before
// the first step.
Counter& ComputeSeconds();

// \error kInvalidArgument naming the device and the devices `model` hosts
//   here when it does not host `device`.
absl::Status CheckHostsDevice(const LoadedModel& model, int64_t device);

// Adds each input slice as buffer (device, "in/<name>").
// \error CheckHostsDevice's and BoxTensorFromSlice's, naming the input;
//   kInvalidArgument for an input given twice for one device.
absl::Status AddInputBuffers(const LoadedModel& model, std::vector<SliceIr> inputs,
                             absl::node_hash_map<RunBufferKey, BoxTensor>* buffers);

// Inserts `bytes` (box's elements in dtype `from`) into dst (InsertBox,
// copy_box.h), converted once per element when dst's dtype differs (e.g.
// float32 partial sums into a bfloat16 buffer).
// \error InsertBox's and ConvertDType's; kInvalidArgument for a byte count
//   that is not box's in `from`.
absl::Status InsertConverted(BoxTensor* dst, const Box& box, DType from,
                             absl::string_view bytes, bool accumulate);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PROGRAM_STEPS_H_
