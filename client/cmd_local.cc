// `meshserve local`: a whole cluster on this machine, on loopback.
//
//   meshserve local --workers N --model_dir DIR [flags: kLocalUsage]
//
// --tls_dir goes to every process (mutual TLS inside the cluster) and our own
// client presents DIR/client.pem; --auth_token_file, the limits, --replicas
// and the generation flags go to the coordinator (and the token to our
// client); --kv_cache_bytes (default: a quarter of the host's memory over the
// workers) to the workers and the coordinator; --host_workers=N to the workers.
// Starts `meshserve-coordinator --host H --port P --model_dir DIR
// --min_workers N` (--port 0: a port from the OS, read from its "listening
// on" line) and N `meshserve-worker --port 0 --coordinator H:P`
// processes (both binaries from the directory of the running `meshserve`),
// each with its output in D/<name>.log (not on our stdout, so that the only
// line with "ready" on it is ours). It prints
//
//   meshserve local: worker 3 pid 12345
//   meshserve local: ready: coordinator 127.0.0.1:8500, 8 workers, models ...
//
// once the coordinator reports every model servable, then waits. SIGINT or
// SIGTERM stops every child (SIGTERM, then SIGKILL after 5 s). A worker that
// dies is reported with the tail of its log and the cluster keeps serving
// (the coordinator re-places its devices); a coordinator that dies stops
// everything (exit 1). With --then, COMMAND runs under /bin/sh once ready
// (MESHSERVE_TARGET=H:P in its environment), then the cluster stops and its
// exit code is ours. Children get PR_SET_PDEATHSIG so that none outlives us.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/child_process.h"
#include "client/cli_args.h"
#include "client/client_connect.h"
#include "client/command.h"
#include "client/inference_client.h"
#include "common/base/host_memory.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace client {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int signal) { g_stop_signal = signal; }

// "models: a (ready), b (error: ...)" from the Status RPC, or "" on failure.
std::string ModelSummary(InferenceClient& client) {
  auto status = client.Status(absl::Now() + absl::Seconds(5));
  if (!status.ok()) return "";
  std::vector<std::string> models;
  for (const auto& m : status->models()) {
    models.push_back(absl::StrCat(m.name(), " (", m.state(), ")"));
  }
  return absl::StrCat(", models: ", absl::StrJoin(models, ", "));
}

int RunThen(const std::string& command, const std::string& target) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MESHSERVE_TARGET", target.c_str(), 1);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid < 0) return 1;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (g_stop_signal != 0) {
      kill(pid, SIGTERM);
      waitpid(pid, &status, 0);
      return 128 + g_stop_signal;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

constexpr char kLocalUsage[] =
    "local --workers N --model_dir DIR [--port P] [--host 127.0.0.1] [--log_dir D] "
    "[--ready_timeout_s S] [--http_port P] [--then \"COMMAND\"] [--verbose] [--tls_dir DIR] "
    "[--auth_token_file F] [--max_request_bytes N] [--max_tensor_elements N] "
    "[--max_inflight_per_model N] [--max_live_versions N] [--replicas N] [--param_cache_bytes N] "
    "[--kv_cache_bytes N] [--max_prefill_tokens_per_step N] [--max_running_sequences N] "
    "[--max_waiting_sequences N] [--max_cached_programs N] [--push_ttl_s S] [--pull_lease_s S]";

// Flags passed on to the coordinator as given.
constexpr const char* kCoordinatorFlags[] = {
    "tls_dir", "auth_token_file", "max_request_bytes", "max_tensor_elements", "replicas",
    "max_inflight_per_model", "max_prefill_tokens_per_step", "max_running_sequences",
    "param_cache_bytes", "max_waiting_sequences", "max_live_versions", "max_cached_programs",
    "push_ttl_s", "pull_lease_s"};

struct LocalOptions {
  int64_t workers = 1;
  int64_t port = 8500;
  int64_t ready_timeout_s = 180;
  int64_t http_port = 0;  // the coordinator's --http_port; 0: off
  std::string model_dir;
  std::string host;
  std::string target;  // host:port
  std::string log_dir;
  bool has_then = false;  // --then given: run it once ready, then stop
  std::string then;
  bool verbose = false;
  std::vector<std::string> coordinator_flags;  // security and limits
  std::vector<std::string> worker_flags;
  InferenceClient::Options client;
};

// A quarter of the host's memory, split over the workers it runs (the
// coordinator and the tensor pools keep the rest).
int64_t DefaultKvCacheBytes(int64_t workers) {
  return std::max<int64_t>(HostMemoryBytes() / 4 / std::max<int64_t>(workers, 1),
                          int64_t{64} << 20);
}

// The flags, checked (usage errors).
absl::StatusOr<LocalOptions> LocalOptionsFromFlags(const CliArgs& args) {
  LocalOptions o;
  MS_ASSIGN_OR_RETURN(o.workers, args.GetInt("workers", 1, 1, 256));
  MS_ASSIGN_OR_RETURN(o.port, args.GetInt("port", 8500, 0, 65535));
  MS_ASSIGN_OR_RETURN(o.ready_timeout_s, args.GetInt("ready_timeout_s", 180, 1, 86400));
  MS_ASSIGN_OR_RETURN(o.http_port, args.GetInt("http_port", 0, 0, 65535));
  o.model_dir = args.Get("model_dir");
  struct stat st;
  if (stat(o.model_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("flag --model_dir: '", o.model_dir, "' is not a directory");
  }
  o.host = args.Get("host", "127.0.0.1");
  o.target = absl::StrCat(o.host, ":", o.port);
  o.log_dir = args.Get("log_dir");
  o.has_then = args.Has("then");
  o.then = args.Get("then");
  o.verbose = args.Has("verbose");
  MS_RETURN_IF_ERROR(args.GetInt("replicas", 1, 0, 16).status());
  for (const char* flag : kCoordinatorFlags) {
    if (!args.Has(flag)) continue;
    o.coordinator_flags.push_back(absl::StrCat("--", flag));
    o.coordinator_flags.push_back(args.Get(flag));
  }
  if (args.Has("tls_dir")) o.worker_flags = {"--tls_dir", args.Get("tls_dir")};
  MS_ASSIGN_OR_RETURN(const int64_t kv, args.GetInt("kv_cache_bytes",
                                                    DefaultKvCacheBytes(o.workers), 0, 1ll << 50));
  for (auto* f : {&o.coordinator_flags, &o.worker_flags})
    f->push_back(absl::StrCat("--kv_cache_bytes=", kv));
  o.worker_flags.push_back(absl::StrCat("--host_workers=", o.workers));
  MS_ASSIGN_OR_RETURN(o.client, ClientOptionsFromArgs(args));
  return o;
}

// --log_dir, or a fresh /tmp/meshserve-local-XXXXXX.
absl::Status PrepareLogDir(LocalOptions& o) {
  if (!o.log_dir.empty()) {
    mkdir(o.log_dir.c_str(), 0755);
    return absl::OkStatus();
  }
  char templ[] = "/tmp/meshserve-local-XXXXXX";
  if (mkdtemp(templ) == nullptr) return Internal("mkdtemp: ", std::strerror(errno));
  o.log_dir = templ;
  return absl::OkStatus();
}

void InstallStopHandlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnStopSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// The address `child` printed after "listening on " (the coordinator's, bound
// to a port from the OS with --port 0).
// \error kUnavailable when it exits or prints none within `timeout_s`.
absl::StatusOr<std::string> ListeningAddress(Child& child, int64_t timeout_s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  while (absl::Now() < deadline && g_stop_signal == 0) {
    {
      absl::MutexLock lock(&child.mu);
      if (!child.listening.empty()) return child.listening;
    }
    if (Reap(child)) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return Unavailable("the ", child.name, " printed no \"listening on\" address");
}

// Starts the coordinator (children[0]) and the workers, printing their pids;
// with --port 0 sets o.target to the port the coordinator bound.
absl::Status StartCluster(LocalOptions& o, const std::string& bin_dir,
                          std::vector<std::unique_ptr<Child>>& children) {
  auto start = [&](std::string name, std::vector<std::string> child_argv) {
    children.push_back(std::make_unique<Child>());
    children.back()->name = std::move(name);
    return Spawn(children.back().get(), child_argv, o.log_dir, o.verbose);
  };
  std::vector<std::string> coordinator = {
      bin_dir + "/meshserve-coordinator", "--host", o.host, "--port", absl::StrCat(o.port),
      "--model_dir", o.model_dir, "--min_workers", absl::StrCat(o.workers), "--http_port",
      absl::StrCat(o.http_port)};
  coordinator.insert(coordinator.end(), o.coordinator_flags.begin(), o.coordinator_flags.end());
  absl::Status started = start("coordinator", coordinator);
  if (started.ok() && o.port == 0) {
    MS_ASSIGN_OR_RETURN(o.target, ListeningAddress(*children.front(), o.ready_timeout_s));
  }
  std::printf("meshserve local: coordinator %s pid %d, logs in %s\n", o.target.c_str(),
              children.back()->pid, o.log_dir.c_str());
  for (int64_t w = 0; started.ok() && w < o.workers; ++w) {
    std::vector<std::string> worker = {bin_dir + "/meshserve-worker", "--port", "0",
                                       "--coordinator", o.target};
    worker.insert(worker.end(), o.worker_flags.begin(), o.worker_flags.end());
    started = start(absl::StrCat("worker-", w), worker);
    std::printf("meshserve local: worker %lld pid %d\n", static_cast<long long>(w),
                children.back()->pid);
  }
  std::fflush(stdout);
  return started;
}

// True when the coordinator has printed its ready line.
bool CoordinatorReady(std::vector<std::unique_ptr<Child>>& children) {
  absl::MutexLock lock(&children.front()->mu);
  return children.front()->ready_line;
}

// Waits for readiness, runs --then, and reports deaths until a signal; returns
// the exit code. The coordinator dying ends it (exit 1); a worker dying does not.
int SuperviseCluster(const LocalOptions& o, std::vector<std::unique_ptr<Child>>& children) {
  auto client = InferenceClient::Create(o.target, o.client);
  const absl::Time ready_deadline = absl::Now() + absl::Seconds(o.ready_timeout_s);
  bool ready = false;
  while (g_stop_signal == 0) {
    bool coordinator_died = false;
    for (Child* child : ReapChildren(children)) {
      ReportDeath(*child);
      coordinator_died |= child == children.front().get();
    }
    if (coordinator_died) {
      std::fprintf(stderr, "meshserve local: the coordinator died; stopping the cluster\n");
      return 1;
    }
    if (!ready && CoordinatorReady(children) && client.ok()) {
      ready = true;
      std::printf("meshserve local: ready: coordinator %s, %lld workers%s\n", o.target.c_str(),
                  static_cast<long long>(o.workers), ModelSummary(**client).c_str());
      std::fflush(stdout);
      if (o.has_then) return RunThen(o.then, o.target);
    } else if (!ready && absl::Now() > ready_deadline) {
      std::fprintf(stderr, "meshserve local: not ready after %llds; stopping (logs in %s)\n",
                   static_cast<long long>(o.ready_timeout_s), o.log_dir.c_str());
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return 0;
}

int RunLocal(const CliArgs& args) {
  auto options = LocalOptionsFromFlags(args);
  if (!options.ok()) return UsageError("local", kLocalUsage, options.status());
  const std::string bin_dir = SelfDirectory();
  for (const char* name : {"/meshserve-coordinator", "/meshserve-worker"}) {
    const std::string bin = bin_dir + name;
    if (access(bin.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "meshserve local: %s not found (build it first)\n", bin.c_str());
      return 1;
    }
  }
  absl::Status log_dir = PrepareLogDir(*options);
  if (!log_dir.ok()) {
    std::fprintf(stderr, "meshserve local: %s\n", std::string(log_dir.message()).c_str());
    return 1;
  }
  InstallStopHandlers();
  std::vector<std::unique_ptr<Child>> children;
  absl::Status started = StartCluster(*options, bin_dir, children);
  if (!started.ok()) {
    std::fprintf(stderr, "meshserve local: %s\n", started.ToString().c_str());
    StopAll(children, absl::Seconds(5));
    return 1;
  }
  const int exit_code = SuperviseCluster(*options, children);
  if (g_stop_signal != 0) {
    std::printf("meshserve local: signal %d: stopping\n", static_cast<int>(g_stop_signal));
  }
  StopAll(children, absl::Seconds(5));
  std::printf("meshserve local: stopped\n");
  std::fflush(stdout);
  return exit_code;
}

std::vector<FlagDef> LocalFlags() {
  std::vector<FlagDef> flags = {
      {"workers", FlagDef::kValue, true}, {"model_dir", FlagDef::kValue, true}, {"port"},
      {"host"}, {"log_dir"}, {"ready_timeout_s"}, {"http_port"}, {"then"},
      {"verbose", FlagDef::kBool}, {"kv_cache_bytes"}};
  for (const char* flag : kCoordinatorFlags) flags.push_back({flag});
  return flags;
}

MS_REGISTER_COMMAND(FlagCommand{"local", kLocalUsage, LocalFlags(), RunLocal,
                                /*rejects_positional=*/true});

}  // namespace
}  // namespace client
}  // namespace meshserve
