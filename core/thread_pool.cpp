#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <unordered_map>

#include "core/plugin_call.h"

namespace attnrt::core {

struct ThreadPool::Job {
  Job(attnrt_parallel_fn fn_in, void* user_data_in, size_t n_in, size_t chunk_in)
      : fn(fn_in),
        user_data(user_data_in),
        n(n_in),
        chunk(chunk_in),
        num_chunks(n_in / chunk_in + (n_in % chunk_in != 0 ? 1 : 0)) {}

  attnrt_parallel_fn fn;
  void* user_data;
  size_t n;
  size_t chunk;
  size_t num_chunks;
  std::atomic<size_t> next_chunk{0};
  std::atomic<size_t> done_chunks{0};
  std::mutex done_mutex;
  std::condition_variable done_cv;
  // Set by the first range whose fn threw: later ranges are skipped (but still counted as done).
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  std::string failure;

  void Fail(std::string what) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (failed.load(std::memory_order_relaxed)) return;
    failure = std::move(what);
    failed.store(true, std::memory_order_release);
  }
};

namespace {

// Inside a catch block: what fn did, without letting a second exception (out of memory while
// describing the first) escape onto a worker thread.
std::string DescribeCallbackException() noexcept {
  try {
    return "a parallel_for callback threw " + DescribeCurrentException();
  } catch (...) {
    return {};
  }
}

std::atomic<uint64_t> g_ignored_late_members{0};

}  // namespace

// A member gets its region as a token that is never reused, not as the address of the region's
// state: an executor that runs a member after it returned (against its contract) gets nothing
// from a token whose region has ended, instead of a pointer into freed memory. A member that
// finds its region shares ownership of the Job until it returns, so an executor that returns
// while its members still run leaves them valid state too.
class ThreadPool::Regions {
 public:
  // Leaked on purpose: a late member may come during or after static destruction.
  static Regions& Get() {
    static Regions* const regions = new Regions();
    return *regions;
  }

  uintptr_t Open(std::shared_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uintptr_t token = next_token_++;
    live_.emplace(token, std::move(job));
    return token;
  }

  std::shared_ptr<Job> Find(uintptr_t token) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(token);
    return it != live_.end() ? it->second : nullptr;
  }

  void Close(uintptr_t token) noexcept {
    std::shared_ptr<Job> job;  // released outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(token);
    if (it == live_.end()) return;
    job = std::move(it->second);
    live_.erase(it);
  }

 private:
  std::mutex mutex_;
  // Token 0 is never given out (a null user_data is never a live region).
  uintptr_t next_token_ = 1;
  std::unordered_map<uintptr_t, std::shared_ptr<Job>> live_;
};

thread_local ThreadPool::Job* ThreadPool::t_current_job = nullptr;

uint64_t ThreadPool::IgnoredLateMembers() {
  return g_ignored_late_members.load(std::memory_order_relaxed);
}

ThreadPool::ThreadPool(int num_threads, const ThreadStarter& start) : num_threads_(1) {
  const int wanted = std::max(1, num_threads);
  workers_.reserve(static_cast<size_t>(wanted - 1));
  for (int i = 1; i < wanted; ++i) {
    try {
      auto body = [this] { WorkerLoop(); };
      workers_.push_back(start ? start(body) : std::thread(body));
    } catch (const std::exception& e) {
      // A thread that cannot start (EAGAIN under a process limit) leaves the pool smaller; the
      // threads already running stay and are joined by the destructor as usual.
      start_failure_ = "started " + std::to_string(workers_.size() + 1) + " of the " +
                       std::to_string(wanted) + " threads asked for: " + e.what();
      break;
    }
  }
  num_threads_ = static_cast<int>(workers_.size()) + 1;
}

ThreadPool::ThreadPool(int team_size, attnrt_executor_fn executor, void* executor_context)
    : num_threads_(std::max(1, team_size)),
      executor_(executor),
      executor_context_(executor_context) {}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool ThreadPool::InsideParallelRegion() { return t_current_job != nullptr; }

bool ThreadPool::RunOneChunk(Job& job) {
  const size_t index = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
  if (index >= job.num_chunks) return false;
  if (!job.failed.load(std::memory_order_acquire)) {
    // index < num_chunks = ceil(n / chunk), so begin < n and neither sum below can wrap.
    const size_t begin = index * job.chunk;
    const size_t end = begin + std::min(job.chunk, job.n - begin);
    Job* const outer = t_current_job;
    t_current_job = &job;
    try {
      job.fn(job.user_data, begin, end);
    } catch (...) {
      job.Fail(DescribeCallbackException());
    }
    t_current_job = outer;
  }
  if (job.done_chunks.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_chunks) {
    std::lock_guard<std::mutex> lock(job.done_mutex);
    job.done_cv.notify_all();
  }
  return true;
}

void ThreadPool::TeamMember(void* user_data, int32_t /*member*/) {
  const std::shared_ptr<Job> job = Regions::Get().Find(reinterpret_cast<uintptr_t>(user_data));
  if (job == nullptr) {
    // The region ended: its ranges are done and its caller has returned. Nothing to do.
    g_ignored_late_members.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  while (RunOneChunk(*job)) {
  }
}

Status ThreadPool::RunOnExecutor(size_t n, size_t chunk, attnrt_parallel_fn fn, void* user_data,
                                 bool* every_range_ran) {
  auto job = std::make_shared<Job>(fn, user_data, n, chunk);
  const uintptr_t token = Regions::Get().Open(job);
  struct CloseRegion {
    uintptr_t token;
    ~CloseRegion() { Regions::Get().Close(token); }
  } close_region{token};
  std::string executor_failure;
  try {
    executor_(executor_context_, static_cast<int32_t>(num_threads_), TeamMember,
              reinterpret_cast<void*>(token));
  } catch (...) {
    // The executor broke its contract; the work is still finished below.
    try {
      executor_failure = "the runtime's executor threw " + DescribeCurrentException();
    } catch (...) {
      executor_failure = "the runtime's executor threw";
    }
  }
  // Ranges no member claimed (an executor that ran fewer members, or none): done here.
  size_t by_caller = 0;
  while (RunOneChunk(*job)) ++by_caller;
  {
    // Wait for the ranges members claimed: all done already when the executor kept its contract
    // (it returns after its members have), and the wait orders their writes before this return;
    // one that returned early leaves members running, each holding the Job.
    std::unique_lock<std::mutex> lock(job->done_mutex);
    job->done_cv.wait(
        lock, [&] { return job->done_chunks.load(std::memory_order_acquire) == job->num_chunks; });
  }
  if (job->failed.load(std::memory_order_acquire)) {
    if (every_range_ran != nullptr) *every_range_ran = false;
    std::lock_guard<std::mutex> lock(job->failure_mutex);
    return Internal(job->failure);
  }
  if (every_range_ran != nullptr) *every_range_ran = true;
  if (executor_failure.empty()) return Status::Ok();
  // No callback threw, so every range ran: say so, the outputs are whole.
  return Internal(
      executor_failure + " (its members ran " + std::to_string(job->num_chunks - by_caller) +
      " of the " + std::to_string(job->num_chunks) +
      " ranges of a parallel region, the calling thread the other " + std::to_string(by_caller) +
      " after it threw: every range ran, the outputs are complete)");
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

Status ThreadPool::ParallelFor(size_t n, size_t grain, attnrt_parallel_fn fn, void* user_data,
                               bool* every_range_ran) {
  if (every_range_ran != nullptr) *every_range_ran = true;
  if (n == 0) return Status::Ok();
  grain = std::max<size_t>(grain, 1);
  // A few chunks per thread balance uneven work (heads with different sequence lengths). Rounded
  // up without forming n + divisor - 1, which wraps for n near SIZE_MAX.
  const size_t target_chunks = static_cast<size_t>(num_threads_) * 4;
  const size_t chunk = std::max(grain, n / target_chunks + (n % target_chunks != 0 ? 1 : 0));
  Job* const enclosing = t_current_job;
  if (num_threads_ == 1 || enclosing != nullptr || chunk >= n) {
    try {
      fn(user_data, 0, n);
    } catch (...) {
      std::string failure = DescribeCallbackException();
      if (every_range_ran != nullptr) *every_range_ran = false;
      if (enclosing != nullptr) enclosing->Fail(failure);
      return Internal(std::move(failure));
    }
    return Status::Ok();
  }
  if (executor_ != nullptr) return RunOnExecutor(n, chunk, fn, user_data, every_range_ran);
  auto job = std::make_shared<Job>(fn, user_data, n, chunk);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(job);
  }
  work_available_.notify_all();
  while (RunOneChunk(*job)) {
  }
  {
    std::unique_lock<std::mutex> lock(job->done_mutex);
    job->done_cv.wait(
        lock, [&] { return job->done_chunks.load(std::memory_order_acquire) == job->num_chunks; });
  }
  if (!job->failed.load(std::memory_order_acquire)) return Status::Ok();
  if (every_range_ran != nullptr) *every_range_ran = false;
  std::lock_guard<std::mutex> lock(job->failure_mutex);
  return Internal(job->failure);
}

}  // namespace attnrt::core
