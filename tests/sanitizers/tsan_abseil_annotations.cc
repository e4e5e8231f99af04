// ThreadSanitizer annotations for the system's (uninstrumented) abseil
// synchronization library, linked into every test of the TSan build
// (cmake/meshserve_sanitizers.cmake).
//
// Why: Debian's libabsl_synchronization.so is built without TSan, so the
// happens-before edges of absl::Mutex, absl::CondVar, absl::Notification and
// absl::BlockingCounter (atomics and futexes inside the .so) are invisible to
// TSan, and every ABSL_GUARDED_BY field touched by two threads would be
// reported as a race. An abseil built with TSan annotates these entry points
// itself (ABSL_TSAN_MUTEX_PRE_LOCK ... in mutex.cc); this file does the same
// from outside: it defines the public entry points in the executable (which
// the dynamic linker prefers for every caller, gRPC's included), annotates
// them with the __tsan_mutex_* interface and calls the library's own
// definition (dlsym RTLD_NEXT). Between a pre and a post annotation TSan
// ignores memory accesses, as it does inside an instrumented abseil, so the
// Conditions abseil evaluates while it holds the lock are not reported.
// Only synchronization is modelled here: no report is suppressed, and every
// race in our code on our data is still seen.
//
// Thread-safety: the functions are called concurrently, like abseil's.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define MS_STR2(x) #x
#define MS_STR(x) MS_STR2(x)

// The library's definition of `name` (abseil's mangled name with its inline
// namespace, e.g. _ZN4absl7debian35Mutex4LockEv for suffix "5Mutex4LockEv").
void* Real(const char* suffix, bool is_const) {
  const char* ns = MS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(is_const ? "_ZNK4absl" : "_ZN4absl") +
                           std::to_string(std::strlen(ns)) + ns + suffix;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_abseil_annotations: %s not found\n", name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealFn(const char* suffix, bool is_const = false) {
  return reinterpret_cast<Fn>(Real(suffix, is_const));
}

using MutexFn = void (*)(absl::Mutex*);
using TryFn = bool (*)(absl::Mutex*);
using CondFn = void (*)(absl::Mutex*, const absl::Condition&);
using CondTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using CondDeadlineFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);

constexpr unsigned kRead = __tsan_mutex_read_lock;

// abseil calls its own entry points too (AwaitWithTimeout calls
// AwaitWithDeadline), which land here again: only the outermost call of a
// thread is annotated.
thread_local int t_depth = 0;
struct Outermost {
  Outermost() { ++t_depth; }
  ~Outermost() { --t_depth; }
  static bool Nested() { return t_depth > 0; }
};

// The lock is taken (in mode `flags`) by `call`.
template <typename Call>
auto Acquiring(absl::Mutex* mu, unsigned flags, Call call) {
  if (Outermost::Nested()) return call();
  Outermost outermost;
  __tsan_mutex_pre_lock(mu, flags);
  auto result = call();
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

// The lock is released (mode `flags`) by `call`.
template <typename Call>
void Releasing(absl::Mutex* mu, unsigned flags, Call call) {
  if (Outermost::Nested()) return call();
  Outermost outermost;
  __tsan_mutex_pre_unlock(mu, flags);
  call();
  __tsan_mutex_post_unlock(mu, flags);
}

// The lock is released at the start and held again at the end (Await, CondVar::Wait).
template <typename Call>
auto ReleaseAndReacquire(absl::Mutex* mu, Call call) {
  if (Outermost::Nested()) return call();
  Outermost outermost;
  __tsan_mutex_pre_unlock(mu, 0);
  auto result = call();
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = RealFn<MutexFn>("5Mutex4LockEv");
  Acquiring(this, 0, [&] { real(this); return 0; });
}

void Mutex::ReaderLock() {
  static const auto real = RealFn<MutexFn>("5Mutex10ReaderLockEv");
  Acquiring(this, kRead, [&] { real(this); return 0; });
}

bool Mutex::TryLock() {
  static const auto real = RealFn<TryFn>("5Mutex7TryLockEv");
  if (Outermost::Nested()) return real(this);
  Outermost outermost;
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool ok = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed), 0);
  return ok;
}

bool Mutex::ReaderTryLock() {
  static const auto real = RealFn<TryFn>("5Mutex13ReaderTryLockEv");
  if (Outermost::Nested()) return real(this);
  Outermost outermost;
  const unsigned flags = kRead | __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(this, flags);
  const bool ok = real(this);
  __tsan_mutex_post_lock(this, flags | (ok ? 0 : __tsan_mutex_try_lock_failed), 0);
  return ok;
}

void Mutex::Unlock() {
  static const auto real = RealFn<MutexFn>("5Mutex6UnlockEv");
  Releasing(this, 0, [&] { real(this); });
}

void Mutex::ReaderUnlock() {
  static const auto real = RealFn<MutexFn>("5Mutex12ReaderUnlockEv");
  Releasing(this, kRead, [&] { real(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = RealFn<CondFn>("5Mutex8LockWhenERKNS0_9ConditionE");
  Acquiring(this, 0, [&] { real(this, cond); return 0; });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real = RealFn<CondFn>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquiring(this, kRead, [&] { real(this, cond); return 0; });
}

// The *WithTimeout/*WithDeadline forms hold the lock on return either way.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real =
      RealFn<CondTimeoutFn>("5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Acquiring(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      RealFn<CondDeadlineFn>("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquiring(this, 0, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  static const auto real = RealFn<CondFn>("5Mutex5AwaitERKNS0_9ConditionE");
  ReleaseAndReacquire(this, [&] { real(this, cond); return 0; });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real =
      RealFn<CondTimeoutFn>("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return ReleaseAndReacquire(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      RealFn<CondDeadlineFn>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleaseAndReacquire(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  using Fn = void (*)(CondVar*, Mutex*);
  static const auto real = RealFn<Fn>("7CondVar4WaitEPNS0_5MutexE");
  ReleaseAndReacquire(mu, [&] { real(this, mu); return 0; });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  using Fn = bool (*)(CondVar*, Mutex*, Duration);
  static const auto real = RealFn<Fn>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return ReleaseAndReacquire(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  using Fn = bool (*)(CondVar*, Mutex*, Time);
  static const auto real = RealFn<Fn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleaseAndReacquire(mu, [&] { return real(this, mu, deadline); });
}

// Notification and BlockingCounter: release before the signal, acquire after
// the wait (HasBeenNotified is inline: its atomic load is not modelled, and
// none of the TSan tests rely on it).
//
// Both classes start with their Mutex, so `this` is the mutex's address, and
// the mutex's unlock annotation stores (replaces) the sync clock there: a
// release on `this` made while another thread held the lock was lost, and
// TSan reported a race that was none (fan_out_test, about 1 run in 5). The
// edge therefore lives on an address no mutex uses (the byte after the Mutex).
static void* EdgeAfterMutex(const void* object) {
  return const_cast<char*>(static_cast<const char*>(object)) + sizeof(Mutex);
}

void Notification::Notify() {
  using Fn = void (*)(Notification*);
  static const auto real = RealFn<Fn>("12Notification6NotifyEv");
  __tsan_release(EdgeAfterMutex(this));
  real(this);
}

void Notification::WaitForNotification() const {
  using Fn = void (*)(const Notification*);
  static const auto real = RealFn<Fn>("12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(EdgeAfterMutex(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  using Fn = bool (*)(const Notification*, Duration);
  static const auto real =
      RealFn<Fn>("12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(EdgeAfterMutex(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  using Fn = bool (*)(const Notification*, Time);
  static const auto real =
      RealFn<Fn>("12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(EdgeAfterMutex(this));
  return notified;
}

bool BlockingCounter::DecrementCount() {
  using Fn = bool (*)(BlockingCounter*);
  static const auto real = RealFn<Fn>("15BlockingCounter14DecrementCountEv");
  __tsan_release(EdgeAfterMutex(this));
  return real(this);
}

void BlockingCounter::Wait() {
  using Fn = void (*)(BlockingCounter*);
  static const auto real = RealFn<Fn>("15BlockingCounter4WaitEv");
  real(this);
  __tsan_acquire(EdgeAfterMutex(this));
}

ABSL_NAMESPACE_END
}  // namespace absl
