// libFuzzer target for sparse MLA (ATTNRT_OP_SPARSE_MLA) and its metadata op
// (ATTNRT_OP_SPARSE_MLA_METADATA) through the public C ABI (attnrt.h, ops/sparse_mla.h).
//
// Each input decodes with FuzzedDataProvider into one call: a mostly consistent problem (scenario,
// quant mode, layouts, batches with their query / ori / cmp lengths, heads, masks and windows,
// top-k rows, block tables, sinks, softmax_lse), KV tokens from the public encoders or, sometimes,
// raw random bytes (any byte is a token the kernels must decode), a NaN or inf in q or in the
// sinks; then, decoded after all of these (sparse_mla_fuzz_abi16.h), global slot ids
// (topk_value_mode 3) and PA_BBND caches with a block stride, valid or not; then a few mutations (a
// dtype, an extent, a missing input, a metadata word, metadata made for other attributes). Every
// tensor owns a heap buffer of exactly its bytes, so AddressSanitizer reports any access beyond
// what the caller described.
//
// The metadata op runs first (as in CANN); its output feeds the main op, which runs once on a
// runtime pinned to each sparse MLA kernel. Invariants (a violation aborts; libFuzzer records it):
//   - every call returns a known status, a message iff it failed, never INTERNAL;
//   - a failing call writes no output byte;
//   - every kernel gives the same status, and the same answer (fuzz_agreement.h: NaN where the
//     first has NaN, the same infinities, the rest within float reassociation);
//   - with encoded tokens and finite q and sinks, every attn_out element is finite (no poison
//     left), and softmax_lse is finite or -inf (a row that sees no key, docs/sparse-mla.md);
//   - an invalid block stride or slot id, or an input topk_value_mode 3 forbids, is refused;
//   - a strided cache gives the same bytes as its compact copy.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"
#include "fuzz_agreement.h"
#include "fuzz_rng.h"
#include "sparse_mla_fuzz_abi16.h"
#include "sparse_mla_fuzz_case.h"

namespace {

using namespace sparse_mla_fuzz;

uint16_t Bits16(float x, bool fp16) {
  if (!fp16) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u)
      return static_cast<uint16_t>(u >> 16 | ((u & 0xFFFF) ? 0x40 : 0));
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  // float16 via the value's exponent (inputs here are small or special).
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const float ax = std::fabs(x);
  if (ax >= 65520.0f) return sign | 0x7C00;
  if (ax < 6.103515625e-05f) return sign | static_cast<uint16_t>(std::nearbyint(ax * 16777216.0f));
  int e = 0;
  std::frexp(ax, &e);
  int m = static_cast<int>(std::nearbyint(std::ldexp(ax, 11 - e)));
  int exponent = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++exponent;
  }
  return static_cast<uint16_t>(sign | exponent << 10 | (m - 1024));
}

// KV tokens of one side: `tokens` rows (BSND/TND) or num_blocks * block_size slots (PA_BBND).
void FillTokens(Tensor& t, bool cmp, int quant_mode, bool fp16, int64_t block_size, bool encoded,
                Rng& rng) {
  const int64_t token_bytes = t.shape.back() * t.dtype.bits / 8;
  const int64_t tokens = static_cast<int64_t>(t.bytes) / std::max<int64_t>(token_bytes, 1);
  if (!encoded) {
    for (size_t i = 0; i < t.bytes; ++i) t.data[i] = static_cast<unsigned char>(rng.Next());
    return;
  }
  std::vector<float> row(kD);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (float& v : row) v = rng.Unit() * 2.0f;
    unsigned char* dst = t.data.get() + tok * token_bytes;
    if (quant_mode == 3 && !cmp) {
      for (int d = 0; d < kD; ++d) {
        const uint16_t b = Bits16(row[static_cast<size_t>(d)], fp16);
        std::memcpy(dst + 2 * d, &b, 2);
      }
    } else if (quant_mode == 3) {
      attnrt_sparse_mla_encode_tq4(row.data(), kF32, 1, dst);
    } else if (quant_mode == 1) {
      attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1, dst);
    } else {
      attnrt_sparse_mla_encode_mode2(row.data(), kF32,
                                     t.data.get() + (tok / block_size) * block_size * token_bytes,
                                     block_size, tok % block_size);
    }
  }
}

// One KV side (ori or cmp): the tensor in its layout, its lengths and its block table.
void BuildSide(Case& k, Choices& c, Rng& rng, bool cmp, const std::vector<int32_t>& len,
               int64_t block_size) {
  const attnrt_sparse_mla_attributes& a = k.a;
  const int64_t B = static_cast<int64_t>(len.size());
  const int kv = cmp ? ATTNRT_SPARSE_MLA_INPUT_CMP_KV : ATTNRT_SPARSE_MLA_INPUT_ORI_KV;
  const bool fp16 = k.in[ATTNRT_SPARSE_MLA_INPUT_Q].dtype.code == kF16.code &&
                    k.in[ATTNRT_SPARSE_MLA_INPUT_Q].dtype.bits == 16;
  // Bytes per token: quant_mode 3 ori tokens are 512 values of q's dtype.
  const int64_t kv_d = a.quant_mode == 1   ? ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES
                       : a.quant_mode == 2 ? ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES
                       : cmp               ? ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES
                                           : 2 * kD;
  const attnrt_dtype dtype =
      (a.quant_mode == 3 && !cmp) ? k.in[ATTNRT_SPARSE_MLA_INPUT_Q].dtype : kU8;
  const int64_t max_len = len.empty() ? 0 : *std::max_element(len.begin(), len.end());
  const int64_t extra = c.Pick(3);
  if (a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    int64_t blocks = 0;
    std::vector<int64_t> need(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) blocks += need[b] = (len[b] + block_size - 1) / block_size;
    const int64_t cols = (max_len + block_size - 1) / block_size + 1;
    const int64_t num_blocks = blocks + 1 + extra;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Next() % i]);
    Tensor& table = k.in[cmp ? ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE
                             : ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE];
    table.Make(kI32, {B, cols});
    std::fill(table.i32(), table.i32() + B * cols, -1);
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < need[b]; ++j) table.i32()[b * cols + j] = perm[next++];
    }
    k.in[kv].Make(dtype, {num_blocks, block_size, 1, kv_d * 8 / dtype.bits});
  } else if (a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
    Tensor& cu = k.in[cmp ? ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV
                          : ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV];
    cu.Make(kI32, {B + 1});
    cu.i32()[0] = 0;
    for (int64_t b = 0; b < B; ++b) cu.i32()[b + 1] = cu.i32()[b] + len[b];
    k.in[kv].Make(dtype, {cu.i32()[B] + extra, 1, kv_d * 8 / dtype.bits});
  } else {
    k.in[kv].Make(dtype, {B, max_len + extra, 1, kv_d * 8 / dtype.bits});
  }
  if (a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_TND || c.OneIn(3)) {
    Tensor& used =
        k.in[cmp ? ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV : ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV];
    used.Make(kI32, {B});
    std::copy(len.begin(), len.end(), used.i32());
  }
  FillTokens(k.in[kv], cmp, a.quant_mode, fp16, block_size, k.encoded, rng);
}

void Decode(Choices& c, Case& k) {
  attnrt_sparse_mla_attributes& a = k.a;
  attnrt_sparse_mla_attributes_init(&a);
  const int32_t scenario = static_cast<int32_t>(c.Pick(3));
  a.quant_mode = 1 + static_cast<int32_t>(c.Pick(3));
  const bool fp16 = a.quant_mode == 3 && c.OneIn(2);
  a.layout_q = c.OneIn(2) ? ATTNRT_SPARSE_MLA_LAYOUT_TND : ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  constexpr int32_t kKvLayouts[] = {-1, ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND};
  a.layout_kv = c.From(kKvLayouts);
  if (a.layout_kv < 0) a.layout_kv = a.layout_q;  // BSND/BSND or TND/TND
  if (a.quant_mode == 2) a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  constexpr int32_t kRatios[] = {4, 1, 2, 8, 3};
  a.cmp_ratio = scenario == ATTNRT_SPARSE_MLA_SWA ? 1 : c.From(kRatios);
  constexpr int32_t kOriMasks[] = {4, 3, 0};
  a.ori_mask_mode = c.From(kOriMasks);
  a.cmp_mask_mode = c.OneIn(2) ? 0 : 3;
  if (a.ori_mask_mode == 4) {
    a.ori_win_left = static_cast<int32_t>(c.Pick(20)) - 1;
    a.ori_win_right = static_cast<int32_t>(c.Pick(4)) - 1;
  }
  a.return_softmax_lse = c.OneIn(4) ? 0 : 1;
  if (a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND && scenario == ATTNRT_SPARSE_MLA_CSA &&
      c.OneIn(3)) {
    a.topk_value_mode = 2;
  }
  constexpr float kScales[] = {0.0441941738f, 1.0f, 0.01f};
  a.softmax_scale = c.From(kScales);
  Rng rng(c.Bits64());
  k.encoded = !c.OneIn(6);

  const int64_t B = 1 + c.Pick(3);
  constexpr int64_t kHeads[] = {4, 1, 16, 2, 8, 128};
  const int64_t N = c.From(kHeads);
  std::vector<int32_t> s1(static_cast<size_t>(B)), s2(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    s1[b] = static_cast<int32_t>(c.Pick(5));
    s2[b] = static_cast<int32_t>(c.Pick(48));
  }
  constexpr int64_t kBlockSizes[] = {16, 1, 4, 64};
  const int64_t block_size = c.From(kBlockSizes);
  const attnrt_dtype q_dtype = fp16 ? kF16 : kBF16;
  Tensor& q = k.in[ATTNRT_SPARSE_MLA_INPUT_Q];
  const bool seqused_q = c.OneIn(3);
  int64_t q_rows = 0;
  if (a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
    Tensor& cu = k.in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q];
    cu.Make(kI32, {B + 1});
    cu.i32()[0] = 0;
    for (int64_t b = 0; b < B; ++b) cu.i32()[b + 1] = cu.i32()[b] + s1[b] + (seqused_q ? 1 : 0);
    q_rows = cu.i32()[B] + c.Pick(2);
    q.Make(q_dtype, {q_rows, N, kD});
  } else {
    const int32_t cap = *std::max_element(s1.begin(), s1.end());
    if (!seqused_q) std::fill(s1.begin(), s1.end(), cap);
    q_rows = B * (cap + (seqused_q ? 1 : 0));
    q.Make(q_dtype, {B, q_rows / B, N, kD});
  }
  if (seqused_q) {
    k.in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q].Make(kI32, {B});
    std::copy(s1.begin(), s1.end(), k.in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q].i32());
  }
  auto* qb = reinterpret_cast<uint16_t*>(q.data.get());
  for (size_t i = 0; i < q.bytes / 2; ++i) qb[i] = Bits16(rng.Unit() * 2.0f, fp16);
  constexpr float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity()};
  if (q.bytes > 0 && c.OneIn(6)) {
    qb[rng.Next() % (q.bytes / 2)] = Bits16(c.From(kSpecials), fp16);
    k.finite = false;
  }

  BuildSide(k, c, rng, false, s2, block_size);
  if (scenario != ATTNRT_SPARSE_MLA_SWA) {
    std::vector<int32_t> len(static_cast<size_t>(B)), residual(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      len[b] = s2[b] / a.cmp_ratio;
      residual[b] = s2[b] % a.cmp_ratio;
    }
    BuildSide(k, c, rng, true, len, block_size);
    if (c.OneIn(2)) {
      k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].Make(kI32, {B});
      std::copy(residual.begin(), residual.end(),
                k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].i32());
    }
  }
  if (scenario == ATTNRT_SPARSE_MLA_CSA) {
    const int64_t K = 1 + c.Pick(16);
    Tensor& idx = k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
    if (a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
      idx.Make(kI32, {q_rows, 1, K});
    } else {
      idx.Make(kI32, {B, q_rows / B, 1, K});
    }
    const int64_t slots = a.topk_value_mode == 2
                              ? k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV].shape[0] * block_size
                              : 48 / a.cmp_ratio + 2;
    for (int64_t i = 0; i < q_rows * K; ++i) {
      const uint64_t r = rng.Next();
      idx.i32()[i] =
          r % 8 == 0 ? -1 : static_cast<int32_t>((r >> 8) % static_cast<uint64_t>(slots));
    }
  }
  if (c.OneIn(2)) {
    Tensor& sinks = k.in[ATTNRT_SPARSE_MLA_INPUT_SINKS];
    sinks.Make(kF32, {N});
    auto* s = reinterpret_cast<float*>(sinks.data.get());
    for (int64_t h = 0; h < N; ++h) s[h] = rng.Unit() * 3.0f;
    if (c.OneIn(4)) {
      s[rng.Next() % static_cast<uint64_t>(N)] = c.From(kSpecials);
      k.finite = false;
    }
  }
  k.in[ATTNRT_SPARSE_MLA_INPUT_METADATA].Make(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
  k.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].Make(q_dtype, q.shape);
  if (a.return_softmax_lse == 1) {
    k.out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].Make(
        kF32, a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND
                  ? std::vector<int64_t>{1, q_rows, N}
                  : std::vector<int64_t>{B, 1, q_rows / B, N});
  }

  // ---- what a caller gets wrong (one in four): decoded here, made after the ABI 1.6 choices ----
  int mutate_input = -1, mutate_kind = 0, mutate_dim = -1;
  if (c.OneIn(4)) {
    mutate_input = static_cast<int>(c.Pick(kInputs));
    mutate_kind = static_cast<int>(c.Pick(4));
    const Tensor& t = k.in[mutate_input];
    if (mutate_kind == 2 && t.present() && !t.shape.empty()) {
      mutate_dim = static_cast<int>(c.Pick(static_cast<uint32_t>(t.shape.size())));
    }
  }
  k.metadata_change = c.OneIn(8) ? 1 + static_cast<int>(c.Pick(2)) : 0;
  k.metadata_word = c.Pick(ATTNRT_SPARSE_MLA_METADATA_SIZE);

  DecodeAbi16(c, k, rng, B, q_rows);

  if (mutate_input >= 0) {
    Tensor& t = k.in[mutate_input];
    k.mutated = true;
    switch (mutate_kind) {
      case 0:
        t.data.reset();  // absent
        break;
      case 1:
        // Fewer bytes per element, so the buffer still covers what the tensor describes.
        if (t.present()) t.dtype = t.dtype.bits == 32 ? kBF16 : kU8;
        break;
      case 2:
        // A smaller extent, so the buffer still covers what the tensor describes.
        if (t.present() && mutate_dim >= 0 && mutate_dim < static_cast<int>(t.shape.size())) {
          t.shape[static_cast<size_t>(mutate_dim)] /= 2;
        }
        break;
      default:
        if (t.present()) {
          t.shape.push_back(1);
          if (!t.strides.empty()) t.strides.push_back(1);
        }
        break;
    }
  }
}

// ---- invariants
// ----------------------------------------------------------------------------------

[[noreturn]] void Fail(const char* what, const char* call, attnrt_status status) {
  std::fprintf(stderr,
               "\n==== sparse_mla_fuzzer invariant violated: %s\n  call: %s\n  status: %s (%d)\n"
               "  last error: \"%s\"\n",
               what, call, attnrt_status_name(status), static_cast<int>(status),
               attnrt_last_error_message());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, call, status)                    \
  do {                                                    \
    if (!(cond)) Fail("check '" #cond "'", call, status); \
  } while (0)

attnrt_status Checked(const char* call, attnrt_status status) {
  const char* message = attnrt_last_error_message();
  FUZZ_CHECK(message != nullptr && attnrt_status_name(status) != nullptr, call, status);
  FUZZ_CHECK(status >= ATTNRT_OK && status < ATTNRT_ERROR_INTERNAL, call, status);
  FUZZ_CHECK((status == ATTNRT_OK) == (message[0] == '\0'), call, status);
  return status;
}

fuzz_agreement::PinnedRuntimes g_pinned;
attnrt_runtime* g_runtime = nullptr;
// SPARSE_MLA_FUZZER_STATS=1: calls, metadata ops that ran, main ops that ran, of which with global
// slot ids, strided caches compared with their compact copies (printed at exit).
uint64_t g_calls = 0, g_metadata_ran = 0, g_main_ran = 0, g_slots_ran = 0, g_strided_compared = 0;

void PrintStats() {
  std::fprintf(
      stderr,
      "sparse_mla_fuzzer stats: %llu calls, %llu metadata ran, %llu ran (%llu with global "
      "slot ids), %llu strided caches compared\n",
      static_cast<unsigned long long>(g_calls), static_cast<unsigned long long>(g_metadata_ran),
      static_cast<unsigned long long>(g_main_ran), static_cast<unsigned long long>(g_slots_ran),
      static_cast<unsigned long long>(g_strided_compared));
}

void RunCase(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  Choices choices(fdp);
  Case k;
  Decode(choices, k);
  const attnrt_tensor* in[kInputs] = {};
  const attnrt_tensor* out[kOutputs] = {};
  for (int i = 0; i < kInputs; ++i) in[i] = k.in[i].Get();

  // ---- metadata op ----
  const attnrt_tensor* metadata_out[1] = {in[ATTNRT_SPARSE_MLA_INPUT_METADATA]};
  in[ATTNRT_SPARSE_MLA_INPUT_METADATA] = nullptr;
  attnrt_sparse_mla_attributes made_for = k.a;
  if (k.metadata_change == 2) made_for.softmax_scale *= 2.0f;
  const attnrt_status st_meta =
      Checked("metadata op", fuzz_agreement::PlanAndRun(g_runtime, ATTNRT_OP_SPARSE_MLA_METADATA,
                                                        &made_for, in, kInputs, metadata_out, 1));
  in[ATTNRT_SPARSE_MLA_INPUT_METADATA] = metadata_out[0];
  ++g_calls;
  // A value of ABI 1.6 the runtime must refuse (an invalid block stride, a slot out of range, an
  // input topk_value_mode 3 forbids), with no other mistake made: no call may succeed.
  const bool must_refuse = k.expect_refused && !k.mutated && k.metadata_change == 0;
  if (st_meta != ATTNRT_OK) return;
  ++g_metadata_ran;
  if (k.metadata_change == 1) k.in[ATTNRT_SPARSE_MLA_INPUT_METADATA].i32()[k.metadata_word] ^= 1;

  // ---- main op on every kernel ----
  std::vector<fuzz_agreement::Output> compared;
  Tensor& attn = k.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  Tensor& lse = k.out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE];
  compared.push_back({"attn_out", attn.data.get(), static_cast<int64_t>(attn.bytes / 2), 16,
                      attn.dtype.code == kBF16.code, nullptr});
  if (lse.present())
    compared.push_back(
        {"softmax_lse", lse.data.get(), static_cast<int64_t>(lse.bytes / 4), 32, false, nullptr});
  std::vector<std::vector<unsigned char>> first;
  attnrt_status first_status = ATTNRT_OK;
  bool have_first = false;   // the first kernel that did not decline sets status and answer
  size_t first_runtime = 0;  // the runtime of the first kernel that ran
  for (size_t r = 0; r < g_pinned.runtimes.size(); ++r) {
    const char* kernel = g_pinned.kernels[r].c_str();
    // Poison: NaN in every output element.
    std::fill_n(reinterpret_cast<uint16_t*>(attn.data.get()), attn.bytes / 2, uint16_t{0x7FFF});
    if (lse.present()) std::fill_n(reinterpret_cast<float*>(lse.data.get()), lse.bytes / 4, NAN);
    const std::vector<std::vector<unsigned char>> before = fuzz_agreement::Save(compared);
    for (int i = 0; i < kOutputs; ++i) out[i] = k.out[i].Get();
    const attnrt_status st =
        Checked(kernel, fuzz_agreement::PlanAndRun(g_pinned.runtimes[r], ATTNRT_OP_SPARSE_MLA, &k.a,
                                                   in, kInputs, out, kOutputs));
    // The bf16 kernels (avx512_bf16, amx_bf16) decline float16 queries: they neither set nor join
    // the agreement then.
    const attnrt_dtype q_dtype = k.in[ATTNRT_SPARSE_MLA_INPUT_Q].dtype;
    // Neither do kernels this CPU cannot run (the AMX ones without AMX), which decline every
    // problem naming the features the CPU has.
    const bool cpu_lacks_kernel =
        st == ATTNRT_ERROR_UNSUPPORTED &&
        std::string(attnrt_last_error_message()).find("this CPU has:") != std::string::npos;
    if (cpu_lacks_kernel ||
        (st == ATTNRT_ERROR_UNSUPPORTED && q_dtype.code == kF16.code && q_dtype.bits == 16 &&
         std::string(kernel).find("bf16") != std::string::npos)) {
      FUZZ_CHECK(fuzz_agreement::Save(compared) == before, "declining kernel wrote outputs", st);
      continue;
    }
    if (!have_first) {
      first_status = st;
      have_first = true;
    }
    FUZZ_CHECK(st == first_status, kernel, st);
    if (must_refuse && st == ATTNRT_OK) {
      std::fprintf(stderr, "\n==== must be refused: %s\n", k.refused_because.c_str());
      Fail("an input that must be refused ran", kernel, st);
    }
    if (st != ATTNRT_OK) {
      FUZZ_CHECK(fuzz_agreement::Save(compared) == before, "failed run wrote outputs", st);
      continue;
    }
    if (first.empty()) {
      ++g_main_ran;
      if (k.a.topk_value_mode == 3) ++g_slots_ran;
      first_runtime = r;
      first = fuzz_agreement::Save(compared);
      if (k.encoded && k.finite) {
        for (int64_t i = 0; i < compared[0].count; ++i) {
          FUZZ_CHECK(std::isfinite(fuzz_agreement::ToFloat(compared[0], i)),
                     "attn_out not finite (unwritten?)", st);
        }
        for (size_t i = 1; i < compared.size(); ++i) {
          for (int64_t j = 0; j < compared[i].count; ++j) {
            const float v = fuzz_agreement::ToFloat(compared[i], j);
            FUZZ_CHECK(std::isfinite(v) || v == -INFINITY, "softmax_lse neither finite nor -inf",
                       st);
          }
        }
      }
      continue;
    }
    // Raw token bytes may hold values near float's range, where summation order decides overflow.
    if (!k.encoded) continue;
    const std::string differs = fuzz_agreement::Compare(compared, first, 1e-2);
    if (!differs.empty()) {
      std::fprintf(stderr, "\n==== %s disagrees with the first kernel that ran: %s\n", kernel,
                   differs.c_str());
      Fail("cross-kernel agreement", kernel, st);
    }
  }

  // A PA_BBND cache read through a block stride gives the bytes its compact copy gives (the gaps
  // between the blocks hold NaN bytes).
  if (k.strided && !k.mutated && !first.empty()) {
    for (int side = 0; side < 2; ++side) {
      const int kv = side == 0 ? ATTNRT_SPARSE_MLA_INPUT_ORI_KV : ATTNRT_SPARSE_MLA_INPUT_CMP_KV;
      if (k.compact_kv[side].present()) in[kv] = k.compact_kv[side].Get();
    }
    std::fill_n(reinterpret_cast<uint16_t*>(attn.data.get()), attn.bytes / 2, uint16_t{0x7FFF});
    if (lse.present()) std::fill_n(reinterpret_cast<float*>(lse.data.get()), lse.bytes / 4, NAN);
    const char* kernel = g_pinned.kernels[first_runtime].c_str();
    const attnrt_status st = Checked(
        kernel, fuzz_agreement::PlanAndRun(g_pinned.runtimes[first_runtime], ATTNRT_OP_SPARSE_MLA,
                                           &k.a, in, kInputs, out, kOutputs));
    FUZZ_CHECK(st == ATTNRT_OK, "the compact copy of a strided cache", st);
    FUZZ_CHECK(fuzz_agreement::Save(compared) == first, "strided and compact caches disagree", st);
    ++g_strided_compared;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = 2;
  if (attnrt_runtime_create(&options, &g_runtime) != ATTNRT_OK) {
    std::fprintf(stderr, "sparse_mla_fuzzer: attnrt_runtime_create failed: %s\n",
                 attnrt_last_error_message());
    std::exit(1);
  }
  g_pinned.Create(ATTNRT_OP_SPARSE_MLA, 2);
  if (std::getenv("SPARSE_MLA_FUZZER_STATS") != nullptr) std::atexit(PrintStats);
  if (g_pinned.runtimes.empty()) {
    std::fprintf(
        stderr,
        "sparse_mla_fuzzer: no sparse MLA kernel found; build the sparse_mla plugin beside "
        "libattnrt.so or set ATTNRT_PLUGIN_PATH\n");
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunCase(data, size);
  return 0;
}
