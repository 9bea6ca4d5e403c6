// Tests of core/thread_pool.cpp on a host's executor (attnrt_runtime_options.executor, ABI 1.3):
// whatever the executor's mapping of team members to threads (its own threads, one after another
// on the caller, none at all), every index of a ParallelFor is done exactly once; a nested call
// runs inline; an exception out of a callback becomes the call's status; the pool starts no
// thread and reports the team size.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/executors.h"
#include "core/thread_pool.h"

namespace attnrt::core {
namespace {

using Ranges = attnrt_test::ParallelRanges;
using attnrt_test::ExecutorLog;
using attnrt_test::NobodyExecutor;
using attnrt_test::SequentialExecutor;
using attnrt_test::ThreadsExecutor;
using attnrt_test::ThreadsOfProcess;

// A broken executor that throws before running anyone.
void ThrowingExecutor(void* context, int32_t /*team_size*/, attnrt_team_fn /*fn*/,
                      void* /*user_data*/) {
  static_cast<ExecutorLog*>(context)->calls.fetch_add(1);
  throw std::runtime_error("executor out of threads");
}

TEST(ThreadPoolExecutorTest, StartsNoThreadAndReportsTheTeamSize) {
  ExecutorLog log;
  const size_t before = ThreadsOfProcess();
  ThreadPool pool(6, ThreadsExecutor, &log);
  EXPECT_EQ(ThreadsOfProcess(), before);
  EXPECT_EQ(pool.num_threads(), 6);
  EXPECT_EQ(pool.start_failure(), "");
  EXPECT_EQ(log.calls.load(), 0);
}

TEST(ThreadPoolExecutorTest, MembersOnTheirOwnThreadsCoverTheRange) {
  for (const size_t n : {size_t{2}, size_t{7}, size_t{1000}, size_t{SIZE_MAX}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    ExecutorLog log;
    ThreadPool pool(4, ThreadsExecutor, &log);
    Ranges ranges;
    const Status st = pool.ParallelFor(n, 1, Ranges::Record, &ranges);
    EXPECT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(ranges.Check(n), "");
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.team_size.load(), 4);
    EXPECT_EQ(log.members_run.load(), 4);
    EXPECT_LE(ranges.seen.size(), 16u);
  }
}

TEST(ThreadPoolExecutorTest, MembersOneAfterAnotherCoverTheRange) {
  ExecutorLog log;
  ThreadPool pool(8, SequentialExecutor, &log);
  Ranges ranges;
  const Status st = pool.ParallelFor(4096, 3, Ranges::Record, &ranges);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(ranges.Check(4096), "");
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.members_run.load(), 8);
  // The first member to run claimed every chunk before the others ran: all on this thread.
  EXPECT_EQ(ranges.threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ThreadPoolExecutorTest, WorkNoMemberClaimedIsDoneByTheCaller) {
  ExecutorLog log;
  ThreadPool pool(4, NobodyExecutor, &log);
  Ranges ranges;
  const Status st = pool.ParallelFor(1000, 1, Ranges::Record, &ranges);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(ranges.Check(1000), "");
  EXPECT_EQ(ranges.threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ThreadPoolExecutorTest, AThrowingExecutorFailsTheCallAfterTheWorkIsDone) {
  ExecutorLog log;
  ThreadPool pool(4, ThrowingExecutor, &log);
  Ranges ranges;
  const Status st = pool.ParallelFor(1000, 1, Ranges::Record, &ranges);
  EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL);
  EXPECT_NE(st.message.find("executor threw"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("executor out of threads"), std::string::npos) << st.message;
  EXPECT_EQ(ranges.Check(1000), "");
}

// One member or one chunk: the caller runs it, the executor is not called.
TEST(ThreadPoolExecutorTest, ATeamOfOneOrASingleChunkRunsInline) {
  ExecutorLog log;
  ThreadPool one(1, ThreadsExecutor, &log);
  Ranges ranges;
  EXPECT_TRUE(one.ParallelFor(1000, 1, Ranges::Record, &ranges).ok());
  EXPECT_EQ(ranges.Check(1000), "");
  ThreadPool four(4, ThreadsExecutor, &log);
  Ranges single;
  EXPECT_TRUE(four.ParallelFor(100, 100, Ranges::Record, &single).ok());
  EXPECT_EQ(single.Check(100), "");
  EXPECT_EQ(log.calls.load(), 0);
}

struct Nested {
  ThreadPool* pool;
  std::atomic<int> inline_inner{0};
  std::atomic<int> inner_failures{0};
  // Each outer index runs an inner ParallelFor over [i * 100, i * 100 + 100).
  static void Outer(void* user_data, size_t begin, size_t end) {
    auto* self = static_cast<Nested*>(user_data);
    for (size_t i = begin; i < end; ++i) {
      Ranges ranges;
      const Status st = self->pool->ParallelFor(100, 1, Ranges::Record, &ranges);
      if (!st.ok() || !ranges.Check(100).empty()) self->inner_failures.fetch_add(1);
      if (ranges.threads == std::set<std::thread::id>{std::this_thread::get_id()}) {
        self->inline_inner.fetch_add(1);
      }
    }
  }
};

TEST(ThreadPoolExecutorTest, NestedCallsRunInline) {
  ExecutorLog log;
  ThreadPool pool(4, ThreadsExecutor, &log);
  Nested nested{&pool};
  const Status st = pool.ParallelFor(32, 1, Nested::Outer, &nested);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(nested.inner_failures.load(), 0);
  EXPECT_EQ(nested.inline_inner.load(), 32);
  // The executor ran the outer region only.
  EXPECT_EQ(log.calls.load(), 1);
}

void Throw(void* /*user_data*/, size_t begin, size_t /*end*/) {
  throw std::runtime_error("callback at " + std::to_string(begin));
}

TEST(ThreadPoolExecutorTest, ExceptionInACallbackBecomesTheCallsStatus) {
  for (const auto executor : {ThreadsExecutor, SequentialExecutor}) {
    ExecutorLog log;
    ThreadPool pool(4, executor, &log);
    const Status st = pool.ParallelFor(4096, 1, Throw, nullptr);
    EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL);
    EXPECT_NE(st.message.find("parallel_for callback threw"), std::string::npos) << st.message;
    EXPECT_NE(st.message.find("callback at "), std::string::npos) << st.message;
    // The pool is still usable.
    Ranges ranges;
    EXPECT_TRUE(pool.ParallelFor(4096, 1, Ranges::Record, &ranges).ok());
    EXPECT_EQ(ranges.Check(4096), "");
  }
}

// Several threads call ParallelFor at once: the executor is called concurrently, and each call
// covers its own range.
TEST(ThreadPoolExecutorTest, ConcurrentCallersEachCoverTheirRange) {
  ExecutorLog log;
  ThreadPool pool(3, ThreadsExecutor, &log);
  std::vector<Ranges> ranges(4);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (auto& r : ranges) {
    callers.emplace_back([&] {
      if (!pool.ParallelFor(5000, 1, Ranges::Record, &r).ok()) failures.fetch_add(1);
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& r : ranges) EXPECT_EQ(r.Check(5000), "");
  EXPECT_EQ(log.calls.load(), 4);
}

}  // namespace
}  // namespace attnrt::core
