// Tests of core/thread_pool.cpp on a host's executor (attnrt_runtime_options.executor, ABI 1.3):
// whatever the executor's mapping of team members to threads (its own threads, one after another
// on the caller, none at all), every index of a ParallelFor is done exactly once; a nested call
// runs inline; an exception out of a callback becomes the call's status; the pool starts no
// thread and reports the team size.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/executors.h"
#include "core/plugin_call.h"
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

// A broken executor that runs every member on the caller, then throws.
void ThrowAfterMembersExecutor(void* context, int32_t team_size, attnrt_team_fn fn,
                               void* user_data) {
  SequentialExecutor(context, team_size, fn, user_data);
  throw std::runtime_error("executor failed after its members");
}

// The status says whether the outputs are complete: the caller ran what the executor left, so
// every range ran.
TEST(ThreadPoolExecutorTest, AThrowingExecutorFailsTheCallAfterTheWorkIsDone) {
  ExecutorLog log;
  ThreadPool pool(4, ThrowingExecutor, &log);
  Ranges ranges;
  bool every_range_ran = false;
  const Status st = pool.ParallelFor(1000, 1, Ranges::Record, &ranges, &every_range_ran);
  EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL);
  EXPECT_NE(st.message.find("executor threw"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("executor out of threads"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("its members ran 0 of the 16 ranges of a parallel region, the calling "
                            "thread the other 16 after it threw: every range ran, the outputs "
                            "are complete"),
            std::string::npos)
      << st.message;
  EXPECT_TRUE(every_range_ran);
  EXPECT_EQ(ranges.Check(1000), "");

  ThreadPool after(4, ThrowAfterMembersExecutor, &log);
  Ranges all;
  every_range_ran = false;
  const Status late = after.ParallelFor(1000, 1, Ranges::Record, &all, &every_range_ran);
  EXPECT_EQ(late.code, ATTNRT_ERROR_INTERNAL);
  EXPECT_NE(late.message.find("executor failed after its members"), std::string::npos)
      << late.message;
  EXPECT_NE(late.message.find("its members ran 16 of the 16 ranges of a parallel region, the "
                              "calling thread the other 0 after it threw: every range ran, the "
                              "outputs are complete"),
            std::string::npos)
      << late.message;
  EXPECT_TRUE(every_range_ran);
  EXPECT_EQ(all.Check(1000), "");
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
  for (const auto executor : {ThreadsExecutor, SequentialExecutor, ThrowAfterMembersExecutor}) {
    ExecutorLog log;
    ThreadPool pool(4, executor, &log);
    bool every_range_ran = true;
    const Status st = pool.ParallelFor(4096, 1, Throw, nullptr, &every_range_ran);
    EXPECT_EQ(st.code, ATTNRT_ERROR_INTERNAL);
    EXPECT_NE(st.message.find("parallel_for callback threw"), std::string::npos) << st.message;
    EXPECT_NE(st.message.find("callback at "), std::string::npos) << st.message;
    // Ranges were skipped: never "complete", whatever the executor did.
    EXPECT_FALSE(every_range_ran);
    EXPECT_EQ(st.message.find("complete"), std::string::npos) << st.message;
    if (executor == ThrowAfterMembersExecutor) continue;
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

// A broken executor that runs every member, returns, and keeps (fn, user_data) to run a member
// again later.
struct KeptMember {
  ExecutorLog log;
  attnrt_team_fn fn = nullptr;
  void* user_data = nullptr;
};

void KeepingExecutor(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  auto* kept = static_cast<KeptMember*>(context);
  SequentialExecutor(&kept->log, team_size, fn, user_data);
  kept->fn = fn;
  kept->user_data = user_data;
}

constexpr size_t kProbeBytes = 64 * 1024;
constexpr unsigned char kProbeFill = 0xA5;

// Runs the kept member on this thread under a stack buffer that covers the frames ParallelFor had
// (the region's state lived there before it was shared); returns the buffer's bytes it changed.
__attribute__((noinline)) size_t RunKeptMemberUnderAFilledStack(const KeptMember& kept) {
  volatile unsigned char buffer[kProbeBytes];
  for (size_t i = 0; i < kProbeBytes; ++i) buffer[i] = kProbeFill;
  kept.fn(kept.user_data, 0);
  size_t changed = 0;
  for (size_t i = 0; i < kProbeBytes; ++i) changed += buffer[i] != kProbeFill ? 1 : 0;
  return changed;
}

// A parallel_for callback that first runs a kept member of an earlier region, then records.
struct RunOldMember {
  Ranges ranges;
  attnrt_team_fn fn = nullptr;
  void* user_data = nullptr;
  std::atomic<bool> done{false};
  static void Run(void* self_data, size_t begin, size_t end) {
    auto* self = static_cast<RunOldMember*>(self_data);
    if (!self->done.exchange(true)) self->fn(self->user_data, 0);
    Ranges::Record(&self->ranges, begin, end);
  }
};

// A member run after its region ended (its executor had returned, its ranges were done) is
// ignored: it neither runs a range nor writes to memory of the region, whether it comes while
// the pool is idle, during a later region or after the pool is gone.
TEST(ThreadPoolExecutorTest, AMemberRunAfterTheRegionEndedIsIgnored) {
  KeptMember kept;
  Ranges ranges;
  RunOldMember next;
  {
    ThreadPool pool(4, KeepingExecutor, &kept);
    ASSERT_TRUE(pool.ParallelFor(1000, 1, Ranges::Record, &ranges).ok());
    ASSERT_NE(kept.fn, nullptr);
    uint64_t ignored = ThreadPool::IgnoredLateMembers();
    EXPECT_EQ(RunKeptMemberUnderAFilledStack(kept), 0u)
        << "a late member wrote into the stack where the region's state had been";
    EXPECT_EQ(ThreadPool::IgnoredLateMembers(), ignored + 1);

    // During the next region, from one of its callbacks.
    next.fn = kept.fn;
    next.user_data = kept.user_data;
    ignored = ThreadPool::IgnoredLateMembers();
    ASSERT_TRUE(pool.ParallelFor(1000, 1, RunOldMember::Run, &next).ok());
    EXPECT_TRUE(next.done.load());
    EXPECT_EQ(ThreadPool::IgnoredLateMembers(), ignored + 1);
    EXPECT_EQ(next.ranges.Check(1000), "");
  }
  // After the pool is gone, on another thread (the second region's member).
  const uint64_t ignored = ThreadPool::IgnoredLateMembers();
  std::thread late([&] { kept.fn(kept.user_data, 1); });
  late.join();
  EXPECT_EQ(ThreadPool::IgnoredLateMembers(), ignored + 1);
  EXPECT_EQ(ranges.Check(1000), "");
  EXPECT_EQ(next.ranges.Check(1000), "");
}

// A broken executor that starts its members on threads of its own and returns without waiting
// for them; the test joins them.
struct EarlyReturn {
  ExecutorLog log;
  std::mutex mutex;
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
};

void EarlyReturnExecutor(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  auto* early = static_cast<EarlyReturn*>(context);
  early->log.Called(team_size);
  std::lock_guard<std::mutex> lock(early->mutex);
  for (int32_t m = 0; m < team_size; ++m) {
    early->threads.emplace_back([=] {
      // Start only after the executor has returned and the caller has begun the work.
      while (!early->go.load()) std::this_thread::yield();
      fn(user_data, m);
      early->log.members_run.fetch_add(1);
    });
  }
}

// A slow callback: the caller is still working when the members start.
void RecordSlowly(void* user_data, size_t begin, size_t end) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Ranges::Record(user_data, begin, end);
}

// Members still running when their executor returned share the region's state: every index is
// done exactly once and nothing is read after the call returns (ASan builds check the latter).
TEST(ThreadPoolExecutorTest, MembersRunningAfterTheExecutorReturnedStillCoverTheRange) {
  EarlyReturn early;
  Ranges ranges;
  {
    ThreadPool pool(4, EarlyReturnExecutor, &early);
    std::thread release([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      early.go.store(true);
    });
    const Status st = pool.ParallelFor(64, 1, RecordSlowly, &ranges);
    EXPECT_TRUE(st.ok()) << st.message;
    release.join();
  }
  std::lock_guard<std::mutex> lock(early.mutex);
  for (auto& t : early.threads) t.join();
  EXPECT_EQ(early.log.members_run.load(), 4);
  EXPECT_EQ(ranges.Check(64), "");
}

// What a plugin call reports after several failed parallel_for calls: the first, unless a later
// one lost work and the first did not; "the outputs are complete" never survives lost work.
TEST(ThreadPoolExecutorTest, AFailureThatLostWorkIsReportedOverOneThatDidNot) {
  {
    PluginCallScope scope;
    EXPECT_TRUE(PluginCallScope::Report("executor threw: complete", true));
    EXPECT_TRUE(PluginCallScope::Report("callback threw", false));
    EXPECT_TRUE(PluginCallScope::Report("executor threw again: complete", true));
    EXPECT_TRUE(PluginCallScope::Report("callback threw again", false));
    EXPECT_EQ(scope.parallel_failure(), "callback threw");
  }
  {
    PluginCallScope scope;
    EXPECT_TRUE(PluginCallScope::Report("executor threw: complete", true));
    EXPECT_TRUE(PluginCallScope::Report("executor threw again: complete", true));
    EXPECT_EQ(scope.parallel_failure(), "executor threw: complete");
  }
}

}  // namespace
}  // namespace attnrt::core
