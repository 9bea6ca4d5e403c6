// Validation of topk_value_mode 3 (global slot ids) and of strided PA_BBND caches (ABI 1.6,
// abi/attnrt/ops/sparse_mla.h): each bad input is refused with ATTNRT_ERROR_INVALID_ARGUMENT and a
// message naming it, before any output is written.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

const std::string kScalar = "sparse_mla.sparse_mla.flash.scalar";

SparseMlaSpec Slots() {
  SparseMlaSpec s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, 2);
  s.ori_topk = 6;
  s.topk = 5;
  return s;
}

bool Contains(const std::string& message, const std::vector<std::string>& any) {
  for (const std::string& n : any) {
    if (message.find(n) != std::string::npos) return true;
  }
  return false;
}

// Builds the case and its metadata, applies `change`, runs the metadata op again (it may refuse the
// changed inputs, naming one of `names`, or make metadata for them) and the main op, which must
// refuse with INVALID_ARGUMENT naming one of `names` and leave attn_out poisoned.
void ExpectRejected(const SparseMlaSpec& spec, const std::function<void(SparseMlaCase&)>& change,
                    const std::vector<std::string>& names) {
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("expecting " + names[0]);
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(spec, rng);
  std::string error;
  const bool valid_before =
      spec.topk_value_mode != 3 || (spec.ori_mask_mode == 0 && spec.cmp_mask_mode == 0);
  if (valid_before) {
    ASSERT_EQ(RunSparseMlaMetadata(c, kScalar, &error), ATTNRT_OK) << error;
  }
  change(c);
  const attnrt_status meta = RunSparseMlaMetadata(c, kScalar, &error);
  if (meta != ATTNRT_OK) {
    EXPECT_EQ(meta, ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(Contains(error, names)) << "metadata op message: " << error;
  }
  EXPECT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(error, names)) << "message: " << error;
  const Tensor& o = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  const auto* bits = static_cast<const uint16_t*>(const_cast<Tensor&>(o).data());
  for (int64_t k = 0; k < o.numel(); ++k) {
    ASSERT_EQ(bits[k], 0x7FFF) << "attn_out element " << k << " was written before the error";
  }
}

int64_t CacheSlots(SparseMlaCase& c, int input) {
  return c.in()[input].shape()[0] * c.in()[input].shape()[1];
}

TEST(SparseMlaSlotsValidation, TheValidCaseRuns) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(Slots(), rng);
  std::string error;
  EXPECT_EQ(RunSparseMla(c, kScalar, &error), ATTNRT_OK) << error;
}

TEST(SparseMlaSlotsValidation, SlotsOutOfRange) {
  for (int input :
       {ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES}) {
    const bool ori = input == ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES;
    const std::string name = ori ? "ori_sparse_indices" : "cmp_sparse_indices";
    const int cache = ori ? ATTNRT_SPARSE_MLA_INPUT_ORI_KV : ATTNRT_SPARSE_MLA_INPUT_CMP_KV;
    // Row 1 (batch 0, row 1), entry 2: one past the cache, far past it, -2, INT32_MIN.
    for (int64_t which = 0; which < 4; ++which) {
      SCOPED_TRACE(name + " value " + std::to_string(which));
      ExpectRejected(Slots(),
                     [&](SparseMlaCase& c) {
                       const int64_t n = CacheSlots(c, cache);
                       const int32_t values[] = {static_cast<int32_t>(n), 1 << 30, -2, INT32_MIN};
                       const int64_t width = c.in()[input].shape().back();
                       c.in()[input].i32()[width + 2] = values[which];
                     },
                     {name});
    }
  }
  // The message names the entry, the value and the range.
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(Slots(), rng);
  std::string error;
  ASSERT_EQ(RunSparseMlaMetadata(c, kScalar, &error), ATTNRT_OK) << error;
  const int64_t n = CacheSlots(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV);
  c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES].i32()[6 + 2] = static_cast<int32_t>(n);
  EXPECT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(error, {"ori_sparse_indices[1][2]", "ori_sparse_indices[1, 2]"})) << error;
  EXPECT_NE(error.find(std::to_string(n)), std::string::npos) << error;
}

TEST(SparseMlaSlotsValidation, OriSparseIndicesPresence) {
  ExpectRejected(
      Slots(),
      [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES] = Tensor(); },
      {"ori_sparse_indices"});
  // topk_value_mode 1 with a well-shaped ori_sparse_indices.
  SparseMlaSpec paged;
  paged.scenario = ATTNRT_SPARSE_MLA_CSA;
  paged.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  ExpectRejected(paged,
                 [](SparseMlaCase& c) {
                   const auto& q = c.in()[ATTNRT_SPARSE_MLA_INPUT_Q].shape();
                   c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES] =
                       I32(std::vector<int32_t>(q[0] * q[1] * 4, 0), {q[0], q[1], 1, 4});
                 },
                 {"ori_sparse_indices"});
}

TEST(SparseMlaSlotsValidation, OriSparseIndicesDtypeAndShape) {
  using Shape = std::vector<int64_t>;
  auto replace = [](attnrt_dtype dtype, std::function<Shape(const Shape&)> shape) {
    return [=](SparseMlaCase& c) {
      const Shape good = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES].shape();
      c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES] = Tensor(dtype, shape(good));
    };
  };
  const std::vector<std::string> name{"ori_sparse_indices"};
  ExpectRejected(Slots(), replace(kI64, [](const Shape& s) { return s; }), name);
  ExpectRejected(Slots(),
                 replace(kI32,
                         [](const Shape& s) {
                           return Shape{s[0], s[1], s[3]};
                         }),
                 name);
  ExpectRejected(Slots(),
                 replace(kI32,
                         [](const Shape& s) {
                           return Shape{s[0], s[1], 2, s[3]};
                         }),
                 name);
  ExpectRejected(Slots(),
                 replace(kI32,
                         [](const Shape& s) {
                           return Shape{s[0], s[1], 1, 0};
                         }),
                 name);
  ExpectRejected(Slots(),
                 replace(kI32,
                         [](const Shape& s) {
                           return Shape{s[0], s[1] + 1, 1, s[3]};
                         }),
                 name);
  ExpectRejected(Slots(),
                 replace(kI32,
                         [](const Shape& s) {
                           return Shape{s[0] + 1, s[1], 1, s[3]};
                         }),
                 name);
  SparseMlaSpec tnd = Slots();
  tnd.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  ExpectRejected(tnd, replace(kI32, [](const Shape& s) { return Shape{s[0] + 1, 1, s[2]}; }), name);
  ExpectRejected(tnd, replace(kI32, [](const Shape& s) { return Shape{1, s[0], 1, s[2]}; }), name);
}

TEST(SparseMlaSlotsValidation, InputsThatSlotListsExclude) {
  auto add = [](int input, std::function<Tensor(SparseMlaCase&)> make) {
    return [=](SparseMlaCase& c) { c.in()[input] = make(c); };
  };
  auto per_batch = [](SparseMlaCase&) { return I32({1, 1}, {2}); };
  ExpectRejected(Slots(),
                 add(ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE,
                     [](SparseMlaCase&) {
                       return I32({0, 1}, {2, 1});
                     }),
                 {"ori_block_table"});
  ExpectRejected(Slots(),
                 add(ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
                     [](SparseMlaCase&) {
                       return I32({0, 1}, {2, 1});
                     }),
                 {"cmp_block_table"});
  ExpectRejected(Slots(), add(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, per_batch),
                 {"seqused_ori_kv"});
  ExpectRejected(Slots(), add(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV, per_batch),
                 {"seqused_cmp_kv"});
  ExpectRejected(Slots(),
                 add(ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV,
                     [](SparseMlaCase&) {
                       return I32({0, 0}, {2});
                     }),
                 {"cmp_residual_kv"});
  ExpectRejected(Slots(),
                 add(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV,
                     [](SparseMlaCase&) {
                       return I32({0, 1, 2}, {3});
                     }),
                 {"cu_seqlens_ori_kv"});
  // HCA: cmp_kv without cmp_sparse_indices.
  ExpectRejected(
      Slots(),
      [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] = Tensor(); },
      {"cmp_sparse_indices", "cmp_kv"});
  // Mask modes other than 0.
  SparseMlaSpec ori_mask = Slots();
  ori_mask.ori_mask_mode = 4;
  ori_mask.ori_win_left = 7;
  ori_mask.ori_win_right = 0;
  ExpectRejected(ori_mask, [](SparseMlaCase&) {}, {"ori_mask_mode"});
  SparseMlaSpec cmp_mask = Slots();
  cmp_mask.cmp_mask_mode = 3;
  ExpectRejected(cmp_mask, [](SparseMlaCase&) {}, {"cmp_mask_mode"});
}

TEST(SparseMlaSlotsValidation, SlotListsNeedPagedCaches) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  for (int32_t layout : {ATTNRT_SPARSE_MLA_LAYOUT_BSND, ATTNRT_SPARSE_MLA_LAYOUT_TND}) {
    for (int32_t kind : {ATTNRT_OP_SPARSE_MLA, ATTNRT_OP_SPARSE_MLA_METADATA}) {
      attnrt_sparse_mla_attributes a;
      attnrt_sparse_mla_attributes_init(&a);
      a.quant_mode = 1;
      a.layout_q = layout;
      a.layout_kv = layout;
      a.topk_value_mode = 3;
      attnrt_op* op = nullptr;
      EXPECT_EQ(attnrt_op_create(runtime.get(), kind, &a, &op), ATTNRT_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(Contains(attnrt_last_error_message(), {"topk_value_mode", "layout_kv"}))
          << attnrt_last_error_message();
      attnrt_op_destroy(op);
    }
  }
  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = 1;
  a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  a.topk_value_mode = 4;
  attnrt_op* op = nullptr;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_SPARSE_MLA, &a, &op),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(attnrt_last_error_message(), {"topk_value_mode"}));
  attnrt_op_destroy(op);
}

// ---- strided caches
// -----------------------------------------------------------------------------------------------

// Installs a view of a copy of cache `input` with `strides` (elements) at `byte_offset`.
std::function<void(SparseMlaCase&)> View(
    int input, std::function<std::vector<int64_t>(const std::vector<int64_t>&)> strides,
    uint64_t byte_offset = 0) {
  return [=](SparseMlaCase& c) {
    const std::vector<int64_t>& shape = c.in()[input].shape();
    const std::vector<int64_t> st = strides(shape);
    int64_t span = 1;
    for (size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * std::abs(st[d]);
    // A negative block stride starts at the last block, inside the buffer.
    const uint64_t offset = byte_offset + (st[0] < 0 ? (shape[0] - 1) * -st[0] : 0);
    Tensor storage(kU8, {static_cast<int64_t>(offset) + 2 * span + 64});
    c.SetKvView(input, storage, st, offset);
  };
}

TEST(SparseMlaSlotsValidation, StridedCacheRules) {
  using Shape = std::vector<int64_t>;
  for (int input : {ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_KV}) {
    const std::string name = input == ATTNRT_SPARSE_MLA_INPUT_ORI_KV ? "ori_kv" : "cmp_kv";
    for (const SparseMlaSpec& spec : {Slots(), [] {
                                        SparseMlaSpec s;
                                        s.scenario = ATTNRT_SPARSE_MLA_CSA;
                                        s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
                                        return s;
                                      }()}) {
      // Blocks that overlap: block stride below block_size * kv_d.
      ExpectRejected(spec,
                     View(input,
                          [](const Shape& s) {
                            return Shape{s[1] * s[3] - 1, s[3], s[3], 1};
                          }),
                     {name});
      // Token rows not packed inside a block.
      ExpectRejected(spec,
                     View(input,
                          [](const Shape& s) {
                            return Shape{2 * s[1] * s[3], s[3] + 8, s[3], 1};
                          }),
                     {name});
      // Strided innermost dimension.
      ExpectRejected(spec,
                     View(input,
                          [](const Shape& s) {
                            return Shape{4 * s[1] * s[3], 2 * s[3], 2 * s[3], 2};
                          }),
                     {name});
      // Blocks in reverse order (negative block stride).
      ExpectRejected(spec,
                     View(input,
                          [](const Shape& s) {
                            return Shape{-s[1] * s[3], s[3], s[3], 1};
                          }),
                     {name});
    }
  }
  // A strided cache in a non-PA layout.
  for (int32_t layout : {ATTNRT_SPARSE_MLA_LAYOUT_BSND, ATTNRT_SPARSE_MLA_LAYOUT_TND}) {
    SparseMlaSpec s;
    s.scenario = ATTNRT_SPARSE_MLA_CSA;
    s.layout_q = layout;
    s.layout_kv = layout;
    ExpectRejected(s,
                   View(ATTNRT_SPARSE_MLA_INPUT_ORI_KV,
                        [](const Shape& sh) {
                          Shape st(sh.size(), 1);
                          for (size_t d = sh.size() - 1; d-- > 0;) st[d] = st[d + 1] * sh[d + 1];
                          st[0] += 64;  // padded rows (BSND: batches; TND: tokens)
                          return st;
                        }),
                   {"ori_kv"});
  }
}

}  // namespace
}  // namespace attnrt_test
