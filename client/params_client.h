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
  int64_t bytes_sent = 0;   // tensor bytes written to the stream
  int64_t messages = 0;
  double seconds = 0;       // first write until the response
  int workers = 0;          // a direct push (params_direct.h): workers sent to, else 0
};

// Seconds from `start` until now (the push and pull timings).
double SecondsSince(std::chrono::steady_clock::time_point start);

// \error the server's status (code kept) when it refuses the push; the
//   reader's kDataLoss when the file cannot be read (the stream is then
//   cancelled, so nothing is committed).
absl::StatusOr<PushResult> PushParamsFromFile(InferenceClient& client, PushChunkReader& reader,
                                              absl::Time deadline);

struct PullResult {
  int64_t version = 0;
  int64_t bytes = 0;
  std::vector<std::string> params;
  double seconds = 0;
};

// `params` empty: every param. \error the server's status; kInternal when
// the answer lacks a requested param or breaks the stream's rules.
absl::StatusOr<PullResult> PullParamsToFile(InferenceClient& client, absl::string_view model,
                                            const std::vector<std::string>& params,
                                            PulledFileWriter& writer, absl::Time deadline);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_PARAMS_CLIENT_H_
