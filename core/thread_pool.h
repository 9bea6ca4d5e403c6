// The runtime's CPU thread pool. Plugins reach it only through attnrt_host_services::parallel_for;
// they never start threads of their own (docs/plugins.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "attnrt/plugin.h"

namespace attnrt::core {

class ThreadPool {
 public:
  // num_threads counts the calling thread: num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn over [0, n) in contiguous ranges of at least `grain` indices and returns when every
  // range is done. The caller works too. Several threads may call at once; a call from inside fn (a
  // nested parallel region) runs inline on the calling thread, so it can never deadlock.
  void ParallelFor(size_t n, size_t grain, attnrt_parallel_fn fn, void* user_data);

 private:
  struct Job;
  void WorkerLoop();
  static bool RunOneChunk(Job& job);

  int num_threads_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace attnrt::core
