// Tests of buffer_pool.h: the cap's parsing and configuration, prefaulting,
// reuse of freed pooled ranges, zeroing and alignment, and errors.
#include "common/tensor/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOkAndHolds;
using ::meshserve::testing::StatusIs;

int64_t Mib(int64_t n) { return n << 20; }

// Pages of [p, p + bytes) resident in memory, by the kernel's own count
// (mincore), and the number of pages.
std::pair<int64_t, int64_t> ResidentPages(const char* p, int64_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) +
                         page - 1) / page * page;
  std::vector<unsigned char> in((end - begin) / page);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return {-1, -1};
  int64_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return {resident, static_cast<int64_t>(in.size())};
}

// Unmaps every free range, then sets `cap`.
absl::Status EmptyPoolWithCap(int64_t cap) {
  BufferPoolOptions options;
  options.cap_bytes = 0;
  if (absl::Status s = ConfigureBufferPool(options); !s.ok()) return s;
  options.cap_bytes = cap;
  return ConfigureBufferPool(options);
}

// Restores the default configuration after each test (tests share the
// process-wide pool).
class BufferPoolTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_OK(ConfigureBufferPool(BufferPoolOptions())); }
};

TEST_F(BufferPoolTest, ParseMibTakesWholeMibAndNamesTheSourceOfABadValue) {
  EXPECT_THAT(ParseBufferPoolMib(nullptr, "X"), IsOkAndHolds(Mib(2048)));
  EXPECT_THAT(ParseBufferPoolMib("", "X"), IsOkAndHolds(Mib(2048)));
  EXPECT_THAT(ParseBufferPoolMib("512", "X"), IsOkAndHolds(Mib(512)));
  EXPECT_THAT(ParseBufferPoolMib("0", "X"), IsOkAndHolds(0));
  for (const char* bad : {"lots", "-1", "12x", "99999999999"}) {
    EXPECT_THAT(ParseBufferPoolMib(bad, "MESHSERVE_TENSOR_POOL_MIB"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         std::string("MESHSERVE_TENSOR_POOL_MIB='") + bad + "'"));
  }
}

TEST_F(BufferPoolTest, ConfigureSetsTheCapAndRefusesANegativeOne) {
  EXPECT_EQ(BufferPoolCapBytes(), Mib(kDefaultBufferPoolCapMib));
  BufferPoolOptions options;
  options.cap_bytes = Mib(64);
  EXPECT_OK(ConfigureBufferPool(options));
  EXPECT_EQ(BufferPoolCapBytes(), Mib(64));
  options.cap_bytes = -5;
  EXPECT_THAT(ConfigureBufferPool(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "cap_bytes=-5"));
  EXPECT_EQ(BufferPoolCapBytes(), Mib(64));
  options.cap_bytes = Mib(64);
  options.tune_malloc = true;  // its effect is malloc's; here: it does not fail
  EXPECT_OK(ConfigureBufferPool(options));
}

TEST_F(BufferPoolTest, PrefaultChecksItsSizeAndKeepsTheMemoryFree) {
  BufferPoolOptions options;
  options.cap_bytes = 0;  // empties the pool
  ASSERT_OK(ConfigureBufferPool(options));
  EXPECT_EQ(BufferPoolFreeBytes(), 0);
  options.cap_bytes = Mib(32);
  ASSERT_OK(ConfigureBufferPool(options));
  EXPECT_THAT(PrefaultBufferPool(-1), StatusIs(absl::StatusCode::kInvalidArgument, "-1 bytes"));
  EXPECT_THAT(PrefaultBufferPool(Mib(33)),
              StatusIs(absl::StatusCode::kInvalidArgument, "at most 33554432 bytes"));
  EXPECT_OK(PrefaultBufferPool(0));
  EXPECT_EQ(BufferPoolFreeBytes(), 0);
  EXPECT_OK(PrefaultBufferPool(Mib(24) - 1));  // rounded up to whole 2 MiB pages
  EXPECT_EQ(BufferPoolFreeBytes(), Mib(24));
  // A lower cap unmaps the excess at once.
  options.cap_bytes = Mib(8);
  ASSERT_OK(ConfigureBufferPool(options));
  EXPECT_EQ(BufferPoolFreeBytes(), 0);
}

TEST_F(BufferPoolTest, AFreedPooledRangeIsReusedAndZeroedAgain) {
  ASSERT_OK(EmptyPoolWithCap(Mib(64)));
  const int64_t size = Mib(6) + 100;
  char* first = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(TensorBuffer b, AllocateTensorBuffer(size, /*zero=*/true));
    first = b.get();
    EXPECT_EQ(BufferPoolFreeBytes(), 0);
    std::memset(b.get(), 0xab, static_cast<size_t>(size));
  }
  // Header + 6 MiB + 100 bytes take four 2 MiB pages.
  EXPECT_EQ(BufferPoolFreeBytes(), Mib(8));
  ASSERT_OK_AND_ASSIGN(TensorBuffer again, AllocateTensorBuffer(size, /*zero=*/true));
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(BufferPoolFreeBytes(), 0);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < size; ++i) nonzero += again.get()[i] != 0;
  EXPECT_EQ(nonzero, 0);
  // A smaller request splits a free range; the rest stays free.
  again.reset();
  ASSERT_OK_AND_ASSIGN(TensorBuffer part, AllocateTensorBuffer(Mib(4), /*zero=*/false));
  EXPECT_EQ(part.get(), first);
  EXPECT_EQ(BufferPoolFreeBytes(), Mib(2));
}

TEST_F(BufferPoolTest, PrefaultedMemoryIsResidentWhenABufferTakesIt) {
  ASSERT_OK(EmptyPoolWithCap(Mib(32)));
  ASSERT_OK(PrefaultBufferPool(Mib(32)));
  EXPECT_EQ(BufferPoolFreeBytes(), Mib(32));
  // A buffer the caller fills (zero=false: nothing written into it here)
  // taken from the prefaulted range is resident before the caller's first
  // write: the prefault touched it, not the allocation.
  ASSERT_OK_AND_ASSIGN(TensorBuffer b, AllocateTensorBuffer(Mib(20), /*zero=*/false));
  EXPECT_EQ(BufferPoolFreeBytes(), Mib(32) - Mib(22));  // header + 20 MiB: 11 pages of 2 MiB
  const auto [resident, pages] = ResidentPages(b.get(), Mib(20));
  EXPECT_GT(pages, 1000);
  EXPECT_EQ(resident, pages);
}

TEST_F(BufferPoolTest, AFreshBufferTheCallerFillsIsNotResidentBeforeItsWrites) {
  // The reference for the test above: without a prefault the same buffer is
  // a fresh mapping whose pages the kernel has not faulted in yet.
  ASSERT_OK(EmptyPoolWithCap(0));
  ASSERT_OK_AND_ASSIGN(TensorBuffer b, AllocateTensorBuffer(Mib(20), /*zero=*/false));
  const auto [resident, pages] = ResidentPages(b.get(), Mib(20));
  EXPECT_GT(pages, 1000);
  EXPECT_LT(resident, pages / 2);
}

TEST_F(BufferPoolTest, CapZeroKeepsNothing) {
  BufferPoolOptions options;
  options.cap_bytes = 0;
  ASSERT_OK(ConfigureBufferPool(options));
  { ASSERT_OK_AND_ASSIGN(TensorBuffer b, AllocateTensorBuffer(Mib(5), /*zero=*/true)); }
  EXPECT_EQ(BufferPoolFreeBytes(), 0);
}

TEST_F(BufferPoolTest, BuffersAreAlignedAndTheirPaddingIsZero) {
  for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{10}, int64_t{64}, int64_t{1000},
                       Mib(4) + 3}) {
    SCOPED_TRACE(size);
    ASSERT_OK_AND_ASSIGN(TensorBuffer b, AllocateTensorBuffer(size, /*zero=*/false));
    ASSERT_NE(b.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % kTensorAlignment, 0u);
    const int64_t rounded = std::max<int64_t>(1, (size + 63) / 64) * 64;
    for (int64_t i = size; i < rounded; ++i) ASSERT_EQ(b.get()[i], 0) << i;
  }
}

TEST_F(BufferPoolTest, BadSizesAreStatusesNotExceptions) {
  EXPECT_THAT(AllocateTensorBuffer(-1, true),
              StatusIs(absl::StatusCode::kInvalidArgument, "-1 bytes"));
  EXPECT_THAT(AllocateTensorBuffer(int64_t{1} << 62, true),
              StatusIs(absl::StatusCode::kResourceExhausted, "4611686018427387904 bytes"));
  EXPECT_THAT(AllocateTensorBuffer(INT64_MAX, false),
              StatusIs(absl::StatusCode::kResourceExhausted));
  FreeTensorBuffer(nullptr);  // a no-op
}

TEST_F(BufferPoolTest, ThreadsAllocateAndFreeConcurrently) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 20; ++i) {
        const int64_t size = (i % 2 == 0 ? Mib(4 + t) : 1000 + i);
        absl::StatusOr<TensorBuffer> b = AllocateTensorBuffer(size, /*zero=*/true);
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_EQ((*b).get()[size - 1], 0);
        (*b).get()[0] = static_cast<char>(t);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(BufferPoolFreeBytes(), BufferPoolCapBytes());
}

}  // namespace
}  // namespace meshserve
