#include "common/rpc/write_queue.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace meshserve {
namespace {

TEST(WriteQueueTest, OneWriteOutAtATimeInOrder) {
  WriteQueue<std::unique_ptr<std::string>> q;
  EXPECT_FALSE(q.writing());
  const std::string* first = q.Push(std::make_unique<std::string>("a"));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, "a");
  EXPECT_TRUE(q.writing());
  EXPECT_EQ(q.Push(std::make_unique<std::string>("b")), nullptr);  // "a" is out
  EXPECT_EQ(q.Push(std::make_unique<std::string>("c")), nullptr);
  const std::string* next = q.Done(true);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(*next, "b");
  next = q.Done(true);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(*next, "c");
  EXPECT_EQ(q.Done(true), nullptr);
  EXPECT_FALSE(q.writing());
  // Idle again: the next push goes out at once.
  next = q.Push(std::make_unique<std::string>("d"));
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(*next, "d");
}

TEST(WriteQueueTest, AFailedWriteDropsTheRest) {
  WriteQueue<std::shared_ptr<std::string>> q;
  ASSERT_NE(q.Push(std::make_shared<std::string>("a")), nullptr);
  q.Push(std::make_shared<std::string>("b"));
  q.Push(std::make_shared<std::string>("c"));
  EXPECT_EQ(q.Done(false), nullptr);
  EXPECT_FALSE(q.writing());
  EXPECT_EQ(q.size(), 0u);
}

TEST(WriteQueueTest, ClearKeepsTheWriteOut) {
  WriteQueue<std::unique_ptr<std::string>> q;
  const std::string* out = q.Push(std::make_unique<std::string>("a"));
  q.Push(std::make_unique<std::string>("b"));
  q.Clear();
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(*out, "a");  // still alive for gRPC
  EXPECT_EQ(q.Done(true), nullptr);
  EXPECT_FALSE(q.writing());
  q.Clear();  // idle and empty: nothing to do
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace meshserve
