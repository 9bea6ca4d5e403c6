// Host executors (attnrt_runtime_options.executor, ABI 1.3) for tests, each mapping team members
// to threads its own way, a parallel_for callback that records the ranges it is given, and a count
// of the process's threads.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attnrt/attnrt.h"

namespace attnrt_test {

// What an executor saw: its calls, the team size last asked for, the members it ran.
struct ExecutorLog {
  std::atomic<int> calls{0};
  std::atomic<int> team_size{0};
  std::atomic<int> members_run{0};

  void Called(int32_t size) {
    calls.fetch_add(1);
    team_size.store(size);
  }
};

// Members 1..team_size-1 on threads of their own, member 0 on the caller (as OpenMP does).
inline void ThreadsExecutor(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  auto* log = static_cast<ExecutorLog*>(context);
  log->Called(team_size);
  std::vector<std::thread> threads;
  for (int32_t m = 1; m < team_size; ++m) {
    threads.emplace_back([=] {
      fn(user_data, m);
      log->members_run.fetch_add(1);
    });
  }
  fn(user_data, 0);
  log->members_run.fetch_add(1);
  for (auto& t : threads) t.join();
}

// Every member one after another on the calling thread, the last first (a host with one thread).
inline void SequentialExecutor(void* context, int32_t team_size, attnrt_team_fn fn,
                               void* user_data) {
  auto* log = static_cast<ExecutorLog*>(context);
  log->Called(team_size);
  for (int32_t m = team_size - 1; m >= 0; --m) {
    fn(user_data, m);
    log->members_run.fetch_add(1);
  }
}

// A broken executor that returns without running any member: the runtime's caller does the work.
inline void NobodyExecutor(void* context, int32_t team_size, attnrt_team_fn /*fn*/,
                           void* /*user_data*/) {
  static_cast<ExecutorLog*>(context)->Called(team_size);
}

// A parallel_for callback recording the ranges it was given and the threads that ran them.
struct ParallelRanges {
  std::mutex mutex;
  std::vector<std::pair<size_t, size_t>> seen;
  std::set<std::thread::id> threads;

  static void Record(void* user_data, size_t begin, size_t end) {
    auto* self = static_cast<ParallelRanges*>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->seen.emplace_back(begin, end);
    self->threads.insert(std::this_thread::get_id());
  }

  // "" when the ranges are non-empty, disjoint and cover [0, n) exactly.
  std::string Check(size_t n) {
    std::sort(seen.begin(), seen.end());
    size_t next = 0;
    for (const auto& [begin, end] : seen) {
      if (begin != next || end <= begin || end > n) {
        return "range [" + std::to_string(begin) + ", " + std::to_string(end) + ") after " +
               std::to_string(next);
      }
      next = end;
    }
    return next == n ? "" : "covered up to " + std::to_string(next) + " of " + std::to_string(n);
  }
};

// Threads of this process now (Linux: the entries of /proc/self/task; 0 when it cannot be read).
inline size_t ThreadsOfProcess() {
  size_t count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace attnrt_test
