// A runtime asked for more threads than the process may start (RLIMIT_NPROC, what `ulimit -u`
// sets): creation succeeds with the threads that started, says so in a warning, and runs. Before,
// the pool destroyed its running threads and std::terminate fired.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

std::vector<std::string> g_warnings;

void Collect(void* /*user_data*/, int32_t level, const char* message) {
  if (level == ATTNRT_LOG_WARNING) g_warnings.emplace_back(message);
}

TEST(ThreadLimitTest, RuntimeStartsWithTheThreadsThatStart) {
  CleanAttnrtEnv env;
  std::string output;
  const std::string failure = RunInChild(
      120,
      [](std::string* out) {
        // RLIMIT_NPROC does not bind root: the child becomes an unprivileged user first.
        if (geteuid() == 0 &&
            (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
          *out = "cannot drop root privileges";
          return 2;
        }
        const rlimit limit{60, 60};
        if (setrlimit(RLIMIT_NPROC, &limit) != 0) {
          *out = "setrlimit failed";
          return 2;
        }
        attnrt_runtime_options options = DefaultOptions();
        options.num_threads = 1024;
        options.log_fn = Collect;
        attnrt_runtime* runtime = nullptr;
        const attnrt_status st = attnrt_runtime_create(&options, &runtime);
        if (st != ATTNRT_OK) {
          *out = "creation failed: " + LastError(st);
          return 1;
        }
        int32_t threads = 0;
        attnrt_runtime_num_threads(runtime, &threads);
        bool warned = false;
        for (const auto& w : g_warnings) warned = warned || ContainsI(w, "of the 1024 threads");
        if (threads < 1 || threads >= 1024) *out += "num_threads " + std::to_string(threads) + "; ";
        if (!warned) *out += "no warning names the 1024 threads asked for; ";
        // The pool works: a plain GQA call runs on it.
        attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
        attnrt_op* op = nullptr;
        if (attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op) == ATTNRT_OK) {
          std::mt19937_64 rng(1);
          SimpleGqa spec;
          spec.batch = 4;
          GqaTensors t = MakeGqaTensors(spec, rng);
          attnrt_plan* plan = nullptr;
          attnrt_status run = attnrt_op_plan(op, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                             ATTNRT_GQA_NUM_OUTPUTS, &plan);
          if (run == ATTNRT_OK) run = RunPlan(plan, t);
          if (run != ATTNRT_OK) *out += "GQA failed: " + LastError(run);
          attnrt_plan_release(plan);
          attnrt_op_destroy(op);
        }
        attnrt_runtime_destroy(runtime);
        return out->empty() ? 0 : 1;
      },
      &output);
  EXPECT_EQ(failure, "") << output;
}

}  // namespace
}  // namespace attnrt_test
