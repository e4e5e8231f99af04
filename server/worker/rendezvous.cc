#include "server/worker/rendezvous.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

std::string SliceName(absl::string_view request_id, absl::string_view tag) {
  return absl::StrCat("request '", request_id, "' tag '", tag, "'");
}

// Runs the waiters' callbacks taken under the lock (after releasing it).
void RunAll(std::vector<Rendezvous::Ready>& wake) {
  for (Rendezvous::Ready& ready : wake) ready();
}

}  // namespace

absl::Status Rendezvous::ValidateOptions(const Options& options) {
  if (options.max_inflight_slice_bytes < 1) {
    return InvalidArgument("max_inflight_slice_bytes must be at least 1, got ",
                           options.max_inflight_slice_bytes);
  }
  if (options.max_slice_bytes < 0) {
    return InvalidArgument("max_slice_bytes must be >= 0, got ", options.max_slice_bytes);
  }
  if (options.max_remembered_requests < 1) {
    return InvalidArgument("max_remembered_requests must be at least 1, got ",
                           options.max_remembered_requests);
  }
  return absl::OkStatus();
}

absl::Status Rendezvous::ChargeLocked(absl::string_view request_id, absl::string_view tag,
                                      int64_t src_worker, int64_t bytes, Slice* slice) {
  // inflight_bytes_ <= budget always, so the subtraction cannot overflow.
  if (bytes > options_.max_inflight_slice_bytes - inflight_bytes_) {
    slice->refused = true;
    slice->error = absl::ResourceExhaustedError(absl::StrCat(
        SliceName(request_id, tag), " from worker ", src_worker, ": a slice of ", bytes,
        " bytes does not fit: ", inflight_bytes_, " of this worker's ",
        options_.max_inflight_slice_bytes,
        " bytes for slices in flight are in use (--max_inflight_slice_bytes=",
        options_.max_inflight_slice_bytes, "); retry later"));
    return slice->error;
  }
  inflight_bytes_ += bytes;
  slice->charged = bytes;
  return absl::OkStatus();
}

void Rendezvous::UnchargeLocked(Slice* slice) {
  inflight_bytes_ -= slice->charged;
  slice->charged = 0;
}

void Rendezvous::EraseRequestLocked(const std::string& request_id, std::vector<Ready>* wake) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (auto& [tag, slice] : it->second.slices) UnchargeLocked(&slice);
  if (it->second.waiter.has_value()) wake->push_back(std::move(it->second.waiter->ready));
  requests_.erase(it);
}

void Rendezvous::WakeLocked(absl::string_view request_id, absl::string_view tag,
                            std::vector<Ready>* wake) {
  auto it = requests_.find(request_id);
  if (it == requests_.end() || !it->second.waiter.has_value() ||
      it->second.waiter->tag != tag) {
    return;
  }
  auto slice = it->second.slices.find(tag);
  if (slice == it->second.slices.end()) return;
  if (!slice->second.complete() && slice->second.error.ok()) return;
  wake->push_back(std::move(it->second.waiter->ready));
  it->second.waiter.reset();
}


void Rendezvous::RememberLocked(const std::string& request_id) {
  done_order_.push_back(request_id);
  while (static_cast<int64_t>(done_order_.size()) >
         options_.max_remembered_requests) {
    done_.erase(done_order_.front());
    done_order_.pop_front();
  }
}

void Rendezvous::CollectOrphansLocked(absl::Time now) {
  if (now - last_collect_ < options_.orphan_ttl / 4) return;
  last_collect_ = now;
  for (auto it = requests_.begin(); it != requests_.end();) {
    auto cur = it++;
    if (!cur->second.running && !cur->second.waiter.has_value() &&
        now - cur->second.created > options_.orphan_ttl) {
      for (auto& [tag, slice] : cur->second.slices) UnchargeLocked(&slice);
      requests_.erase(cur);
    }
  }
}

Rendezvous::RequestSlices* Rendezvous::FindOrCreateLocked(
    absl::string_view request_id) {
  if (done_.contains(request_id)) return nullptr;
  auto [it, inserted] = requests_.try_emplace(std::string(request_id));
  if (inserted) {
    absl::Time now = absl::Now();
    it->second.created = now;
    CollectOrphansLocked(now);
    // CollectOrphansLocked never erases the entry just created (age 0).
  }
  return &it->second;
}

absl::Status Rendezvous::CheckTotal(absl::string_view request_id, absl::string_view tag,
                                    int64_t src_worker, int64_t total_bytes) const {
  if (total_bytes >= 0 && total_bytes <= options_.max_slice_bytes) return absl::OkStatus();
  return InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                         ": total_bytes ", total_bytes, " outside [0, ",
                         options_.max_slice_bytes, "]");
}

template <typename Locked>
absl::Status Rendezvous::DeliverAndWake(absl::string_view request_id, absl::string_view tag,
                                        Locked deliver) {
  std::vector<Ready> wake;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = deliver();
    WakeLocked(request_id, tag, &wake);
  }
  RunAll(wake);
  return status;
}

absl::Status Rendezvous::DeliverChunk(absl::string_view request_id,
                                      absl::string_view tag, int64_t total_bytes,
                                      int64_t offset, absl::string_view data,
                                      int64_t src_worker, std::optional<DType> dtype) {
  MS_RETURN_IF_ERROR(CheckTotal(request_id, tag, src_worker, total_bytes));
  return DeliverAndWake(request_id, tag, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return DeliverChunkLocked(request_id, tag, total_bytes, offset, data, src_worker, dtype);
  });
}

absl::Status Rendezvous::DeliverChunkLocked(absl::string_view request_id,
                                            absl::string_view tag, int64_t total_bytes,
                                            int64_t offset, absl::string_view data,
                                            int64_t src_worker, std::optional<DType> dtype) {
  const int64_t size = static_cast<int64_t>(data.size());
  RequestSlices* request = FindOrCreateLocked(request_id);
  if (request == nullptr) return absl::OkStatus();  // late chunk: drop
  auto [it, inserted] = request->slices.try_emplace(std::string(tag));
  Slice& slice = it->second;
  if (inserted) {
    slice.total_bytes = total_bytes;
    slice.src_worker = src_worker;
    slice.dtype = dtype;
    MS_RETURN_IF_ERROR(ChargeLocked(request_id, tag, src_worker, total_bytes, &slice));
    slice.bytes.resize(total_bytes);
  }
  if (!slice.error.ok()) return slice.error;
  absl::Status error;
  if (total_bytes != slice.total_bytes) {
    error = InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                            ": chunk says total_bytes ", total_bytes,
                            " but the slice has ", slice.total_bytes);
  } else if (slice.complete() && !inserted) {
    error = InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                            ": a second slice under a tag already complete");
  } else if (offset != slice.received) {
    error = InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                            ": chunk offset ", offset, " but ", slice.received,
                            " bytes received so far (chunks must arrive in order)");
  } else if (size > total_bytes - offset) {
    error = InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                            ": chunk [", offset, ", ", offset + size,
                            ") overruns total_bytes ", total_bytes);
  }
  if (!error.ok()) {
    slice.error = error;
    slice.bytes.clear();
    slice.bytes.shrink_to_fit();
    UnchargeLocked(&slice);
    return error;
  }
  if (size > 0) std::memcpy(&slice.bytes[offset], data.data(), size);
  slice.received += size;
  return absl::OkStatus();
}

absl::Status Rendezvous::DeliverSlice(absl::string_view request_id,
                                      absl::string_view tag, std::string bytes,
                                      int64_t src_worker, std::optional<DType> dtype) {
  MS_RETURN_IF_ERROR(
      CheckTotal(request_id, tag, src_worker, static_cast<int64_t>(bytes.size())));
  return DeliverAndWake(request_id, tag, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return DeliverSliceLocked(request_id, tag, std::move(bytes), src_worker, dtype);
  });
}

absl::Status Rendezvous::DeliverSliceLocked(absl::string_view request_id,
                                            absl::string_view tag, std::string bytes,
                                            int64_t src_worker, std::optional<DType> dtype) {
  const int64_t total = static_cast<int64_t>(bytes.size());
  RequestSlices* request = FindOrCreateLocked(request_id);
  if (request == nullptr) return absl::OkStatus();
  auto [it, inserted] = request->slices.try_emplace(std::string(tag));
  Slice& slice = it->second;
  if (!inserted) {
    if (!slice.error.ok()) return slice.error;
    slice.error = InvalidArgument(SliceName(request_id, tag), " from worker ",
                                  src_worker, ": a second slice under a tag already ",
                                  slice.complete() ? "complete" : "being received");
    slice.bytes.clear();
    slice.bytes.shrink_to_fit();
    UnchargeLocked(&slice);
    return slice.error;
  }
  MS_RETURN_IF_ERROR(ChargeLocked(request_id, tag, src_worker, total, &slice));
  slice.bytes = std::move(bytes);
  slice.total_bytes = total;
  slice.received = total;
  slice.src_worker = src_worker;
  slice.dtype = dtype;
  return absl::OkStatus();
}

absl::Status Rendezvous::StartRequest(absl::string_view request_id) {
  absl::MutexLock lock(&mu_);
  auto done = done_.find(request_id);
  if (done != done_.end()) {
    if (!done->second.ok()) return done->second;
    return absl::AlreadyExistsError(
        absl::StrCat("request '", request_id, "' already ran on this worker"));
  }
  RequestSlices* request = FindOrCreateLocked(request_id);
  if (request->running) {
    return absl::AlreadyExistsError(
        absl::StrCat("request '", request_id, "' is already running on this worker"));
  }
  request->running = true;
  return absl::OkStatus();
}

absl::StatusOr<Rendezvous::Received> Rendezvous::Receive(absl::string_view request_id,
                                                         absl::string_view tag,
                                                         int64_t src_worker,
                                                         absl::Time deadline) {
  while (true) {
    auto arrived = std::make_shared<absl::Notification>();
    MS_ASSIGN_OR_RETURN(std::optional<Received> got,
                        TryReceive(request_id, tag, src_worker, deadline, [&arrived]() -> Ready {
                          return [arrived]() { arrived->Notify(); };
                        }));
    if (got.has_value()) return std::move(*got);
    // Past the deadline the next TryReceive takes a slice that came just in
    // time or reports the deadline.
    if (!arrived->WaitForNotificationWithDeadline(deadline)) RemoveWaiter(request_id);
  }
}

absl::StatusOr<std::optional<Rendezvous::Received>> Rendezvous::TryReceive(
    absl::string_view request_id, absl::string_view tag, int64_t src_worker,
    absl::Time deadline, absl::FunctionRef<Ready()> make_ready) {
  absl::MutexLock lock(&mu_);
  auto done = done_.find(request_id);
  if (done != done_.end()) {
    if (!done->second.ok()) return done->second;
    return FailedPrecondition(SliceName(request_id, tag), ": the request already finished");
  }
  RequestSlices* request = FindOrCreateLocked(request_id);
  auto it = request->slices.find(tag);
  if (it != request->slices.end()) {
    if (!it->second.error.ok()) {
      absl::Status error = it->second.error;
      // A refused slice stays (its later chunks are refused too).
      if (!it->second.refused) request->slices.erase(it);
      return error;
    }
    if (it->second.complete()) {
      Received received{std::move(it->second.bytes), it->second.dtype};
      UnchargeLocked(&it->second);
      request->slices.erase(it);
      return std::optional<Received>(std::move(received));
    }
  }
  if (absl::Now() >= deadline) return DeadlineErrorLocked(request_id, tag, src_worker);
  if (request->waiter.has_value()) {
    return FailedPrecondition(SliceName(request_id, tag), ": a receive of tag '",
                              request->waiter->tag, "' is already waiting");
  }
  request->waiter = Waiter{std::string(tag), src_worker, make_ready()};
  return std::optional<Received>();
}

absl::Status Rendezvous::DeadlineErrorLocked(absl::string_view request_id,
                                             absl::string_view tag,
                                             int64_t src_worker) const {
  int64_t have = 0, total = -1;
  auto request = requests_.find(request_id);
  if (request != requests_.end()) {
    auto slice = request->second.slices.find(tag);
    if (slice != request->second.slices.end()) {
      have = slice->second.received;
      total = slice->second.total_bytes;
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      SliceName(request_id, tag), ": no complete slice from worker ", src_worker,
      " before the deadline (",
      total < 0 ? std::string("nothing") : absl::StrCat(have, " of ", total, " bytes"),
      " received)"));
}

bool Rendezvous::RemoveWaiter(absl::string_view request_id) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end() || !it->second.waiter.has_value()) return false;
  it->second.waiter.reset();
  return true;
}

void Rendezvous::FailAll(absl::Status error) {
  std::vector<Ready> wake;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids;
    for (const auto& [id, request] : requests_) ids.push_back(id);
    for (const std::string& id : ids) {
      if (done_.try_emplace(id, error).second) RememberLocked(id);
      EraseRequestLocked(id, &wake);
    }
  }
  RunAll(wake);
}

void Rendezvous::Cancel(absl::string_view request_id, absl::string_view reason) {
  Fail(request_id,
       absl::AbortedError(absl::StrCat("request '", request_id, "' cancelled: ", reason)));
}

void Rendezvous::Fail(absl::string_view request_id, absl::Status status) {
  std::vector<Ready> wake;
  {
    absl::MutexLock lock(&mu_);
    std::string id(request_id);
    auto [it, inserted] = done_.try_emplace(id, std::move(status));
    if (inserted) {
      RememberLocked(id);
    } else if (it->second.ok()) {
      return;  // already finished: nothing to abort
    }
    EraseRequestLocked(id, &wake);
  }
  RunAll(wake);
}

void Rendezvous::FinishRequest(absl::string_view request_id) {
  std::vector<Ready> wake;
  {
    absl::MutexLock lock(&mu_);
    std::string id(request_id);
    EraseRequestLocked(id, &wake);
    if (done_.try_emplace(id, absl::OkStatus()).second) RememberLocked(id);
  }
  RunAll(wake);
}

int64_t Rendezvous::NumPendingSlices() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [id, request] : requests_) n += request.slices.size();
  return n;
}

int64_t Rendezvous::InflightSliceBytes() const {
  absl::MutexLock lock(&mu_);
  return inflight_bytes_;
}

}  // namespace meshserve
