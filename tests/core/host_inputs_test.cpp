// The host-read integer inputs that bound memory accesses (seqlens_k, total_sequence_length,
// block_table, query_start_loc, seq_lens, slot_mapping, sparse MLA's indices, lengths, block tables
// and metadata) are read once per run: a caller that changes them while the run is under way gets
// the result of the values it passed, never an access out of bounds. The change is made from
// inside the run, deterministically: the runtime runs on a host executor (ABI 1.3) that overwrites
// one input with out-of-range values each time a kernel opens a parallel region, i.e. after the
// run was validated and while the kernel works.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "attnrt/ops/sparse_mla.h"
#include "common/test_support.h"
#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

// One op call: its kind and attributes, every input and output by position (empty = absent), and
// the inputs the core reads on the host to bound accesses.
struct Call {
  int32_t kind = 0;
  std::vector<unsigned char> attributes;
  std::vector<Tensor> in, out;
  std::vector<size_t> host_inputs;
  // Inputs the run writes in place (paged pools): compared after the run like the outputs.
  std::vector<size_t> written_inputs;
  std::vector<const attnrt_tensor*> in_ptrs, out_ptrs;

  const attnrt_tensor* const* Inputs() {
    in_ptrs.clear();
    for (auto& t : in) in_ptrs.push_back(t.empty() ? nullptr : t.get());
    return in_ptrs.data();
  }
  const attnrt_tensor* const* Outputs() {
    out_ptrs.clear();
    for (auto& t : out) out_ptrs.push_back(t.empty() ? nullptr : t.get());
    return out_ptrs.data();
  }
};

template <typename Attributes>
std::vector<unsigned char> Bytes(const Attributes& a) {
  std::vector<unsigned char> bytes(sizeof a);
  std::memcpy(bytes.data(), &a, sizeof a);
  return bytes;
}

void FillNormal(Tensor& t, std::mt19937_64& rng) { t.FillNormal(rng); }

// A float32 GQA decode over a shared past/present buffer, two sequences of different lengths.
Call GqaCall(std::mt19937_64& rng) {
  SimpleGqa spec;
  spec.batch = 2;
  spec.seq = 1;
  spec.num_heads = 4;
  spec.kv_num_heads = 2;
  spec.head_size = 16;
  spec.past = 48;
  spec.total = 40;
  spec.present = true;
  spec.shared_buffer = true;
  spec.seqlens = {39, 17};
  GqaTensors t = MakeGqaTensors(spec, rng);
  Call c;
  c.kind = ATTNRT_OP_GQA;
  c.attributes = Bytes(GqaAttributes(4, 2));
  c.in.assign(t.in.begin(), t.in.end());
  c.out.assign(t.out.begin(), t.out.end());
  c.host_inputs = {ATTNRT_GQA_INPUT_SEQLENS_K, ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH};
  return c;
}

constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadSize = 16, kBlockSize = 8, kNumBlocks = 24;

attnrt_paged_gqa_attributes PagedAttributes() {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kHeads, kKvHeads);
  a.block_size = kBlockSize;
  return a;
}

// Pools of random rows and a block table of shuffled blocks, 4 slots a sequence.
void AddPools(Call& c, size_t key_cache, size_t value_cache, std::mt19937_64& rng,
              std::vector<int32_t>* table) {
  for (size_t i : {key_cache, value_cache}) {
    c.in[i] = F32({kNumBlocks, kBlockSize, kKvHeads, kHeadSize});
    FillNormal(c.in[i], rng);
  }
  std::vector<int32_t> ids(kNumBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  table->assign(ids.begin(), ids.begin() + 2 * 4);
  c.written_inputs = {key_cache, value_cache};
}

// A paged decode step of two sequences (lengths 27 and 9), writing each new row.
Call PagedCall(std::mt19937_64& rng) {
  Call c;
  c.kind = ATTNRT_OP_PAGED_GQA;
  c.attributes = Bytes(PagedAttributes());
  c.in.resize(ATTNRT_PAGED_GQA_NUM_INPUTS);
  c.out.resize(ATTNRT_PAGED_GQA_NUM_OUTPUTS);
  c.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = F32({2, 1, kHeads * kHeadSize});
  c.in[ATTNRT_PAGED_GQA_INPUT_KEY] = F32({2, 1, kKvHeads * kHeadSize});
  c.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = F32({2, 1, kKvHeads * kHeadSize});
  for (size_t i = 0; i < 3; ++i) FillNormal(c.in[i], rng);
  std::vector<int32_t> table;
  AddPools(c, ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, rng, &table);
  c.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({26, 8}, {2});
  c.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({27}, {1});
  c.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(table, {2, 4});
  c.out[ATTNRT_PAGED_GQA_OUTPUT_OUTPUT] = F32({2, 1, kHeads * kHeadSize});
  c.out[ATTNRT_PAGED_GQA_OUTPUT_OUTPUT].Fill(std::numeric_limits<float>::quiet_NaN());
  c.host_inputs = {ATTNRT_PAGED_GQA_INPUT_SEQLENS_K, ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH,
                   ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE};
  return c;
}

// A varlen batch: a 5-token prefill chunk over 20 cached tokens and a decode over 9, new rows
// written through slot_mapping.
Call VarlenCall(std::mt19937_64& rng) {
  Call c;
  c.kind = ATTNRT_OP_PAGED_GQA_VARLEN;
  c.attributes = Bytes(PagedAttributes());
  c.in.resize(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  c.out.resize(ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS);
  constexpr int64_t kTokens = 6;
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = F32({kTokens, kHeads * kHeadSize});
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = F32({kTokens, kKvHeads * kHeadSize});
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = F32({kTokens, kKvHeads * kHeadSize});
  for (size_t i = 0; i < 3; ++i) FillNormal(c.in[i], rng);
  std::vector<int32_t> table;
  AddPools(c, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE,
           rng, &table);
  const std::vector<int32_t> lens = {25, 10};
  const std::vector<int32_t> starts = {0, 5, 6};
  std::vector<int64_t> slots;
  for (size_t b = 0; b < 2; ++b) {
    const int32_t q_len = starts[b + 1] - starts[b];
    for (int32_t i = 0; i < q_len; ++i) {
      const int32_t position = lens[b] - q_len + i;
      slots.push_back(int64_t{table[b * 4 + position / kBlockSize]} * kBlockSize +
                      position % kBlockSize);
    }
  }
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(starts, {3});
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(lens, {2});
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(table, {2, 4});
  c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = I64(slots, {kTokens});
  c.out[ATTNRT_PAGED_GQA_VARLEN_OUTPUT_OUTPUT] = F32({kTokens, kHeads * kHeadSize});
  c.out[0].Fill(std::numeric_limits<float>::quiet_NaN());
  c.host_inputs = {
      ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC, ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS,
      ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE, ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING};
  return c;
}

// Sparse MLA, CSA over paged (PA_BBND) caches: indices, block tables, lengths and the metadata
// made for them by the metadata op.
Call SparseMlaCall(std::mt19937_64& rng) {
  SparseMlaSpec spec;
  spec.scenario = ATTNRT_SPARSE_MLA_CSA;
  spec.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  spec.num_threads = 2;
  SparseMlaCase sparse(spec, rng);
  std::string error;
  const attnrt_status st = RunSparseMlaMetadata(sparse, "", &error);
  EXPECT_EQ(st, ATTNRT_OK) << error;
  Call c;
  c.kind = ATTNRT_OP_SPARSE_MLA;
  c.attributes = Bytes(sparse.Attributes());
  c.in.assign(sparse.in().begin(), sparse.in().end());
  c.out.assign(sparse.out().begin(), sparse.out().end());
  for (size_t i = ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES;
       i <= ATTNRT_SPARSE_MLA_INPUT_CMP_TOPK_LENGTH; ++i) {
    if (!c.in[i].empty() && c.in[i].numel() > 0) c.host_inputs.push_back(i);
  }
  c.host_inputs.push_back(ATTNRT_SPARSE_MLA_INPUT_METADATA);
  return c;
}

// Overwrites every element of `t` (int32 or int64) with a value far out of any valid range.
void Corrupt(Tensor& t) {
  if (t.bytes() == static_cast<size_t>(t.numel()) * 8) {
    for (int64_t i = 0; i < t.numel(); ++i) t.i64()[i] = int64_t{1} << 40;
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = (i % 2 == 0) ? (1 << 24) : -7;
  }
}

// The executor: applies `change` (when set), then runs every member in order on this thread.
struct ChangingExecutor {
  std::function<void()> change;
  int calls = 0;

  static void Run(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
    auto* self = static_cast<ChangingExecutor*>(context);
    ++self->calls;
    if (self->change) self->change();
    for (int32_t m = 0; m < team_size; ++m) fn(user_data, m);
  }
};

struct Outcome {
  attnrt_status status = ATTNRT_OK;
  std::string error;
  bool no_kernel = false;                           // no plugin of this build serves the op
  std::vector<std::vector<unsigned char>> written;  // outputs, then written inputs
  int executor_calls = 0;
};

// `c`'s op created on `runtime` and planned for its tensors; status: the first failure, if any.
struct Planned {
  OpPtr op;
  PlanPtr plan;
  attnrt_status status = ATTNRT_OK;
};

Planned PlanCall(attnrt_runtime* runtime, Call& c) {
  Planned p;
  attnrt_op* raw_op = nullptr;
  p.status = attnrt_op_create(runtime, c.kind, c.attributes.data(), &raw_op);
  p.op.reset(raw_op);
  attnrt_plan* raw_plan = nullptr;
  if (p.status == ATTNRT_OK) {
    p.status =
        attnrt_op_plan(p.op.get(), c.Inputs(), c.in.size(), c.Outputs(), c.out.size(), &raw_plan);
  }
  p.plan.reset(raw_plan);
  return p;
}

// Makes the call from `seed`, runs it on a 2-member executor runtime that applies `change` to the
// call's input `changed` (none when < 0) at each parallel region, and returns what it wrote.
Outcome RunWithChange(const std::function<Call(std::mt19937_64&)>& make, uint64_t seed,
                      int64_t changed) {
  std::mt19937_64 rng(seed);
  Call c = make(rng);
  ChangingExecutor executor;
  if (changed >= 0) executor.change = [&] { Corrupt(c.in[static_cast<size_t>(changed)]); };
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = 2;
  options.executor = &ChangingExecutor::Run;
  options.executor_context = &executor;
  RuntimePtr runtime = CreateRuntime(options);
  Outcome outcome;
  const Planned planned = PlanCall(runtime.get(), c);
  outcome.status = planned.status;
  outcome.no_kernel = NoKernelForOp(planned.status);
  if (outcome.status == ATTNRT_OK) {
    outcome.status = attnrt_plan_run(planned.plan.get(), c.Inputs(), c.in.size(), c.Outputs(),
                                     c.out.size(), nullptr, 0, nullptr);
  }
  if (outcome.status != ATTNRT_OK) outcome.error = attnrt_last_error_message();
  auto keep = [&](Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    outcome.written.emplace_back(p, p + (t.empty() ? 0 : t.bytes()));
  };
  for (auto& t : c.out) keep(t);
  for (size_t i : c.written_inputs) keep(c.in[i]);
  outcome.executor_calls = executor.calls;
  return outcome;
}

struct OpCase {
  std::string name;
  std::function<Call(std::mt19937_64&)> make;
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

class HostInputsChangedDuringRun : public ::testing::TestWithParam<OpCase> {};

TEST_P(HostInputsChangedDuringRun, RunsOnTheValuesPassed) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(seed);
  const Call probe = GetParam().make(rng);
  const std::vector<size_t>& host_inputs = probe.host_inputs;
  ASSERT_FALSE(host_inputs.empty());
  const Outcome expected = RunWithChange(GetParam().make, seed, -1);
  if (expected.no_kernel) {
    GTEST_SKIP() << "no plugin of this build serves the op";
  }
  ASSERT_EQ(expected.status, ATTNRT_OK) << expected.error;
  ASSERT_GT(expected.executor_calls, 0) << "the kernel opened no parallel region: nothing tested";
  for (size_t input : host_inputs) {
    SCOPED_TRACE(std::string("input ") + attnrt_op_input_name(probe.kind, input));
    const Outcome changed = RunWithChange(GetParam().make, seed, static_cast<int64_t>(input));
    ASSERT_EQ(changed.status, ATTNRT_OK) << changed.error;
    ASSERT_EQ(changed.written.size(), expected.written.size());
    for (size_t w = 0; w < expected.written.size(); ++w) {
      EXPECT_TRUE(changed.written[w] == expected.written[w]) << "written tensor " << w;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, HostInputsChangedDuringRun,
                         ::testing::Values(OpCase{"gqa", GqaCall}, OpCase{"paged_gqa", PagedCall},
                                           OpCase{"paged_gqa_varlen", VarlenCall},
                                           OpCase{"sparse_mla", SparseMlaCall}),
                         [](const auto& param_info) { return param_info.param.name; });

// A cache written in place over the caller's slot_mapping would change it while the kernel reads
// the run's copy: it is refused, as before the copy was taken.
TEST(HostInputs, ACacheWrittenOverAHostInputIsRefused) {
  std::mt19937_64 rng(TestSeed());
  Call c = VarlenCall(rng);
  RuntimePtr runtime = CreateRuntime();
  const Planned planned = PlanCall(runtime.get(), c);
  if (NoKernelForOp(planned.status)) {
    GTEST_SKIP() << "no plugin of this build serves the op";
  }
  ASSERT_EQ(planned.status, ATTNRT_OK) << attnrt_last_error_message();
  attnrt_plan* plan = planned.plan.get();
  // The key cache's storage as the slot mapping: the run would write new rows over it.
  Tensor& pool = c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE];
  Tensor slots = c.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING].Clone();
  std::memcpy(pool.data(), slots.data(), slots.bytes());
  Tensor aliased = pool.View({6});
  attnrt_tensor desc = *aliased.get();
  desc.dtype = kI64;
  c.Inputs();
  c.in_ptrs[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = &desc;
  const attnrt_status st = attnrt_plan_run(plan, c.in_ptrs.data(), c.in.size(), c.Outputs(),
                                           c.out.size(), nullptr, 0, nullptr);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(
      std::string(attnrt_last_error_message())
          .find("Input 'slot_mapping' shares memory with key_cache; the run writes key_cache"),
      std::string::npos)
      << attnrt_last_error_message();
}

// A plan run with a host integer input of other strides or another shape than planned is a plan
// mismatch, refused before that input is read: its span under those strides (or that shape) may
// run far past the caller's memory.
TEST(HostInputs, AnInputOfOtherStridesOrShapeIsAPlanMismatchBeforeItIsRead) {
  std::mt19937_64 rng(TestSeed());
  Call c = GqaCall(rng);
  RuntimePtr runtime = CreateRuntime();
  const Planned planned = PlanCall(runtime.get(), c);
  ASSERT_EQ(planned.status, ATTNRT_OK) << attnrt_last_error_message();
  attnrt_plan* plan = planned.plan.get();
  const attnrt_tensor seqlens = *c.in[ATTNRT_GQA_INPUT_SEQLENS_K].get();
  const int64_t far_stride[] = {int64_t{1} << 30};
  const int64_t back_stride[] = {-(int64_t{1} << 30)};
  const int64_t long_shape[] = {int64_t{1} << 28};
  struct Variant {
    const char* name;
    const int64_t* shape;
    const int64_t* strides;
  };
  for (const Variant& v : {Variant{"strides 2^30", seqlens.shape, far_stride},
                           Variant{"strides -2^30", seqlens.shape, back_stride},
                           Variant{"2^28 elements", long_shape, nullptr}}) {
    SCOPED_TRACE(v.name);
    attnrt_tensor changed = seqlens;
    changed.shape = v.shape;
    changed.strides = v.strides;
    c.Inputs();
    c.in_ptrs[ATTNRT_GQA_INPUT_SEQLENS_K] = &changed;
    const attnrt_status st = attnrt_plan_run(plan, c.in_ptrs.data(), c.in.size(), c.Outputs(),
                                             c.out.size(), nullptr, 0, nullptr);
    EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << attnrt_last_error_message();
    EXPECT_NE(std::string(attnrt_last_error_message()).find("input 'seqlens_k'"), std::string::npos)
        << attnrt_last_error_message();
  }
}

}  // namespace
}  // namespace attnrt_test
