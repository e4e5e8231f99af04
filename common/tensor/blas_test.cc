#include "common/tensor/blas.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

constexpr char kChildMarker[] = "MESHSERVE_BLAS_TEST_CHILD_OUT";

TEST(BlasTest, SelfTestPassesWithTheLoadedKernel) {
  EXPECT_OK(BlasSelfTest());
  EXPECT_FALSE(BlasCoreName().empty());
  EXPECT_NE(BlasConfig().find("threads="), std::string::npos);
  std::cerr << "BlasConfig: " << BlasConfig() << "\n";
}

TEST(BlasTest, ThreadsCanBeSet) {
  const int before = BlasThreads();
  SetBlasThreads(1);
  EXPECT_EQ(BlasThreads(), 1);
  SetBlasThreads(0);  // ignored
  EXPECT_EQ(BlasThreads(), 1);
  SetBlasThreads(before);
}

TEST(BlasTest, CandidatesFollowCpuidAndEndWithDefault) {
  std::vector<std::string> c = BlasCoreCandidates("");
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.back(), "default");
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(c.front() == "SkylakeX", avx512);
  c = BlasCoreCandidates("Zen");
  EXPECT_EQ(c.front(), "Zen");
  EXPECT_EQ(BlasCoreCandidates("skylakex").size(), BlasCoreCandidates("").size() + !avx512)
      << "a preferred core the CPU list has already is not listed twice";
}

TEST(BlasTest, NextCandidateSkipsTried) {
  const std::vector<std::string> c = BlasCoreCandidates("");
  BlasOptions options;
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    EXPECT_EQ(NextBlasCoreCandidate(c[i], options), c[i + 1]);
  }
  EXPECT_EQ(NextBlasCoreCandidate("default", options), "");
  if (c.size() >= 3) {
    options.tried = absl::StrCat(c[0], ",", c[1]);
    EXPECT_EQ(NextBlasCoreCandidate(c[0], options), c[2]);
  }
}

TEST(BlasTest, OptionsComeFromTheLookup) {
  const std::map<std::string, std::string> env = {{"MESHSERVE_BLAS_CORETYPE", "Zen"},
                                                  {"MESHSERVE_BLAS_TRIED", "Zen,Haswell"},
                                                  {"OPENBLAS_CORETYPE", "Haswell"}};
  auto lookup = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  BlasOptions options = BlasOptionsFromEnvironment(lookup);
  EXPECT_EQ(options.preferred_core, "Zen");
  EXPECT_FALSE(options.chosen.has_value());
  EXPECT_EQ(options.tried, "Zen,Haswell");
  EXPECT_EQ(options.openblas_core_type, "Haswell");
  // Set but empty is still "chosen".
  options = BlasOptionsFromEnvironment(
      [](const char* name) -> const char* {
        return std::string(name) == "MESHSERVE_BLAS_CHOSEN" ? "" : nullptr;
      });
  EXPECT_EQ(options.chosen, std::optional<std::string>(""));
  EXPECT_EQ(options.preferred_core, "");
}

// Runs in a child process (see ReexecSelectsTheCore): calls
// EnsureBlasCoreTypeOrReexec, which re-execs this binary once, then reports
// what OpenBLAS loaded.
TEST(BlasReexecChild, Report) {
  const char* out = std::getenv(kChildMarker);
  if (out == nullptr) GTEST_SKIP() << "only runs as a child of ReexecSelectsTheCore";
  std::vector<std::string> args = ::testing::internal::GetArgvs();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  BlasOptions options = BlasOptionsFromEnvironment(std::getenv);
  EnsureBlasCoreTypeOrReexec(argv.data(), &options);
  std::ofstream f(out);
  const char* chosen = std::getenv("MESHSERVE_BLAS_CHOSEN");
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  f << BlasCoreName() << "\n" << (chosen ? chosen : "") << "\n" << (core ? core : "") << "\n"
    << (BlasSelfTest().ok() ? "selftest-ok" : "selftest-failed") << "\n";
}

std::vector<std::string> RunChild(const std::string& user_core) {
  const std::string out = absl::StrCat(::testing::TempDir(), "/h4_blas_child_", getpid());
  std::remove(out.c_str());
  const pid_t pid = fork();
  if (pid == 0) {
    ::setenv(kChildMarker, out.c_str(), 1);
    ::unsetenv("MESHSERVE_BLAS_CHOSEN");
    ::unsetenv("MESHSERVE_BLAS_TRIED");
    ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);  // anything but the choice
    if (user_core.empty()) {
      ::unsetenv("MESHSERVE_BLAS_CORETYPE");
    } else {
      ::setenv("MESHSERVE_BLAS_CORETYPE", user_core.c_str(), 1);
    }
    char filter[] = "--gtest_filter=BlasReexecChild.Report";
    char* argv[] = {const_cast<char*>("blas_test"), filter, nullptr};
    ::execv("/proc/self/exe", argv);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::ifstream in(out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::remove(out.c_str());
  return lines;
}

TEST(BlasTest, ReexecSelectsTheCore) {
  const std::string want = BlasCoreCandidates("").front();
  if (want == "default") GTEST_SKIP() << "CPU has neither AVX-512 nor AVX2";
  std::vector<std::string> lines = RunChild("");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(absl::EqualsIgnoreCase(lines[0], want)) << lines[0];
  EXPECT_EQ(lines[1], want);
  EXPECT_EQ(lines[2], want);
  EXPECT_EQ(lines[3], "selftest-ok");
  // The user's choice wins.
  lines = RunChild("Haswell");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1], "Haswell");
  EXPECT_TRUE(absl::EqualsIgnoreCase(lines[0], "Haswell")) << lines[0];
}

}  // namespace
}  // namespace meshserve
