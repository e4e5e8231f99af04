// The parameter RPCs of a coordinator's ClusterService, file to file:
//
//   PushParamsFromFile  streams every chunk of a PushChunkReader (a
//                       safetensors file, params_files.h) in one PushParams
//                       call; the server commits a new version only when the
//                       stream ends and every param named is covered exactly
//                       once, else nothing changes and its status comes back.
//   PullParamsToFile    one PullParams call into a PulledFileWriter, then
//                       Finish (the file appears only when the stream is
//                       complete and consistent).
//   PullBoxesToFile     boxes of params (or of checkpoint tensors the model
//                       imported) at one version: PlanPull per name (the
//                       first answer's version pins the others), then every
//                       holder read at once (WorkerService.ReadParam, one
//                       thread per worker), each chunk written into its
//                       place in the file (BoxFileWriter: memory stays a
//                       chunk per worker), then EndPull. Falls back through
//                       the coordinator (PullParams with offset, shape and
//                       version, one call per name; with neither box nor
//                       version, one call for every name as before) when
//                       PlanPull is kUnimplemented (an older server), a
//                       holder cannot be reached within connect_timeout, or
//                       direct is false (TLS: workers admit only members).
//
// Errors: the server's status with its code, prefixed with the RPC and the
// target ("PushParams on 127.0.0.1:8500: ..."); the file's own errors as
// params_files.h documents them.
//
// Thread-safety: each call is independent; the client is thread-safe.
#ifndef MESHSERVE_CLIENT_PARAMS_CLIENT_H_
#define MESHSERVE_CLIENT_PARAMS_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/inference_client.h"
#include "client/params_files.h"
#include "proto/cluster_service.pb.h"

namespace meshserve {
namespace client {

struct PushResult {
  PushParamsResponse response;
  int64_t bytes_sent = 0;   // tensor bytes written to the stream(s)
  // The pushed tensors' bytes: bytes_sent, or less when a direct push tees
  // each piece to every holder of its cell (replicas; param_push.h).
  int64_t bytes_tensors = 0;
  int64_t messages = 0;
  double seconds = 0;       // first write until the response
  int workers = 0;          // a direct push (params_direct.h): workers sent to, else 0
};

// Seconds from `start` until now (the push and pull timings).
double SecondsSince(std::chrono::steady_clock::time_point start);

// \error the server's status (code kept) when it refuses the push;
//   kDataLoss when the file is shorter than its header says (MapFile; a
//   file that shrinks while it is sent raises SIGBUS, as for a direct push).
// The chunks go out as slices of the mapped file (zero-copy), on a channel
// to client.target() made with `options` (the client's own).
absl::StatusOr<PushResult> PushParamsFromFile(InferenceClient& client,
                                              const InferenceClient::Options& options,
                                              PushChunkReader& reader, absl::Time deadline);

struct PullResult {
  int64_t version = 0;
  int64_t bytes = 0;
  std::vector<std::string> params;
  double seconds = 0;
  std::string path;  // "direct from N workers" or "through the coordinator (why)"
};

// `params` empty: every param. \error the server's status; kInternal when
// the answer lacks a requested param or breaks the stream's rules.
absl::StatusOr<PullResult> PullParamsToFile(InferenceClient& client, absl::string_view model,
                                            const std::vector<std::string>& params,
                                            PulledFileWriter& writer, absl::Time deadline);

struct BoxPull {
  std::string model;
  std::vector<std::string> names;  // param or checkpoint tensor names, at least one
  std::vector<int64_t> offset;     // empty: the origin
  std::vector<int64_t> shape;      // empty: the whole tensor from offset
  int64_t version = 0;             // 0: the current one
  bool direct = true;              // false: through the coordinator only
  absl::Duration connect_timeout = absl::Seconds(2);
};

// Each name's box is one tensor of the file, under the name asked for.
// \error the server's status (kNotFound for an unknown name or a version no
//   longer held, kInvalidArgument / kOutOfRange for a bad box), prefixed with
//   the RPC; "ReadParam on worker N at ADDR: ..." for a holder's refusal;
//   kInternal for a plan whose pieces do not tile the box.
absl::StatusOr<PullResult> PullBoxesToFile(InferenceClient& client, const BoxPull& pull,
                                           const std::string& path, absl::Time deadline);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_PARAMS_CLIENT_H_
