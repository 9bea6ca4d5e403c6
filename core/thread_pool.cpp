#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace attnrt::core {
namespace {
// Set while a thread runs a chunk of some job: a nested ParallelFor then runs inline.
thread_local bool t_inside_parallel_region = false;
}  // namespace

struct ThreadPool::Job {
  attnrt_parallel_fn fn;
  void* user_data;
  size_t n;
  size_t chunk;
  size_t num_chunks;
  std::atomic<size_t> next_chunk{0};
  std::atomic<size_t> done_chunks{0};
  std::mutex done_mutex;
  std::condition_variable done_cv;
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool ThreadPool::RunOneChunk(Job& job) {
  const size_t index = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
  if (index >= job.num_chunks) return false;
  const size_t begin = index * job.chunk;
  const size_t end = std::min(job.n, begin + job.chunk);
  const bool was_inside = t_inside_parallel_region;
  t_inside_parallel_region = true;
  job.fn(job.user_data, begin, end);
  t_inside_parallel_region = was_inside;
  if (job.done_chunks.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_chunks) {
    std::lock_guard<std::mutex> lock(job.done_mutex);
    job.done_cv.notify_all();
  }
  return true;
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_ && jobs_.empty()) return;
      job = jobs_.front();
      // Every chunk of the front job is claimed: it leaves the queue, its owner waits for it.
      if (job->next_chunk.load(std::memory_order_relaxed) >= job->num_chunks) {
        jobs_.pop_front();
        continue;
      }
    }
    while (RunOneChunk(*job)) {
    }
  }
}

void ThreadPool::ParallelFor(size_t n, size_t grain, attnrt_parallel_fn fn, void* user_data) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  // A few chunks per thread balance uneven work (heads with different sequence lengths).
  const size_t target_chunks = static_cast<size_t>(num_threads_) * 4;
  const size_t chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  if (workers_.empty() || t_inside_parallel_region || chunk >= n) {
    fn(user_data, 0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = fn;
  job->user_data = user_data;
  job->n = n;
  job->chunk = chunk;
  job->num_chunks = (n + chunk - 1) / chunk;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(job);
  }
  work_available_.notify_all();
  while (RunOneChunk(*job)) {
  }
  std::unique_lock<std::mutex> lock(job->done_mutex);
  job->done_cv.wait(
      lock, [&] { return job->done_chunks.load(std::memory_order_acquire) == job->num_chunks; });
}

}  // namespace attnrt::core
