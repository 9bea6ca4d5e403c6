// The runtime's CPU thread pool. Plugins reach it only through attnrt_host_services::parallel_for;
// they never start threads of their own (docs/plugins.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnrt/plugin.h"
#include "core/status.h"

namespace attnrt::core {

class ThreadPool {
 public:
  // Starts one worker thread running `body`; throws std::system_error when it cannot (what
  // std::thread's constructor does). Tests substitute one that fails on purpose.
  using ThreadStarter = std::function<std::thread(std::function<void()> body)>;

  // num_threads counts the calling thread: num_threads - 1 workers are started. A worker that
  // cannot be started (a process or memory limit) is not an error: the pool keeps the workers
  // that did start, num_threads() says how many, and start_failure() says why.
  explicit ThreadPool(int num_threads, const ThreadStarter& start = nullptr);
  // A pool of the host's threads (attnrt_runtime_options.executor): starts no thread; each
  // ParallelFor with work for more than one member calls executor(context, team_size, ...), whose
  // members claim chunks as the runtime's own threads do. team_size is at least 1.
  ThreadPool(int team_size, attnrt_executor_fn executor, void* executor_context);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads of the pool, caller included; with an executor, the team size asked of it.
  int num_threads() const { return num_threads_; }
  // Why fewer threads than asked for were started ("" when all were).
  const std::string& start_failure() const { return start_failure_; }

  // Calls fn over [0, n) in contiguous ranges of at least `grain` indices and returns when every
  // range is done or skipped. The caller works too. Several threads may call at once; a call from
  // inside fn (a nested parallel region) runs inline on the calling thread, so it can never
  // deadlock. An exception out of fn, on any thread, is caught: the ranges not yet started are
  // skipped and the call returns ATTNRT_ERROR_INTERNAL describing the first exception (a nested
  // call also fails the enclosing one). At most a few ranges per thread are made, whatever n.
  // With an executor, the ranges its members leave unclaimed (an executor that ran none of them)
  // are run by the caller after it returns. `every_range_ran` (optional) is set to whether every
  // range ran: true on success, and on a failure that lost no work (an executor that threw, whose
  // ranges the caller then finished); false when a callback threw and ranges were skipped.
  Status ParallelFor(size_t n, size_t grain, attnrt_parallel_fn fn, void* user_data,
                     bool* every_range_ran = nullptr);

  // True on a thread that is running a range of some ParallelFor call.
  static bool InsideParallelRegion();

  // Team members, in this process, that an executor ran after their parallel region had ended
  // (after the executor had returned and the region's ranges were all done): each was ignored
  // without touching the region's state (the executor contract forbids them).
  static uint64_t IgnoredLateMembers();

 private:
  struct Job;
  // The executor regions in progress, process-wide: a member finds its region's Job by the token
  // it was given (user_data), or learns that the region has ended.
  class Regions;
  void WorkerLoop();
  static bool RunOneChunk(Job& job);
  // An executor's team member: runs chunks of the Job at user_data until none is left.
  // user_data is the region's token (Regions), not a pointer: a member run after its region ended
  // finds no Job and returns.
  static void TeamMember(void* user_data, int32_t member);
  Status RunOnExecutor(size_t n, size_t chunk, attnrt_parallel_fn fn, void* user_data,
                       bool* every_range_ran);

  // The job whose range this thread is running (null outside any): a nested ParallelFor runs
  // inline and reports an exception to it.
  static thread_local Job* t_current_job;

  int num_threads_;
  std::string start_failure_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  attnrt_executor_fn executor_ = nullptr;
  void* executor_context_ = nullptr;
};

}  // namespace attnrt::core
