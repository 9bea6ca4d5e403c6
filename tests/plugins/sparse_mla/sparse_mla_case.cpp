#include "sparse_mla_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>

namespace attnrt_test {
namespace {

namespace ref = attnrt::testref;
constexpr int kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

uint16_t ToBits(float x, bool fp16) { return fp16 ? ref::DoubleToFp16(x) : ref::FloatToBf16(x); }

// A random KV row: nope groups with different magnitudes (so the group scales differ), rope N(0,1).
std::vector<float> RandomRow(std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> amplitude(0.25f, 4.0f);
  std::vector<float> row(kD);
  for (int g = 0; g < 7; ++g) {
    const float a = amplitude(rng);
    for (int d = g * 64; d < (g + 1) * 64; ++d) row[d] = a * normal(rng);
  }
  for (int d = 448; d < kD; ++d) row[d] = normal(rng);
  return row;
}

// Storage of one KV side: where logical token j of batch b lives.
struct Side {
  bool cmp = false;
  int64_t token_bytes = 0;
  std::vector<int64_t> start;  // BSND / TND
  std::vector<int32_t> table;  // PA, (B, cols)
  int64_t cols = 0;
};

}  // namespace

SparseMlaCase::SparseMlaCase(const SparseMlaSpec& spec, std::mt19937_64& rng) : spec_(spec) {
  SparseMlaSpec& s = spec_;
  const int64_t B = static_cast<int64_t>(s.s1.size());
  const int64_t N = s.num_heads;
  const bool tnd_q = s.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool tnd_kv = s.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool pa = s.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  const bool has_cmp = s.scenario != ATTNRT_SPARSE_MLA_SWA;
  const int32_t r = has_cmp ? s.cmp_ratio : 1;
  if (!has_cmp) s.cmp_ratio = 1;
  const attnrt_dtype qd = s.fp16 ? kF16 : kBf16;
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // ---- q and the query-side lengths.
  std::vector<int64_t> q_start(B), q_cap(B);
  if (tnd_q) {
    std::vector<int32_t> cu{0};
    for (int64_t b = 0; b < B; ++b) {
      q_cap[b] = s.s1[b] + (s.seqused_q ? 1 : 0);
      q_start[b] = cu.back();
      cu.push_back(static_cast<int32_t>(cu.back() + q_cap[b]));
    }
    q_rows_ = cu.back() + s.q_extra;
    in_[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q] = I32(cu, {B + 1});
    in_[ATTNRT_SPARSE_MLA_INPUT_Q] = Tensor(qd, {q_rows_, N, kD});
  } else {
    const int32_t max_s1 = *std::max_element(s.s1.begin(), s.s1.end());
    if (!s.seqused_q) std::fill(s.s1.begin(), s.s1.end(), max_s1);
    q_rows_ = max_s1 + (s.seqused_q ? s.q_extra : 0);
    for (int64_t b = 0; b < B; ++b) {
      q_start[b] = b * q_rows_;
      q_cap[b] = q_rows_;
    }
    in_[ATTNRT_SPARSE_MLA_INPUT_Q] = Tensor(qd, {B, q_rows_, N, kD});
  }
  if (s.seqused_q) in_[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q] = I32(s.s1, {B});
  {
    Tensor& q = in_[ATTNRT_SPARSE_MLA_INPUT_Q];
    auto* bits = static_cast<uint16_t*>(q.data());
    for (int64_t k = 0; k < q.numel(); ++k) bits[k] = ToBits(normal(rng) * s.q_scale, s.fp16);
  }
  const int64_t total_q_rows = tnd_q ? q_rows_ : B * q_rows_;

  // ---- lengths of the KV sides.
  std::vector<int32_t> cmp_len(B), residual(B);
  for (int64_t b = 0; b < B; ++b) {
    cmp_len[b] = has_cmp ? s.s2[b] / r : 0;
    residual[b] = has_cmp ? s.s2[b] % r : 0;
  }
  auto token_bytes = [&](bool cmp) -> int64_t {
    if (s.quant_mode == 1) return ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES;
    if (s.quant_mode == 2) return ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;
    return cmp ? ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES : kD;  // mode-3 ori: 512 16-bit values
  };

  // Builds one side's tensor, lengths inputs and block table; fills every allocated token.
  auto build_side = [&](bool cmp, const std::vector<int32_t>& len, int input, int table_input,
                        int cu_input, int64_t* rows, int64_t* cols) {
    const int64_t kv_d = token_bytes(cmp);
    const attnrt_dtype dtype = (!cmp && s.quant_mode == 3) ? qd : kU8;
    const int64_t elem_bytes = (!cmp && s.quant_mode == 3) ? 2 : 1;
    const int64_t max_len = *std::max_element(len.begin(), len.end());
    std::vector<int64_t> start(B, 0);
    Tensor t;
    std::vector<int32_t> table;
    if (pa) {
      const int64_t bs = s.block_size;
      std::vector<int64_t> need(B);
      int64_t total = 0;
      for (int64_t b = 0; b < B; ++b) total += need[b] = (len[b] + bs - 1) / bs;
      const int64_t num_blocks = total + 2;  // two spare blocks never referenced
      *cols = (max_len + bs - 1) / bs + 1;
      std::vector<int32_t> perm(num_blocks);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      table.assign(B * *cols, -1);
      int64_t next = 0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t k = 0; k < need[b]; ++k) table[b * *cols + k] = perm[next++];
      }
      *rows = num_blocks;
      t = Tensor(dtype, {num_blocks, bs, 1, kv_d});
      in_[table_input] = I32(table, {B, *cols});
    } else if (tnd_kv) {
      std::vector<int32_t> cu{0};
      for (int64_t b = 0; b < B; ++b) {
        start[b] = cu.back();
        cu.push_back(cu.back() + len[b]);
      }
      *rows = cu.back() + s.kv_extra;
      t = Tensor(dtype, {*rows, 1, kv_d});
      in_[cu_input] = I32(cu, {B + 1});
    } else {
      *rows = max_len + s.kv_extra;
      for (int64_t b = 0; b < B; ++b) start[b] = b * *rows;
      t = Tensor(dtype, {B, *rows, 1, kv_d});
    }
    // Every token of the tensor gets data (unused slots too, so nothing reads garbage).
    auto* base = static_cast<uint8_t*>(t.data());
    const int64_t tokens = pa ? *rows * s.block_size : (tnd_kv ? *rows : B * *rows);
    for (int64_t tok = 0; tok < tokens; ++tok) {
      std::vector<float> row = RandomRow(rng);
      if (cmp && s.quant_mode == 3) {
        EXPECT_EQ(attnrt_sparse_mla_encode_tq4(row.data(), kF32, 1, base + tok * kv_d), ATTNRT_OK);
      } else if (!cmp && s.quant_mode == 3) {
        auto* bits = reinterpret_cast<uint16_t*>(base + tok * kv_d * elem_bytes);
        for (int d = 0; d < kD; ++d) bits[d] = ToBits(row[d], s.fp16);
      } else if (s.quant_mode == 1) {
        EXPECT_EQ(attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1, base + tok * kv_d),
                  ATTNRT_OK);
      } else {
        const int64_t bs = s.block_size;
        EXPECT_EQ(attnrt_sparse_mla_encode_mode2(row.data(), kF32, base + (tok / bs) * bs * kv_d,
                                                 bs, tok % bs),
                  ATTNRT_OK);
      }
    }
    in_[input] = t;
    return table;
  };

  std::vector<int32_t> s2(s.s2.begin(), s.s2.end());
  build_side(false, s2, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE,
             ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV, &ori_rows_, &ori_cols_);
  if (!tnd_kv) in_[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] = I32(s2, {B});
  std::vector<int32_t> cmp_table;
  if (has_cmp) {
    cmp_table = build_side(true, cmp_len, ATTNRT_SPARSE_MLA_INPUT_CMP_KV,
                           ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
                           ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV, &cmp_rows_, &cmp_cols_);
    if (s.seqused_cmp) in_[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV] = I32(cmp_len, {B});
    if (s.residual) in_[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV] = I32(residual, {B});
  }

  // ---- cmp_sparse_indices: valid entries (some beyond the causal limit, some >= cmp_len,
  // duplicates), then -1 and trailing entries the scan never reaches.
  if (s.scenario == ATTNRT_SPARSE_MLA_CSA) {
    const int64_t K = s.topk;
    std::vector<int32_t> idx(total_q_rows * K, -1);
    for (int64_t row = 0; row < total_q_rows; ++row) {
      int64_t b = -1;
      for (int64_t x = 0; x < B; ++x) {
        if (row >= q_start[x] && row < q_start[x] + q_cap[x]) b = x;
      }
      const int32_t c = b >= 0 ? cmp_len[b] : 0;
      std::uniform_int_distribution<int64_t> fill_dist(K / 2, K);
      const int64_t fill = fill_dist(rng);
      std::uniform_int_distribution<int32_t> value(0, c + 2);
      for (int64_t k = 0; k < K; ++k) {
        int32_t v = -1;
        if (k < fill) {
          v = (k > 0 && rng() % 5 == 0) ? idx[row * K + k - 1] : value(rng);
        } else if (k > fill && rng() % 3 == 0) {
          v = value(rng);  // after the first -1: never examined
        }
        if (v >= 0 && s.topk_value_mode == 2) {
          // Physical slot: through the batch's table for logical positions in range; a spare
          // block (in no table row) for the rest, which the op skips.
          const int64_t bs = s.block_size;
          if (b >= 0 && v < c) {
            v = static_cast<int32_t>(cmp_table[b * cmp_cols_ + v / bs] * bs + v % bs);
          } else {
            v = static_cast<int32_t>((cmp_rows_ - 1) * bs + v % bs);
          }
        }
        idx[row * K + k] = v;
      }
    }
    if (tnd_q) {
      in_[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] = I32(idx, {q_rows_, 1, K});
    } else {
      in_[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] = I32(idx, {B, q_rows_, 1, K});
    }
  }

  if (s.sinks) {
    Tensor sinks = F32({N});
    for (int64_t h = 0; h < N; ++h) sinks.f32()[h] = normal(rng);
    in_[ATTNRT_SPARSE_MLA_INPUT_SINKS] = sinks;
  }
  in_[ATTNRT_SPARSE_MLA_INPUT_METADATA] = Tensor(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
  out_[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT] = Tensor(qd, in_[ATTNRT_SPARSE_MLA_INPUT_Q].shape());
  if (s.lse) {
    out_[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE] =
        tnd_q ? Tensor(kF32, {1, q_rows_, N}) : Tensor(kF32, {B, 1, q_rows_, N});
  }
  if (s.topk_value_mode == 3) MakeSlotIndices(rng, total_q_rows);
  Poison();
}

void SparseMlaCase::Poison() {
  Tensor& o = out_[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  std::fill_n(static_cast<uint16_t*>(o.data()), o.numel(), uint16_t{0x7FFF});  // NaN in bf16/fp16
  if (!out_[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].empty()) {
    out_[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].Fill(std::nanf(""));
  }
}

attnrt_sparse_mla_attributes SparseMlaCase::Attributes() const {
  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = spec_.quant_mode;
  a.softmax_scale = spec_.softmax_scale;
  a.cmp_ratio = spec_.cmp_ratio;
  a.ori_mask_mode = spec_.ori_mask_mode;
  a.cmp_mask_mode = spec_.cmp_mask_mode;
  a.ori_win_left = spec_.ori_mask_mode == 4 ? spec_.ori_win_left : -1;
  a.ori_win_right = spec_.ori_mask_mode == 4 ? spec_.ori_win_right : -1;
  a.layout_q = spec_.layout_q;
  a.layout_kv = spec_.layout_kv;
  a.topk_value_mode = spec_.topk_value_mode;
  a.return_softmax_lse = spec_.lse ? 1 : 0;
  return a;
}

const attnrt_tensor* const* SparseMlaCase::Inputs() {
  for (size_t i = 0; i < in_.size(); ++i) in_ptrs_[i] = in_[i].empty() ? nullptr : in_[i].get();
  for (int input : {ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_KV}) {
    if (const attnrt_tensor* view = ViewDescriptor(input)) in_ptrs_[input] = view;
  }
  return in_ptrs_.data();
}

const attnrt_tensor* const* SparseMlaCase::MetadataInputs() {
  Inputs();
  in_ptrs_[ATTNRT_SPARSE_MLA_INPUT_METADATA] = nullptr;
  return in_ptrs_.data();
}

const attnrt_tensor* const* SparseMlaCase::Outputs() {
  for (size_t i = 0; i < out_.size(); ++i) out_ptrs_[i] = out_[i].empty() ? nullptr : out_[i].get();
  return out_ptrs_.data();
}

ref::SparseMlaRefInputs SparseMlaCase::RefInputs() const {
  ref::SparseMlaRefInputs x;
  const SparseMlaSpec& s = spec_;
  const int64_t B = static_cast<int64_t>(s.s1.size());
  auto layout = [](int32_t l) {
    return l == ATTNRT_SPARSE_MLA_LAYOUT_BSND  ? ref::SparseMlaLayout::kBSND
           : l == ATTNRT_SPARSE_MLA_LAYOUT_TND ? ref::SparseMlaLayout::kTND
                                               : ref::SparseMlaLayout::kPA_BBND;
  };
  x.scenario = s.scenario == ATTNRT_SPARSE_MLA_SWA   ? ref::SparseMlaScenario::kSWA
               : s.scenario == ATTNRT_SPARSE_MLA_CSA ? ref::SparseMlaScenario::kCSA
                                                     : ref::SparseMlaScenario::kHCA;
  const attnrt_sparse_mla_attributes a = Attributes();
  x.quant_mode = a.quant_mode;
  x.softmax_scale = a.softmax_scale;
  x.cmp_ratio = a.cmp_ratio;
  x.ori_mask_mode = a.ori_mask_mode;
  x.cmp_mask_mode = a.cmp_mask_mode;
  x.ori_win_left = a.ori_win_left;
  x.ori_win_right = a.ori_win_right;
  x.layout_q = layout(s.layout_q);
  x.layout_kv = layout(s.layout_kv);
  x.topk_value_mode = a.topk_value_mode;
  x.return_softmax_lse = s.lse;
  x.q_dtype = s.fp16 ? ref::SparseMlaFloat16Kind::kFp16 : ref::SparseMlaFloat16Kind::kBf16;
  x.b = B;
  x.q_n = s.num_heads;
  const bool tnd_q = s.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  (tnd_q ? x.q_t : x.q_s) = q_rows_;
  auto data = [&](int i) -> const void* {
    return in_[i].empty() ? nullptr : const_cast<Tensor&>(in_[i]).data();
  };
  auto i32 = [&](int i) { return static_cast<const int32_t*>(data(i)); };
  switch (s.layout_kv) {
    case ATTNRT_SPARSE_MLA_LAYOUT_BSND:
      x.ori_kv_s = ori_rows_;
      x.cmp_kv_s = cmp_rows_;
      break;
    case ATTNRT_SPARSE_MLA_LAYOUT_TND:
      x.ori_kv_t = ori_rows_;
      x.cmp_kv_t = cmp_rows_;
      break;
    default:
      x.ori_kv_block_nums = ori_rows_;
      x.ori_kv_block_size = s.block_size;
      x.ori_block_table_cols = ori_cols_;
      x.cmp_kv_block_nums = cmp_rows_;
      x.cmp_kv_block_size = cmp_rows_ > 0 ? s.block_size : 0;
      x.cmp_block_table_cols = cmp_cols_;
      break;
  }
  const Tensor& cmp_idx = in_[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
  x.cmp_kv_k = cmp_idx.empty() ? 0 : cmp_idx.shape().back();
  const Tensor& ori_idx = in_[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
  x.ori_kv_w = ori_idx.empty() ? 0 : ori_idx.shape().back();
  x.q = static_cast<const uint16_t*>(data(ATTNRT_SPARSE_MLA_INPUT_Q));
  x.ori_kv = static_cast<const uint8_t*>(data(ATTNRT_SPARSE_MLA_INPUT_ORI_KV));
  x.cmp_kv = static_cast<const uint8_t*>(data(ATTNRT_SPARSE_MLA_INPUT_CMP_KV));
  x.cmp_sparse_indices = i32(ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES);
  x.ori_sparse_indices = i32(ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES);
  for (int side = 0; side < 2; ++side) {
    const KvView& v = views_[side];
    if (!v.set) continue;
    const int64_t elem = side == 0 && s.quant_mode == 3 ? 2 : 1;
    const uint8_t* base =
        static_cast<const uint8_t*>(const_cast<Tensor&>(v.storage).data()) + v.byte_offset;
    (side == 0 ? x.ori_kv : x.cmp_kv) = base;
    (side == 0 ? x.ori_kv_block_stride : x.cmp_kv_block_stride) = v.strides[0] * elem;
  }
  x.ori_block_table = i32(ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE);
  x.cmp_block_table = i32(ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE);
  x.cu_seqlens_q = i32(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q);
  x.cu_seqlens_ori_kv = i32(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV);
  x.cu_seqlens_cmp_kv = i32(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV);
  x.seqused_q = i32(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q);
  x.seqused_ori_kv = i32(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV);
  x.seqused_cmp_kv = i32(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV);
  x.cmp_residual_kv = i32(ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV);
  x.sinks = static_cast<const float*>(data(ATTNRT_SPARSE_MLA_INPUT_SINKS));
  return x;
}

namespace {

// One runtime per (kernel pin, thread count), for the whole test process.
attnrt_runtime* RuntimeFor(const std::string& kernel, int32_t num_threads) {
  static std::map<std::pair<std::string, int32_t>, RuntimePtr> runtimes;
  auto it = runtimes.find({kernel, num_threads});
  if (it != runtimes.end()) return it->second.get();
  attnrt_runtime_options options = DefaultOptions();
  if (num_threads > 0) options.num_threads = num_threads;
  const char* paths[] = {ATTNRT_TEST_DEFAULT_PLUGIN_DIR};
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  options.kernel = kernel.c_str();
  options.disable = "";
  RuntimePtr runtime = CreateRuntime(options);
  attnrt_runtime* raw = runtime.get();
  runtimes.emplace(std::make_pair(kernel, num_threads), std::move(runtime));
  return raw;
}

}  // namespace

const std::vector<std::string>& SparseMlaKernels() {
  static const std::vector<std::string> kernels = {
    "sparse_mla.sparse_mla.flash.scalar",
#if defined(__aarch64__)
    "sparse_mla.sparse_mla.flash.neon",
#else
    "sparse_mla.sparse_mla.flash.avx2",
    "sparse_mla.sparse_mla.flash.avx512",
    "sparse_mla.sparse_mla.flash.avx512_bf16",
    "sparse_mla.sparse_mla.flash.amx_bf16",
#endif
  };
  return kernels;
}

bool SparseMlaKernelRuns(const std::string& kernel) {
  std::vector<std::string> needs;
  if (kernel.find("amx_bf16") != std::string::npos) {
    needs = {"avx512f", "avx512bw", "avx512vl", "avx512bf16", "amx_bf16", "fma", "f16c"};
  } else if (kernel.find("avx512_bf16") != std::string::npos) {
    needs = {"avx512f", "avx512bw", "avx512vl", "avx512bf16", "fma", "f16c"};
  } else if (kernel.find("avx512") != std::string::npos) {
    needs = {"avx512f", "avx512bw", "avx512vl", "fma"};
  } else if (kernel.find("avx2") != std::string::npos) {
    needs = {"avx2", "fma", "f16c"};
  } else if (kernel.find("neon") != std::string::npos) {
    needs = {"neon"};
  } else {
    return true;
  }
  RuntimePtr runtime = CreateRuntime();
  for (const auto& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != "sparse_mla") continue;
    for (const auto& [key, value] : plugin.facts) {
      if (key != "isa") continue;
      const std::string isa = "," + value + ",";
      bool all = true;
      for (const auto& n : needs) all = all && isa.find("," + n + ",") != std::string::npos;
      if (all) return true;
    }
  }
  return false;
}

attnrt_status RunSparseMlaMetadata(SparseMlaCase& c, const std::string& kernel,
                                   std::string* error) {
  attnrt_runtime* runtime = RuntimeFor(kernel, c.spec().num_threads);
  if (runtime == nullptr) {
    *error = "no runtime";
    return ATTNRT_ERROR_INTERNAL;
  }
  const attnrt_sparse_mla_attributes a = c.Attributes();
  attnrt_op* raw = nullptr;
  attnrt_status st = attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &raw);
  OpPtr op(raw);
  const attnrt_tensor* out[1] = {c.in()[ATTNRT_SPARSE_MLA_INPUT_METADATA].get()};
  attnrt_plan* plan_raw = nullptr;
  if (st == ATTNRT_OK) {
    st = attnrt_op_plan(op.get(), c.MetadataInputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, out, 1,
                        &plan_raw);
  }
  PlanPtr plan(plan_raw);
  if (st == ATTNRT_OK) {
    st = attnrt_plan_run(plan.get(), c.MetadataInputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, out, 1,
                         nullptr, 0, nullptr);
  }
  if (st != ATTNRT_OK) *error = attnrt_last_error_message();
  return st;
}

attnrt_status RunSparseMlaMain(SparseMlaCase& c, const std::string& kernel, std::string* error,
                               std::string* chosen_kernel) {
  attnrt_runtime* runtime = RuntimeFor(kernel, c.spec().num_threads);
  if (runtime == nullptr) {
    *error = "no runtime";
    return ATTNRT_ERROR_INTERNAL;
  }
  const attnrt_sparse_mla_attributes a = c.Attributes();
  attnrt_op* raw = nullptr;
  attnrt_status st = attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA, &a, &raw);
  OpPtr op(raw);
  attnrt_plan* plan_raw = nullptr;
  if (st == ATTNRT_OK) {
    st = attnrt_op_plan(op.get(), c.Inputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, c.Outputs(),
                        ATTNRT_SPARSE_MLA_NUM_OUTPUTS, &plan_raw);
  }
  PlanPtr plan(plan_raw);
  if (st == ATTNRT_OK && chosen_kernel != nullptr) *chosen_kernel = PlanKernel(plan.get());
  if (st == ATTNRT_OK) {
    st = attnrt_plan_run(plan.get(), c.Inputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, c.Outputs(),
                         ATTNRT_SPARSE_MLA_NUM_OUTPUTS, nullptr, 0, nullptr);
  }
  if (st != ATTNRT_OK) *error = attnrt_last_error_message();
  return st;
}

attnrt_status RunSparseMla(SparseMlaCase& c, const std::string& kernel, std::string* error,
                           std::string* chosen_kernel) {
  const attnrt_status st = RunSparseMlaMetadata(c, kernel, error);
  if (st != ATTNRT_OK) return st;
  return RunSparseMlaMain(c, kernel, error, chosen_kernel);
}

bool CompareWithReference(SparseMlaCase& c, std::string* report, double* max_abs_error,
                          double min_close_fraction, double lse_slack) {
  ref::SparseMlaRefOutputs expected;
  if (!ref::SparseMlaReference(c.RefInputs(), &expected)) {
    *report = "reference rejected the inputs: " + expected.error;
    return false;
  }
  const bool fp16 = c.spec().fp16;
  const Tensor& o = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  const auto* bits = static_cast<const uint16_t*>(const_cast<Tensor&>(o).data());
  const int64_t n = o.numel();
  std::ostringstream os;
  if (static_cast<int64_t>(expected.attn_out.size()) != n) {
    os << "reference has " << expected.attn_out.size() << " outputs, attnrt " << n;
    *report = os.str();
    return false;
  }
  const double rtol = 1.0 / 128.0, atol = 1e-4;
  int64_t close = 0, unwritten = 0, same_bits = 0;
  double worst = 0.0;
  int64_t worst_at = -1;
  for (int64_t k = 0; k < n; ++k) {
    const double got = fp16 ? ref::Fp16ToFloat(bits[k]) : ref::Bf16ToFloat(bits[k]);
    if (std::isnan(got)) {
      ++unwritten;
      continue;
    }
    if (bits[k] == expected.attn_out_bits[k]) ++same_bits;
    const double want = expected.attn_out[k];
    const double err = std::fabs(got - want);
    if (err <= atol + rtol * std::fabs(want)) ++close;
    if (err > worst) {
      worst = err;
      worst_at = k;
    }
  }
  if (max_abs_error != nullptr) *max_abs_error = worst;
  const double fraction = n > 0 ? static_cast<double>(close) / n : 1.0;
  os << "attn_out: " << close << "/" << n << " close (" << fraction * 100 << "%), max abs error "
     << worst << " at " << worst_at << ", unwritten " << unwritten << ", equal to the reference's "
     << (fp16 ? "float16" : "bfloat16") << " rounding " << same_bits << "/" << n;
  bool ok = unwritten == 0 && fraction >= min_close_fraction;
  if (c.spec().lse) {
    const Tensor& l = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE];
    const float* lse = const_cast<Tensor&>(l).f32();
    int64_t bad = 0;
    double lse_worst = 0.0;
    for (int64_t k = 0; k < l.numel(); ++k) {
      const double want = static_cast<float>(expected.softmax_lse[k]);
      const double err = std::fabs(lse[k] - want);
      if (std::isnan(lse[k]) || err > 1e-4 + 2e-5 * std::fabs(want) + lse_slack) ++bad;
      if (err > lse_worst) lse_worst = err;
    }
    os << "; softmax_lse: " << bad << " of " << l.numel() << " outside 1e-4 + 2e-5|lse| + "
       << lse_slack << ", max error " << lse_worst;
    ok = ok && bad == 0;
  }
  *report = os.str();
  return ok;
}

SparseMlaResult RunSparseMlaCall(SparseMlaCase& c, const std::string& kernel) {
  c.Poison();
  std::string error, chosen;
  EXPECT_EQ(RunSparseMla(c, kernel, &error, &chosen), ATTNRT_OK) << error;
  EXPECT_EQ(chosen, kernel);
  SparseMlaResult r;
  const Tensor& o = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  const auto* bits = static_cast<const uint16_t*>(const_cast<Tensor&>(o).data());
  for (int64_t i = 0; i < o.numel(); ++i) {
    const uint32_t x = static_cast<uint32_t>(bits[i]) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    r.out.push_back(f);
  }
  Tensor& l = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE];
  for (int64_t i = 0; i < l.numel(); ++i) r.lse.push_back(l.f32()[i]);
  return r;
}

}  // namespace attnrt_test
