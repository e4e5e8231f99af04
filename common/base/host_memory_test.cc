// HostMemoryBytes against /proc/meminfo's MemTotal read here with its own
// parser, and against the kernel's page count (sysconf), which MemTotal trails
// by the kernel's reserved memory only.
#include "common/base/host_memory.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(HostMemoryTest, IsMemTotalInBytes) {
  std::ifstream in("/proc/meminfo");
  if (!in) GTEST_SKIP() << "no /proc/meminfo";
  long long kib = -1;
  std::string line;
  while (std::getline(in, line)) {
    if (std::sscanf(line.c_str(), "MemTotal: %lld kB", &kib) == 1) break;
  }
  ASSERT_GT(kib, 0) << "no MemTotal line";
  EXPECT_EQ(HostMemoryBytes(), static_cast<int64_t>(kib) * 1024);
}

TEST(HostMemoryTest, IsCloseToThePhysicalPages) {
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                       static_cast<double>(sysconf(_SC_PAGESIZE));
  ASSERT_GT(pages, 0);
  EXPECT_GT(HostMemoryBytes(), 0);
  EXPECT_NEAR(static_cast<double>(HostMemoryBytes()), pages, 0.1 * pages);
}

}  // namespace
}  // namespace meshserve
