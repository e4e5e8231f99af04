// meshserve-worker: one shard worker process.
//
//   meshserve-worker --port 0 --coordinator 127.0.0.1:7000
//
// Order: BLAS kernel choice (may re-exec), flags, serve WorkerService, register
// with the coordinator and heartbeat; prints
//   meshserve-worker ready id=<id> address=<addr> blas=<core>
// on stdout once registered (id=-1 without --coordinator). --tls_dir DIR: mutual
// TLS with members of DIR/ca.pem only (common/rpc/grpc_credentials.h); without
// it the port is plaintext and says so in the "serving on" line.
// --max_inflight_slice_bytes N bounds the bytes of peers' slices held at once
// (rendezvous.h; default: a quarter of MemTotal over --host_workers, 64 MiB to
// 4 GiB, program_runner.h). --http_port P serves Prometheus /metrics on P (HTTPS with
// --tls_dir's member certificate, clients need none; logs "metrics on HOST:P
// (https)" or "(plaintext)"). SIGTERM/SIGINT: a
// draining heartbeat; it keeps serving until the coordinator has moved its
// models away (at most --drain_timeout_s, 60 s by default: the new holders read
// the params from this worker with ReadParam meanwhile; at once when the
// coordinator is gone), then exits.
//
// Memory: the tensor buffer pool keeps at most --tensor_pool_mib MiB free for
// reuse (default: MESHSERVE_TENSOR_POOL_MIB, else 2048), malloc is tuned for
// it, and --prefault_mib MiB of it are touched before registering
// (common/tensor/buffer_pool.h); without --prefault_mib, the bytes the
// coordinator's registration answer names (capped by --warm_pool_mib) are
// touched on a thread after registering, before the coordinator places here
// (membership_client.h). Other environment: MESHSERVE_LOG_LEVEL,
// MESHSERVE_GEMM_ISA (caps the small-M kernel, gemm_small_m.h) and the BLAS
// core choice's variables (blas.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "grpcpp/server.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/elastic_executor.h"
#include "common/base/flags_usage.h"
#include "common/base/host_memory.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/base/thread_pool.h"
#include "common/metrics/http_endpoint.h"
#include "common/rpc/grpc_credentials.h"
#include "common/tensor/blas.h"
#include "common/tensor/buffer_pool.h"
#include "common/tensor/gemm_small_m.h"
#include "server/worker/calibration.h"
#include "server/worker/grpc/grpc_peer_transport.h"
#include "server/worker/grpc/membership_client.h"
#include "server/worker/grpc/worker_service.h"
#include "server/worker/program_runner.h"
#include "server/worker/worker_engine.h"

ABSL_FLAG(int, port, 0, "Port to serve WorkerService on (0 = pick a free port).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to bind (0.0.0.0 in containers).");
ABSL_FLAG(std::string, advertise, "",
          "Address peers and the coordinator use to reach this worker (default host:port; "
          "the hostname when host is 0.0.0.0).");
ABSL_FLAG(std::string, coordinator, "", "Coordinator HOST:PORT to register with.");
ABSL_FLAG(int, cores, 0, "Cores this worker may use (0 = all of the machine's).");
ABSL_FLAG(int, threads, 0, "OpenBLAS threads (0 = cores / 2, at least 1).");
ABSL_FLAG(int, http_port, 0,
          "Port serving Prometheus /metrics over HTTP (HTTPS with --tls_dir; 0 = off).");
ABSL_FLAG(int, drain_timeout_s, 60,
          "On SIGTERM, serve (ReadParam for the hand-off of the params) at most this long "
          "while the coordinator moves the models away, then exit.");
ABSL_FLAG(int64_t, max_inflight_slice_bytes, 0,
          "Bytes of peers' slices this worker holds at once for the requests in flight; a "
          "slice that does not fit fails its request with RESOURCE_EXHAUSTED (0: a quarter "
          "of the host's MemTotal over --host_workers, between 64 MiB and 4 GiB).");
ABSL_FLAG(int64_t, host_workers, 1,
          "Workers running on this host (meshserve local: its --workers): the memory-derived "
          "defaults are split over them.");
ABSL_FLAG(int64_t, kv_cache_bytes, int64_t{1} << 30,
          "KV cache bytes per model for generation (split over the model's devices here); "
          "0: no generation on this worker");
ABSL_FLAG(std::string, tensor_pool_mib, "",
          "MiB of freed tensor memory kept for reuse (empty: MESHSERVE_TENSOR_POOL_MIB from "
          "the environment, else 2048).");
ABSL_FLAG(int64_t, prefault_mib, 0,
          "MiB of tensor memory to map and touch before registering, kept in the tensor pool "
          "(at most --tensor_pool_mib): a worker joining a running cluster then takes "
          "its shards without paying the first touch of fresh memory (0 = off).");
ABSL_FLAG(int64_t, warm_pool_mib, -1,
          "Without --prefault_mib: when the coordinator's registration answer says how many "
          "bytes its next placement will put here, touch that much tensor pool memory on a "
          "thread before it places on this worker (at most this many MiB and the pool's cap; "
          "-1: the pool's cap only; 0: no warm-up).");
ABSL_FLAG(std::string, tls_dir, "",
          "Directory with ca.pem, member.pem and member.key (scripts/make-dev-certs.sh): "
          "serve and dial with mutual TLS, accepting only members of that CA (empty: "
          "insecure, plaintext).");

namespace meshserve {
namespace {

std::string AdvertisedAddress(const std::string& host, int port) {
  if (!absl::GetFlag(FLAGS_advertise).empty()) return absl::GetFlag(FLAGS_advertise);
  std::string h = host;
  if (h == "0.0.0.0" || h == "::" || h.empty()) {
    char name[256] = {0};
    h = gethostname(name, sizeof(name) - 1) == 0 ? name : "127.0.0.1";
  }
  return absl::StrCat(h, ":", port);
}

// A leaving worker keeps serving until the coordinator has moved its models
// to a generation without it and unloaded them here (so no request is routed
// to a closed port, and the new holders have read their shards from here with
// ReadParam), at most --drain_timeout_s, and not at all once the coordinator
// stops answering (it is shutting down too).
void DrainModels(const WorkerEngine& worker, MembershipClient& membership) {
  const absl::Duration timeout =
      absl::Seconds(std::max(0, absl::GetFlag(FLAGS_drain_timeout_s)));
  const absl::Time give_up = absl::Now() + timeout;
  while (!worker.Status().models.empty()) {
    if (absl::Now() >= give_up) {
      MS_LOG(WARNING) << "models still hosted after " << timeout << "; exiting";
      return;
    }
    if (absl::Status s = membership.DrainingHeartbeat(); !s.ok()) {
      MS_LOG(INFO) << "coordinator gone while draining (" << s << "); exiting";
      return;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

// Registers with --coordinator and heartbeats (null without --coordinator,
// after announcing id -1).
absl::StatusOr<std::unique_ptr<MembershipClient>> StartMembership(
    const std::string& address, int cores, const RpcSecurity& security,
    std::function<void(int64_t)> announce) {
  if (absl::GetFlag(FLAGS_coordinator).empty()) {
    announce(-1);
    return nullptr;
  }
  MembershipClient::Options options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.address = address;
  options.cores = cores;
  options.channel = security.MemberChannelOptions();
  options.memory_bytes = HostMemoryBytes();
  const int64_t warm_mib = absl::GetFlag(FLAGS_warm_pool_mib);
  if (warm_mib < -1 || warm_mib > (int64_t{1} << 30)) {
    return InvalidArgument("--warm_pool_mib=", warm_mib, " must be -1 or between 0 and 2^30");
  }
  if (absl::GetFlag(FLAGS_prefault_mib) == 0 && warm_mib != 0) {
    options.warm_up = [warm_mib](int64_t bytes) {
      int64_t limit = BufferPoolCapBytes();
      if (warm_mib > 0) limit = std::min(limit, warm_mib << 20);
      constexpr int64_t kHugePage = int64_t{2} << 20;  // PrefaultBufferPool rounds up to it
      return PrefaultBufferPool(std::min(bytes, limit) / kHugePage * kHugePage);
    };
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<MembershipClient> client,
                      MembershipClient::Create(options, std::move(announce)));
  client->Start();
  return client;
}

// Shutdown cancels calls still running after 300 ms, but then waits for their
// handlers, and an Execute may wait on a peer's slice until its deadline (it
// holds no thread, but its call stays open): give it 1 s in all, then return regardless (the coordinator already
// knows we left; the caller exits without destructors, which loses nothing).
// The shutdown runs on the shared executor (never destroyed); its task holds
// its own reference to the notification, which may outlive this call.
void ShutDownWithin1s(grpc::Server& server) {
  auto shut_down = std::make_shared<absl::Notification>();
  ElasticExecutor::Shared().Schedule([&server, shut_down] {
    server.Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    shut_down->Notify();
  });
  if (!shut_down->WaitForNotificationWithTimeout(absl::Seconds(1))) {
    MS_LOG(WARNING) << "requests still running after 1 s; exiting without them";
  }
}

// --tls_dir: the member identity, or insecure without it.
absl::StatusOr<RpcSecurity> SecurityFromFlag() {
  const std::string dir = absl::GetFlag(FLAGS_tls_dir);
  if (dir.empty()) return RpcSecurity::Insecure();
  MS_ASSIGN_OR_RETURN(TlsFiles files, ReadTlsDir(dir, "member"), "--tls_dir");
  // A key that is not the certificate's: named here, not as gRPC's "cannot listen".
  MS_RETURN_IF_ERROR(
      CheckHttpsFiles({absl::StrCat(dir, "/member.pem"), absl::StrCat(dir, "/member.key")}),
      "--tls_dir");
  return RpcSecurity::Tls(std::move(files));
}

// --max_inflight_slice_bytes (0: derived from the host's memory,
// DefaultMaxInflightSliceBytes), validated (the message names the flag and value).
absl::StatusOr<WorkerEngine::Options> WorkerOptionsFromFlags() {
  WorkerEngine::Options options;
  const int64_t host_workers = absl::GetFlag(FLAGS_host_workers);
  if (host_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_workers=", host_workers, " must be at least 1"));
  }
  int64_t budget = absl::GetFlag(FLAGS_max_inflight_slice_bytes);
  if (budget == 0) {
    const int64_t host_bytes = HostMemoryBytes();
    budget = DefaultMaxInflightSliceBytes(host_bytes, host_workers);
    MS_LOG(INFO) << "max_inflight_slice_bytes " << budget << " (a quarter of "
                 << host_bytes << " host bytes over " << host_workers << " workers)";
  }
  options.rendezvous.max_inflight_slice_bytes = budget;
  if (absl::Status s = Rendezvous::ValidateOptions(options.rendezvous); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_slice_bytes=", budget, ": ", s.message()));
  }
  options.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes);
  if (options.kv_cache_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_cache_bytes=", options.kv_cache_bytes, " must be >= 0"));
  }
  return options;
}

// --http_port: /metrics (the counters of worker_service.cc), HTTPS with
// --tls_dir's member certificate; null when off.
absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartMetrics(const std::string& host) {
  const int port = absl::GetFlag(FLAGS_http_port);
  if (port <= 0) return nullptr;
  std::optional<HttpsFiles> https;
  if (const std::string dir = absl::GetFlag(FLAGS_tls_dir); !dir.empty()) {
    https = HttpsFiles{absl::StrCat(dir, "/member.pem"), absl::StrCat(dir, "/member.key")};
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<HttpEndpoint> http,
                      HttpEndpoint::Create(&GlobalMetricRegistry(), https));
  MS_RETURN_IF_ERROR(http->Start(host, port));
  MS_LOG(INFO) << "metrics on " << host << ":" << http->port() << " ("
               << http->scheme_description() << ")";
  return http;
}

// Configures the tensor pool from --tensor_pool_mib (or MESHSERVE_TENSOR_POOL_MIB)
// with malloc tuned, and touches --prefault_mib of pool memory.
absl::Status SetUpMemory() {
  constexpr char kPoolEnv[] = "MESHSERVE_TENSOR_POOL_MIB";
  const std::string flag = absl::GetFlag(FLAGS_tensor_pool_mib);
  BufferPoolOptions pool;
  MS_ASSIGN_OR_RETURN(pool.cap_bytes,
                      flag.empty() ? ParseBufferPoolMib(std::getenv(kPoolEnv), kPoolEnv)
                                   : ParseBufferPoolMib(flag.c_str(), "--tensor_pool_mib"));
  pool.tune_malloc = true;
  MS_RETURN_IF_ERROR(ConfigureBufferPool(pool));
  const int64_t mib = absl::GetFlag(FLAGS_prefault_mib);
  if (mib < 0 || mib > (int64_t{1} << 30)) {
    return InvalidArgument("--prefault_mib=", mib, " must be between 0 and 2^30");
  }
  return AnnotateStatus(PrefaultBufferPool(mib << 20), "--prefault_mib=", mib);
}

// The engine runs programs that compute for long on `pool`
// (WorkerEngine::Options::executor), the quick ones on gRPC's threads.
void RunLongProgramsOn(ThreadPool* pool, WorkerEngine::Options* options) {
  options->executor = [pool](std::function<void()> task) { pool->Schedule(std::move(task)); };
}

// Over 80 lines: the start-up sequence in order (BLAS threads, signal mask,
// server, calibration, membership, then the wait for a signal).
int Run() {
  const int machine_cores = std::max(1u, std::thread::hardware_concurrency());
  const int cores = absl::GetFlag(FLAGS_cores) > 0 ? absl::GetFlag(FLAGS_cores) : machine_cores;
  const int threads =
      absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : std::max(1, cores / 2);
  SetBlasThreads(threads);

  // SIGTERM/SIGINT are taken by sigwait below: block them before any thread
  // starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<RpcSecurity> security = SecurityFromFlag();
  if (!security.ok()) {
    std::cerr << "meshserve-worker: " << security.status() << "\n";
    return 2;
  }
  absl::StatusOr<WorkerEngine::Options> worker_options = WorkerOptionsFromFlags();
  const absl::Status flags = worker_options.ok() ? SetUpMemory() : worker_options.status();
  if (!flags.ok()) {
    std::cerr << "meshserve-worker: " << flags.message() << "\n";
    return 2;
  }
  GrpcPeerTransport::Options transport_options;
  transport_options.channel = security->MemberChannelOptions();
  GrpcPeerTransport transport(transport_options);
  ThreadPool pool;  // before the worker, whose engine uses it
  RunLongProgramsOn(&pool, &*worker_options);
  WorkerEngine worker(*worker_options, &transport);
  WorkerServiceImpl service(&worker, &pool);
  const std::string host = absl::GetFlag(FLAGS_host);
  absl::StatusOr<WorkerServer> server = StartWorkerServer(
      &service, host, absl::GetFlag(FLAGS_port), security->MemberOnlyServerCredentials());
  if (!server.ok()) {
    std::cerr << "meshserve-worker: " << server.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> http = StartMetrics(host);
  if (!http.ok()) {
    std::cerr << "meshserve-worker: " << http.status() << "\n";
    return 1;
  }
  const std::string address = AdvertisedAddress(host, server->port);
  service.set_address(address);
  const std::string blas = BlasCoreName();
  StartWorkerCalibration(blas, threads, CalibrationCacheDir(std::getenv));  // background

  absl::Mutex print_mu;
  bool printed = false;
  auto announce = [&](int64_t id) {
    worker.set_worker_id(id);
    absl::MutexLock lock(&print_mu);
    if (printed) return;
    printed = true;
    std::cout << "meshserve-worker ready id=" << id << " address=" << address
              << " blas=" << blas << std::endl;
  };
  absl::StatusOr<std::unique_ptr<MembershipClient>> membership =
      StartMembership(address, cores, *security, announce);
  if (!membership.ok()) {
    std::cerr << "meshserve-worker: " << membership.status() << "\n";
    return 2;
  }
  MS_LOG(INFO) << "serving on " << host << ":" << server->port << " (advertised " << address
               << "), blas=" << blas << " threads=" << threads
               << ", transport: " << security->Describe();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  MS_LOG(INFO) << "signal " << signal_number << ": draining and exiting";
  if (*membership != nullptr) {
    (*membership)->Stop(/*draining=*/true);
    DrainModels(worker, **membership);
  }
  ShutDownWithin1s(*server->server);
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace
}  // namespace meshserve

int main(int argc, char** argv) {
  meshserve::StartServerMain(
      argc, argv,
      "meshserve-worker: one shard worker process; it hosts the devices the coordinator\n"
      "places on it and runs their programs.\n\n"
      "  meshserve-worker --port 0 --coordinator 127.0.0.1:7000",
      std::getenv("MESHSERVE_LOG_LEVEL"));
  const char* gemm_isa = std::getenv("MESHSERVE_GEMM_ISA");
  meshserve::SetSmallMIsaCap(gemm_isa == nullptr ? "" : gemm_isa);
  meshserve::BlasOptions blas = meshserve::BlasOptionsFromEnvironment(std::getenv);
  meshserve::EnsureBlasCoreTypeOrReexec(argv, &blas);
  if (absl::Status s = meshserve::EnsureWorkingBlasOrReexec(argv, blas); !s.ok()) {
    std::cerr << "meshserve-worker: no working BLAS kernel: " << s << "\n";
    return 1;
  }
  return meshserve::Run();
}
