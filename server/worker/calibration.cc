// A worker's calibration: measure, cache, publish (calibration.h).
#include "server/worker/calibration.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/file_io.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/tensor/kernels.h"
#include "common/tensor/tensor.h"

namespace meshserve {
namespace {

constexpr const char* kFigureNames[] = {"gemm_gflops_one_row", "gemm_gflops_small_m",
                                        "gemm_gflops_large_m", "memory_bytes_per_s",
                                        "hop_ms",              "link_bytes_per_s"};
constexpr int kNumFigures = 6;

double* FigureOf(WorkerCalibration& c, int i) {
  double* figures[] = {&c.gemm_gflops_one_row, &c.gemm_gflops_small_m, &c.gemm_gflops_large_m,
                       &c.memory_bytes_per_s,  &c.hop_ms,              &c.link_bytes_per_s};
  return figures[i];
}

// The calling thread's CPU time.
absl::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

constexpr absl::Duration kWindow = absl::Milliseconds(50);
constexpr int64_t kMaxCallsPerWindow = 20000;

// Best rate (units per CPU second of this thread) of `work` (returns the
// units it did) over 3 windows, each up to kWindow of CPU or
// kMaxCallsPerWindow calls, after one warm-up.
absl::StatusOr<double> BestRate(const std::function<absl::StatusOr<double>()>& work) {
  MS_RETURN_IF_ERROR(work().status());
  double best = 0;
  for (int w = 0; w < 3; ++w) {
    const absl::Duration start = ThreadCpuTime();
    double units = 0;
    absl::Duration elapsed;
    for (int64_t calls = 0; calls < kMaxCallsPerWindow; ++calls) {
      MS_ASSIGN_OR_RETURN(double u, work());
      units += u;
      elapsed = ThreadCpuTime() - start;
      if (elapsed >= kWindow) break;
    }
    const double s = absl::ToDoubleSeconds(elapsed);
    if (s > 0) best = std::max(best, units / s);
  }
  return best;
}

// GFLOP/s of DotGeneral on [m, k] x [k, n] float32.
absl::StatusOr<double> GemmGflops(int64_t m, int64_t k, int64_t n) {
  Tensor a = Tensor::Zeros(DType::kFloat32, {m, k});
  Tensor b = Tensor::Zeros(DType::kFloat32, {k, n});
  float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t i = 0; i < m * k; ++i) pa[i] = static_cast<float>(i % 7) * 0.25f;
  for (int64_t i = 0; i < k * n; ++i) pb[i] = static_cast<float>(i % 5) * 0.5f;
  const double flops = 2.0 * static_cast<double>(m * k * n);
  MS_ASSIGN_OR_RETURN(double rate, BestRate([&]() -> absl::StatusOr<double> {
                        MS_ASSIGN_OR_RETURN(Tensor c, DotGeneral(a, b, {1}, {0}, {}, {},
                                                                 DType::kFloat32));
                        return flops;
                      }));
  return rate / 1e9;
}

// Bytes per CPU second of a one-row GEMM's weight read (a 64 MiB weight).
absl::StatusOr<double> MemoryReadBytesPerSecond() {
  // The read a one-row GEMM makes: DotGeneral [1, 4096] x [4096, 4096] (sgemv)
  // streams the 64 MiB weight once per call.
  MS_ASSIGN_OR_RETURN(double gflops, GemmGflops(1, 4096, 4096));
  return gflops * 1e9 / 2.0 * sizeof(float);  // 2 flops per weight element
}

absl::Status SocketError(absl::string_view call) {
  return absl::UnavailableError(absl::StrCat("loopback link calibration: ", call, ": ",
                                             std::strerror(errno)));
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly `n` bytes into a fresh buffer (the copy a receiver makes).
bool ReadMessage(int fd, size_t n) {
  std::string buffer(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, buffer.data() + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

constexpr size_t kSmallMessage = 64;
constexpr int kRoundTrips = 200;
constexpr size_t kLargeMessage = size_t{1} << 20;
constexpr int kLargePerWindow = 16;

// The echo side: answers kRoundTrips small messages, then reads 3 windows
// of kLargePerWindow large ones, acknowledging each window with one byte.
void EchoPeer(int fd) {
  const std::string small(kSmallMessage, 's');
  for (int i = 0; i < kRoundTrips; ++i) {
    if (!ReadMessage(fd, kSmallMessage) || !WriteAll(fd, small.data(), small.size())) return;
  }
  for (int w = 0; w < 3; ++w) {
    for (int i = 0; i < kLargePerWindow; ++i) {
      if (!ReadMessage(fd, kLargeMessage)) return;
    }
    if (!WriteAll(fd, "a", 1)) return;
  }
}

std::string Sanitized(absl::string_view key) {
  std::string out(key);
  for (char& c : out) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

absl::Mutex g_mu;
bool g_started ABSL_GUARDED_BY(g_mu) = false;
std::optional<WorkerCalibration> g_current ABSL_GUARDED_BY(g_mu);

void Publish(const WorkerCalibration& c) {
  absl::MutexLock lock(&g_mu);
  g_current = c;
}

// An exclusive flock on `path`.lock while it lives (none if the file cannot
// be opened): workers sharing a host measure one after the other, and the
// later ones read the first one's file instead of measuring under its load.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    fd_ = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~CacheLock() {
    if (fd_ >= 0) close(fd_);  // releases the flock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

void RunCalibration(const std::string& cache_path, const std::string& key,
                    const std::string& kernel_name) {
  CacheLock lock(cache_path);
  if (!cache_path.empty()) {
    absl::StatusOr<WorkerCalibration> cached = ReadCalibrationFile(cache_path, key);
    if (cached.ok()) {
      MS_LOG(INFO) << "calibration read from " << cache_path;
      Publish(*cached);
      return;
    }
    if (!absl::IsNotFound(cached.status())) {
      MS_LOG(WARNING) << "calibration cache ignored: " << cached.status();
    }
  }
  const absl::Time start = absl::Now();
  // The link first, at normal priority (wall time: at nice 19 on a loaded
  // host it would measure the scheduler); then the CPU-time figures at 19.
  absl::StatusOr<WorkerCalibration> link = MeasureLoopbackLink();
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  absl::StatusOr<WorkerCalibration> measured =
      link.ok() ? MeasureCalibration(kernel_name) : link.status();
  if (measured.ok()) {
    measured->hop_ms = link->hop_ms;
    measured->link_bytes_per_s = link->link_bytes_per_s;
  }
  if (!measured.ok()) {
    MS_LOG(WARNING) << "calibration failed: " << measured.status();
    return;
  }
  MS_LOG(INFO) << "calibration measured in " << absl::FormatDuration(absl::Now() - start)
               << ": one-row " << measured->gemm_gflops_one_row << ", small-M "
               << measured->gemm_gflops_small_m << ", large-M "
               << measured->gemm_gflops_large_m << " GFLOP/s, memory "
               << measured->memory_bytes_per_s / 1e9 << " GB/s, hop " << measured->hop_ms
               << " ms, link " << measured->link_bytes_per_s / 1e9 << " GB/s";
  if (!cache_path.empty()) {
    absl::Status written = WriteCalibrationFile(cache_path, key, *measured);
    if (!written.ok()) MS_LOG(WARNING) << "calibration cache not written: " << written;
  }
  Publish(*measured);
}

}  // namespace

std::string CalibrationKey(absl::string_view cpu_model, absl::string_view blas_core,
                           int threads) {
  return absl::StrCat(cpu_model, "|", blas_core, "|", threads);
}

std::string CpuModelName() {
  absl::StatusOr<std::string> cpuinfo = ReadFileToString("/proc/cpuinfo");
  if (!cpuinfo.ok()) return "unknown-cpu";
  for (absl::string_view line : absl::StrSplit(*cpuinfo, '\n')) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown-cpu";
}

std::string CalibrationCacheDir(absl::FunctionRef<const char*(const char*)> getenv) {
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] != '\0') return absl::StrCat(xdg, "/meshserve");
  const char* home = getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/meshserve");
  return "";
}

std::string CalibrationCachePath(absl::string_view dir, absl::string_view key) {
  return absl::StrCat(dir, "/calibration-", Sanitized(key), ".txt");
}

std::string FormatCalibrationFile(absl::string_view key, const WorkerCalibration& c) {
  WorkerCalibration copy = c;
  std::string out = absl::StrCat("key=", key, "\n");
  for (int i = 0; i < kNumFigures; ++i) {
    absl::StrAppend(&out, kFigureNames[i], "=", absl::StrFormat("%.17g", *FigureOf(copy, i)), "\n");
  }
  absl::StrAppend(&out, "kernel=", c.kernel, "\n");
  return out;
}

absl::StatusOr<WorkerCalibration> ParseCalibrationFile(absl::string_view text,
                                                       absl::string_view key) {
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("calibration line '", line, "' has no '='"));
    }
    fields[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  if (fields["key"] != key) {
    return absl::FailedPreconditionError(absl::StrCat("calibration file is for '", fields["key"],
                                                      "', not '", key, "'"));
  }
  WorkerCalibration c;
  c.kernel = fields["kernel"];
  for (int i = 0; i < kNumFigures; ++i) {
    auto it = fields.find(kFigureNames[i]);
    if (it == fields.end()) {
      return absl::InvalidArgumentError(absl::StrCat("calibration file has no ", kFigureNames[i]));
    }
    double* v = FigureOf(c, i);
    if (!absl::SimpleAtod(it->second, v) || !std::isfinite(*v) || *v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("calibration ", kFigureNames[i], " '",
                                                     it->second,
                                                     "' is not a positive finite number"));
    }
  }
  return c;
}

absl::StatusOr<WorkerCalibration> ReadCalibrationFile(const std::string& path,
                                                      absl::string_view key) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));  // NotFound when absent
  return ParseCalibrationFile(text, key);
}

absl::Status WriteCalibrationFile(const std::string& path, absl::string_view key,
                                  const WorkerCalibration& c) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the directory of ", path, ": ",
                                                  ec.message()));
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << FormatCalibrationFile(key, c);
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ",
                                                  ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<WorkerCalibration> MeasureCalibration(const std::string& kernel_name) {
  WorkerCalibration c;
  c.kernel = kernel_name;
  MS_ASSIGN_OR_RETURN(c.gemm_gflops_one_row, GemmGflops(1, 256, 256));
  MS_ASSIGN_OR_RETURN(c.gemm_gflops_small_m, GemmGflops(8, 512, 512));
  MS_ASSIGN_OR_RETURN(c.gemm_gflops_large_m, GemmGflops(256, 512, 512));
  MS_ASSIGN_OR_RETURN(c.memory_bytes_per_s, MemoryReadBytesPerSecond());
  return c;
}

absl::StatusOr<WorkerCalibration> MeasureLoopbackLink() {
  Fd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) return SocketError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return SocketError("bind 127.0.0.1:0");
  }
  if (listen(listener.get(), 1) != 0) return SocketError("listen");
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return SocketError("getsockname");
  }
  Fd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (client.get() < 0) return SocketError("socket");
  if (connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return SocketError("connect");
  }
  Fd server(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (server.get() < 0) return SocketError("accept");
  const int one = 1;
  setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(server.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::thread peer(EchoPeer, server.get());
  const std::string small(kSmallMessage, 'p');
  const std::string large(kLargeMessage, 'l');
  std::vector<double> round_trip_ms;
  double best_bytes_per_s = 0;
  bool ok = true;
  for (int i = 0; ok && i < kRoundTrips; ++i) {
    const absl::Time start = absl::Now();
    ok = WriteAll(client.get(), small.data(), small.size()) && ReadMessage(client.get(), kSmallMessage);
    round_trip_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  for (int w = 0; ok && w < 3; ++w) {
    const absl::Time start = absl::Now();
    for (int i = 0; ok && i < kLargePerWindow; ++i) ok = WriteAll(client.get(), large.data(), large.size());
    ok = ok && ReadMessage(client.get(), 1);
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (s > 0) best_bytes_per_s = std::max(best_bytes_per_s, kLargePerWindow * kLargeMessage / s);
  }
  shutdown(client.get(), SHUT_RDWR);
  peer.join();
  if (!ok) return SocketError("send/recv");
  std::nth_element(round_trip_ms.begin(), round_trip_ms.begin() + kRoundTrips / 2, round_trip_ms.end());
  WorkerCalibration c;
  c.hop_ms = round_trip_ms[kRoundTrips / 2] / 2;
  c.link_bytes_per_s = best_bytes_per_s;
  return c;
}

void StartCalibration(std::string cache_path, std::string key, std::string kernel_name) {
  {
    absl::MutexLock lock(&g_mu);
    if (g_started) return;
    g_started = true;
  }
  std::thread([cache_path = std::move(cache_path), key = std::move(key),
               kernel_name = std::move(kernel_name)] {
    RunCalibration(cache_path, key, kernel_name);
  }).detach();
}

void StartWorkerCalibration(const std::string& blas_core, int threads,
                            const std::string& cache_dir) {
  std::string key = CalibrationKey(CpuModelName(), blas_core, threads);
  std::string path = cache_dir.empty() ? "" : CalibrationCachePath(cache_dir, key);
  StartCalibration(std::move(path), std::move(key),
                   absl::StrCat("DotGeneral (OpenBLAS ", blas_core, ", ", threads, " threads)"));
}

std::optional<WorkerCalibration> CurrentCalibration() {
  absl::MutexLock lock(&g_mu);
  return g_current;
}

}  // namespace meshserve
