// Memory bounds of the PER_BLOCK_32 (ggml Q8_0 / Q4_0) cache paths of every GQA and paged GQA
// kernel of the CPU plugin, and of the runtime's own choice: the caches (past_key, past_value,
// present_key, present_value; the key_cache and value_cache pools) are placed in memory that ends
// exactly at an inaccessible page, then in memory that starts right after one, and the call reads
// the first and last rows of each (the last row of the last kv head of the last batch is a past
// token that is read and, for present, the new token that is written; the pools' first and last
// physical blocks are full blocks of a sequence). A load or store of one byte outside a cache, as a
// vector load of a whole register from a Q4_0 block of 18 bytes at a row's end would do, faults.
// Each guarded run must give bitwise the output and cache bytes of the same kernel on ordinary
// buffers holding the same inputs (the numbers themselves: gqa_block_quant_test.cpp,
// paged_gqa_block_quant_test.cpp). Seeds as in the other tests.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace {

using namespace block_quant;  // NOLINT(google-build-using-namespace)

// `bytes` of memory directly before (at_end) or after an inaccessible page.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, bool at_end) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t pages = (bytes + page_ - 1) / page_;
    size_ = (pages + 1) * page_;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<uint8_t*>(p);
    if (at_end) {
      mprotect(base_ + pages * page_, page_, PROT_NONE);
      data_ = base_ + pages * page_ - bytes;
    } else {
      mprotect(base_, page_, PROT_NONE);
      data_ = base_ + page_;
    }
  }
  ~GuardedBuffer() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t page_ = 0, size_ = 0;
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
};

// A descriptor of a uint8 tensor at `data` (compact).
struct Desc {
  std::vector<int64_t> shape;
  attnrt_tensor t{};
  Desc(uint8_t* data, std::vector<int64_t> s) : shape(std::move(s)) {
    t.data = data;
    t.device = {ATTNRT_DEVICE_CPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = kU8;
    t.shape = shape.data();
  }
};

struct Case {
  std::string name;
  bool paged = false;
  int64_t H = 64;
  int64_t S = 1;  // new tokens per sequence; a prompt when it equals the sequence's length
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

constexpr int64_t kB = 2, kN = 4, kNkv = 2, kPast = 20, kBlockSize = 8;

using Param = std::tuple<std::string, Dtypes, Case>;

class GqaBlockQuantGuard : public testing::TestWithParam<Param> {};

TEST_P(GqaBlockQuantGuard, CachesReadAndWrittenWithinBounds) {
  const std::string& pinned = std::get<0>(GetParam());
  const Dtypes& d = std::get<1>(GetParam());
  const Case& c = std::get<2>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", dtypes " +
               d.name + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  const FloatFormat Tq = d.query;
  const attnrt_dtype dq = QueryDtype(Tq);
  const int64_t H = c.H, Hc = BlockRowBytes(d.cache, H), S = c.S;
  const bool prompt = S > 1;
  // Decode: kPast past rows each, all read (T_b = kPast + 1). Prompt: S tokens, no past.
  const int64_t T = prompt ? S : kPast + 1, P = prompt ? 0 : kPast;
  const std::vector<int32_t> seqlens(kB, static_cast<int32_t>(T - 1));

  std::vector<Tensor> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
  in[ATTNRT_GQA_INPUT_QUERY] = Tensor(dq, {kB, S, kN * H});
  in[ATTNRT_GQA_INPUT_KEY] = Tensor(dq, {kB, S, kNkv * H});
  in[ATTNRT_GQA_INPUT_VALUE] = Tensor(dq, {kB, S, kNkv * H});
  for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    Store(in[i], Tq, RoundedNormal(Tq, in[i].numel(), rng));
  }
  in[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {kB});
  in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});

  // The caches: shapes and initial bytes (random blocks; present poisoned).
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int> cache_inputs;  // positions in `in` (inputs) or -1 - output position
  std::vector<int32_t> table;
  int64_t slots = 0, num_blocks = 0;
  if (c.paged) {
    slots = (T + kBlockSize - 1) / kBlockSize;
    num_blocks = kB * slots;
    // Blocks in random order, with the first and the last physical block full blocks of batch 0
    // (its slots 0 and 1: T = 21 > 2 blocks of 8).
    table.assign(static_cast<size_t>(num_blocks), 0);
    std::iota(table.begin() + 2, table.end(), 1);
    std::shuffle(table.begin() + 2, table.end(), rng);
    table[0] = static_cast<int32_t>(num_blocks - 1);  // slot 0: the last block; slot 1: block 0
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(table, {kB, slots});
    const std::vector<int64_t> pool = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
                                          ? std::vector<int64_t>{num_blocks, kNkv, kBlockSize, Hc}
                                          : std::vector<int64_t>{num_blocks, kBlockSize, kNkv, Hc};
    shapes = {pool, pool};
    cache_inputs = {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE};
  } else {
    shapes = {{kB, kNkv, P, Hc}, {kB, kNkv, P, Hc}, {kB, kNkv, T, Hc}, {kB, kNkv, T, Hc}};
    cache_inputs = {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE,
                    -1 - ATTNRT_GQA_OUTPUT_PRESENT_KEY, -1 - ATTNRT_GQA_OUTPUT_PRESENT_VALUE};
  }
  std::vector<std::vector<uint8_t>> initial;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t rows = shapes[k][0] * shapes[k][1] * shapes[k][2];
    initial.emplace_back(static_cast<size_t>(rows * Hc));
    for (int64_t r = 0; r < rows; ++r) {
      if (cache_inputs[k] >= 0) {
        RandomBlockRow(d.cache, H, rng, initial.back().data() + r * Hc);
      } else {
        std::memset(initial.back().data() + r * Hc, kBytePoison, static_cast<size_t>(Hc));
      }
    }
  }

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kN, kNkv);
  a.gqa.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.gqa.kv_cache_bit_width = BitWidth(d.cache);
  a.block_size = static_cast<int32_t>(kBlockSize);
  a.kv_layout = c.layout;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();
  options.disable = "";
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = c.paged ? attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &raw_op)
                             : attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &a.gqa, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  const size_t num_inputs =
      c.paged ? size_t{ATTNRT_PAGED_GQA_NUM_INPUTS} : size_t{ATTNRT_GQA_NUM_INPUTS};
  const size_t num_outputs = c.paged ? 1 : 3;

  // One run with the caches at `memory` (one pointer per cache); returns the output's and the
  // caches' bytes after the run.
  auto run = [&](const std::vector<uint8_t*>& memory, std::string* kernel) {
    std::vector<uint8_t> result;
    std::vector<Desc> descs;
    for (size_t k = 0; k < shapes.size(); ++k) {
      // A zero-length past cache has no bytes (memcpy may not be given a null pointer).
      if (!initial[k].empty()) std::memcpy(memory[k], initial[k].data(), initial[k].size());
      descs.emplace_back(memory[k], shapes[k]);
    }
    Tensor output = Filled(Tq, {kB, S, kN * H}, kNaN);
    std::vector<const attnrt_tensor*> ins, outs(num_outputs, nullptr);
    for (size_t i = 0; i < num_inputs; ++i) ins.push_back(in[i].empty() ? nullptr : in[i].get());
    outs[0] = output.get();
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (cache_inputs[k] >= 0) {
        ins[static_cast<size_t>(cache_inputs[k])] = &descs[k].t;
      } else {
        outs[static_cast<size_t>(-1 - cache_inputs[k])] = &descs[k].t;
      }
    }
    if (kernel != nullptr && !pinned.empty()) {
      std::string skip;
      const bool runs = PinnedKernelRuns(
          Explain(op.get(), ins.data(), num_inputs, outs.data(), num_outputs), pinned, &skip);
      if (!skip.empty()) {
        *kernel = "skip: " + skip;
        return result;
      }
      if (!runs) return result;
    }
    attnrt_plan* raw_plan = nullptr;
    attnrt_status s =
        attnrt_op_plan(op.get(), ins.data(), num_inputs, outs.data(), num_outputs, &raw_plan);
    EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
    if (s != ATTNRT_OK) return result;
    PlanPtr plan(raw_plan);
    if (kernel != nullptr) *kernel = PlanKernel(plan.get());
    s = attnrt_plan_run(plan.get(), ins.data(), num_inputs, outs.data(), num_outputs, nullptr, 0,
                        nullptr);
    EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
    const auto* o = static_cast<const uint8_t*>(output.data());
    result.assign(o, o + output.bytes());
    for (size_t k = 0; k < shapes.size(); ++k) {
      result.insert(result.end(), memory[k], memory[k] + initial[k].size());
    }
    return result;
  };

  std::vector<std::vector<uint8_t>> plain_memory;
  std::vector<uint8_t*> plain;
  for (const auto& bytes : initial) {
    plain_memory.emplace_back(bytes.size() + 64);
    plain.push_back(plain_memory.back().data());
  }
  std::string kernel;
  const std::vector<uint8_t> want = run(plain, &kernel);
  if (kernel.rfind("skip: ", 0) == 0) GTEST_SKIP() << kernel.substr(6);
  ASSERT_FALSE(HasFailure());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());
  for (const bool at_end : {true, false}) {
    SCOPED_TRACE(at_end ? "caches end at an inaccessible page" : "caches start after one");
    std::vector<std::unique_ptr<GuardedBuffer>> guarded;
    std::vector<uint8_t*> memory;
    for (const auto& bytes : initial) {
      guarded.push_back(std::make_unique<GuardedBuffer>(bytes.size(), at_end));
      ASSERT_NE(guarded.back()->data(), nullptr);
      memory.push_back(guarded.back()->data());
    }
    const std::vector<uint8_t> got = run(memory, nullptr);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "the guarded run's output or caches differ from the plain run's";
  }
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name +
                     "__" + std::get<2>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Gqa, GqaBlockQuantGuard,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_GQA)),
                                          testing::ValuesIn(AllDtypes()),
                                          testing::Values(Case{"decode_h32", false, 32, 1},
                                                          Case{"decode_h96", false, 96, 1},
                                                          Case{"prompt_h64", false, 64, 9})),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(PagedGqa, GqaBlockQuantGuard,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_PAGED_GQA)),
                                          testing::ValuesIn(AllDtypes()),
                                          testing::Values(Case{"decode_bsnh_h32", true, 32, 1},
                                                          Case{"decode_bnsh_h64", true, 64, 1,
                                                               ATTNRT_PAGED_KV_LAYOUT_BNSH})),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaBlockQuantGuard);

}  // namespace
}  // namespace attnrt_test
