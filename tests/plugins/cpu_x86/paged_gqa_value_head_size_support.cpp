// The kernel loop of the value head size tests (paged_gqa_value_head_size_support.h).
#include "paged_gqa_value_head_size_support.h"

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace attnrt_test {
namespace value_head_size {
namespace {

constexpr int32_t kThreads = 3;

}  // namespace

attnrt_runtime* RuntimeFor(const std::string& kernel) {
  static std::map<std::string, RuntimePtr> runtimes;
  auto it = runtimes.find(kernel);
  if (it != runtimes.end()) return it->second.get();
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = kernel.c_str();
  options.disable = "";
  options.num_threads = kThreads;
  RuntimePtr runtime = CreateRuntime(options);
  attnrt_runtime* raw = runtime.get();
  if (raw != nullptr) runtimes.emplace(kernel, std::move(runtime));
  return raw;
}

const std::vector<std::string>& KernelsOf(int32_t op_kind) {
  static std::map<int32_t, std::vector<std::string>> kernels;
  auto it = kernels.find(op_kind);
  if (it == kernels.end()) {
    CleanAttnrtEnv env;
    it = kernels.emplace(op_kind, block_quant::CpuKernels(op_kind)).first;
  }
  return it->second;
}

namespace {

std::map<std::pair<std::string, std::string>, int>& Declines() {
  static std::map<std::pair<std::string, std::string>, int> declines;
  return declines;
}

class DeclineSummary : public testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [key, count] : Declines()) {
      std::printf("[declined] %s (%d cases): %s\n", key.first.c_str(), count, key.second.c_str());
    }
  }
};
[[maybe_unused]] testing::Environment* const kSummary =
    testing::AddGlobalTestEnvironment(new DeclineSummary);

OpPtr MakeOp(attnrt_runtime* runtime, int32_t op_kind, const void* attributes) {
  attnrt_op* op = nullptr;
  const attnrt_status st = attnrt_op_create(runtime, op_kind, attributes, &op);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return OpPtr(st == ATTNRT_OK ? op : nullptr);
}

// Plans and runs the call on runtime's op; returns the kernel that ran ("" on failure).
std::string PlanAndRun(attnrt_runtime* runtime, int32_t op_kind, const void* attributes,
                       Call& call) {
  OpPtr op = MakeOp(runtime, op_kind, attributes);
  if (!op) return "";
  attnrt_plan* raw = nullptr;
  attnrt_status st = attnrt_op_plan(op.get(), call.inputs.data(), call.inputs.size(),
                                    call.outputs.data(), call.outputs.size(), &raw);
  EXPECT_EQ(st, ATTNRT_OK) << "plan: " << LastError(st);
  if (st != ATTNRT_OK) return "";
  PlanPtr plan(raw);
  const std::string kernel = PlanKernel(plan.get());
  call.reset();
  st = attnrt_plan_run(plan.get(), call.inputs.data(), call.inputs.size(), call.outputs.data(),
                       call.outputs.size(), nullptr, 0, nullptr);
  EXPECT_EQ(st, ATTNRT_OK) << "run on " << kernel << ": " << LastError(st);
  return st == ATTNRT_OK ? kernel : "";
}

}  // namespace

void RecordDecline(const std::string& kernel, const std::string& reason) {
  ++Declines()[{kernel, reason}];
}

int RunOnEveryKernel(int32_t op_kind, const void* attributes, Call& call) {
  attnrt_runtime* unpinned = RuntimeFor("");
  if (unpinned == nullptr) return 0;
  OpPtr op = MakeOp(unpinned, op_kind, attributes);
  if (!op) return 0;
  const std::vector<Candidate> candidates = Explain(
      op.get(), call.inputs.data(), call.inputs.size(), call.outputs.data(), call.outputs.size());
  int ran = 0;
  for (const std::string& kernel : KernelsOf(op_kind)) {
    SCOPED_TRACE("kernel " + kernel);
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& c) { return c.kernel == kernel; });
    if (it == candidates.end()) {
      ADD_FAILURE() << "explain does not list " << kernel;
      continue;
    }
    if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE) {
      RecordDecline(kernel, "unavailable on this CPU: " + it->reason);
      continue;
    }
    if (it->status == ATTNRT_CANDIDATE_DECLINED) {
      EXPECT_FALSE(it->reason.empty()) << kernel << " declines without a reason";
      RecordDecline(kernel, it->reason);
      if (block_quant::Algorithm(kernel) == "naive" &&
          !block_quant::IsCpuFeatureReason(it->reason)) {
        ADD_FAILURE() << kernel << " (a naive kernel) declines: " << it->reason;
      }
      continue;
    }
    if (it->status != ATTNRT_CANDIDATE_SELECTED && it->status != ATTNRT_CANDIDATE_ELIGIBLE) {
      ADD_FAILURE() << kernel << " is " << attnrt_candidate_status_name(it->status) << ": "
                    << it->reason;
      continue;
    }
    if (block_quant::IsApproximate(kernel)) {
      // An opt-in approximate kernel (cpu_arm's int8 dot products) is outside these bounds.
      RecordDecline(kernel, "accepted; approximate, not compared");
      continue;
    }
    attnrt_runtime* pinned = RuntimeFor(kernel);
    if (pinned == nullptr) continue;
    const std::string ran_kernel = PlanAndRun(pinned, op_kind, attributes, call);
    if (ran_kernel.empty()) continue;
    EXPECT_EQ(ran_kernel, kernel);
    call.check(kernel);
    ++ran;
  }
  EXPECT_GE(ran, 1) << "no registered kernel accepts the case";
  SCOPED_TRACE("the runtime's own choice");
  const std::string chosen = PlanAndRun(unpinned, op_kind, attributes, call);
  if (!chosen.empty()) {
    EXPECT_FALSE(block_quant::IsApproximate(chosen)) << "chosen without a pin: " << chosen;
    call.check(chosen);
  }
  return ran;
}

}  // namespace value_head_size
}  // namespace attnrt_test
