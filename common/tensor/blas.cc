// The OpenBLAS core choice, re-exec and self-test of blas.h.
//
// Thread-safety: see blas.h (the Ensure* calls setenv, so main calls them
// before threads start).
#include "common/tensor/blas.h"

#include <cblas.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>  // setenv, unsetenv
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

constexpr char kChosenEnv[] = "MESHSERVE_BLAS_CHOSEN";
constexpr char kUserEnv[] = "MESHSERVE_BLAS_CORETYPE";
constexpr char kTriedEnv[] = "MESHSERVE_BLAS_TRIED";
constexpr char kCoreTypeEnv[] = "OPENBLAS_CORETYPE";
constexpr char kDefault[] = "default";

bool SameCore(absl::string_view a, absl::string_view b) { return absl::EqualsIgnoreCase(a, b); }

// Applies `core` to the environment (kDefault unsets OPENBLAS_CORETYPE),
// appends it to `tried` there, and re-execs. Returns only if execv fails.
void ApplyAndReexec(const std::string& core, const std::string& tried, char** argv) {
  if (core == kDefault) {
    ::unsetenv(kCoreTypeEnv);
  } else {
    ::setenv(kCoreTypeEnv, core.c_str(), 1);
  }
  ::setenv(kChosenEnv, core.c_str(), 1);
  ::setenv(kTriedEnv, (tried.empty() ? core : absl::StrCat(tried, ",", core)).c_str(), 1);
  ::execv("/proc/self/exe", argv);
  MS_LOG(WARNING) << "BLAS: execv(/proc/self/exe) failed (" << std::strerror(errno)
                  << "); continuing with OpenBLAS core " << BlasCoreName();
}

// C = alpha * op(A) op(B) + beta * C with a naive loop in double; returns the
// worst |difference| relative to (1 + |reference|) against cblas_sgemm.
double SgemmError(int m, int n, int k, bool trans_a, bool trans_b, float alpha, float beta) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n),
      c(static_cast<size_t>(m) * n);
  uint32_t state = 12345u + static_cast<uint32_t>(m * 31 + n * 7 + k);
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) * (1.0f / 16777216.0f) - 0.5f;
  };
  for (float& x : a) x = next();
  for (float& x : b) x = next();
  for (float& x : c) x = next();
  std::vector<float> c_ref = c;
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.data(), lda, b.data(), ldb,
              beta, c.data(), n);
  double worst = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
        const double bv = trans_b ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
        sum += av * bv;
      }
      const double want = alpha * sum + beta * c_ref[static_cast<size_t>(i) * n + j];
      const double got = c[static_cast<size_t>(i) * n + j];
      const double err = std::isfinite(got) ? std::fabs(got - want) / (1.0 + std::fabs(want))
                                            : INFINITY;
      worst = std::max(worst, err);
    }
  }
  return worst;
}

}  // namespace

BlasOptions BlasOptionsFromEnvironment(absl::FunctionRef<const char*(const char*)> lookup) {
  auto value = [&lookup](const char* name) {
    const char* v = lookup(name);
    return std::string(v == nullptr ? "" : v);
  };
  BlasOptions options;
  options.preferred_core = value(kUserEnv);
  if (lookup(kChosenEnv) != nullptr) options.chosen = value(kChosenEnv);
  options.tried = value(kTriedEnv);
  options.openblas_core_type = value(kCoreTypeEnv);
  return options;
}

std::vector<std::string> BlasCoreCandidates(absl::string_view preferred_core) {
  std::vector<std::string> out;
  auto add = [&out](absl::string_view core) {
    for (const std::string& c : out) {
      if (SameCore(c, core)) return;
    }
    out.emplace_back(core);
  };
  if (!preferred_core.empty()) add(preferred_core);
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    add("SkylakeX");
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) add("Haswell");
  add(kDefault);
  return out;
}

std::string NextBlasCoreCandidate(const std::string& current, const BlasOptions& options) {
  const std::vector<std::string> candidates = BlasCoreCandidates(options.preferred_core);
  const std::vector<std::string> tried = absl::StrSplit(options.tried, ',', absl::SkipEmpty());
  bool after_current = current.empty();
  for (const std::string& c : candidates) {
    if (after_current) {
      bool was_tried = false;
      for (const std::string& t : tried) was_tried |= SameCore(t, c);
      if (!was_tried) return c;
    }
    if (SameCore(c, current)) after_current = true;
  }
  return "";
}

void EnsureBlasCoreTypeOrReexec(char** argv, BlasOptions* options) {
  if (options->chosen.has_value()) return;
  const std::vector<std::string> candidates = BlasCoreCandidates(options->preferred_core);
  const std::string choice = candidates.front();
  const std::string& current = options->openblas_core_type;
  // Nothing to change: the library already loaded with this choice.
  if (choice == kDefault || SameCore(choice, current)) {
    options->chosen = choice == kDefault && !current.empty() ? current : choice;
    options->tried = *options->chosen;
    ::setenv(kChosenEnv, options->chosen->c_str(), 1);
    ::setenv(kTriedEnv, options->tried.c_str(), 1);
    return;
  }
  MS_LOG(INFO) << "BLAS: selecting OpenBLAS core " << choice << " (was "
               << (current.empty() ? "unset" : current) << "); re-executing";
  ApplyAndReexec(choice, options->tried, argv);
}

absl::Status EnsureWorkingBlasOrReexec(char** argv, const BlasOptions& options) {
  absl::Status status = BlasSelfTest();
  if (status.ok()) return status;
  std::string current = options.chosen.value_or("");
  if (current.empty()) current = options.openblas_core_type;
  if (current.empty()) current = kDefault;
  const std::string next = NextBlasCoreCandidate(current, options);
  if (next.empty()) {
    return AnnotateStatus(status, "BLAS self-test failed and no OpenBLAS core is left to try (",
                          options.tried, ")");
  }
  MS_LOG(ERROR) << "BLAS: " << status.message() << "; retrying with core " << next;
  ApplyAndReexec(next, options.tried, argv);
  return AnnotateStatus(status, "BLAS self-test failed and the re-exec failed");
}

absl::Status BlasSelfTest() {
  struct Case {
    int m, n, k;
    bool ta, tb;
    float alpha, beta;
  };
  // Odd sizes (edge tiles), each transpose flag, and one size past the
  // small-matrix paths so the blocked kernel runs too.
  const Case cases[] = {{67, 129, 33, false, false, 0.75f, 0.5f},
                        {31, 17, 65, false, true, 1.0f, 0.0f},
                        {45, 23, 129, true, false, -1.25f, 1.0f},
                        {1, 7, 3, true, true, 2.0f, 0.25f},
                        {263, 257, 301, false, false, 1.0f, 0.0f}};
  for (const Case& c : cases) {
    const double err = SgemmError(c.m, c.n, c.k, c.ta, c.tb, c.alpha, c.beta);
    if (!(err < 1e-4)) {
      return Internal("BLAS self-test failed on OpenBLAS core ", BlasCoreName(), ": sgemm m=",
                      c.m, " n=", c.n, " k=", c.k, c.ta ? " A^T" : "", c.tb ? " B^T" : "",
                      " differs from the naive loop by ", err);
    }
  }
  return absl::OkStatus();
}

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string BlasConfig() {
  const char* config = openblas_get_config();
  return absl::StrCat(config == nullptr ? "" : config, " core=", BlasCoreName(),
                      " threads=", BlasThreads());
}

void SetBlasThreads(int n) {
  if (n >= 1) openblas_set_num_threads(n);
}

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace meshserve
