#include "server/coordinator/batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_util.h"

namespace meshserve {

// One queued request; written under mu_ (result, done) by the batch's runner.
struct Batcher::Pending {
  const InferRequest* request = nullptr;
  int64_t rows = 0;
  absl::Time arrived;
  absl::Time deadline;
  absl::StatusOr<InferResponse> result = absl::UnknownError("not run");
  bool done = false;
};

// Requests with one batch key, collected until the first one's delay ends or
// the rows reach max_batch_size (full). Members are owned by their callers.
struct Batcher::Group {
  std::vector<Pending*> members;
  int64_t rows = 0;
  bool full = false;
};

namespace batcher_internal {

int64_t BatchRows(const ValidatedRequest& v, std::string* key) {
  int64_t rows = 0;
  std::vector<std::string> parts;
  for (const auto& [name, shape] : v.shapes) {
    if (shape.empty()) return -1;
    if (rows != 0 && shape[0] != rows) return -1;
    rows = shape[0];
    std::vector<int64_t> rest(shape.begin() + 1, shape.end());
    parts.push_back(absl::StrCat(name, "[", absl::StrJoin(rest, ","), "]"));
  }
  for (const auto& [name, spec] : v.out_specs) parts.push_back(name + "=" + spec.ToString());
  // A converted input (INT64 ids for an int32 input) concatenates only with
  // requests that sent the same dtype.
  for (const auto& c : v.converted) parts.push_back(c->name + "(converted)");
  parts.push_back(absl::StrCat("->", absl::StrJoin(v.outputs, ",")));
  *key = absl::StrJoin(parts, ";");
  return rows;
}

InferRequest Concatenate(const std::vector<const InferRequest*>& requests,
                         absl::Duration timeout) {
  const InferRequest& first = *requests.front();
  InferRequest batch;
  batch.model = first.model;
  batch.id = absl::StrCat("batch", requests.size());
  batch.requested_outputs = first.requested_outputs;
  batch.out_shardings = first.out_shardings;
  batch.timeout = timeout;
  for (const NamedTensor& in : first.inputs) {
    NamedTensor& out = batch.inputs.emplace_back();
    out.name = in.name;
    out.dtype = in.dtype;
    out.shape = in.shape;
    out.shape[0] = 0;
    size_t bytes = 0;
    for (const InferRequest* r : requests) {
      for (const NamedTensor& x : r->inputs) bytes += x.name == in.name ? x.bytes.size() : 0;
    }
    out.bytes.reserve(bytes);
    for (const InferRequest* r : requests) {
      for (const NamedTensor& x : r->inputs) {
        if (x.name != in.name) continue;
        out.shape[0] += x.shape[0];
        out.bytes.append(x.bytes);
      }
    }
  }
  return batch;
}

absl::StatusOr<InferResponse> SplitRows(const InferResponse& batch, int64_t row, int64_t rows,
                                        int64_t total) {
  InferResponse r;
  r.model = batch.model;
  r.generation = batch.generation;
  r.compute_us = batch.compute_us;
  for (const InferOutput& batched : batch.outputs) {
    const NamedTensor& out = batched.tensor;
    if (out.shape.empty() || out.shape[0] != total || total <= 0) {
      return Internal("batched output '", out.name, "' has leading dim ",
                      out.shape.empty() ? 0 : out.shape[0], ", expected the batch's ", total,
                      " rows");
    }
    const size_t row_bytes = out.bytes.size() / static_cast<size_t>(total);
    InferOutput& o = r.outputs.emplace_back();
    o.tensor.name = out.name;
    o.tensor.dtype = out.dtype;
    o.tensor.shape = out.shape;
    o.tensor.shape[0] = rows;
    o.type_str = batched.type_str;
    o.tensor.bytes = out.bytes.substr(static_cast<size_t>(row) * row_bytes,
                                      static_cast<size_t>(rows) * row_bytes);
  }
  return r;
}

}  // namespace batcher_internal

Batcher::Batcher(BatchingConfig config, RunFn run)
    : config_(config), run_(std::move(run)) {}

absl::StatusOr<InferResponse> Batcher::Infer(const InferRequest& request,
                                             const ValidatedRequest& v,
                                             absl::Duration timeout) {
  std::string key;
  const int64_t rows = batcher_internal::BatchRows(v, &key);
  if (rows < 1 || rows > config_.max_batch_size) {  // runs alone
    absl::StatusOr<InferResponse> r = run_(request);
    if (r.ok()) r->batch_size = std::max<int64_t>(rows, 1);
    return r;
  }
  Pending me;
  me.request = &request;
  me.rows = rows;
  me.arrived = absl::Now();
  me.deadline = me.arrived + timeout;
  std::shared_ptr<Group> group;
  {
    absl::MutexLock lock(&mu_);
    if (queued_ >= config_.max_queue_size) {
      return absl::ResourceExhaustedError(absl::StrCat("model '", request.model, "': ", queued_,
                                                  " requests queued for batching (max_queue_size ",
                                                  config_.max_queue_size, ")"));
    }
    ++queued_;
    auto it = open_.find(key);
    if (it != open_.end() && it->second->rows + rows <= config_.max_batch_size) {
      Group& g = *it->second;  // join; the group's first request runs it
      g.members.push_back(&me);
      g.rows += rows;
      if (g.rows >= config_.max_batch_size) {
        g.full = true;
        open_.erase(it);
      }
      mu_.Await(absl::Condition(&me.done));
      return std::move(me.result);
    }
    if (it != open_.end()) {  // no room: close it, start the next one
      it->second->full = true;
      open_.erase(it);
    }
    group = std::make_shared<Group>();
    group->members.push_back(&me);
    group->rows = rows;
    group->full = rows >= config_.max_batch_size;
    if (!group->full) open_[key] = group;
    // Wait for the delay (or a full batch), then for a free execution slot
    // (max_concurrent_batches): requests keep joining meanwhile, as in Triton.
    const absl::Duration delay = absl::Microseconds(config_.max_queue_delay_us);
    mu_.AwaitWithDeadline(absl::Condition(&group->full), me.arrived + delay);
    const bool waited_for_slot = !IdleLocked();
    mu_.Await(absl::Condition(this, &Batcher::IdleLocked));
    if (waited_for_slot) {
      // A batch ended the wait: the requests its clients send next get one
      // more delay to join this one, which would otherwise start before they
      // arrive (closed-loop clients then split into alternating half batches,
      // each streaming all the weights).
      mu_.AwaitWithDeadline(absl::Condition(&group->full), absl::Now() + delay);
      mu_.Await(absl::Condition(this, &Batcher::IdleLocked));
    }
    auto open = open_.find(key);
    if (open != open_.end() && open->second == group) open_.erase(open);
    group->full = true;  // closed: nobody joins any more
    ++running_;
  }
  RunGroup(*group, absl::Now());
  return std::move(me.result);
}

void Batcher::RunGroup(const Group& group, absl::Time started) {
  // The group is closed: its members and their requests no longer change.
  std::vector<Pending*> live;
  std::vector<const InferRequest*> requests;
  std::vector<absl::StatusOr<InferResponse>> answers(group.members.size());
  int64_t total = 0;
  absl::Time last_deadline = started;
  for (size_t i = 0; i < group.members.size(); ++i) {
    const Pending& p = *group.members[i];
    if (p.deadline <= started) {
      answers[i] = absl::DeadlineExceededError(absl::StrCat(
          "request '", p.request->id, "' of model '", p.request->model, "': deadline passed after ",
          absl::ToInt64Microseconds(started - p.arrived), " us queued for batching"));
      continue;
    }
    live.push_back(group.members[i]);
    requests.push_back(p.request);
    total += p.rows;
    last_deadline = std::max(last_deadline, p.deadline);
  }
  absl::StatusOr<InferResponse> batch = absl::UnknownError("not run");
  if (live.size() == 1) batch = run_(*requests[0]);
  if (live.size() > 1) {
    batch = run_(batcher_internal::Concatenate(requests, last_deadline - started));
  }
  int64_t row = 0;
  for (size_t i = 0; i < group.members.size(); ++i) {
    const Pending& p = *group.members[i];
    if (p.deadline <= started) continue;
    absl::StatusOr<InferResponse>& r = answers[i];
    if (!batch.ok()) {
      r = batch.status();
    } else {
      r = live.size() == 1 ? *batch : batcher_internal::SplitRows(*batch, row, p.rows, total);
    }
    row += p.rows;
    if (r.ok()) {
      r->id = p.request->id;
      r->batch_size = total;
      r->queue_us = absl::ToInt64Microseconds(started - p.arrived);
    }
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < group.members.size(); ++i) {
    group.members[i]->result = std::move(answers[i]);
    group.members[i]->done = true;
  }
  queued_ -= static_cast<int64_t>(group.members.size());
  --running_;
}

}  // namespace meshserve
