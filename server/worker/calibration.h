// A worker's calibration (issue 35 item 2): how fast this process runs the
// GEMMs and memory reads `meshserve suggest` prices a layout with
// (server/suggest/cost_figures.h), measured once at start and reported in the
// worker's Status reply.
//
// Measured with the kernel the worker runs (DotGeneral, common/tensor/
// kernels.h: GemmSmallM or sgemm by shape, on OpenBLAS's threads),
// float32, K = N = 512 (256 for one row), per CPU-second of the measuring
// thread (CLOCK_THREAD_CPUTIME_ID), not per wall second: on a shared host the
// wall rate depends on what else runs at that moment (and the thread runs at
// nice 19), the CPU rate is the core's. With one BLAS thread (the default on
// 2 cores) this is the worker's rate when it has a core to itself; the cost
// model divides it by the host's oversubscription (cost_figures.h):
//   one row   M = 1 on a cache-resident 256 x 256 weight: the arithmetic a
//             one-row GEMM costs on top of its weight read (which the cost
//             model prices by memory bandwidth);
//   small M   M = 8   (2 <= M <= 16);
//   large M   M = 256;
//   rate = 2 M K N / CPU seconds per call, best of 3 windows of ~50 ms.
//   memory    the weight read of a one-row GEMM: DotGeneral M = 1 on a
//             4096 x 4096 float32 weight (64 MiB, not cache-resident), 4 x
//             4096 x 4096 bytes / CPU seconds per call, best of 3 windows of
//             ~50 ms (sgemv streams faster than a summing loop: ~14 vs
//             ~9 GB/s here, and it is what a decode step does).
// About 1 s in all (each window stops after 50 ms of CPU or 20000 calls).
//
// Link and hop (the peers' transport on one host is loopback TCP): a
// listening socket on 127.0.0.1 and a second thread connected to it;
//   hop_ms           half the median round trip of 64-byte messages (200
//                    round trips), each received into a fresh buffer;
//   link_bytes_per_s 1 MiB messages sent one after another and received
//                    into a fresh buffer each (the copy a receiver makes):
//                    bytes / wall seconds, best of 3 windows of 16 MiB.
// Wall time here (the kernel's loopback and both threads' scheduling are the
// cost). This is the transport's floor: gRPC's framing and completion queues
// add to both (tens of microseconds per message on this machine class).
//
// Cache: one file per key "<CPU model>|<BLAS core>|<threads>" in
// $XDG_CACHE_HOME/meshserve (else $HOME/.cache/meshserve), named
// "calibration-<key with every non [A-Za-z0-9] byte as _>.txt", text lines
// "name=value" (key, gemm_gflops_one_row, gemm_gflops_small_m,
// gemm_gflops_large_m, memory_bytes_per_s, hop_ms, link_bytes_per_s, kernel;
// a file without a figure is refused, so an older file is measured again); written to a temporary
// file and renamed, so a reader never sees half a file. A restarted worker
// with the same key reads it instead of measuring. Workers sharing a host
// take an flock on "<file>.lock" around read-or-measure: one measures, the
// others then read its file (no measuring under each other's load).
//
// Thread-safety: the free functions are pure or touch only their file;
// StartCalibration / CurrentCalibration share one process-wide value behind a
// mutex.
#ifndef MESHSERVE_SERVER_WORKER_CALIBRATION_H_
#define MESHSERVE_SERVER_WORKER_CALIBRATION_H_

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// "<cpu_model>|<blas_core>|<threads>".
std::string CalibrationKey(absl::string_view cpu_model, absl::string_view blas_core,
                           int threads);

struct WorkerCalibration {
  double gemm_gflops_one_row = 0, gemm_gflops_small_m = 0, gemm_gflops_large_m = 0;
  double memory_bytes_per_s = 0;
  double hop_ms = 0;            // one small message one way over loopback TCP
  double link_bytes_per_s = 0;  // 1 MiB messages over loopback TCP
  std::string kernel;  // e.g. "DotGeneral (OpenBLAS SkylakeX, 1 threads)"
};

// The "model name" of /proc/cpuinfo, or "unknown-cpu".
std::string CpuModelName();

// $XDG_CACHE_HOME/meshserve, else $HOME/.cache/meshserve, else "" (no cache);
// `getenv` is the environment lookup.
std::string CalibrationCacheDir(absl::FunctionRef<const char*(const char*)> getenv);

// `dir`/calibration-<sanitized key>.txt.
std::string CalibrationCachePath(absl::string_view dir, absl::string_view key);

std::string FormatCalibrationFile(absl::string_view key, const WorkerCalibration& c);

// \error kInvalidArgument: a line without '=', a figure that is not a
//   positive finite number, or a missing figure (each named);
//   kFailedPrecondition: the file's key is not `key` (both named).
absl::StatusOr<WorkerCalibration> ParseCalibrationFile(absl::string_view text,
                                                       absl::string_view key);

// \error kNotFound: no file at `path`; ParseCalibrationFile's errors.
absl::StatusOr<WorkerCalibration> ReadCalibrationFile(const std::string& path,
                                                      absl::string_view key);

// Creates the directory, writes `path`.tmp and renames it to `path`.
// \error kInternal naming the path when the directory or file cannot be written.
absl::Status WriteCalibrationFile(const std::string& path, absl::string_view key,
                                  const WorkerCalibration& c);

// Measures the GEMM and memory figures (see the file comment; hop_ms and
// link_bytes_per_s stay 0: MeasureLoopbackLink); `kernel_name` is recorded as
// `kernel`.
// \error kInternal if a kernel call fails.
absl::StatusOr<WorkerCalibration> MeasureCalibration(const std::string& kernel_name);

// The hop_ms and link_bytes_per_s of the file comment (only those two set).
// \error kUnavailable naming the socket call that failed.
absl::StatusOr<WorkerCalibration> MeasureLoopbackLink();

// Starts a detached thread that reads the cache at `cache_path` or, failing
// that, measures (MeasureLoopbackLink at normal priority, then
// MeasureCalibration at nice 19) and writes it ("" = no cache), then
// publishes the figures to CurrentCalibration. At most once per process.
void StartCalibration(std::string cache_path, std::string key, std::string kernel_name);

// StartCalibration for this process: key CalibrationKey(CpuModelName(),
// blas_core, threads), cache under `cache_dir` (the main passes
// CalibrationCacheDir(std::getenv); "" = no cache), kernel
// "DotGeneral (OpenBLAS <blas_core>, <threads> threads)".
void StartWorkerCalibration(const std::string& blas_core, int threads,
                            const std::string& cache_dir);

// The published figures, nullopt until StartCalibration's thread is done.
std::optional<WorkerCalibration> CurrentCalibration();

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_CALIBRATION_H_
