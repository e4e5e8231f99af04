// The writes of a gRPC callback reactor's stream: one write out at a time
// (gRPC allows one outstanding StartWrite per reactor), the rest queued in
// order. The owner keeps the queue under its own mutex and starts the write
// that Push or Done hands back, outside that mutex:
//
//   {
//     absl::MutexLock lock(&mu_);
//     write = writes_.Push(std::move(message));   // null: one is out already
//   }
//   if (write != nullptr) StartWrite(write);
//
//   void OnWriteDone(bool ok) {
//     { absl::MutexLock lock(&mu_); write = writes_.Done(ok); ... }
//     if (write != nullptr) StartWrite(write);
//   }
//
// A message stays owned by the queue (its address stable) until Done for it.
// After a failed write (ok == false) the rest are dropped: the stream is
// broken and will not take them.
//
// Thread-safety: none of its own (the owner's mutex guards it).
#ifndef MESHSERVE_COMMON_RPC_WRITE_QUEUE_H_
#define MESHSERVE_COMMON_RPC_WRITE_QUEUE_H_

#include <deque>
#include <utility>

namespace meshserve {

// `Ptr`: an owning pointer to the message (std::unique_ptr or std::shared_ptr).
template <typename Ptr>
class WriteQueue {
 public:
  using Message = typename Ptr::element_type;

  // Queues `message`; returns it when no write was out (start it now), else
  // null (it goes when the writes before it are done).
  const Message* Push(Ptr message) {
    queue_.push_back(std::move(message));
    if (writing_) return nullptr;
    writing_ = true;
    return queue_.front().get();
  }

  // The write out finished: drops it (and, when !ok, every queued one);
  // returns the next to start, or null when none is left (idle again).
  const Message* Done(bool ok) {
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) queue_.clear();
    if (queue_.empty()) {
      writing_ = false;
      return nullptr;
    }
    return queue_.front().get();
  }

  // Drops what is queued (the stream ended); a write out stays out.
  void Clear() {
    while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  }

  bool writing() const { return writing_; }  // a write is out
  size_t size() const { return queue_.size(); }

 private:
  std::deque<Ptr> queue_;  // front() is out when writing_
  bool writing_ = false;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_RPC_WRITE_QUEUE_H_
