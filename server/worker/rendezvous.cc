#include "server/worker/rendezvous.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

std::string SliceName(absl::string_view request_id, absl::string_view tag) {
  return absl::StrCat("request '", request_id, "' tag '", tag, "'");
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
    arrived_.SignalAll();
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

void Rendezvous::EraseRequestLocked(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (auto& [tag, slice] : it->second.slices) UnchargeLocked(&slice);
  requests_.erase(it);
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
    if (!cur->second.running && now - cur->second.created > options_.orphan_ttl) {
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

absl::Status Rendezvous::DeliverChunk(absl::string_view request_id,
                                      absl::string_view tag, int64_t total_bytes,
                                      int64_t offset, absl::string_view data,
                                      int64_t src_worker, int dtype) {
  const int64_t size = static_cast<int64_t>(data.size());
  if (total_bytes < 0 || total_bytes > options_.max_slice_bytes) {
    return InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                           ": total_bytes ", total_bytes, " outside [0, ",
                           options_.max_slice_bytes, "]");
  }
  absl::MutexLock lock(&mu_);
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
    arrived_.SignalAll();
    return error;
  }
  if (size > 0) std::memcpy(&slice.bytes[offset], data.data(), size);
  slice.received += size;
  if (slice.complete()) arrived_.SignalAll();
  return absl::OkStatus();
}

absl::Status Rendezvous::DeliverSlice(absl::string_view request_id,
                                      absl::string_view tag, std::string bytes,
                                      int64_t src_worker, int dtype) {
  const int64_t total = static_cast<int64_t>(bytes.size());
  if (total > options_.max_slice_bytes) {
    return InvalidArgument(SliceName(request_id, tag), " from worker ", src_worker,
                           ": total_bytes ", total, " outside [0, ",
                           options_.max_slice_bytes, "]");
  }
  absl::MutexLock lock(&mu_);
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
    arrived_.SignalAll();
    return slice.error;
  }
  MS_RETURN_IF_ERROR(ChargeLocked(request_id, tag, src_worker, total, &slice));
  slice.bytes = std::move(bytes);
  slice.total_bytes = total;
  slice.received = total;
  slice.src_worker = src_worker;
  slice.dtype = dtype;
  arrived_.SignalAll();
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
  absl::MutexLock lock(&mu_);
  while (true) {
    auto done = done_.find(request_id);
    if (done != done_.end()) {
      if (!done->second.ok()) return done->second;
      return FailedPrecondition(SliceName(request_id, tag),
                                ": the request already finished");
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
        return received;
      }
    }
    if (arrived_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      // Re-check once more: the slice may have completed exactly at the deadline.
      auto again = requests_.find(request_id);
      if (again != requests_.end()) {
        auto slice = again->second.slices.find(tag);
        if (slice != again->second.slices.end() && slice->second.complete()) continue;
      }
      int64_t have = 0, total = -1;
      if (again != requests_.end()) {
        auto slice = again->second.slices.find(tag);
        if (slice != again->second.slices.end()) {
          have = slice->second.received;
          total = slice->second.total_bytes;
        }
      }
      return absl::DeadlineExceededError(absl::StrCat(
          SliceName(request_id, tag), ": no complete slice from worker ", src_worker,
          " before the deadline (", total < 0 ? std::string("nothing") :
          absl::StrCat(have, " of ", total, " bytes"), " received)"));
    }
  }
}

void Rendezvous::Cancel(absl::string_view request_id, absl::string_view reason) {
  Fail(request_id,
       absl::AbortedError(absl::StrCat("request '", request_id, "' cancelled: ", reason)));
}

void Rendezvous::Fail(absl::string_view request_id, absl::Status status) {
  absl::MutexLock lock(&mu_);
  std::string id(request_id);
  auto [it, inserted] = done_.try_emplace(id, std::move(status));
  if (inserted) {
    RememberLocked(id);
  } else if (it->second.ok()) {
    return;  // already finished: nothing to abort
  }
  EraseRequestLocked(id);
  arrived_.SignalAll();
}

void Rendezvous::FinishRequest(absl::string_view request_id) {
  absl::MutexLock lock(&mu_);
  std::string id(request_id);
  EraseRequestLocked(id);
  if (done_.try_emplace(id, absl::OkStatus()).second) RememberLocked(id);
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
