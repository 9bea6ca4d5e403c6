// Float64 GQA reference; every rule cites the section of gqa-semantics.md it implements.
#include "common/gqa_reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace attnrt_test {
namespace {

using Row = std::vector<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Rotary: RoPE of one head row at position pos; dimensions [R, H) are copied unchanged.
void Rotate(const GqaRefProblem& p, const GqaRefInputs& in, int64_t pos, Row& x) {
  const int64_t half = p.rotary_half_dim;
  const Row src = x;
  for (int64_t i = 0; i < half; ++i) {
    const double c = in.cos_cache[pos * half + i];
    const double s = in.sin_cache[pos * half + i];
    const int64_t i0 = p.rotary_interleaved == 1 ? 2 * i : i;
    const int64_t i1 = p.rotary_interleaved == 1 ? 2 * i + 1 : i + half;
    x[i0] = src[i0] * c - src[i1] * s;
    x[i1] = src[i1] * c + src[i0] * s;
  }
}

}  // namespace

GqaRefOutputs ComputeGqaReference(const GqaRefProblem& p, const GqaRefInputs& in) {
  const int64_t B = p.batch_size;
  const int64_t S = p.sequence_length;
  const int64_t L = p.packed_qkv ? S : p.kv_sequence_length;
  const int64_t N = p.num_heads;
  const int64_t Nkv = p.kv_num_heads;
  const int64_t H = p.head_size;
  const int64_t G = N / Nkv;
  const int64_t P = p.has_past ? p.past_length : 0;
  const int64_t T = p.total_sequence_length;
  const int64_t PL = p.has_present ? p.present_length : 0;
  const bool first_prompt = S == T;  // phases
  const bool rotary = p.do_rotary == 1;
  const bool sink = p.smooth_softmax == 1 || p.has_head_sink;  // score pipeline, softmax step
  const double alpha = p.scale != 0.0f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(double(H));

  const int64_t q_row = p.packed_qkv ? (N + 2 * Nkv) * H : N * H;
  const int64_t kv_row = p.packed_qkv ? (N + 2 * Nkv) * H : Nkv * H;
  auto q_at = [&](int64_t b, int64_t s, int64_t n) {
    return in.query + (b * S + s) * q_row + n * H;
  };
  auto new_k_at = [&](int64_t b, int64_t l, int64_t kh) {
    return p.packed_qkv ? in.query + (b * S + l) * q_row + (N + kh) * H
                        : in.key + (b * L + l) * kv_row + kh * H;
  };
  auto new_v_at = [&](int64_t b, int64_t l, int64_t kh) {
    return p.packed_qkv ? in.query + (b * S + l) * q_row + (N + Nkv + kh) * H
                        : in.value + (b * L + l) * kv_row + kh * H;
  };
  auto past_at = [&](const float* past, int64_t b, int64_t kh, int64_t j) {
    return past + ((b * Nkv + kh) * P + j) * H;
  };

  GqaRefOutputs out;
  out.output.assign(static_cast<size_t>(B * S * N * H), 0.0);
  if (p.has_present) {
    out.present_key.assign(static_cast<size_t>(B * Nkv * PL * H), 0.0);
    out.present_value.assign(out.present_key.size(), 0.0);
    if (p.present_shares_past) {  // present = past: past rows are left untouched
      for (size_t i = 0; i < out.present_key.size(); ++i) {
        out.present_key[i] = in.past_key[i];
        out.present_value[i] = in.past_value[i];
      }
    }
  }
  if (p.qk_output != 0) out.output_qk.assign(static_cast<size_t>(B * N * S * T), 0.0);

  for (int64_t b = 0; b < B; ++b) {
    const int64_t Tb = int64_t{p.seqlens_k[b]} + 1;
    out.valid_keys.push_back(Tb);
    // Phases: rows [0, P_b) come from the past, new rows go to [P_b, P_b + L); the causal offset is
    // P_b (shared KV: T_b - S), and 0 in the first prompt. ONNX Runtime's phase check: a subsequent
    // prompt without a past has offset 0 too (its output equals the plain S-token prompt).
    const int64_t offset = (first_prompt || (!p.has_past && L > 0)) ? 0 : Tb - S;
    // Rows that exist: T_b, except in that no-past case where only the L new rows do.
    const int64_t rows = L == 0 ? Tb : std::min(Tb, offset + L);

    // Rotary positions.
    auto position = [&](int64_t s) -> int64_t {
      if (first_prompt) return (p.position_ids_length > 0 ? in.position_ids[0] : 0) + s;
      if (p.position_ids_length > 0) return in.position_ids[b * p.position_ids_length + s];
      return Tb - S + s;
    };

    // Keys and values visible to this batch: rows [0, T_b) of the logical cache, K after RoPE.
    std::vector<std::vector<Row>> keys(static_cast<size_t>(Nkv)), values(static_cast<size_t>(Nkv));
    for (int64_t kh = 0; kh < Nkv; ++kh) {
      auto& kk = keys[static_cast<size_t>(kh)];
      auto& vv = values[static_cast<size_t>(kh)];
      // New rows (all L of them: in the first prompt padded tokens are written too).
      std::vector<Row> new_k(static_cast<size_t>(L)), new_v(static_cast<size_t>(L));
      for (int64_t l = 0; l < L; ++l) {
        new_k[l].assign(new_k_at(b, l, kh), new_k_at(b, l, kh) + H);
        new_v[l].assign(new_v_at(b, l, kh), new_v_at(b, l, kh) + H);
        if (rotary) Rotate(p, in, position(l), new_k[l]);
      }
      for (int64_t j = 0; j < rows; ++j) {
        if (L == 0 || j < offset) {
          kk.emplace_back(past_at(in.past_key, b, kh, j), past_at(in.past_key, b, kh, j) + H);
          vv.emplace_back(past_at(in.past_value, b, kh, j), past_at(in.past_value, b, kh, j) + H);
        } else {
          kk.push_back(new_k[j - offset]);
          vv.push_back(new_v[j - offset]);
        }
      }
      // Present K/V.
      if (p.has_present) {
        auto put = [&](int64_t row, const Row& k, const Row& v) {
          const size_t base = static_cast<size_t>(((b * Nkv + kh) * PL + row) * H);
          std::copy(k.begin(), k.end(), out.present_key.begin() + base);
          std::copy(v.begin(), v.end(), out.present_value.begin() + base);
        };
        if (L == 0) {
          for (int64_t j = 0; j < Tb; ++j) put(j, kk[j], vv[j]);
        } else {
          for (int64_t j = 0; j < offset; ++j) put(j, kk[j], vv[j]);
          for (int64_t l = 0; l < L; ++l) put(offset + l, new_k[l], new_v[l]);
        }
      }
    }

    for (int64_t n = 0; n < N; ++n) {
      const auto& kk = keys[static_cast<size_t>(n / G)];
      const auto& vv = values[static_cast<size_t>(n / G)];
      for (int64_t s = 0; s < S; ++s) {
        Row q(q_at(b, s, n), q_at(b, s, n) + H);
        if (rotary) Rotate(p, in, position(s), q);
        // Causal mask and local window: [lo, ecl).
        const int64_t ecl = std::min(p.causal == 1 ? std::min(offset + s + 1, Tb) : Tb, rows);
        const int64_t W = p.local_window_size;
        int64_t lo = (W >= 0 && ecl > W) ? ecl - W : 0;
        if (p.flash_padded_window && first_prompt && W >= 0 && s >= Tb) {
          lo = std::min(std::max<int64_t>(0, s + 1 - W), ecl);
        }
        const int64_t hi = ecl;
        // Score pipeline: scale inside the product, softcap on the window, then the bias.
        Row x(static_cast<size_t>(T), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0.0;
          for (int64_t h = 0; h < H; ++h) dot += q[h] * kk[j][h];
          double v = alpha * dot;
          if (p.softcap > 0.0f) v = double{p.softcap} * std::tanh(v / double{p.softcap});
          if (p.bias_batch > 0) {
            const int64_t bb = p.bias_batch == 1 ? 0 : b;
            const int64_t bn = p.bias_heads == 1 ? 0 : n;
            v += in.attention_bias[((bb * p.bias_heads + bn) * S + s) * T + j];
          }
          x[j] = v;
        }
        double* qk_row =
            p.qk_output != 0 ? out.output_qk.data() + ((b * N + n) * S + s) * T : nullptr;
        if (p.qk_output == 1) std::copy(x.begin(), x.end(), qk_row);  // step 5
        // Step 6: softmax over the window only, with the raw sink logit when enabled; non-finite
        // values as docs/gqa-semantics.md states them: a NaN or +inf score or sink makes the row
        // NaN, a row of -inf scores only (or no key) is a zero row whose values are not read.
        const double sink_logit = p.has_head_sink ? double{in.head_sink[n]} : 0.0;
        bool nan_row = sink && (std::isnan(sink_logit) || sink_logit == kInf);
        bool zero_row = !nan_row;
        for (int64_t j = lo; j < hi && !nan_row; ++j) {
          if (std::isnan(x[j]) || x[j] == kInf) nan_row = true;
          if (x[j] != -kInf) zero_row = false;
        }
        if (nan_row) zero_row = false;
        Row prob(static_cast<size_t>(T), 0.0);
        if (nan_row) {
          for (int64_t j = lo; j < hi; ++j) prob[j] = kNaN;
        } else if (!zero_row) {
          double m = -kInf;
          for (int64_t j = lo; j < hi; ++j) m = std::max(m, x[j]);
          if (sink) m = std::max(m, sink_logit);
          double sum = 0.0;
          for (int64_t j = lo; j < hi; ++j) sum += std::exp(x[j] - m);
          if (sink) sum += std::exp(sink_logit - m);
          for (int64_t j = lo; j < hi; ++j) prob[j] = std::exp(x[j] - m) / sum;
        }
        if (p.qk_output == 2) std::copy(prob.begin(), prob.end(), qk_row);  // step 7
        // Step 8: every visible key, weight 0 included (0 * inf is NaN, as in IEEE arithmetic).
        double* o = out.output.data() + (b * S + s) * N * H + n * H;
        if (nan_row) std::fill(o, o + H, kNaN);
        for (int64_t j = lo; j < hi && !nan_row && !zero_row; ++j) {
          for (int64_t h = 0; h < H; ++h) o[h] += prob[j] * vv[j][h];
        }
      }
    }
  }
  return out;
}

}  // namespace attnrt_test
