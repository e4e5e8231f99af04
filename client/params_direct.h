// Direct pushes (PushDirect, proto/cluster_service.proto): a safetensors
// file's tensors, each one whole box of the param of its name, sent by this
// client straight to the workers that hold them. The coordinator checks the
// boxes, plans the routes and commits; no tensor byte passes through it, so
// each byte crosses one socket on its way to its first holder instead of two
// (client -> coordinator -> worker with PushParams).
//
//   PushDirectFromFile  maps the file, sends the boxes, receives the routes
//                       (one per piece of a tensor and a held cell, each to
//                       one worker), checks that every worker named can be
//                       reached, streams each worker's pieces on its own
//                       thread (WorkerService.StageParams, in row slabs of
//                       about chunk_bytes; a slab that is contiguous in the
//                       file goes out as a slice of the mapping, others are
//                       copied once out of it), then commits.
//
// Falling back. Two failures happen before any byte is staged and leave the
// caller free to push through the coordinator instead (PushParamsFromFile):
// the coordinator does not know PushDirect (kUnimplemented: an older
// server), or a worker cannot be reached from here within connect_timeout
// (kUnavailable naming it: e.g. compose service names seen from the host).
// *fallback_reason is set then, and only then; the planned push was
// cancelled, so nothing changed.
//
// Other errors: the coordinator's refusal of the boxes (its code: kNotFound,
// kInvalidArgument, ...), a worker's refusal of a chunk ("StageParams on
// worker N at ADDR: ..."; the push is cancelled and aborted), the commit's
// refusal (kFailedPrecondition when a worker was not sent all it holds),
// kDataLoss for a file shorter than its header says.
//
// The file is mapped: if it shrinks while it is pushed, a read past its new
// end raises SIGBUS. `meshserve push` (cmd_params.cc) turns that into an
// error message and exit 1; the broken calls make the coordinator abort, so
// nothing changes. Other callers should do the same or not let the file change.
//
// Thread-safety: each call is independent.
#ifndef MESHSERVE_CLIENT_PARAMS_DIRECT_H_
#define MESHSERVE_CLIENT_PARAMS_DIRECT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/inference_client.h"
#include "client/params_client.h"
#include "client/params_files.h"
#include "common/tensor/safetensors.h"
#include "grpcpp/channel.h"

namespace meshserve {
namespace client {

struct DirectPushOptions {
  int64_t chunk_bytes = kParamChunkBytes;  // data bytes per StageParams message, at most
  absl::Duration connect_timeout = absl::Seconds(2);
};

absl::StatusOr<PushResult> PushDirectFromFile(InferenceClient& client, const std::string& path,
                                              const std::string& model,
                                              const DirectPushOptions& options,
                                              absl::Time deadline, std::string* fallback_reason);

// A safetensors file mapped read-only (data() is its data region); the
// chunks of both pushes are slices of it. \error kNotFound when it cannot be
// opened; kDataLoss when it cannot be mapped or is shorter than its header
// says.
struct MappedFile {
  ~MappedFile();
  void* addr = nullptr;
  size_t size = 0;
  int64_t data_start = 0;
  const char* data() const { return static_cast<const char*>(addr) + data_start; }
};
absl::StatusOr<std::shared_ptr<MappedFile>> MapFile(const SafetensorsFile& file);

// Channels to workers (address -> worker id), all dialled at once (direct
// pushes here, box pulls in params_client.h). \error kUnavailable "worker N
// at ADDR is not reachable from here" for the first one not connected by
// `by`; *unreachable is set to that text then.
absl::StatusOr<std::map<std::string, std::shared_ptr<grpc::Channel>>> ConnectWorkers(
    const std::map<std::string, int64_t>& workers, absl::Time by, std::string* unreachable);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_PARAMS_DIRECT_H_
