// PushSessions (push_sessions.h): the registry, a put's resolution to param
// pieces and routes, expiry and the StageThrough relay.
#include "server/coordinator/params/push_sessions.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "server/coordinator/params/stage_sender.h"
#include "server/coordinator/params/tensor_names.h"

namespace meshserve {
namespace {

// 128 random bits as 32 hex digits.
std::string NewPushId() {
  std::random_device rd;
  auto word = [&rd] { return (static_cast<uint64_t>(rd()) << 32) | static_cast<uint64_t>(rd()); };
  const uint64_t high = word();
  return absl::StrFormat("%016x%016x", high, word());
}

// One param's share of a put box.
struct ParamPiece {
  const ParamDef* param = nullptr;
  Box box;                          // the param's global coordinates
  std::vector<int64_t> dst_offset;  // where it starts inside the put box
};

// The pieces of box [offset, offset + shape) of tensor `name` (a param or a
// checkpoint tensor; tensor_names.h). A box outside the tensor is a bad
// field here (kInvalidArgument), as the proto says.
absl::StatusOr<std::vector<ParamPiece>> ResolvePut(const ModelFile& model,
                                                   const std::string& name,
                                                   const std::vector<int64_t>& offset,
                                                   const std::vector<int64_t>& shape,
                                                   std::string* note) {
  absl::StatusOr<ResolvedBox> resolved = ResolveTensorBox(model, name, offset, shape);
  if (absl::IsOutOfRange(resolved.status())) {
    return absl::InvalidArgumentError(resolved.status().message());
  }
  MS_RETURN_IF_ERROR(resolved.status());
  *note = resolved->note;
  if (resolved->uncovered > 0) {
    absl::StrAppend(note, note->empty() ? "" : "; ", resolved->uncovered, " elements of '", name,
                    "' are read by no param: ignored");
  }
  std::vector<ParamPiece> pieces;
  for (TensorPiece& piece : resolved->pieces) {
    const ParamDef* param = model.FindParam(piece.param);
    if (param == nullptr) {
      return Internal("tensor '", name, "' resolved to no param '", piece.param, "'");
    }
    pieces.push_back(ParamPiece{param, std::move(piece.box), std::move(piece.dst_offset)});
  }
  return pieces;
}

absl::Status Ended(const std::string& push_id) {
  return NotFound("push session '", push_id, "' has ended (committed, aborted or expired)");
}

}  // namespace

PushSessions::PushSessions(BeginFn begin, Options options)
    : begin_(std::move(begin)), options_(std::move(options)) {
  if (options_.reaper) reaper_ = std::thread([this] { Reap(); });
}

void PushSessions::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (reaper_.joinable()) reaper_.join();
  std::map<std::string, Entry> open;
  {
    absl::MutexLock lock(&mu_);
    open.swap(sessions_);
  }
  for (auto& [id, entry] : open) {
    std::unique_ptr<ParamPush> push;
    {
      absl::MutexLock lock(&entry.session->mu);
      push = std::move(entry.session->push);
    }
    push.reset();  // aborts on every worker
  }
}

void PushSessions::Reap() {
  const absl::Duration period =
      std::clamp(options_.ttl / 4, absl::Milliseconds(10), absl::Seconds(1));
  while (!stop_.WaitForNotificationWithTimeout(period)) ExpireIdle();
}

int PushSessions::ExpireIdle() {
  std::vector<std::pair<std::string, std::shared_ptr<Session>>> dropped;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (now - it->second.touched < options_.ttl) {
        ++it;
        continue;
      }
      dropped.emplace_back(it->first, std::move(it->second.session));
      it = sessions_.erase(it);
    }
  }
  for (auto& [id, session] : dropped) {
    std::unique_ptr<ParamPush> push;
    {
      absl::MutexLock lock(&session->mu);
      push = std::move(session->push);
    }
    MS_LOG(INFO) << "push session " << id << " to model '" << session->info.model
                 << "' expired after " << absl::FormatDuration(options_.ttl)
                 << " untouched; aborting it on every worker";
    push.reset();
  }
  return static_cast<int>(dropped.size());
}

int PushSessions::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

absl::StatusOr<std::shared_ptr<PushSessions::Session>> PushSessions::Find(
    const std::string& model, const std::string& push_id, bool take) {
  ExpireIdle();  // an overdue session is gone even between reaper ticks
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(push_id);
  if (it == sessions_.end()) {
    return NotFound("push session '", push_id, "' not found: unknown, ended, or expired (",
                    "untouched for --push_ttl_s=", absl::ToDoubleSeconds(options_.ttl), ")");
  }
  std::shared_ptr<Session> session = it->second.session;
  if (!model.empty() && session->info.model != model) {
    return InvalidArgument("push session '", push_id, "' is a push to model '",
                           session->info.model, "', not '", model, "'");
  }
  it->second.touched = options_.now();
  if (take) sessions_.erase(it);
  return session;
}

absl::StatusOr<PushSessionInfo> PushSessions::BeginPush(const std::string& model) {
  ExpireIdle();  // an expired session of the model releases its admission
  MS_ASSIGN_OR_RETURN(std::unique_ptr<ParamPush> push, begin_(model));
  auto session = std::make_shared<Session>();
  session->info = PushSessionInfo{"", model, push->generation(), push->version(),
                                  absl::ToDoubleSeconds(options_.ttl)};
  {
    absl::MutexLock lock(&session->mu);
    session->push = std::move(push);
  }
  absl::MutexLock lock(&mu_);
  std::string id = NewPushId();
  while (sessions_.count(id) > 0) id = NewPushId();
  session->info.push_id = id;
  sessions_[id] = Entry{session, options_.now()};
  MS_LOG(INFO) << "push session " << id << " to model '" << model << "' version "
               << session->info.version << " begun";
  return session->info;
}

absl::StatusOr<PushSessionInfo> PushSessions::JoinPush(const std::string& model,
                                                       const std::string& push_id) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(model, push_id, false));
  return session->info;
}

absl::StatusOr<PutPlan> PushSessions::PlanPut(const std::string& model,
                                              const std::string& push_id,
                                              const std::string& name,
                                              const std::vector<int64_t>& offset,
                                              const std::vector<int64_t>& shape) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(model, push_id, false));
  absl::MutexLock lock(&session->mu);
  if (session->push == nullptr) return Ended(push_id);
  ParamPush& push = *session->push;
  PutPlan plan;
  plan.session = session->info;
  MS_ASSIGN_OR_RETURN(std::vector<ParamPiece> pieces,
                      ResolvePut(push.model_file(), name, offset, shape, &plan.note));
  for (const ParamPiece& piece : pieces) {
    MS_ASSIGN_OR_RETURN(std::vector<PushPlan::Route> routes, push.Put(*piece.param, piece.box));
    for (PushPlan::Route& r : routes) {
      PutRoute out{piece.param->name, piece.param->dtype, piece.dst_offset, std::move(r.piece),
                   r.worker, std::move(r.address)};
      for (int d = 0; d < out.box.rank(); ++d) {
        out.src_offset[d] += out.box.dims()[d].begin - piece.box.dims()[d].begin;
      }
      plan.pieces.push_back(std::move(out));
    }
  }
  return plan;
}

absl::StatusOr<PushResult> PushSessions::CommitPush(const std::string& model,
                                                    const std::string& push_id,
                                                    absl::Time deadline) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(model, push_id, /*take=*/true));
  std::unique_ptr<ParamPush> push;
  {
    absl::MutexLock lock(&session->mu);  // waits for a PlanPut in progress
    push = std::move(session->push);
  }
  if (push == nullptr) return Ended(push_id);
  absl::StatusOr<PushResult> result = push->Finish(deadline);
  if (!result.ok()) {
    MS_LOG(INFO) << "push session " << push_id << " to model '" << model
                 << "' refused at its commit (aborted on every worker): " << result.status();
  }
  push.reset();  // a refused commit aborts on every worker; either way releases
  return result;
}

absl::Status PushSessions::AbortPush(const std::string& model, const std::string& push_id) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(model, push_id, /*take=*/true));
  std::unique_ptr<ParamPush> push;
  {
    absl::MutexLock lock(&session->mu);
    push = std::move(session->push);
  }
  if (push == nullptr) return Ended(push_id);
  push.reset();  // aborts on every worker
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PushSessions::StageThrough(const std::function<bool(RelayChunk*)>& next) {
  RelayChunk chunk;
  std::string push_id;
  PushSessionInfo info;
  PushTarget target;  // placement and client only
  std::map<int64_t, std::unique_ptr<StageSender>> senders;
  int64_t bytes = 0;
  while (next(&chunk)) {
    if (push_id.empty()) {
      MS_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find("", chunk.push_id, false));
      absl::MutexLock lock(&session->mu);
      if (session->push == nullptr) return Ended(chunk.push_id);
      info = session->info;
      target.placement = session->push->target().placement;
      target.client = session->push->target().client;
      target.timeout = session->push->target().timeout;
      push_id = chunk.push_id;
    } else if (!chunk.push_id.empty() && chunk.push_id != push_id) {
      return InvalidArgument("StageThrough: a chunk of push session '", chunk.push_id,
                             "' in the stream of push session '", push_id, "'");
    } else {
      MS_RETURN_IF_ERROR(Find("", push_id, false).status());  // touches it
    }
    auto sender = senders.find(chunk.worker);
    if (sender == senders.end()) {
      if (target.placement->worker_addresses.count(chunk.worker) == 0) {
        return InvalidArgument("StageThrough: worker ", chunk.worker,
                               " is not on the placement of push session '", push_id, "'");
      }
      MS_ASSIGN_OR_RETURN(std::shared_ptr<WorkerClient> client, target.client(chunk.worker));
      MS_ASSIGN_OR_RETURN(std::unique_ptr<StageParamsWriter> writer,
                          client->StageParams(target.timeout), "worker ", chunk.worker);
      sender = senders
                   .emplace(chunk.worker,
                            std::make_unique<StageSender>(chunk.worker, std::move(writer)))
                   .first;
    }
    bytes += static_cast<int64_t>(chunk.data.size());
    MS_RETURN_IF_ERROR(sender->second->Enqueue(
        StageChunkIr{info.model, info.generation, info.version, std::move(chunk.param),
                     std::move(chunk.box), chunk.total_bytes, chunk.offset,
                     std::move(chunk.data)}));
    chunk = RelayChunk();
  }
  absl::Status first;
  for (auto& [id, sender] : senders) {
    absl::Status s = sender->Close();
    if (first.ok()) first = s;
  }
  MS_RETURN_IF_ERROR(first);
  return bytes;
}

}  // namespace meshserve
