// A runtime whose parallel work runs on torch's intra-op threads (ABI 1.3's
// attnrt_runtime_options.executor): each parallel region of a kernel is one at::parallel_for over
// the team's members, so in a process where torch runs on OpenMP (its standard builds) attention
// and torch's own operators share one team of threads instead of two pools competing for the
// cores (a spinning OpenMP thread against a runtime worker woken on a condition variable).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "attnrt/attnrt.h"
#include "bindings/torch/runtimes.h"

namespace attnrt_torch {
namespace {

// Members [begin, end) of the team on each thread at::parallel_for hands a range to: with OpenMP a
// member per thread while the team has threads to spare, else several one after another (the
// runtime's members claim work dynamically, so any mapping does all of it).
void TorchThreadsExecutor(void* /*executor_context*/, int32_t team_size, attnrt_team_fn fn,
                          void* user_data) {
  try {
    at::parallel_for(0, team_size, 1, [&](int64_t begin, int64_t end) {
      for (int64_t member = begin; member < end; ++member) {
        fn(user_data, static_cast<int32_t>(member));
      }
    });
  } catch (...) {
    // fn never throws; should at::parallel_for fail before running a member, the runtime's caller
    // does the work those members would have claimed.
  }
}

}  // namespace

int64_t TorchThreadsRuntime(int64_t num_threads) {
  // A team past int32_t is named here with its own value; up to there the runtime's check names
  // options.num_threads and its range.
  ATTNRT_TORCH_CHECK_ARG(num_threads >= 0 && num_threads <= INT32_MAX,
                         "num_threads: expected 0 (torch's intra-op thread count, "
                         "at::get_num_threads()) or a team size from 1 to the runtime's limit on "
                         "options.num_threads, got ",
                         num_threads);
  // A library older than ABI 1.3 would ignore options.executor and start a pool of its own.
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  TORCH_CHECK(major == ATTNRT_ABI_VERSION_MAJOR && minor >= 3,
              "ATTNRT_ERROR_ABI_MISMATCH: the loaded libattnrt.so has ABI ", major, ".", minor,
              "; a runtime on torch's threads needs ABI ", ATTNRT_ABI_VERSION_MAJOR,
              ".3 or later (options.executor)");
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads =
      num_threads > 0 ? static_cast<int32_t>(num_threads) : std::max(1, at::get_num_threads());
  options.executor = TorchThreadsExecutor;
  attnrt_runtime* runtime = nullptr;
  const attnrt_status status = attnrt_runtime_create(&options, &runtime);
  if (status != ATTNRT_OK) ThrowStatus(status);
  try {
    return RegisterOwnedRuntime(runtime);
  } catch (...) {
    attnrt_runtime_destroy(runtime);
    throw;
  }
}

}  // namespace attnrt_torch
