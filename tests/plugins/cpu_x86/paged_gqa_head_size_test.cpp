// Paged GroupQueryAttention (ATTNRT_OP_PAGED_GQA) over unquantized caches of any positive head size
// (ABI 1.9; paged_gqa_head_size_support.h states the rule): every kernel the plugins register for
// the op, pinned (naive kernels must accept and match, flash kernels must decline, naming the head
// size), and the runtime's own choice, against the float64 reference of
// paged_gqa_mixed_kv_types_support.h written from the headers.
//
// Head sizes (H, Hv): (65, 67), (1, 1), (3, 5), (12, 12), (36, 20), (67, 65), (67, 67), (129, 127),
// (7, 64), (64, 7). Types (T; key_cache; value_cache): f32, f16 and bf16 with one type for both
// pools (v_cache_own_type 0), and (f32; f32; f16), (f16; f16; bf16), (bf16; bf16; f32) with
// v_cache_own_type 1; and one pool PER_BLOCK_32, the other a float type of an odd head size:
// (f16; f16 H 65; Q8_0 Hv 64), (f32; f32 H 3; Q4_0 Hv 32), (bf16; bf16 H 129; Q8_0 Hv 96),
// (f32; f32 H 67; Q8_0 Hv 64), (f32; Q8_0 H 64; f16 Hv 67), (bf16; Q4_0 H 32; bf16 Hv 5: a float
// value cache narrower than a block behind a block key cache, see
// paged_gqa_head_size_errors_test.cpp, FloatValueCacheBehindABlockKeyCacheTakesAnyHeadSize). Each
// with kv_layout BSNH and BNSH; phases rotating over a right-padded first prompt of 2 sequences, a
// chunked prompt of 5 tokens after 18 cached ones, a decode of 3 sequences, a decode with key/value
// of kv_sequence_length 0 (the pools hold every row) and a packed-QKV decode (H == Hv); block sizes
// 1, 5, 16; (N, Nkv) (4, 2), (6, 2), (4, 1), (8, 2); and, rotating, softcap 8, a head_sink and a
// local window of 6 keys.
//
// Method (as the mixed-type test's): query x4 (a peaked softmax: the mean distance of the keys'
// weights from uniform must be at least 0.3), key, value, head_sink random values of T; past rows
// written into the pools by the test's own codecs, every other row poisoned (NaN, or NaN block
// scales), one poisoned block before and after each pool and 64 NaN elements before and after the
// output (guards, checked unchanged), the output NaN before each run. After each run: every output
// element within AttendRow's bound (float32 arithmetic from the element values the pools hold,
// plus one rounding to T; the derivation is at AttendRow), and both pools byte for byte: each new
// row as T itself, rounded to nearest even to the value cache's float type, or quantized by the
// test's Q8_0/Q4_0 quantizer, at its token's row, every other byte unchanged. Window rows see the
// keys [pos + 1 - W, pos + 1); a padded row of a first prompt sees [max(0, T_b - W), T_b), as the
// naive path has it (docs/gqa-semantics.md). A negative control shows that a reference reading the
// value rows with a stride rounded up to a multiple of 8 does not match. Five cases also run with
// both pools strided views of one cache (key row then value row, odd element offsets).
// ATTNRT_TEST_SEED repeats a run (printed with each case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "paged_gqa_head_size_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace head_size {
namespace {

using mixed_kv::Expected;
using mixed_kv::kNaN;
using mixed_kv::Paging;
using mixed_kv::Pool;

constexpr int64_t kTies = 4;  // rounding ties at the start of each f32 -> f16/bf16 value row
constexpr int64_t kBlockSizes[] = {16, 1, 5};
constexpr std::pair<int64_t, int64_t> kHeads[] = {{4, 2}, {6, 2}, {4, 1}, {8, 2}};

enum class Phase { kFirstPrompt, kChunkedPrompt, kDecode, kDecodeCached, kPackedDecode };

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kFirstPrompt:
      return "first_prompt";
    case Phase::kChunkedPrompt:
      return "chunked_prompt";
    case Phase::kDecode:
      return "decode";
    case Phase::kDecodeCached:
      return "decode_kv_absent";
    case Phase::kPackedDecode:
      break;
  }
  return "packed_qkv_decode";
}

struct Case {
  std::string name;
  TypeSet types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Phase phase = Phase::kDecode;
  int64_t H = 65, Hv = 67, block_size = 16, N = 4, Nkv = 2;
  Features features;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string Name(const Case& c) {
  return c.types.name + "_" + (c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh") + "_" +
         PhaseName(c.phase) + "_h" + std::to_string(c.H) + "_hv" + std::to_string(c.Hv) + "_bs" +
         std::to_string(c.block_size) + "_n" + std::to_string(c.N) + "_nkv" +
         std::to_string(c.Nkv) + FeatureName(c.features);
}

Case MakeCase(const TypeSet& types, HeadSizes hs, int32_t layout, size_t index) {
  Case c;
  c.types = types;
  c.layout = layout;
  c.H = hs.H;
  c.Hv = hs.Hv;
  c.phase = static_cast<Phase>(index % 5);
  if (c.phase == Phase::kPackedDecode && hs.H != hs.Hv) c.phase = Phase::kFirstPrompt;
  const uint64_t h = Mix(index);
  c.block_size = kBlockSizes[h % 3];
  c.N = kHeads[(h >> 8) % 4].first;
  c.Nkv = kHeads[(h >> 8) % 4].second;
  if ((h >> 16) % 3 == 0) c.features.softcap = 8.0f;
  if ((h >> 24) % 3 == 0) c.features.sink = true;
  if ((h >> 32) % 3 == 0) c.features.window = 6;
  c.name = Name(c);
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  size_t index = 0;
  for (const HeadSizes& hs : kHeadSizes) {
    for (const TypeSet& types : FloatTypeSets()) {
      for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
        v.push_back(MakeCase(types, hs, layout, index++));
      }
    }
  }
  for (const QuantValueSet& q : QuantValueSets()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (int k = 0; k < 2; ++k) v.push_back(MakeCase(q.types, q.hs, layout, index++));
    }
  }
  return v;
}

// One call: its tensors, the pools before and after, the T values of q and head_sink.
struct Padded {
  Case c;
  int64_t B = 1, S = 1, T = 1, L = 1;
  std::vector<int32_t> seqlens;  // T_b - 1
  bool first_prompt = false;
  Paging paging;
  Pool pool[2];
  Guarded pool_tensor[2], output;
  std::vector<float> q, sink;  // q (B, S, N, H)
  std::vector<Tensor> in;
  attnrt_paged_gqa_attributes attributes{};
  // With `shared`: both pools are strided views of one cache whose rows hold a key row of H
  // elements followed by a value row of Hv (vLLM's CPU cache kv[..., :H] and kv[..., H:]).
  struct Shared {
    Guarded buffer;  // rows of H + Hv elements
    std::vector<int64_t> shape[2], strides;
    attnrt_tensor view[2]{};
  };
  std::unique_ptr<Shared> shared;

  int64_t Tb(int64_t b) const { return seqlens[static_cast<size_t>(b)] + 1; }
  int64_t Offset(int64_t b) const { return first_prompt ? 0 : Tb(b) - S; }
};

// poison = false (the negative control): every pool row holds finite values, so that a reference
// reading the wrong rows gets finite wrong values instead of NaN.
void Build(Padded& s, const Case& c, std::mt19937_64& rng, bool poison = true) {
  s.c = c;
  const FloatFormat t = c.types.t;
  switch (c.phase) {
    case Phase::kFirstPrompt:  // right-padded: T_b 11 and 7
      s.B = 2;
      s.S = 11;
      s.seqlens = {10, 6};
      break;
    case Phase::kChunkedPrompt:  // 5 new tokens after 18 (batch_size 1, as GQA requires)
      s.B = 1;
      s.S = 5;
      s.seqlens = {22};
      break;
    case Phase::kDecode:
      s.B = 3;
      s.seqlens = {32, 15, 6};
      break;
    case Phase::kDecodeCached:
      s.B = 2;
      s.seqlens = {24, 11};
      break;
    case Phase::kPackedDecode:
      s.B = 2;
      s.seqlens = {17, 4};
      break;
  }
  s.T = *std::max_element(s.seqlens.begin(), s.seqlens.end()) + 1;
  s.first_prompt = s.S == s.T;
  s.L = c.phase == Phase::kDecodeCached ? 0 : s.S;
  const int64_t B = s.B, S = s.S, N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv;
  std::vector<int64_t> lengths;
  for (int32_t x : s.seqlens) lengths.push_back(x + 1);
  s.paging = mixed_kv::MakePaging(c.layout, Nkv, c.block_size, lengths, s.T, rng);
  s.pool[0] = Pool{"key_cache", c.types.k, H, {}, {}};
  s.pool[1] = Pool{"value_cache", c.types.v, Hv, {}, {}};
  for (Pool& pool : s.pool) {
    mixed_kv::PoisonPool(pool, s.paging, rng);
    if (poison) continue;
    for (int64_t r = 0; r < s.paging.Rows(); ++r) {
      const std::vector<float> x = block_quant::RoundedNormal(t, pool.width, rng);
      mixed_kv::EncodeRow(pool.type, x.data(), pool.width,
                          pool.before.data() + r * pool.RowBytesOf());
    }
  }
  for (int64_t b = 0; b < B; ++b) {  // past rows
    const int64_t past = s.L == 0 ? s.Tb(b) : s.Offset(b);
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < past; ++j) {
        const std::vector<float> k = block_quant::RoundedNormal(t, H, rng);
        const std::vector<float> v = mixed_kv::ValueRow(t, c.types.v, Hv, kTies, rng);
        mixed_kv::EncodeRow(c.types.k, k.data(), H,
                            s.pool[0].RowIn(s.pool[0].before, s.paging, b, h, j));
        mixed_kv::EncodeRow(c.types.v, v.data(), Hv,
                            s.pool[1].RowIn(s.pool[1].before, s.paging, b, h, j));
      }
    }
  }
  for (Pool& pool : s.pool) pool.after = pool.before;
  s.q = block_quant::RoundedNormal(t, B * S * N * H, rng);
  // Scores of a tiny head size (a dot product of 1 to 5 terms) spread less: a larger gain keeps
  // attention far from uniform (the check below) whatever the seed.
  const float q_gain = H < 8 ? 10.0f : 4.0f;
  for (float& x : s.q) x = RoundToFormat(t, q_gain * x);
  s.sink = block_quant::RoundedNormal(t, N, rng);
  for (float& x : s.sink) x = RoundToFormat(t, 2.0f * x + 1.0f);
  std::vector<float> k, v;
  for (int64_t r = 0; r < B * s.L * Nkv; ++r) {
    const std::vector<float> kr = block_quant::RoundedNormal(t, H, rng);
    const std::vector<float> vr = mixed_kv::ValueRow(t, c.types.v, Hv, kTies, rng);
    k.insert(k.end(), kr.begin(), kr.end());
    v.insert(v.end(), vr.begin(), vr.end());
  }
  // New rows go to their tokens' rows (a first prompt's right padding is not stored).
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < s.L && s.Offset(b) + i < s.Tb(b); ++i) {
      for (int64_t h = 0; h < Nkv; ++h) {
        const int64_t j = s.Offset(b) + i, r = (b * s.L + i) * Nkv + h;
        mixed_kv::EncodeRow(c.types.k, k.data() + r * H, H,
                            s.pool[0].RowIn(s.pool[0].after, s.paging, b, h, j));
        mixed_kv::EncodeRow(c.types.v, v.data() + r * Hv, Hv,
                            s.pool[1].RowIn(s.pool[1].after, s.paging, b, h, j));
      }
    }
  }

  const attnrt_dtype dq = block_quant::QueryDtype(t);
  s.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
  if (c.phase == Phase::kPackedDecode) {  // (B, S, (N + 2 Nkv) H): query, key, value heads
    std::vector<float> packed;
    for (int64_t r = 0; r < B * S; ++r) {
      packed.insert(packed.end(), s.q.begin() + r * N * H, s.q.begin() + (r + 1) * N * H);
      packed.insert(packed.end(), k.begin() + r * Nkv * H, k.begin() + (r + 1) * Nkv * H);
      packed.insert(packed.end(), v.begin() + r * Nkv * Hv, v.begin() + (r + 1) * Nkv * Hv);
    }
    s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, (N + 2 * Nkv) * H});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, packed);
  } else {
    s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
    s.in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, s.L, Nkv * H});
    s.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, s.L, Nkv * Hv});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, s.q);
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_KEY], t, k);
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_VALUE], t, v);
  }
  if (c.features.sink) {
    s.in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK], t, s.sink);
  }
  for (int which = 0; which < 2; ++which) {
    s.pool_tensor[which] = GuardedPool(s.pool[which], s.paging, rng);
  }
  s.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(s.seqlens, {B});
  s.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.T)}, {1});
  s.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.paging.table, {B, s.paging.slots});
  s.output = GuardedOutput(t, {B, S, N * Hv});
  s.attributes = Attributes(c.types, N, Nkv, c.block_size, c.layout, c.features);
}

// The float64 reference from the pools' expected bytes. value_stride: the value rows' width in
// elements as the reference reads them (Hv; a wider one for the negative control, which reads row r
// at r * value_stride elements into the pool). *mean_tv: the mean distance from uniform weights
// over rows of >= 4 keys.
Expected Reference(const Padded& s, int64_t value_stride, double* mean_tv) {
  const Case& c = s.c;
  const int64_t S = s.S, N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv, W = c.features.window;
  const Pool& vp = s.pool[1];
  Expected e;
  e.out.assign(static_cast<size_t>(s.B * S * N * Hv), 0.0);
  e.bound.assign(e.out.size(), 0.0);
  double tv = 0.0;
  int64_t rows = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t tb = s.Tb(b);
    for (int64_t h = 0; h < Nkv; ++h) {
      std::vector<float> kk(static_cast<size_t>(tb * H)), vv(static_cast<size_t>(tb * Hv), kNaN);
      for (int64_t j = 0; j < tb; ++j) {
        mixed_kv::DecodeRow(c.types.k, s.pool[0].RowIn(s.pool[0].after, s.paging, b, h, j), H,
                            kk.data() + j * H);
        const int64_t at = s.paging.Row(b, h, j) * mixed_kv::RowBytes(vp.type, value_stride);
        if (at + vp.RowBytesOf() <= static_cast<int64_t>(vp.after.size())) {
          mixed_kv::DecodeRow(c.types.v, vp.after.data() + at, Hv, vv.data() + j * Hv);
        }
      }
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        mixed_kv::Scoring scoring;
        scoring.softcap = c.features.softcap;
        scoring.has_sink = c.features.sink;
        scoring.sink = s.sink[static_cast<size_t>(n)];
        for (int64_t i = 0; i < S; ++i) {
          const int64_t hi = std::min(s.Offset(b) + i + 1, tb);  // a padded row: all T_b keys
          const int64_t lo = W >= 0 ? std::max<int64_t>(0, hi - W) : 0;
          const mixed_kv::RowRef r = mixed_kv::AttendRow(
              s.q.data() + ((b * S + i) * N + n) * H, H, Hv, lo, hi,
              1.0 / std::sqrt(static_cast<double>(H)), [&](int64_t j) { return kk.data() + j * H; },
              [&](int64_t j) { return vv.data() + j * Hv; }, scoring);
          const size_t o = static_cast<size_t>(((b * S + i) * N + n) * Hv);
          std::copy(r.out.begin(), r.out.end(), e.out.begin() + o);
          std::copy(r.bound.begin(), r.bound.end(), e.bound.begin() + o);
          if (r.keys >= 4) {
            tv += r.tv;
            ++rows;
          }
        }
      }
    }
  }
  *mean_tv = rows > 0 ? tv / static_cast<double>(rows) : 1.0;
  return e;
}

// Every output element of a guarded output against want (the mixed test's comparison).
mixed_kv::Comparison CompareOutput(const Padded& s, const Expected& want) {
  mixed_kv::Comparison c;
  const FloatFormat t = s.c.types.t;
  for (size_t i = 0; i < want.out.size(); ++i) {
    const double g = LoadOutput(s.output, t, static_cast<int64_t>(i)), w = want.out[i];
    ++c.checked;
    bool ok = std::isnan(w) ? std::isnan(g) : false;
    if (!std::isnan(w)) {
      const double allowed = mixed_kv::Allowed(t, w, want.bound[i]), error = std::fabs(g - w);
      ok = error <= allowed;
      if (ok) c.worst_ratio = std::max(c.worst_ratio, error / allowed);
    }
    if (!ok && c.bad++ == 0) c.first = static_cast<int64_t>(i);
  }
  return c;
}

// Makes s's pools strided views of one buffer (both pools of one type; the guard after the
// buffer is a poisoned row of H + Hv elements repeated).
void ShareOneBuffer(Padded& s) {
  const CacheType type = s.pool[0].type;
  ASSERT_EQ(type, s.pool[1].type);
  const int64_t H = s.c.H, Hv = s.c.Hv, W = H + Hv, e = mixed_kv::RowBytes(type, 1);
  auto sh = std::make_unique<Padded::Shared>();
  std::vector<uint8_t> poison(static_cast<size_t>(W * e));
  std::mt19937_64 rng(1);
  mixed_kv::PoisonRow(type, W, rng, poison.data());
  sh->buffer = Guarded(mixed_kv::DtypeOf(type), {s.paging.Rows() * W}, W * e, poison);
  const std::vector<int64_t> dims = s.paging.Shape(W);
  sh->strides = {dims[1] * dims[2] * W, dims[2] * W, W, 1};
  for (int which = 0; which < 2; ++which) {
    sh->shape[which] = s.paging.Shape(which == 0 ? H : Hv);
    attnrt_tensor& v = sh->view[which];
    v = *sh->buffer.get();
    v.ndim = 4;
    v.shape = sh->shape[which].data();
    v.strides = sh->strides.data();
    v.byte_offset += static_cast<uint64_t>(which == 0 ? 0 : H * e);
  }
  s.shared = std::move(sh);
}

// Copies the pools' compact images into the shared buffer (to_buffer) or back.
void CopyShared(Padded& s, bool to_buffer, std::vector<uint8_t>* key, std::vector<uint8_t>* value) {
  const int64_t e = mixed_kv::RowBytes(s.pool[0].type, 1), W = s.c.H + s.c.Hv;
  std::vector<uint8_t>* image[2] = {key, value};
  for (int64_t r = 0; r < s.paging.Rows(); ++r) {
    for (int which = 0; which < 2; ++which) {
      const int64_t bytes = s.pool[which].RowBytesOf();
      uint8_t* row = s.shared->buffer.body() + (r * W + (which == 0 ? 0 : s.c.H)) * e;
      uint8_t* compact = image[which]->data() + r * bytes;
      if (to_buffer) {
        std::copy(compact, compact + bytes, row);
      } else {
        std::copy(row, row + bytes, compact);
      }
    }
  }
}

mixed_kv::Call MakeCall(Padded& s, const Expected& want) {
  mixed_kv::Call call;
  call.op_kind = ATTNRT_OP_PAGED_GQA;
  call.attributes = &s.attributes;
  for (int i = 0; i < ATTNRT_PAGED_GQA_NUM_INPUTS; ++i) {
    Tensor& x = s.in[static_cast<size_t>(i)];
    call.inputs.push_back(x.empty() ? nullptr : x.get());
  }
  call.inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = s.pool_tensor[0].get();
  call.inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = s.pool_tensor[1].get();
  call.outputs.push_back(s.output.get());
  if (s.shared) {
    call.inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = &s.shared->view[0];
    call.inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = &s.shared->view[1];
  }
  call.reset = [&s] {
    if (s.shared) {
      CopyShared(s, true, &s.pool[0].before, &s.pool[1].before);
      s.shared->buffer.RestoreGuards();
    }
    for (int which = 0; which < 2; ++which) {
      std::copy(s.pool[which].before.begin(), s.pool[which].before.end(),
                s.pool_tensor[which].body());
      s.pool_tensor[which].RestoreGuards();
    }
    PoisonOutput(s.output, s.c.types.t);
    s.output.RestoreGuards();
  };
  call.check = [&s, &want](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    const int64_t S = s.S, N = s.c.N, Hv = s.c.Hv;
    const mixed_kv::Comparison c = CompareOutput(s, want);
    if (c.bad > 0) {
      const int64_t i = c.first;
      const double w = want.out[static_cast<size_t>(i)];
      ADD_FAILURE() << "output: " << c.bad << " of " << c.checked
                    << " elements outside the bound; first at b " << i / (S * N * Hv) << ", token "
                    << i / (N * Hv) % S << ", head " << i / Hv % N << ", element " << i % Hv
                    << " of Hv " << Hv << ": got " << LoadOutput(s.output, s.c.types.t, i)
                    << ", want " << w << ", allowed "
                    << mixed_kv::Allowed(s.c.types.t, w, want.bound[static_cast<size_t>(i)]);
    }
    std::printf("[observed] %s on %s: output max error / allowed %.3g\n", s.c.name.c_str(),
                kernel.c_str(), c.worst_ratio);
    s.output.ExpectGuards("output");
    if (s.shared) {
      std::vector<uint8_t> got[2] = {s.pool[0].before, s.pool[1].before};
      CopyShared(s, false, &got[0], &got[1]);
      for (int which = 0; which < 2; ++which) {
        mixed_kv::ExpectPoolBytes(s.pool[which], s.paging, got[which].data());
      }
      s.shared->buffer.ExpectGuards("the shared cache");
      return;
    }
    for (int which = 0; which < 2; ++which) {
      mixed_kv::ExpectPoolBytes(s.pool[which], s.paging, s.pool_tensor[which].body());
      s.pool_tensor[which].ExpectGuards(s.pool[which].name);
    }
  };
  return call;
}

bool OneType(const TypeSet& t) { return !t.own || t.k == t.v; }

class PagedGqaHeadSize : public testing::TestWithParam<Case> {};

TEST_P(PagedGqaHeadSize, MatchesReferenceOnEveryKernel) {
  const Case& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  Padded s;
  Build(s, c, rng);
  ASSERT_FALSE(HasFatalFailure());
  double tv = 0.0;
  const Expected want = Reference(s, c.Hv, &tv);
  std::printf("[observed] %s: mean distance from uniform attention %.3f\n", c.name.c_str(), tv);
  EXPECT_GE(tv, 0.3) << "attention too uniform for the test to see wrong rows";
  mixed_kv::Call call = MakeCall(s, want);
  const mixed_kv::Outcome outcome = mixed_kv::RunOnEveryKernel(call);
  ExpectVerdicts(outcome, ATTNRT_OP_PAGED_GQA,
                 OneType(c.types) && c.H == c.Hv && c.features.softcap == 0.0f && !c.features.sink,
                 OddSize(c.H, c.Hv));
}

std::string CaseName(const testing::TestParamInfo<Case>& p) {
  std::string name = p.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaHeadSize, testing::ValuesIn(Cases()), CaseName);

// Both pools as strided views of one cache, each row a key row of H elements followed by a value
// row of Hv (vLLM's CPU cache, BNSH, and FlashAttention-style interleaving, BSNH; the header's
// strided pools, ABI 1.2): rows start at odd element offsets, so a kernel that rounds the head size
// or the row stride reads and writes the wrong elements.
TEST(PagedGqaHeadSizeStrided, KeyAndValueHalvesOfOneCache) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const std::vector<TypeSet> sets = FloatTypeSets();
  struct Pick {
    size_t types;
    HeadSizes hs;
    int32_t layout;
    size_t index;  // MakeCase's rotation
  };
  for (const Pick& p : {Pick{1, {65, 67}, ATTNRT_PAGED_KV_LAYOUT_BNSH, 2},
                        Pick{0, {3, 5}, ATTNRT_PAGED_KV_LAYOUT_BSNH, 1},
                        Pick{2, {67, 67}, ATTNRT_PAGED_KV_LAYOUT_BNSH, 0},
                        Pick{0, {12, 12}, ATTNRT_PAGED_KV_LAYOUT_BSNH, 3},
                        Pick{1, {7, 64}, ATTNRT_PAGED_KV_LAYOUT_BSNH, 5}}) {
    const Case c = MakeCase(sets[p.types], p.hs, p.layout, p.index);
    SCOPED_TRACE("case " + c.name + ", strided halves of one cache");
    std::printf("[case] strided %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
                static_cast<unsigned long long>(BaseSeed()));
    Padded s;
    Build(s, c, rng);
    ASSERT_FALSE(HasFatalFailure());
    ShareOneBuffer(s);
    ASSERT_FALSE(HasFatalFailure());
    double tv = 0.0;
    const Expected want = Reference(s, c.Hv, &tv);
    EXPECT_GE(tv, 0.3) << "attention too uniform for the test to see wrong rows";
    mixed_kv::Call call = MakeCall(s, want);
    const mixed_kv::Outcome outcome = mixed_kv::RunOnEveryKernel(call);
    ExpectVerdicts(outcome, ATTNRT_OP_PAGED_GQA,
                   c.H == c.Hv && c.features.softcap == 0.0f && !c.features.sink,
                   OddSize(c.H, c.Hv));
  }
}

// Negative control: a reference that reads the value rows with a stride rounded up to a multiple
// of 8 (as a kernel assuming 8-element rows would) does not match the runtime's output, while the
// right one does. The pools hold finite values in every row here, so the wrong reading gives
// finite wrong values, not the poison.
TEST(PagedGqaHeadSizeNegativeControl, ValueRowsReadWithARoundedStrideDoNotMatch) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  for (const TypeSet& types : {FloatTypeSets()[0], FloatTypeSets()[1]}) {
    Case c = MakeCase(types, {65, 67}, ATTNRT_PAGED_KV_LAYOUT_BSNH, 0);
    c.phase = Phase::kDecode;
    c.features = Features{};
    c.name = Name(c);
    std::printf("[case] negative control %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
                static_cast<unsigned long long>(BaseSeed()));
    Padded s;
    Build(s, c, rng, /*poison=*/false);
    ASSERT_FALSE(HasFatalFailure());
    double tv = 0.0;
    const Expected right = Reference(s, c.Hv, &tv);
    const Expected wrong = Reference(s, (c.Hv + 7) / 8 * 8, &tv);
    mixed_kv::Call call = MakeCall(s, right);
    const std::string kernel = mixed_kv::PlanAndRun(mixed_kv::RuntimeFor(""), call);
    ASSERT_FALSE(kernel.empty());
    const mixed_kv::Comparison with_right = CompareOutput(s, right);
    const mixed_kv::Comparison with_wrong = CompareOutput(s, wrong);
    std::printf(
        "[observed] negative control %s on %s: %lld of %lld elements outside the bound of the "
        "right reference, %lld outside that of value rows read with a stride of %lld\n",
        c.name.c_str(), kernel.c_str(), static_cast<long long>(with_right.bad),
        static_cast<long long>(with_right.checked), static_cast<long long>(with_wrong.bad),
        static_cast<long long>((c.Hv + 7) / 8 * 8));
    EXPECT_EQ(with_right.bad, 0);
    EXPECT_GT(with_wrong.bad, with_wrong.checked / 2)
        << "the reference reading value rows with a rounded stride matches the runtime's output: "
           "the comparison cannot tell the two apart";
  }
}

}  // namespace
}  // namespace head_size
}  // namespace attnrt_test
