#include "sparse_mla_workload.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "errors.h"

namespace plugin_inspect {
namespace {

constexpr attnrt_dtype kBf16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;

// Truncation to bf16 / a float16 conversion are enough for random test data.
uint16_t to_half_bits(float v, bool fp16) {
  if (!fp16) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return static_cast<uint16_t>(bits >> 16);
  }
  // |v| < 8 here: a normal float16 with 10 mantissa bits (truncated).
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  float a = v < 0 ? -v : v;
  if (a < 6.2e-5f) return sign;
  int e = 0;
  while (a >= 2.0f) a *= 0.5f, ++e;
  while (a < 1.0f) a *= 2.0f, --e;
  return sign | static_cast<uint16_t>((e + 15) << 10) |
         static_cast<uint16_t>(static_cast<int>((a - 1.0f) * 1024.0f));
}

const char* layout_name(int32_t layout) {
  return layout == ATTNRT_SPARSE_MLA_LAYOUT_BSND  ? "BSND"
         : layout == ATTNRT_SPARSE_MLA_LAYOUT_TND ? "TND"
                                                  : "PA_BBND";
}

// A paged row position `p` of batch `b`, through its block table, as a global slot id.
int32_t slot_of(const SparseMlaBuffer& table, int64_t b, int64_t p, int64_t block_size) {
  const int64_t block =
      reinterpret_cast<const int32_t*>(table.bytes.data())[b * table.shape[1] + p / block_size];
  return static_cast<int32_t>(block * block_size + p % block_size);
}

// topk_value_mode 3: each row's ori window and its top-k as global slot ids (vLLM's addressing);
// the block tables, seqused_ori_kv and cmp_residual_kv go.
void to_global_slots(const SparseMlaConfig& c, SparseMlaWorkload* w) {
  const attnrt_sparse_mla_attributes& a = c.attributes;
  const int64_t B = c.batch, rows = B * c.q_len, bs = c.block_size;
  const int64_t width = a.ori_mask_mode == 4 ? a.ori_win_left + 1 : c.kv_len;
  auto& ori = w->in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
  if (a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
    ori.make(kI32, {rows, 1, width}, true);
  } else {
    ori.make(kI32, {B, c.q_len, 1, width}, true);
  }
  const SparseMlaBuffer& ori_table = w->in[ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE];
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / c.q_len, i = row % c.q_len;
    // Visible ori positions [lo, hi) of a right-down causal row with a window of `width`.
    const int64_t hi = std::clamp<int64_t>(c.kv_len - c.q_len + i + 1, 0, c.kv_len);
    const int64_t lo = std::max<int64_t>(hi - width, 0);
    for (int64_t k = 0; k < width; ++k) {
      ori.i32()[row * width + k] = lo + k < hi ? slot_of(ori_table, b, lo + k, bs) : -1;
    }
  }
  auto& cmp = w->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
  if (cmp.present) {
    const SparseMlaBuffer& cmp_table = w->in[ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE];
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t k = 0; k < c.topk; ++k) {
        int32_t& v = cmp.i32()[row * c.topk + k];
        if (v >= 0) v = slot_of(cmp_table, row / c.q_len, v, bs);
      }
    }
  }
  for (int i : {ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
                ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
    w->in[i].present = false;
  }
}

}  // namespace

void SparseMlaBuffer::make(attnrt_dtype dtype, std::vector<int64_t> dims, bool allocate) {
  shape = std::move(dims);
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  if (allocate) bytes.assign(static_cast<size_t>(n * dtype.bits / 8), 0);
  tensor = attnrt_tensor{allocate ? bytes.data() : nullptr,
                         {ATTNRT_DEVICE_CPU, 0},
                         static_cast<int32_t>(shape.size()),
                         dtype,
                         shape.data(),
                         nullptr,
                         0};
  present = true;
}

void SparseMlaBuffer::make_strided(attnrt_dtype dtype, std::vector<int64_t> dims,
                                   int64_t block_stride, bool allocate) {
  shape = std::move(dims);
  strides = {block_stride, shape[3], shape[3], 1};
  const int64_t block = shape[1] * shape[3];
  const int64_t elements = (shape[0] - 1) * std::max(block_stride, block) + block;
  if (allocate) bytes.assign(static_cast<size_t>(elements * dtype.bits / 8), 0xFF);
  tensor = attnrt_tensor{allocate ? bytes.data() : nullptr,
                         {ATTNRT_DEVICE_CPU, 0},
                         4,
                         dtype,
                         shape.data(),
                         strides.data(),
                         0};
  present = true;
}

attnrt_sparse_mla_attributes sparse_mla_op_attributes(const SparseMlaConfig& c) {
  attnrt_sparse_mla_attributes a = c.attributes;
  if (c.topk_value_mode == 3) {
    a.topk_value_mode = 3;
    a.ori_mask_mode = 0;
    a.cmp_mask_mode = 0;
    a.ori_win_left = -1;
    a.ori_win_right = -1;
  }
  return a;
}

std::vector<const attnrt_tensor*> SparseMlaWorkload::inputs(bool with_metadata) const {
  std::vector<const attnrt_tensor*> v(ATTNRT_SPARSE_MLA_NUM_INPUTS, nullptr);
  for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    if (in[i].present) v[i] = &in[i].tensor;
  }
  if (!with_metadata) v[ATTNRT_SPARSE_MLA_INPUT_METADATA] = nullptr;
  return v;
}

std::vector<const attnrt_tensor*> SparseMlaWorkload::outputs() const {
  std::vector<const attnrt_tensor*> v(ATTNRT_SPARSE_MLA_NUM_OUTPUTS, nullptr);
  for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_OUTPUTS; ++i) {
    if (out[i].present) v[i] = &out[i].tensor;
  }
  return v;
}

void make_sparse_mla_workload(const SparseMlaConfig& c, bool allocate, uint64_t seed,
                              SparseMlaWorkload* w) {
  const attnrt_sparse_mla_attributes& a = c.attributes;
  if (c.batch < 1 || c.q_len < 1 || c.kv_len < 1 || c.num_heads < 1 || c.block_size < 1) {
    throw UsageError("--batch, --q-len, --kv-len, --num-heads and --block-size must be >= 1");
  }
  if (c.scenario == ATTNRT_SPARSE_MLA_CSA && c.topk < 1) throw UsageError("--topk must be >= 1");
  const bool pa = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  if (c.topk_value_mode != 1 && c.topk_value_mode != 3) {
    throw UsageError(
        "--topk-value-mode: expected 1 (logical positions) or 3 (global slot ids), got " +
        std::to_string(c.topk_value_mode));
  }
  if (c.topk_value_mode == 3 && (!pa || c.scenario == ATTNRT_SPARSE_MLA_HCA)) {
    throw UsageError(
        "--topk-value-mode 3 (global slot ids) needs --layout-kv pa_bbnd and --scenario swa or "
        "csa (the slots address the paged caches; the compressed keys are listed)");
  }
  if (c.block_stride != 0 && (!pa || c.block_stride < 0)) {
    throw UsageError(
        "--block-stride: expected a positive number of bytes with --layout-kv "
        "pa_bbnd, got " +
        std::to_string(c.block_stride) + (pa ? "" : " with another layout"));
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t B = c.batch, N = c.num_heads;
  const bool tnd_q = a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool tnd_kv = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool has_cmp = c.scenario != ATTNRT_SPARSE_MLA_SWA;
  const attnrt_dtype qd = c.fp16 ? kF16 : kBf16;
  const int64_t rows = B * c.q_len;
  w->query_tokens = rows;

  if (tnd_q) {
    w->in[ATTNRT_SPARSE_MLA_INPUT_Q].make(qd, {rows, N, 512}, allocate);
    w->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].make(kI32, {B + 1}, true);
    for (int64_t b = 0; b <= B; ++b) {
      w->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].i32()[b] = static_cast<int32_t>(b * c.q_len);
    }
  } else {
    w->in[ATTNRT_SPARSE_MLA_INPUT_Q].make(qd, {B, c.q_len, N, 512}, allocate);
  }
  if (allocate) {
    auto* q = reinterpret_cast<uint16_t*>(w->in[ATTNRT_SPARSE_MLA_INPUT_Q].bytes.data());
    for (int64_t k = 0; k < rows * N * 512; ++k) q[k] = to_half_bits(normal(rng), c.fp16);
  }

  const int64_t r = has_cmp ? a.cmp_ratio : 1;
  const int64_t cmp_len = c.kv_len / r;
  // One KV side: tensor, block table or cu_seqlens; tokens encoded when allocating.
  auto side = [&](bool cmp, int64_t len, int kv, int table, int cu) {
    int64_t kv_d = a.quant_mode == 1   ? ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES
                   : a.quant_mode == 2 ? ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES
                   : cmp               ? ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES
                                       : 512;
    const attnrt_dtype dtype = (a.quant_mode == 3 && !cmp) ? qd : kU8;
    const int64_t token_bytes = kv_d * dtype.bits / 8;
    int64_t tokens = 0;
    int64_t block_bytes = 0;  // PA_BBND: bytes from one block to the next
    if (pa) {
      const int64_t per_seq = std::max<int64_t>(1, (len + c.block_size - 1) / c.block_size);
      block_bytes = c.block_size * token_bytes;
      if (c.block_stride != 0) {
        if (c.block_stride % (dtype.bits / 8) != 0) {
          throw UsageError("--block-stride: " + std::to_string(c.block_stride) +
                           " bytes is not a whole number of " + (cmp ? "cmp_kv" : "ori_kv") +
                           " elements (" + std::to_string(dtype.bits / 8) + " bytes each)");
        }
        // A stride below the block's bytes is the runtime's to refuse (blocks would overlap):
        // the buffer is then laid out as compact.
        block_bytes = std::max(block_bytes, c.block_stride);
        w->in[kv].make_strided(dtype, {B * per_seq, c.block_size, 1, kv_d},
                               c.block_stride / (dtype.bits / 8), allocate);
      } else {
        w->in[kv].make(dtype, {B * per_seq, c.block_size, 1, kv_d}, allocate);
      }
      w->in[table].make(kI32, {B, per_seq}, true);
      std::vector<int32_t> ids(B * per_seq);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy(ids.begin(), ids.end(), w->in[table].i32());
      tokens = B * per_seq * c.block_size;
    } else if (tnd_kv) {
      w->in[kv].make(dtype, {B * len, 1, kv_d}, allocate);
      w->in[cu].make(kI32, {B + 1}, true);
      for (int64_t b = 0; b <= B; ++b) w->in[cu].i32()[b] = static_cast<int32_t>(b * len);
      tokens = B * len;
    } else {
      w->in[kv].make(dtype, {B, len, 1, kv_d}, allocate);
      tokens = B * len;
    }
    if (!allocate) return;
    uint8_t* base = w->in[kv].bytes.data();
    // Tokens in blocks of block_size (quant_mode 2's block-planar layout; a compact BSND or TND
    // cache is blocks without gaps too).
    const int64_t bs = c.block_size;
    if (!pa) block_bytes = bs * token_bytes;
    std::vector<float> row(512);
    for (int64_t t = 0; t < tokens; ++t) {
      for (float& v : row) v = normal(rng);
      uint8_t* block = base + (t / bs) * block_bytes;
      uint8_t* token = block + (t % bs) * token_bytes;
      if (a.quant_mode == 1) {
        check(attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1, token));
      } else if (a.quant_mode == 2) {
        check(attnrt_sparse_mla_encode_mode2(row.data(), kF32, block, bs, t % bs));
      } else if (cmp) {
        check(attnrt_sparse_mla_encode_tq4(row.data(), kF32, 1, token));
      } else {
        auto* bits = reinterpret_cast<uint16_t*>(token);
        for (int d = 0; d < 512; ++d) bits[d] = to_half_bits(row[d], c.fp16);
      }
    }
  };
  side(false, c.kv_len, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE,
       ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV);
  if (!tnd_kv) {
    w->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].make(kI32, {B}, true);
    std::fill_n(w->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].i32(), B,
                static_cast<int32_t>(c.kv_len));
  }
  if (has_cmp) {
    side(true, cmp_len, ATTNRT_SPARSE_MLA_INPUT_CMP_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
         ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV);
    w->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].make(kI32, {B}, true);
    std::fill_n(w->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].i32(), B,
                static_cast<int32_t>(c.kv_len % r));
  }
  const int64_t token_bytes = a.quant_mode == 1 ? 608 : a.quant_mode == 2 ? 584 : 1024;
  const int64_t cmp_token_bytes = a.quant_mode == 3 ? 258 : token_bytes;
  if (c.scenario == ATTNRT_SPARSE_MLA_CSA) {
    auto& idx = w->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
    if (tnd_q) {
      idx.make(kI32, {rows, 1, c.topk}, true);
    } else {
      idx.make(kI32, {B, c.q_len, 1, c.topk}, true);
    }
    std::vector<int32_t> all(static_cast<size_t>(std::max<int64_t>(cmp_len, 1)));
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % c.q_len;
      const int64_t visible = std::clamp<int64_t>((c.kv_len - c.q_len + i + 1) / r, 0, cmp_len);
      std::iota(all.begin(), all.begin() + visible, 0);
      std::shuffle(all.begin(), all.begin() + visible, rng);
      const int64_t used = std::min(c.topk, visible);
      for (int64_t k = 0; k < c.topk; ++k) idx.i32()[row * c.topk + k] = k < used ? all[k] : -1;
      w->kv_bytes_per_run += used * cmp_token_bytes;
    }
  } else if (c.scenario == ATTNRT_SPARSE_MLA_HCA) {
    for (int64_t i = 0; i < c.q_len; ++i) {
      w->kv_bytes_per_run +=
          B * std::clamp<int64_t>((c.kv_len - c.q_len + i + 1) / r, 0, cmp_len) * cmp_token_bytes;
    }
  }
  for (int64_t i = 0; i < c.q_len; ++i) {
    const int64_t thr = c.kv_len - c.q_len + i + 1;
    if (thr <= 0) continue;
    int64_t lo = 0, hi = c.kv_len;
    if (a.ori_mask_mode == 4) {
      lo = a.ori_win_left < 0 ? 0 : std::max<int64_t>(thr - 1 - a.ori_win_left, 0);
      hi = a.ori_win_right < 0 ? c.kv_len : std::min<int64_t>(thr + a.ori_win_right, c.kv_len);
    } else if (a.ori_mask_mode == 3) {
      hi = std::min(thr, c.kv_len);
    }
    w->kv_bytes_per_run += B * std::max<int64_t>(hi - lo, 0) * token_bytes;
  }
  if (c.topk_value_mode == 3) to_global_slots(c, w);
  w->in[ATTNRT_SPARSE_MLA_INPUT_SINKS].make(kF32, {N}, true);
  w->in[ATTNRT_SPARSE_MLA_INPUT_METADATA].make(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE}, true);
  const std::vector<int64_t> q_shape = w->in[ATTNRT_SPARSE_MLA_INPUT_Q].shape;
  w->out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].make(qd, q_shape, allocate);
  if (a.return_softmax_lse == 1) {
    if (tnd_q) {
      w->out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].make(kF32, {1, rows, N}, allocate);
    } else {
      w->out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].make(kF32, {B, 1, c.q_len, N}, allocate);
    }
  }
}

std::string describe_sparse_mla(const SparseMlaConfig& c) {
  const attnrt_sparse_mla_attributes& a = c.attributes;
  const char* scenario = c.scenario == ATTNRT_SPARSE_MLA_SWA   ? "SWA"
                         : c.scenario == ATTNRT_SPARSE_MLA_CSA ? "CSA"
                                                               : "HCA";
  std::string text = std::string(scenario) + " quant_mode " + std::to_string(a.quant_mode) + " " +
                     layout_name(a.layout_q) + "/" + layout_name(a.layout_kv) +
                     " B=" + std::to_string(c.batch) + " q_len=" + std::to_string(c.q_len) +
                     " kv_len=" + std::to_string(c.kv_len) +
                     " heads=" + std::to_string(c.num_heads);
  if (c.scenario == ATTNRT_SPARSE_MLA_CSA) text += " topk=" + std::to_string(c.topk);
  if (c.scenario != ATTNRT_SPARSE_MLA_SWA) text += " cmp_ratio=" + std::to_string(a.cmp_ratio);
  if (a.ori_mask_mode == 4) text += " window=" + std::to_string(a.ori_win_left + 1);
  if (a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    text += " block_size=" + std::to_string(c.block_size);
    if (c.block_stride != 0) text += " block_stride=" + std::to_string(c.block_stride);
  }
  if (c.topk_value_mode == 3) text += " topk_value_mode=3";
  return text + (c.fp16 ? " float16" : " bfloat16");
}

}  // namespace plugin_inspect
