// Workspaces: a paged varlen plan's workspace is per-thread scratch that does not grow with the
// number of sequences (split-KV partials are needed only while the sequences are fewer than the
// threads), and runs given no workspace reuse the plan's own, also from several threads at once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadSize = 128, kBlockSize = 16;

// Members one after another on the calling thread: a team of any size, no threads started.
void SequentialTeam(void*, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  for (int32_t m = 0; m < team_size; ++m) fn(user_data, m);
}

attnrt_paged_gqa_attributes Attributes() {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kHeads, kKvHeads);
  a.block_size = kBlockSize;
  return a;
}

// The workspace a decode step of `sequences` sequences (contexts up to 4096 tokens) asks for on
// a runtime of `threads` threads; 0 when no plugin of this build serves the op.
size_t DecodeWorkspace(int64_t sequences, int32_t threads) {
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = threads;
  options.executor = &SequentialTeam;
  RuntimePtr runtime = CreateRuntime(options);
  const attnrt_paged_gqa_attributes a = Attributes();
  attnrt_op* raw_op = nullptr;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA_VARLEN, &a, &raw_op), ATTNRT_OK)
      << attnrt_last_error_message();
  OpPtr op(raw_op);
  const int64_t slots = 4096 / kBlockSize;
  // Shapes only: planning reads no data.
  std::vector<int64_t> q_shape{sequences, kHeads * kHeadSize};
  std::vector<int64_t> kv_shape{sequences, kKvHeads * kHeadSize};
  std::vector<int64_t> pool_shape{sequences * slots, kBlockSize, kKvHeads, kHeadSize};
  std::vector<int64_t> starts_shape{sequences + 1}, lens_shape{sequences};
  std::vector<int64_t> table_shape{sequences, slots};
  auto desc = [](attnrt_dtype dtype, std::vector<int64_t>& shape) {
    attnrt_tensor t{};
    t.dtype = dtype;
    t.device = {ATTNRT_DEVICE_CPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.shape = shape.data();
    return t;
  };
  attnrt_tensor q = desc(kF32, q_shape), k = desc(kF32, kv_shape), v = desc(kF32, kv_shape),
                pool = desc(kF32, pool_shape), starts = desc(kI32, starts_shape),
                lens = desc(kI32, lens_shape), table = desc(kI32, table_shape),
                out = desc(kF32, q_shape);
  attnrt_tensor value_pool = pool;
  const attnrt_tensor* in[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS] = {
      &q, &k, &v, &pool, &value_pool, &starts, &lens, &table};
  const attnrt_tensor* outs[1] = {&out};
  attnrt_plan* raw_plan = nullptr;
  const attnrt_status planned =
      attnrt_op_plan(op.get(), in, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, outs, 1, &raw_plan);
  if (NoKernelForOp(planned)) return 0;
  EXPECT_EQ(planned, ATTNRT_OK) << attnrt_last_error_message();
  PlanPtr plan(raw_plan);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
  return info.workspace_size;
}

TEST(Workspace, VarlenDecodeDoesNotGrowWithTheSequences) {
  // 64 and 256 threads: the workspace was sequences x threads x heads of split-KV partials
  // (278 MiB at 256 sequences on 64 threads, 4.2 GiB at 1024 on 256).
  for (const int32_t threads : {64, 256}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const size_t few = DecodeWorkspace(threads, threads);
    if (few == 0) GTEST_SKIP() << "no plugin of this build serves the varlen op";
    for (const int64_t sequences : {int64_t{256}, int64_t{1024}}) {
      const size_t many = DecodeWorkspace(sequences, threads);
      EXPECT_LE(many, few) << sequences << " sequences";
    }
    // Per-thread scratch: at most 2 MiB a thread at head size 128 (a prompt tile of the packed
    // rows).
    EXPECT_LE(few, static_cast<size_t>(threads) << 21);
  }
}

// A plain GQA run without a workspace, many times and from four threads at once on one plan: the
// plan's kept workspaces serve every run, with the output of a run given its own workspace.
TEST(Workspace, RunsWithoutAWorkspaceShareThePlans) {
  std::mt19937_64 rng(TestSeed());
  SCOPED_TRACE(SeedTrace());
  SimpleGqa spec;
  spec.batch = 2;
  spec.seq = 8;
  spec.total = 8;
  spec.num_heads = 4;
  spec.kv_num_heads = 2;
  spec.head_size = 32;
  GqaTensors t = MakeGqaTensors(spec, rng);
  RuntimePtr runtime = CreateRuntime();
  const attnrt_gqa_attributes a = GqaAttributes(4, 2);
  attnrt_op* raw_op = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &a, &raw_op), ATTNRT_OK);
  OpPtr op(raw_op);
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
  const Tensor expected = out.Clone();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      Tensor mine = out.Clone();
      std::vector<const attnrt_tensor*> outs(t.Outputs(), t.Outputs() + ATTNRT_GQA_NUM_OUTPUTS);
      outs[ATTNRT_GQA_OUTPUT_OUTPUT] = mine.get();
      for (int i = 0; i < 50; ++i) {
        mine.Fill(std::numeric_limits<float>::quiet_NaN());
        if (attnrt_plan_run(plan.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, outs.data(),
                            ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr) != ATTNRT_OK ||
            std::memcmp(mine.data(), expected.f32(), expected.bytes()) != 0) {
          ++failures[static_cast<size_t>(w)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(failures[static_cast<size_t>(w)], 0) << "thread " << w;
}

}  // namespace
}  // namespace attnrt_test
