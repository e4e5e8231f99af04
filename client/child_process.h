// Child processes for `meshserve local` (cmd_local.cc): fork + exec with the
// output drained into a log file by a thread (the last lines kept for a
// death report), reaping, and a graceful stop (SIGTERM, then SIGKILL).
//
// Thread-safety: a Child's tail and ready flag are guarded by its mutex (its
// drain thread writes them); the functions are called from one thread.
#ifndef MESHSERVE_CLIENT_CHILD_PROCESS_H_
#define MESHSERVE_CLIENT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshserve {
namespace client {

// One child process and the thread that drains its output into a log file.
struct Child {
  std::string name;  // "coordinator", "worker-3"
  pid_t pid = -1;
  bool exited = false;
  int wait_status = 0;
  std::thread reader;
  absl::Mutex mu;
  std::deque<std::string> tail ABSL_GUARDED_BY(mu);  // last lines
  bool ready_line ABSL_GUARDED_BY(mu) = false;       // a line said "ready"
  std::string listening ABSL_GUARDED_BY(mu);         // after a first "listening on "
};

// The directory of the running executable ("." when unknown).
std::string SelfDirectory();

// fork + exec `argv` (the child dies with us: PR_SET_PDEATHSIG) with stdout
// and stderr into LOG_DIR/<name>.log, drained by child->reader; with
// `verbose` the lines also go to our stderr.
// \error kInternal when pipe or fork fails.
absl::Status Spawn(Child* child, const std::vector<std::string>& argv,
                   const std::string& log_dir, bool verbose);

// "exit code N", "killed by signal N (NAME)" or "stopped".
std::string DescribeExit(int wait_status);

// Prints to stderr that `child` exited unexpectedly, with its last lines.
void ReportDeath(Child& child);

// Reaps `child` if it exited (sets exited and wait_status); true if it
// exited now.
bool Reap(Child& child);

// Reaps exited children; returns those that exited now.
std::vector<Child*> ReapChildren(std::vector<std::unique_ptr<Child>>& children);

// SIGTERM to every live child (the last first), SIGKILL to those alive after
// `grace`; joins the drain threads.
void StopAll(std::vector<std::unique_ptr<Child>>& children, absl::Duration grace);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_CHILD_PROCESS_H_
