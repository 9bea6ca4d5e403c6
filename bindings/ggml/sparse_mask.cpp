// The visible keys of a sparse mask's rows as attnrt's block_table, seqlens_k and attention_bias
// (see sparse_mask.h).
#include "sparse_mask.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "convert.h"

namespace attnrt_ggml {

namespace {

constexpr uint16_t kMinusInf = 0xFC00;  // float16 -inf: the one entry ggml's CPU backend skips

const ggml_fp16_t* MaskRowAt(const ggml_tensor* mask, int64_t b, int64_t row) {
  return reinterpret_cast<const ggml_fp16_t*>(static_cast<const char*>(mask->data) +
                                              (b % mask->ne[3]) * mask->nb[3] + row * mask->nb[1]);
}

bool Visible(const ggml_fp16_t* row, int64_t j) {
  uint16_t bits;  // copied: the mask may start at any byte
  std::memcpy(&bits, row + j, sizeof bits);
  return bits != kMinusInf;
}

}  // namespace

void GatherSparseRows(const ggml_tensor* mask, int64_t b, int64_t r0, int64_t rows, int64_t total,
                      int64_t bias_heads, int64_t num_heads, float max_bias,
                      const attnrt_dtype& dtype, bool shift, int team, SparseRows* out) {
  std::vector<int64_t> counts(static_cast<size_t>(rows));
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    const ggml_fp16_t* row = MaskRowAt(mask, b, r0 + i);
    int64_t n = 0;
    for (int64_t j = 0; j < total; ++j) n += Visible(row, j) ? 1 : 0;
    counts[static_cast<size_t>(i)] = n;
  }
  // n_kv_max bounds a row's visible keys, as ggml requires; a row with more is still served whole.
  const int64_t keys = std::max<int64_t>(1, *std::max_element(counts.begin(), counts.end()));
  const size_t es = dtype.bits / 8;
  out->keys = keys;
  out->table.assign(static_cast<size_t>(rows * keys), 0);
  out->seqlens_k.resize(static_cast<size_t>(rows));
  out->bias.resize(static_cast<size_t>(rows * bias_heads * keys) * es);
  out->inexact.assign(static_cast<size_t>(rows), 0);
#pragma omp parallel num_threads(team)
  {
    std::vector<ggml_fp16_t> values(static_cast<size_t>(keys));
    std::vector<float> scratch(static_cast<size_t>(keys));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const ggml_fp16_t* row = MaskRowAt(mask, b, r0 + i);
      int32_t* table = out->table.data() + i * keys;
      int64_t n = 0;
      for (int64_t j = 0; j < total; ++j) {
        if (!Visible(row, j)) continue;
        table[n] = static_cast<int32_t>(j);
        std::memcpy(&values[static_cast<size_t>(n)], row + j, sizeof(ggml_fp16_t));
        ++n;
      }
      // Entries past the row's keys are never read (seqlens_k); a row without keys reads key 0
      // under -inf.
      std::fill(values.begin() + n, values.end(),
                ggml_fp32_to_fp16(-std::numeric_limits<float>::infinity()));
      out->seqlens_k[static_cast<size_t>(i)] = static_cast<int32_t>(std::max<int64_t>(n, 1) - 1);
      for (int64_t h = 0; h < bias_heads; ++h) {
        const bool exact = MaskRow(
            values.data(), out->bias.data() + static_cast<size_t>((i * bias_heads + h) * keys) * es,
            keys, dtype, AlibiSlope(max_bias, num_heads, h), shift, scratch.data());
        if (!exact) out->inexact[static_cast<size_t>(i)] = 1;
      }
    }
  }
}

}  // namespace attnrt_ggml
