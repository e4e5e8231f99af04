// meshserve-coordinator: serves the models of --model_dir to clients (KServe
// v2 gRPC) and places them on the workers that register with it.
//
//   meshserve-coordinator --port 8500 --model_dir examples/models --min_workers 2
//
// Prints "meshserve-coordinator listening on HOST:PORT" once bound and, once
// every loadable model is placed and servable, one line
// "meshserve-coordinator ready port=PORT models=N workers=M" (launchers wait
// for "ready"). With --http_port P it also serves HTTP on P (KServe v2 REST,
// /metrics, the status page; server/coordinator/http/) and prints
// "meshserve-coordinator http on HOST:P (https)", or "(plaintext)" without
// --tls_dir. Exits cleanly on SIGINT/SIGTERM.
//
// Security (common/rpc/grpc_credentials.h, grpc/edge_auth.h): insecure by
// default, and the "listening on" line says so. --tls_dir DIR serves TLS with
// DIR/member.pem on the client port and HTTPS on --http_port (client
// certificates optional on both), requires
// a member certificate for MembershipService, and dials workers with mutual
// TLS. --auth_token_file F requires F's token from clients (gRPC and HTTP).
// --max_request_bytes and --max_tensor_elements bound what a client sends.
//
// Environment: MESHSERVE_LOG_LEVEL=warning|error raises the log level;
// MESHSERVE_TENSOR_POOL_MIB caps the free tensor memory kept for reuse
// (default 2048; a bad value exits 2 naming it).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/flags_usage.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_credentials.h"
#include "common/tensor/buffer_pool.h"
#include "server/compiler/jax_model_compiler.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/generate/coordinator_backend.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/grpc/coordinator_server.h"
#include "server/coordinator/grpc/grpc_worker_client.h"
#include "server/coordinator/http/http_server.h"
#include "server/coordinator/request_limits.h"

ABSL_FLAG(int, port, 8500, "port to listen on (0: pick a free one)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address to bind (0.0.0.0 in containers)");
ABSL_FLAG(std::string, model_dir, "", "directory of *.json model files");
ABSL_FLAG(int, min_workers, 1, "placement waits for this many live workers");
ABSL_FLAG(int, heartbeat_ms, 500, "worker heartbeat interval; 3 missed = dead");
ABSL_FLAG(int, warmup_wait_ms, 5000,
          "a joining worker that warms its pool (the bytes its first placement will get) is "
          "placed on when it reports warm or after this long (0: at once)");
ABSL_FLAG(int, rejoin_quiet_ms, -1,
          "after a restart, first placements wait until no returning worker has registered "
          "for this long (-1: one heartbeat interval; 0: no wait)");
ABSL_FLAG(int, forget_dead_after_s, 30,
          "seconds after its last heartbeat when a dead worker that no placement uses is "
          "dropped from membership and status");
ABSL_FLAG(int, replicas, 1,
          "copies of every param box kept on a second worker (0 or 1; 0 turns replicas "
          "off, leaving a pushed model unrecoverable if a worker dies)");
ABSL_FLAG(std::string, tls_dir, "",
          "directory with ca.pem, member.pem, member.key (scripts/make-dev-certs.sh): TLS "
          "on the client port, mutual TLS with the workers (empty: insecure, plaintext)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file whose first line is the bearer token clients must send (gRPC metadata and "
          "HTTP header 'authorization: Bearer <token>'; empty: no token)");
ABSL_FLAG(int64_t, max_request_bytes, meshserve::RequestLimits().max_request_bytes,
          "largest request a client may send, in bytes (gRPC message or REST body; over "
          "it: RESOURCE_EXHAUSTED / HTTP 413)");
ABSL_FLAG(int64_t, max_tensor_elements, meshserve::RequestLimits().max_tensor_elements,
          "most elements one input tensor may have (over it: RESOURCE_EXHAUSTED / 413)");
ABSL_FLAG(int, max_inflight_per_model, meshserve::CoordinatorOptions().max_inflight_per_model,
          "requests of one unbatched model in flight at once; one more gets "
          "RESOURCE_EXHAUSTED (batched models: the model's max_queue_size)");
ABSL_FLAG(int, max_concurrent_pushes, meshserve::CoordinatorOptions().max_concurrent_pushes,
          "parameter pushes in progress at once over all models; one more gets "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(double, push_ttl_s, absl::ToDoubleSeconds(meshserve::CoordinatorOptions().push_ttl),
          "a push session (BeginPush) no call touched for this many seconds expires: aborted "
          "on every worker, its staged bytes freed, its push_id unknown afterwards; > 0");
ABSL_FLAG(double, pull_lease_s, absl::ToDoubleSeconds(meshserve::CoordinatorOptions().pull_lease),
          "a box pull's plan (PlanPull) holds its version until EndPull or this many "
          "seconds; > 0");
ABSL_FLAG(int, max_live_versions, meshserve::CoordinatorOptions().max_live_versions,
          "weight versions of one model live at once (the current one and each older one a "
          "sequence or request still holds); a push beyond it waits for one to drain, up to "
          "its deadline (then DEADLINE_EXCEEDED)");
ABSL_FLAG(int64_t, param_cache_bytes, meshserve::CoordinatorOptions().param_cache_bytes,
          "most bytes any one worker keeps, over all compiled programs, of the values a "
          "program computes from params alone (e.g. an all-gathered kernel), kept with "
          "their param version so that later requests skip computing and moving them; "
          "programs beyond it run those steps on every request; 0: never keep");
ABSL_FLAG(int64_t, max_cached_programs, meshserve::CoordinatorOptions().max_cached_programs,
          "compiled programs kept installed at once (one per model, generation, input shapes "
          "and out_shardings); one more evicts and uninstalls the least recently used");
ABSL_FLAG(int64_t, small_call_bytes, meshserve::CoordinatorOptions().small_call_bytes,
          "a worker's part of a request whose input and output slices are at most this many "
          "bytes goes over one long-lived stream to that worker (a message each way) instead "
          "of a call of its own; 0: every part is a call");
ABSL_FLAG(int64_t, kv_cache_bytes, meshserve::CoordinatorBackendOptions().kv_cache_bytes,
          "KV cache bytes per worker and model that generation counts with (no more than the "
          "workers' own --kv_cache_bytes; meshserve local passes one value to both)");
ABSL_FLAG(int64_t, max_prefill_tokens_per_step,
          meshserve::GeneratorOptions().max_prefill_tokens_per_step,
          "prompt tokens a generation step prefills at most (long prompts go in chunks)");
ABSL_FLAG(int64_t, max_running_sequences, meshserve::GeneratorOptions().max_running,
          "sequences of one model decoded in one step at most");
ABSL_FLAG(int64_t, max_waiting_sequences, meshserve::GeneratorOptions().max_waiting,
          "sequences waiting for a slot per model; more are refused (RESOURCE_EXHAUSTED)");
ABSL_FLAG(int, http_port, 0,
          "HTTP port for KServe v2 REST, Prometheus /metrics and the status page at / "
          "(HTTPS with --tls_dir's member.pem; 0: off)");

namespace {

constexpr char kPoolEnv[] = "MESHSERVE_TENSOR_POOL_MIB";

// The tensor buffer pool's cap from MESHSERVE_TENSOR_POOL_MIB (default 2048
// MiB) and malloc tuned for it (common/tensor/buffer_pool.h).
absl::Status ConfigureMemory() {
  meshserve::BufferPoolOptions pool;
  MS_ASSIGN_OR_RETURN(pool.cap_bytes, meshserve::ParseBufferPoolMib(std::getenv(kPoolEnv), kPoolEnv));
  pool.tune_malloc = true;
  return meshserve::ConfigureBufferPool(pool);
}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// The transport security, the client-edge policy and the worker channels'
// options from the flags.
struct Edge {
  meshserve::RpcSecurity security = meshserve::RpcSecurity::Insecure();
  meshserve::CoordinatorServerOptions server;
  meshserve::CoordinatorHttpOptions http;
};

absl::StatusOr<Edge> EdgeFromFlags() {
  Edge edge;
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    MS_ASSIGN_OR_RETURN(meshserve::TlsFiles files, meshserve::ReadTlsDir(dir, "member"),
                        "--tls_dir");
    edge.security = meshserve::RpcSecurity::Tls(std::move(files));
    edge.http.https =
        meshserve::HttpsFiles{absl::StrCat(dir, "/member.pem"), absl::StrCat(dir, "/member.key")};
    // A key that is not the certificate's: named here, not as gRPC's "cannot listen".
    MS_RETURN_IF_ERROR(meshserve::CheckHttpsFiles(*edge.http.https), "--tls_dir");
  }
  meshserve::EdgeOptions& options = edge.server.edge;
  options.tls = edge.security.tls();
  if (const std::string file = absl::GetFlag(FLAGS_auth_token_file); !file.empty()) {
    MS_ASSIGN_OR_RETURN(options.auth_token, meshserve::ReadTokenFile(file),
                        "--auth_token_file");
  }
  options.limits.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.limits.max_tensor_elements = absl::GetFlag(FLAGS_max_tensor_elements);
  MS_RETURN_IF_ERROR(meshserve::ValidateRequestLimits(options.limits));
  edge.server.credentials = edge.security.ClientPortServerCredentials();
  edge.http.auth_token = options.auth_token;
  edge.http.limits = options.limits;
  return edge;
}

// The KServe v2 REST edge when --http_port is set; null otherwise.
absl::StatusOr<std::unique_ptr<meshserve::CoordinatorHttpServer>> StartHttp(
    meshserve::Coordinator* coordinator, const meshserve::CoordinatorHttpOptions& options) {
  if (absl::GetFlag(FLAGS_http_port) <= 0) return nullptr;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<meshserve::CoordinatorHttpServer> http,
                      meshserve::CoordinatorHttpServer::Start(coordinator,
                                                              absl::GetFlag(FLAGS_host),
                                                              absl::GetFlag(FLAGS_http_port),
                                                              options));
  std::cout << "meshserve-coordinator http on " << absl::GetFlag(FLAGS_host) << ":"
            << http->port() << " (" << http->scheme_description() << ")" << std::endl;
  return http;
}

// The coordinator's options from the flags (range checks beyond these are
// Coordinator::Create's).
absl::StatusOr<meshserve::CoordinatorOptions> OptionsFromFlags() {
  meshserve::CoordinatorOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model_dir);
  options.min_workers = absl::GetFlag(FLAGS_min_workers);
  options.replicas = absl::GetFlag(FLAGS_replicas);
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  const int rejoin_quiet_ms = absl::GetFlag(FLAGS_rejoin_quiet_ms);
  if (rejoin_quiet_ms < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rejoin_quiet_ms=", rejoin_quiet_ms, ": want -1, 0 or a positive time"));
  }
  options.rejoin_quiet =
      rejoin_quiet_ms < 0 ? options.heartbeat_interval : absl::Milliseconds(rejoin_quiet_ms);
  options.forget_dead_after = absl::Seconds(absl::GetFlag(FLAGS_forget_dead_after_s));
  if (absl::GetFlag(FLAGS_warmup_wait_ms) < 0) {  // applied by CreateCoordinator
    return absl::InvalidArgumentError(absl::StrCat(
        "--warmup_wait_ms=", absl::GetFlag(FLAGS_warmup_wait_ms), " must be 0 or more"));
  }
  options.max_inflight_per_model = absl::GetFlag(FLAGS_max_inflight_per_model);
  options.max_concurrent_pushes = absl::GetFlag(FLAGS_max_concurrent_pushes);
  options.max_live_versions = absl::GetFlag(FLAGS_max_live_versions);
  if (options.max_live_versions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_live_versions=", options.max_live_versions, " must be at least 1"));
  }
  const double push_ttl_s = absl::GetFlag(FLAGS_push_ttl_s);
  if (!(push_ttl_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--push_ttl_s=", push_ttl_s, " must be more than 0"));
  }
  options.push_ttl = absl::Seconds(push_ttl_s);
  const double pull_lease_s = absl::GetFlag(FLAGS_pull_lease_s);
  if (!(pull_lease_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pull_lease_s=", pull_lease_s, " must be more than 0"));
  }
  options.pull_lease = absl::Seconds(pull_lease_s);
  options.param_cache_bytes = absl::GetFlag(FLAGS_param_cache_bytes);
  if (options.param_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--param_cache_bytes=", options.param_cache_bytes, " must not be negative"));
  }
  options.small_call_bytes = absl::GetFlag(FLAGS_small_call_bytes);
  if (options.small_call_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--small_call_bytes=", options.small_call_bytes, " must not be negative"));
  }
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError("--model_dir is required");
  }
  if (absl::GetFlag(FLAGS_forget_dead_after_s) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--forget_dead_after_s=", absl::GetFlag(FLAGS_forget_dead_after_s),
                     " must not be negative"));
  }
  if (options.max_inflight_per_model < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_per_model=", options.max_inflight_per_model,
                     " must be at least 1"));
  }
  if (options.max_concurrent_pushes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_concurrent_pushes=", options.max_concurrent_pushes, " must be at least 1"));
  }
  options.max_cached_programs = absl::GetFlag(FLAGS_max_cached_programs);
  if (options.max_cached_programs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_cached_programs=", options.max_cached_programs, " must be at least 1"));
  }
  return options;
}

// Calls that reach a server while grpc::Server::Shutdown runs are cancelled
// (CANCELLED at the client, which nobody retries); so once the calls inside
// have ended and every new one is refused with UNAVAILABLE, the process exits
// with the server up: its clients see the connection close (UNAVAILABLE) and
// retry against the next coordinator. The workers keep their state; nothing
// here needs flushing but the two streams.
// Token generation over the coordinator (server/coordinator/generate), from
// the flags.
meshserve::CoordinatorBackendOptions BackendFromFlags() {
  meshserve::CoordinatorBackendOptions options;
  options.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  return options;
}
meshserve::GeneratorOptions GeneratorFromFlags(meshserve::Coordinator* coordinator) {
  meshserve::GeneratorOptions options;
  options.metrics = &coordinator->metrics().registry;  // the coordinator's /metrics
  options.max_prefill_tokens_per_step = absl::GetFlag(FLAGS_max_prefill_tokens_per_step);
  options.max_running = absl::GetFlag(FLAGS_max_running_sequences);
  options.max_waiting = absl::GetFlag(FLAGS_max_waiting_sequences);
  return options;
}
struct Generation {
  explicit Generation(meshserve::Coordinator* coordinator)
      : backend(coordinator, BackendFromFlags()),
        generator(&backend, GeneratorFromFlags(coordinator)) {}
  meshserve::CoordinatorGenerationBackend backend;
  meshserve::Generator generator;
};

void Stop(meshserve::CoordinatorServer* server,
          std::unique_ptr<meshserve::Coordinator>* coordinator) {
  if (server->Drain(absl::Seconds(2))) {
    coordinator->reset();  // no handler can reach it any more
    std::cout << "meshserve-coordinator stopped" << std::endl;
    std::cerr.flush();
    std::_Exit(0);
  }
  server->Shutdown();  // a call still running (a long push): cancelled
  coordinator->reset();
}

// The coordinator, dialing workers with the edge's member credentials, with
// --warmup_wait_ms applied to its registry (worker_registry.h).
absl::StatusOr<std::unique_ptr<meshserve::Coordinator>> CreateCoordinator(
    const meshserve::CoordinatorOptions& options, const Edge& edge) {
  absl::StatusOr<std::unique_ptr<meshserve::Coordinator>> coordinator =
      meshserve::Coordinator::Create(
          options, meshserve::GrpcWorkerClientFactory(edge.security.MemberChannelOptions()),
          std::make_unique<meshserve::JaxModelCompiler>());
  if (coordinator.ok()) {
    (*coordinator)->registry().set_warmup_wait(
        absl::Milliseconds(absl::GetFlag(FLAGS_warmup_wait_ms)));
  }
  return coordinator;
}

}  // namespace

int main(int argc, char** argv) {
  meshserve::StartServerMain(
      argc, argv,
      "meshserve-coordinator: serves the models of --model_dir to clients (KServe v2 gRPC,\n"
      "generation) and places them on the workers that register with it.\n\n"
      "  meshserve-coordinator --port 8500 --model_dir examples/models --min_workers 2",
      std::getenv("MESHSERVE_LOG_LEVEL"));
  if (absl::Status s = ConfigureMemory(); !s.ok()) {
    std::cerr << "meshserve-coordinator: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<meshserve::CoordinatorOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "meshserve-coordinator: " << options.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<Edge> edge = EdgeFromFlags();
  if (!edge.ok()) {
    std::cerr << "meshserve-coordinator: " << edge.status() << "\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<meshserve::Coordinator>> coordinator =
      CreateCoordinator(*options, *edge);
  if (!coordinator.ok()) {
    std::cerr << "meshserve-coordinator: " << coordinator.status() << "\n";
    return 1;
  }
  Generation generation(coordinator->get());
  edge->server.generator = edge->http.generator = &generation.generator;
  absl::StatusOr<std::unique_ptr<meshserve::CoordinatorServer>> server =
      meshserve::CoordinatorServer::Start(coordinator->get(), absl::GetFlag(FLAGS_host),
                                          absl::GetFlag(FLAGS_port), edge->server);
  if (!server.ok()) {
    std::cerr << "meshserve-coordinator: " << server.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<meshserve::CoordinatorHttpServer>> http =
      StartHttp(coordinator->get(), edge->http);
  if (!http.ok()) {
    std::cerr << "meshserve-coordinator: " << http.status() << "\n";
    return 1;
  }
  if (!edge->security.tls() && !edge->server.edge.auth_token.empty()) {
    MS_LOG(WARNING) << "--auth_token_file without --tls_dir: the token travels in plaintext";
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::cout << "meshserve-coordinator listening on " << (*server)->address() << " ("
            << edge->security.Describe()
            << (edge->server.edge.auth_token.empty() ? ", no client token" : ", client token")
            << ")" << std::endl;
  // Model states go to stderr: an error text could contain "ready"
  // ("already ...") and launchers grep stdout for it.
  for (const meshserve::ModelStatus& m : (*coordinator)->ModelStatuses()) {
    std::cerr << "model " << m.name << ": " << m.state << std::endl;
  }
  bool announced = false;
  while (!g_stop) {
    absl::SleepFor(absl::Milliseconds(50));
    (*server)->UpdateHealth();
    if (!announced && (*coordinator)->IsReady()) {
      announced = true;
      size_t servable = 0;
      for (const auto& m : (*coordinator)->ModelStatuses()) servable += m.ready ? 1 : 0;
      std::cout << "meshserve-coordinator ready port=" << (*server)->port()
                << " models=" << servable
                << " workers=" << (*coordinator)->registry().PlaceableWorkers().size()
                << std::endl;
    }
  }
  std::cout << "meshserve-coordinator stopping" << std::endl;
  if (*http != nullptr) (*http)->Stop();
  generation.generator.Shutdown();  // its loops call the coordinator: they end first
  Stop(server->get(), &*coordinator);
  return 0;
}
