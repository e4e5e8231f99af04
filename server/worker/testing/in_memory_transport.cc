#include "server/worker/testing/in_memory_transport.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace meshserve {

void InMemoryTransport::Register(int64_t worker_id, WorkerEngine* engine) {
  absl::MutexLock lock(&mu_);
  engines_[worker_id] = engine;
}

void InMemoryTransport::SetLinkDown(int64_t worker_id, bool down) {
  absl::MutexLock lock(&mu_);
  if (down) {
    down_.insert(worker_id);
  } else {
    down_.erase(worker_id);
  }
}

void InMemoryTransport::Send(OutgoingSlice slice, DoneCallback done) {
  WorkerEngine* engine = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = engines_.find(slice.dst_worker);
    if (it != engines_.end() && !down_.contains(slice.dst_worker)) {
      engine = it->second;
      bytes_sent_ += static_cast<int64_t>(slice.bytes.size());
      ++slices_sent_;
    }
  }
  if (engine == nullptr) {
    done(absl::UnavailableError(
        absl::StrCat("worker ", slice.dst_worker, " is unreachable (in-memory link down)")));
    return;
  }
  if (absl::Now() > slice.deadline) {
    done(absl::DeadlineExceededError(absl::StrCat(
        "send of tag '", slice.tag, "' to worker ", slice.dst_worker, " past the deadline")));
    return;
  }
  if (chunk_bytes_ <= 0) {
    done(engine->DeliverSlice(slice.request_id, slice.tag, std::move(slice.bytes),
                              slice.src_worker, slice.dtype));
    return;
  }
  const int64_t total = static_cast<int64_t>(slice.bytes.size());
  int64_t offset = 0;
  do {
    const int64_t n = std::min(chunk_bytes_, total - offset);
    absl::Status status = engine->DeliverChunk(
        slice.request_id, slice.tag, total, offset,
        absl::string_view(slice.bytes).substr(offset, n), slice.src_worker, slice.dtype);
    if (!status.ok()) {
      done(std::move(status));
      return;
    }
    offset += n;
  } while (offset < total);
  done(absl::OkStatus());
}

absl::Status InMemoryTransport::ReadParam(int64_t worker, const ReadParamIr& request,
                                          absl::Time deadline,
                                          const ParamChunkSink& on_chunk) {
  WorkerEngine* engine = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = engines_.find(worker);
    if (it != engines_.end() && !down_.contains(worker)) engine = it->second;
  }
  if (engine == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("worker ", worker, " is unreachable (in-memory link down)"));
  }
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("ReadParam of '", request.param, "' from worker ", worker,
                     " past the deadline"));
  }
  absl::StatusOr<ParamBytes> read = engine->ReadParam(request);
  if (!read.ok()) {
    return absl::Status(read.status().code(),
                        absl::StrCat("worker ", worker, ": ", read.status().message()));
  }
  const int64_t total = static_cast<int64_t>(read->bytes.size());
  const int64_t chunk = chunk_bytes_ > 0 ? chunk_bytes_ : int64_t{1} << 20;
  int64_t offset = 0;
  do {
    const int64_t n = std::min(chunk, total - offset);
    absl::Status status =
        on_chunk(ParamChunkView{total, offset, read->bytes.substr(offset, n), read->dtype});
    if (!status.ok()) return status;
    offset += n;
  } while (offset < total);
  absl::MutexLock lock(&mu_);
  param_bytes_read_ += total;
  ++param_reads_;
  return absl::OkStatus();
}

int64_t InMemoryTransport::Counter(int64_t InMemoryTransport::*counter) const {
  absl::MutexLock lock(&mu_);
  return this->*counter;
}

}  // namespace meshserve
