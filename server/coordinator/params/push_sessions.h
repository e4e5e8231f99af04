// PushSessions: the coordinator's registry of push sessions (issue 34;
// proto/cluster_service.proto, "push sessions: many ranks, many processes").
// A session is one session-mode ParamPush (param_push.h) named by a push_id
// that other processes pass on, so trainer ranks join it, each puts its own
// boxes, and one commit (by any of them) makes the new version.
//
// push_id: 32 lowercase hex digits, 128 bits from std::random_device
// (unguessable; a session is reachable only by its id).
//
// Calls. Begin admits a push as ParamVersions::BeginPush does (one per model,
// --max_concurrent_pushes, the same errors). Join answers the same session
// for its id (model must match). PlanPut resolves a box of a param, or of the
// checkpoint tensor the model imported params from, to pieces; each piece of
// each held cell goes to the cell's one holder (ParamPush::Put), and the box
// is recorded for the cover check. CommitPush ends the session either way: on
// success the model is at version + 1; on a refusal the push aborts on every
// worker, as AbortPush does. StageThrough relays StageParams chunks to the
// worker named, for clients that cannot reach the workers.
//
// Expiry. Every call on a session (Join, PlanPut, each StageThrough chunk)
// touches it; one untouched for `ttl` is dropped: its ParamPush aborts on
// every worker (AbortParams frees the staged bytes) and releases the model's
// admission; its id then answers kNotFound. ExpireIdle runs on a reaper
// thread (every ttl / 4, at most 1 s) unless options.reaper is false (tests
// call ExpireIdle with their own clock).
//
// Thread-safety: thread-safe. mu_ guards the registry and is never held
// during an RPC or a session's call; each session's ParamPush is driven under
// the session's own mutex (a commit holds it for its whole run, after taking
// the session out of the registry).
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAMS_PUSH_SESSIONS_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAMS_PUSH_SESSIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/dtype.h"
#include "common/program/program_ir.h"
#include "common/sharding/box.h"
#include "server/coordinator/params/param_push.h"

namespace meshserve {

// PushSession.
struct PushSessionInfo {
  std::string push_id;
  std::string model;
  int64_t generation = 0;  // the placement the pieces are staged on
  int64_t version = 0;     // the version the commit makes
  double ttl_s = 0;
};

// PutPiece: stage bytes of `dtype` for `box` (the param's global
// coordinates) on `worker`; they are the put box's elements from src_offset.
struct PutRoute {
  std::string param;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> src_offset;
  Box box;
  int64_t worker = -1;
  std::string address;
};

// PlanPutReply.
struct PutPlan {
  PushSessionInfo session;
  std::vector<PutRoute> pieces;
  std::string note;
};

// StageThroughChunk: one StageParams chunk for `worker` (model, generation
// and version come from the session).
struct RelayChunk {
  std::string push_id;
  int64_t worker = -1;
  std::string param;
  BoxIr box;
  int64_t total_bytes = 0;
  int64_t offset = 0;
  std::string data;
};

class PushSessions {
 public:
  // ParamVersions::BeginPush for `model`.
  using BeginFn = std::function<absl::StatusOr<std::unique_ptr<ParamPush>>(const std::string&)>;
  struct Options {
    absl::Duration ttl = absl::Seconds(300);  // --push_ttl_s
    std::function<absl::Time()> now = [] { return absl::Now(); };
    bool reaper = true;
  };

  PushSessions(BeginFn begin, Options options);
  ~PushSessions() { Shutdown(); }
  // Stops the reaper and aborts every open session (later calls: kNotFound).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  PushSessions(const PushSessions&) = delete;
  PushSessions& operator=(const PushSessions&) = delete;

  // \error as ParamVersions::BeginPush.
  absl::StatusOr<PushSessionInfo> BeginPush(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);
  // \error kNotFound naming an unknown, ended or expired push_id;
  //   kInvalidArgument when the session is another model's.
  absl::StatusOr<PushSessionInfo> JoinPush(const std::string& model, const std::string& push_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The pieces of box [offset, offset + shape) of tensor `name` (empty
  // offset: the origin; empty shape: the rest of the tensor from offset).
  // \error as JoinPush; kNotFound for an unknown name; kInvalidArgument
  //   naming a rank or bounds error. A failed PlanPut leaves the session as
  //   it was.
  absl::StatusOr<PutPlan> PlanPut(const std::string& model, const std::string& push_id,
                                  const std::string& name, const std::vector<int64_t>& offset,
                                  const std::vector<int64_t>& shape) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the session: the new version, or the refusal (then aborted).
  // \error as JoinPush; kInvalidArgument naming a param and an uncovered box
  //   (or "no params" when nothing was put); the commit's errors
  //   (ParamPush::Finish).
  // `deadline` bounds the commit's wait for --max_live_versions (infinite:
  // --load_timeout from the start of the wait).
  absl::StatusOr<PushResult> CommitPush(const std::string& model, const std::string& push_id,
                                        absl::Time deadline = absl::InfiniteFuture())
      ABSL_LOCKS_EXCLUDED(mu_);
  // \error as JoinPush.
  absl::Status AbortPush(const std::string& model, const std::string& push_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Relays the chunks `next` yields (false: the stream ended) to their
  // workers, one StageSender (stage_sender.h) per worker; all of one stream
  // belong to one session. Returns the data bytes relayed.
  // \error as JoinPush; kInvalidArgument for a worker not on the session's
  //   placement or a chunk of another session; the workers' staging errors.
  absl::StatusOr<int64_t> StageThrough(const std::function<bool(RelayChunk*)>& next)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops every session untouched for ttl (see the top); returns how many.
  int ExpireIdle() ABSL_LOCKS_EXCLUDED(mu_);
  // Open sessions.
  int size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Session {
    PushSessionInfo info;
    absl::Mutex mu;
    std::unique_ptr<ParamPush> push ABSL_GUARDED_BY(mu);  // null once ended
  };
  struct Entry {
    std::shared_ptr<Session> session;
    absl::Time touched;
  };

  // The session of push_id (touched); `take` removes it from the registry.
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& model,
                                                const std::string& push_id, bool take)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Reap();

  const BeginFn begin_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);  // by push_id
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAMS_PUSH_SESSIONS_H_
