#include "client/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace client {
namespace {

bool IsReadyLine(absl::string_view line) {
  return absl::StrContains(line, "ready") && !absl::StrContains(line, "not ready");
}

// Reads `fd` to EOF, appending to `log_path` and keeping the last lines.
void DrainOutput(Child* child, int fd, std::string log_path, bool verbose) {
  FILE* log = std::fopen(log_path.c_str(), "a");
  std::string partial;
  char buffer[4096];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log != nullptr) {
      std::fwrite(buffer, 1, n, log);
      std::fflush(log);
    }
    partial.append(buffer, n);
    size_t newline;
    while ((newline = partial.find('\n')) != std::string::npos) {
      std::string line = partial.substr(0, newline);
      partial.erase(0, newline + 1);
      if (verbose) std::fprintf(stderr, "[%s] %s\n", child->name.c_str(), line.c_str());
      absl::MutexLock lock(&child->mu);
      if (IsReadyLine(line)) child->ready_line = true;
      const size_t at = line.find("listening on ");
      if (at != std::string::npos && child->listening.empty()) {
        const std::string rest = line.substr(at + 13);
        child->listening = rest.substr(0, rest.find(' '));
      }
      child->tail.push_back(std::move(line));
      if (child->tail.size() > 15) child->tail.pop_front();
    }
  }
  if (log != nullptr) std::fclose(log);
  close(fd);
}

}  // namespace

std::string SelfDirectory() {
  char buffer[4096];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return ".";
  std::string path(buffer, n);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// fork + exec `argv` with stdout/stderr into a pipe drained by a thread.
absl::Status Spawn(Child* child, const std::vector<std::string>& argv,
                   const std::string& log_dir, bool verbose) {
  int fds[2];
  if (pipe(fds) != 0) return Internal("pipe: ", std::strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Internal("fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  child->pid = pid;
  child->reader = std::thread(DrainOutput, child, fds[0],
                              absl::StrCat(log_dir, "/", child->name, ".log"), verbose);
  return absl::OkStatus();
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return "stopped";
}

void ReportDeath(Child& child) {
  std::fprintf(stderr, "meshserve local: %s (pid %d) exited unexpectedly: %s\n",
               child.name.c_str(), child.pid, DescribeExit(child.wait_status).c_str());
  absl::MutexLock lock(&child.mu);
  for (const std::string& line : child.tail) {
    std::fprintf(stderr, "  [%s] %s\n", child.name.c_str(), line.c_str());
  }
}

bool Reap(Child& child) {
  if (child.exited || child.pid <= 0) return false;
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != child.pid) return false;
  child.exited = true;
  child.wait_status = status;
  return true;
}

std::vector<Child*> ReapChildren(std::vector<std::unique_ptr<Child>>& children) {
  std::vector<Child*> exited;
  for (auto& child : children) {
    if (Reap(*child)) exited.push_back(child.get());
  }
  return exited;
}

// SIGTERM to every live child, SIGKILL to those alive after `grace`.
void StopAll(std::vector<std::unique_ptr<Child>>& children, absl::Duration grace) {
  // Workers first (they drain from the coordinator), then the coordinator.
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    if (!(*it)->exited && (*it)->pid > 0) kill((*it)->pid, SIGTERM);
  }
  absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    ReapChildren(children);
    bool any_alive = false;
    for (auto& child : children) any_alive |= !child->exited && child->pid > 0;
    if (!any_alive) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (auto& child : children) {
    if (!child->exited && child->pid > 0) {
      std::fprintf(stderr, "meshserve local: %s (pid %d) ignored SIGTERM; killing it\n",
                   child->name.c_str(), child->pid);
      kill(child->pid, SIGKILL);
      waitpid(child->pid, &child->wait_status, 0);
      child->exited = true;
    }
  }
  for (auto& child : children) {
    if (child->reader.joinable()) child->reader.join();
  }
}

}  // namespace client
}  // namespace meshserve
