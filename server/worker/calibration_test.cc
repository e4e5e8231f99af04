// Tests of the worker calibration (calibration.h): the cache file round trip,
// its refusals (another key, a bad figure), the cache location, and one real
// measurement's sanity (positive figures; no timing assertions beyond > 0).
#include "server/worker/calibration.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

WorkerCalibration Sample() {
  WorkerCalibration c;
  c.gemm_gflops_one_row = 12.5;
  c.gemm_gflops_small_m = 41.25;
  c.gemm_gflops_large_m = 153.0625;
  c.memory_bytes_per_s = 9.75e9;
  c.hop_ms = 0.0234375;
  c.link_bytes_per_s = 3.5e9;
  c.kernel = "DotGeneral (OpenBLAS SkylakeX, 1 threads)";
  return c;
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string base = t != nullptr ? t : ::testing::TempDir();
  return base + "/calibration_test_" + std::to_string(::getpid());
}

TEST(CalibrationTest, CacheFileRoundTrip) {
  const std::string key = CalibrationKey("Intel(R) Xeon(R) CPU @ 2.00GHz", "SkylakeX", 2);
  EXPECT_EQ(key, "Intel(R) Xeon(R) CPU @ 2.00GHz|SkylakeX|2");
  const std::string dir = TempDir();
  const std::string path = CalibrationCachePath(dir, key);
  EXPECT_EQ(path, dir + "/calibration-Intel_R__Xeon_R__CPU___2_00GHz_SkylakeX_2.txt");
  EXPECT_THAT(ReadCalibrationFile(path, key), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(WriteCalibrationFile(path, key, Sample()));
  ASSERT_OK_AND_ASSIGN(WorkerCalibration back, ReadCalibrationFile(path, key));
  EXPECT_EQ(back.gemm_gflops_one_row, 12.5);
  EXPECT_EQ(back.gemm_gflops_small_m, 41.25);
  EXPECT_EQ(back.gemm_gflops_large_m, 153.0625);
  EXPECT_EQ(back.memory_bytes_per_s, 9.75e9);
  EXPECT_EQ(back.hop_ms, 0.0234375);
  EXPECT_EQ(back.link_bytes_per_s, 3.5e9);
  EXPECT_EQ(back.kernel, Sample().kernel);
  // Another machine, core or thread count does not reuse it.
  EXPECT_THAT(ReadCalibrationFile(path, CalibrationKey("Intel(R) Xeon(R) CPU @ 2.00GHz",
                                                       "SkylakeX", 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  std::filesystem::remove_all(dir);
}

TEST(CalibrationTest, BadFiguresAreRefusedByName) {
  const std::string good = FormatCalibrationFile("k", Sample());
  ASSERT_OK(ParseCalibrationFile(good, "k").status());
  std::string negative = good;
  negative.replace(negative.find("gemm_gflops_large_m=") + 20, 1, "-");
  EXPECT_THAT(ParseCalibrationFile(negative, "k"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gemm_gflops_large_m"));
  EXPECT_THAT(ParseCalibrationFile("key=k\ngemm_gflops_one_row=1\n", "k"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gemm_gflops_small_m"));
  // A file from before the link figures is refused (then measured again).
  std::string no_link = good;
  no_link.erase(no_link.find("hop_ms="), no_link.find('\n', no_link.find("hop_ms=")) -
                                              no_link.find("hop_ms=") + 1);
  EXPECT_THAT(ParseCalibrationFile(no_link, "k"),
              StatusIs(absl::StatusCode::kInvalidArgument, "hop_ms"));
  EXPECT_THAT(ParseCalibrationFile("key=k\nno equals sign\n", "k"),
              StatusIs(absl::StatusCode::kInvalidArgument, "no equals"));
}

TEST(CalibrationTest, CacheDirFollowsXdgThenHome) {
  std::map<std::string, const char*> env = {{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}};
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second;
  };
  EXPECT_EQ(CalibrationCacheDir(lookup), "/x/meshserve");
  env.erase("XDG_CACHE_HOME");
  EXPECT_EQ(CalibrationCacheDir(lookup), "/h/.cache/meshserve");
  env.erase("HOME");
  EXPECT_EQ(CalibrationCacheDir(lookup), "");
}

// The loopback link: a hop is a small message one way (well under a second
// on any host, and a round trip cannot be shorter than nothing), and 16 MiB
// windows give a finite positive rate.
TEST(CalibrationTest, LoopbackLinkGivesPositiveFigures) {
  ASSERT_OK_AND_ASSIGN(WorkerCalibration c, MeasureLoopbackLink());
  EXPECT_GT(c.hop_ms, 0);
  EXPECT_LT(c.hop_ms, 1000);
  EXPECT_GT(c.link_bytes_per_s, 0);
  EXPECT_TRUE(std::isfinite(c.link_bytes_per_s));
  EXPECT_EQ(c.gemm_gflops_large_m, 0);  // only the link figures
}

TEST(CalibrationTest, MeasurementGivesPositiveFigures) {
  ASSERT_OK_AND_ASSIGN(WorkerCalibration c, MeasureCalibration("test kernel"));
  EXPECT_GT(c.gemm_gflops_one_row, 0);
  EXPECT_GT(c.gemm_gflops_small_m, 0);
  EXPECT_GT(c.gemm_gflops_large_m, 0);
  EXPECT_GT(c.memory_bytes_per_s, 0);
  EXPECT_EQ(c.kernel, "test kernel");
  c.hop_ms = 0.5;  // MeasureCalibration leaves the link figures to MeasureLoopbackLink
  c.link_bytes_per_s = 1e9;
  ASSERT_OK_AND_ASSIGN(WorkerCalibration back,
                       ParseCalibrationFile(FormatCalibrationFile("k", c), "k"));
  EXPECT_NEAR(back.gemm_gflops_large_m, c.gemm_gflops_large_m, 1e-3 * c.gemm_gflops_large_m);
}

}  // namespace
}  // namespace meshserve
