// Tests of core/thread_pool.cpp: ranges for any n and grain (n near SIZE_MAX included) cover
// [0, n) exactly once in a few calls, an exception out of a callback on any thread becomes the
// call's status, and a pool whose threads cannot all start keeps the ones that did. The pools
// that run on a host's executor (attnrt_runtime_options.executor) are tested in
// thread_pool_executor_test.cpp.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/child_process.h"
#include "common/executors.h"

namespace attnrt::core {
namespace {

using attnrt_test::RunInChild;

using Ranges = attnrt_test::ParallelRanges;

// In a child with a time limit: before the fix, n = SIZE_MAX and grain 0 meant 2^64 callbacks.
TEST(ThreadPoolTest, AnyNAndGrainCoverTheRangeInAFewCalls) {
  const std::vector<std::pair<size_t, size_t>> cases = {{SIZE_MAX, 0},
                                                        {SIZE_MAX, 1},
                                                        {SIZE_MAX - 1, 3},
                                                        {SIZE_MAX, SIZE_MAX / 2 + 2},
                                                        {SIZE_MAX, SIZE_MAX - 1},
                                                        {SIZE_MAX, SIZE_MAX},
                                                        {1000, 0},
                                                        {1000, 7},
                                                        {1, 0}};
  for (const int threads : {1, 4}) {
    for (const auto& [n, grain] : cases) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", n " + std::to_string(n) + ", grain " +
                   std::to_string(grain));
      std::string output;
      const std::string failure = RunInChild(
          30,
          [&, n = n, grain = grain](std::string* out) {
            ThreadPool pool(threads);
            Ranges ranges;
            const Status st = pool.ParallelFor(n, grain, Ranges::Record, &ranges);
            if (!st.ok()) *out = "status: " + st.message;
            if (ranges.seen.size() > 4 * static_cast<size_t>(threads) && n > 1000) {
              *out += std::to_string(ranges.seen.size()) + " callbacks; ";
            }
            *out += ranges.Check(n);
            return out->empty() ? 0 : 1;
          },
          &output);
      EXPECT_EQ(failure, "") << output;
    }
  }
}

void Throw(void* /*user_data*/, size_t begin, size_t /*end*/) {
  throw std::runtime_error("callback at " + std::to_string(begin));
}

TEST(ThreadPoolTest, ExceptionOnAnyThreadBecomesTheCallsStatus) {
  for (const int threads : {1, 2, 8}) {
    ThreadPool pool(threads);
    const Status st = pool.ParallelFor(4096, 1, Throw, nullptr);
    EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL) << threads;
    EXPECT_NE(st.message.find("parallel_for callback threw"), std::string::npos) << st.message;
    EXPECT_NE(st.message.find("callback at "), std::string::npos) << st.message;
    // The pool is still usable.
    Ranges ranges;
    EXPECT_TRUE(pool.ParallelFor(4096, 1, Ranges::Record, &ranges).ok());
    EXPECT_EQ(ranges.Check(4096), "");
  }
}

struct Nested {
  ThreadPool* pool;
  std::atomic<int> outer_calls{0};
  static void Outer(void* user_data, size_t /*begin*/, size_t /*end*/) {
    auto* self = static_cast<Nested*>(user_data);
    self->outer_calls.fetch_add(1);
    const Status inner = self->pool->ParallelFor(8, 1, Throw, nullptr);
    if (inner.ok()) std::abort();
  }
};

TEST(ThreadPoolTest, NestedExceptionFailsTheEnclosingCall) {
  ThreadPool pool(4);
  Nested nested{&pool};
  const Status st = pool.ParallelFor(64, 1, Nested::Outer, &nested);
  EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL);
  EXPECT_NE(st.message.find("callback at 0"), std::string::npos) << st.message;
  EXPECT_GE(nested.outer_calls.load(), 1);
}

TEST(ThreadPoolTest, ThreadsThatCannotStartLeaveASmallerPool) {
  int started = 0;
  const ThreadPool::ThreadStarter fail_after_three = [&](std::function<void()> body) {
    if (started == 3) throw std::system_error(EAGAIN, std::generic_category(), "thread");
    ++started;
    return std::thread(std::move(body));
  };
  ThreadPool pool(8, fail_after_three);
  EXPECT_EQ(pool.num_threads(), 4);
  EXPECT_NE(pool.start_failure().find("started 4 of the 8 threads"), std::string::npos)
      << pool.start_failure();
  EXPECT_NE(pool.start_failure().find(std::generic_category().message(EAGAIN)), std::string::npos)
      << pool.start_failure();
  Ranges ranges;
  EXPECT_TRUE(pool.ParallelFor(100000, 1, Ranges::Record, &ranges).ok());
  EXPECT_EQ(ranges.Check(100000), "");

  ThreadPool none(8, [](std::function<void()>) -> std::thread {
    throw std::system_error(EAGAIN, std::generic_category(), "thread");
  });
  EXPECT_EQ(none.num_threads(), 1);
  Ranges all;
  EXPECT_TRUE(none.ParallelFor(1000, 1, Ranges::Record, &all).ok());
  EXPECT_EQ(all.Check(1000), "");
}

}  // namespace
}  // namespace attnrt::core
