// Choosing and checking the OpenBLAS kernel ("core type").
//
// OpenBLAS 0.3.21 (Debian) does not recognise recent AMD EPYC CPUs and falls
// back to a slow generic kernel; SkylakeX is ~5x faster on a CPU with AVX-512.
// OpenBLAS reads OPENBLAS_CORETYPE once, when libopenblas is loaded, so the
// choice takes a re-exec of the process:
//
//   int main(int argc, char** argv) {
//     BlasOptions blas = BlasOptionsFromEnvironment(std::getenv);  // first lines of main
//     meshserve::EnsureBlasCoreTypeOrReexec(argv, &blas);
//     if (absl::Status s = meshserve::EnsureWorkingBlasOrReexec(argv, blas); !s.ok()) ...
//
// The library reads no environment variable itself: BlasOptions carries the
// ones below, filled by main (BlasOptionsFromEnvironment with std::getenv) or
// by a test. It writes them, for the re-exec'ed process, with setenv.
//
// EnsureBlasCoreTypeOrReexec: when MESHSERVE_BLAS_CHOSEN is unset, picks a
// core type (MESHSERVE_BLAS_CORETYPE if the user set it, else from CPUID:
// avx512f+avx512bw+avx512vl+avx512dq -> "SkylakeX", avx2+fma -> "Haswell",
// else none), sets OPENBLAS_CORETYPE (unless none), sets MESHSERVE_BLAS_CHOSEN
// to the choice ("default" for none) and execv("/proc/self/exe", argv); no
// re-exec is needed (and none happens) when OPENBLAS_CORETYPE already equals
// the choice (case-insensitive) or the choice is "default" (it then records
// the choice in the environment and in *options). When
// MESHSERVE_BLAS_CHOSEN is already set, it returns at once (so the re-exec'ed
// process continues). If execv fails it logs a warning and returns: the
// process keeps working with whatever kernel OpenBLAS picked.
//
// A wrong kernel must never serve: BlasSelfTest runs sgemm on odd sizes (and
// the transpose flags) against a naive triple loop. EnsureWorkingBlasOrReexec
// runs it and, on failure, re-execs with the next candidate after the current
// one in BlasCoreCandidates() (e.g. SkylakeX -> Haswell -> default, where
// default unsets OPENBLAS_CORETYPE), recording the tried list in
// MESHSERVE_BLAS_TRIED. It returns the self-test's error only when no
// candidate is left (callers must then refuse to serve).
//
// Thread-safety: EnsureBlasCoreTypeOrReexec / EnsureWorkingBlasOrReexec must
// be called from main before other threads start. The others are thread-safe.
#ifndef MESHSERVE_COMMON_TENSOR_BLAS_H_
#define MESHSERVE_COMMON_TENSOR_BLAS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshserve {

// The environment the core choice reads (see the file comment).
struct BlasOptions {
  std::string preferred_core;             // MESHSERVE_BLAS_CORETYPE ("": by CPUID)
  std::optional<std::string> chosen;      // MESHSERVE_BLAS_CHOSEN (set: already chosen)
  std::string tried;                      // MESHSERVE_BLAS_TRIED, comma-separated
  std::string openblas_core_type;         // OPENBLAS_CORETYPE (what libopenblas loaded)
};
// BlasOptions from `lookup` (std::getenv in a main; returns null for unset).
BlasOptions BlasOptionsFromEnvironment(absl::FunctionRef<const char*(const char*)> lookup);

// See file comment. Returns only when no re-exec happened.
void EnsureBlasCoreTypeOrReexec(char** argv, BlasOptions* options);

// See file comment. OK when the self-test passes; re-execs (does not return)
// when it fails and a candidate remains.
absl::Status EnsureWorkingBlasOrReexec(char** argv, const BlasOptions& options);

// The kernel preference order for this CPU (by CPUID), then "default";
// `preferred_core`, when not empty, comes first.
std::vector<std::string> BlasCoreCandidates(absl::string_view preferred_core);

// The candidate to try after `current` ("" when none is left), skipping the
// ones in options.tried.
std::string NextBlasCoreCandidate(const std::string& current, const BlasOptions& options);

// sgemm (NN, NT, TN) of odd sizes (e.g. 67x129x33, alpha/beta != 1) against a
// naive loop. \error kInternal naming the core and the worst mismatch.
absl::Status BlasSelfTest();

// openblas_get_corename(), e.g. "SkylakeX", "Haswell", "Zen".
std::string BlasCoreName();
// openblas_get_config() plus the thread count, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64 threads=2".
std::string BlasConfig();
// openblas_set_num_threads(n) for n >= 1 (n < 1 is ignored).
void SetBlasThreads(int n);
int BlasThreads();

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TENSOR_BLAS_H_
