// Float64 reference of Huawei CANN's MixedQuantSparseFlashMla, written from the operator's public
// README and its golden (mixed_quant_sparse_flash_mla_golden.py in CANN's ops-transformer tests)
// alone, independently of attnrt's kernels and ABI: no attnrt header is included.
//
// What it covers: the SWA / CSA / HCA scenarios, quant_mode 1 / 2 / 3 (the KV token formats),
// layouts BSND / TND / PA_BBND with block tables, seqused_* / cu_seqlens_* / cmp_residual_kv
// (effective lengths), right-down alignment and invalid rows, ori mask modes 0 / 3 / 4 with
// windows, cmp mask modes 0 / 3, the golden's top-k index scan, topk_value_mode 1 and 2, sinks and
// softmax_lse, and the golden's rounding points. Beyond CANN: PA_BBND caches with a block stride
// and topk_value_mode 3 (global slot ids into both caches, attnrt's ABI 1.6 definition, from
// abi/attnrt/ops/sparse_mla.h alone).
//
// Choices where the sources are open are marked "CHOICE" here and in the .cpp (docs/sparse-mla.md
// records the same decisions for attnrt). In short:
//   - empty rows (invalid rows with thr <= 0, rows beyond S1(b), topk_value_mode 3 rows whose
//     lists hold no slot): output 0, softmax_lse -inf, or the sink when sinks are given.
//   - the cmp causal limit uses Lc = C*r + residual (the kernel's effective lengths) and is
//     clamped to [0, C] (the golden's cmp_limit); the golden's S2 gives the same result for
//     consistent inputs.
//   - the golden scan -- only the first min(K, ncmp) slots of a top-k row are examined; -1 stops
//     the scan; other negatives and entries >= ncmp are skipped (the scan goes on); duplicates are
//     attended once per occurrence, in row order.
//   - topk_value_mode 2 (PA_BBND): a physical slot block_id * bs + off is mapped back
//     to the logical index col * bs + off through the first column col of the batch's
//     cmp_block_table that holds block_id, then filtered like a logical index; a slot whose block
//     the batch's table does not hold is skipped. A raw -1 still ends the row.
//   - cmp_mask_mode 0 gives ncmp = min(S2 / r, C) (bf16 sibling golden); ori_mask_mode 0 / 3
//     and ori_win_right != 0 follow the golden and the README; windows are read only in mode 4.
//   - TND lse (N2, T1, G) == (T1, N2, G) bytes since N2 = 1.
//   - TQ4 dequantisation uses the fp32 centroids by default (Tq4Centroids selects).
//   - quant_mode 3 is accepted for SWA / HCA and BSND / TND too (natural extension: ori
//     tokens are 512 × q dtype, cmp tokens 258-byte slots).
//   - golden tile 128 over the concatenated key list [ori window ++ cmp selection].
//   - topk_value_mode 3 (PA_BBND only): ori_sparse_indices (ori_kv_w entries per query row) and
//     cmp_sparse_indices (cmp_kv_k per row) hold slot ids block_id * block_size + offset into
//     ori_kv / cmp_kv, no block table. Every entry of both tensors is examined: -1 is skipped
//     wherever it stands, any other value outside [0, block_nums * block_size) makes the reference
//     fail. Keys = the row's ori slots in index order, then its cmp slots; duplicates count once
//     per occurrence; no mask, no right-down alignment (seqused_q still limits the rows). Block
//     tables, seqused_ori_kv / seqused_cmp_kv, cu_seqlens_*_kv, cmp_residual_kv and mask modes
//     other than 0 are refused, and so is HCA.
//   - The golden's 1e-10 inside log(l) is not added. sinks == nullptr means no sink term at all.
//   - fp16 q (quant_mode 3 only): P for the PV product and the TQ4 dequantised values are rounded
//     to fp16 instead of bf16; the output is cast to fp16.
//
// Conventions for raw buffers: everything is little-endian host memory. bf16 / fp16 values are
// uint16 bit patterns. KV caches are byte views (the operator accepts uint8 / fp8 views of the same
// bytes), in the token byte formats of the README. Query head h = n2 * G + g with N2 = 1, so h = g.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnrt::testref {

// ---- constants ----------------------------------------------------------------------------------
inline constexpr int kSparseMlaHeadDim = 512;    // D: q / K / V / attn_out last dim
inline constexpr int kSparseMlaNopeDim = 448;    // DN: quantised part, logical dims [0, 448)
inline constexpr int kSparseMlaRopeDim = 64;     // DR: bf16 part, logical dims [448, 512)
inline constexpr int kSparseMlaScaleGroup = 64;  // nope dims per scale (7 groups)
inline constexpr int kSparseMlaScaleGroups = 7;

// quant_mode 1: one 608-byte token = rope bf16[64] @0 | nope fp8[448] @128 |
// scale bf16[7] @576 | 18 pad bytes @590.
inline constexpr int kQuantMode1TokenBytes = 608;
inline constexpr int kQuantMode1RopeOffset = 0;
inline constexpr int kQuantMode1NopeOffset = 128;
inline constexpr int kQuantMode1ScaleOffset = 576;

// quant_mode 2, PA_BBND only, block-planar: a block of bs tokens holds bs feature records of
// 576 bytes (nope fp8[448] @0 | rope bf16[64] @448) followed by bs scale records of 8 bytes
// (e8m0[7] @0 | 1 pad byte). kv_d = 584 = 576 + 8.
inline constexpr int kQuantMode2TokenBytes = 584;
inline constexpr int kQuantMode2FeatureBytes = 576;
inline constexpr int kQuantMode2NopeOffset = 0;
inline constexpr int kQuantMode2RopeOffset = 448;
inline constexpr int kQuantMode2ScaleBytes = 8;

// quant_mode 3: ori tokens are unquantised 16-bit (the dtype of q) × 512 = 1024 bytes; cmp
// slots are 258 bytes = 256 bytes of 4-bit codes (byte t: dim 2t in bits 0-3, dim 2t+1 in bits
// 4-7) + fp16 scale @256.
inline constexpr int kQuantMode3OriTokenBytes = 1024;
inline constexpr int kTq4SlotBytes = 258;
inline constexpr int kTq4ScaleOffset = 256;

// TQ4 codebook, indexed by the nibble value n = 0..15 (ascending).
extern const float kTq4Codebook[16];
// The RNE-bf16 images of kTq4Codebook (the NPU fast path's table), as bit patterns.
extern const uint16_t kTq4CodebookBf16Bits[16];

// ---- scalar conversions -------------------------------------------------------------------------
float Bf16ToFloat(uint16_t bits);      // exact
uint16_t FloatToBf16(float x);         // round to nearest even; NaN -> quiet NaN, keeps sign
uint16_t DoubleToBf16(double x);       // one RNE rounding from double (no double rounding)
float Fp16ToFloat(uint16_t bits);      // IEEE binary16, exact (subnormals included)
uint16_t FloatToFp16(float x);         // RNE; overflow -> inf; NaN -> quiet NaN
uint16_t DoubleToFp16(double x);       // one RNE rounding from double
float Fp8E4M3FnToFloat(uint8_t code);  // OCP FP8: bias 7, no inf, S.1111.111 = NaN, max 448
float E8M0ToFloat(uint8_t e);          // e8m0: 2^(e-127) (e = 0 gives 2^-127); 0xFF -> NaN
double RoundToBf16(double x);          // value of DoubleToBf16(x)
double RoundToFp16(double x);          // value of DoubleToFp16(x)

// ---- one-token decoders (the golden's decode_token)
// ---------------------------------------------------- Each writes the 512-value logical K (= V)
// vector: dequantised nope (dims 0..447) then rope (dims 448..511), every value exactly
// representable in bf16 (fp16 for an fp16 quant_mode 3 path).

// quant_mode 1: out[d] = bf16_rne(float(fp8(nope[d])) * float(scale[d / 64])) (product in
// fp32) for d < 448; out[448 + d] = rope[d].
void DecodeQuantMode1Token(const uint8_t* token /*608 bytes*/, float* out /*512*/);

// quant_mode 2, from the token's 576-byte feature record and its 8-byte scale record:
// out[d] = bf16_rne(float(fp8(nope[d])) * 2^(e[d / 64] - 127)) (fp32 product); rope copied.
void DecodeQuantMode2Token(const uint8_t* feature /*576 bytes*/, const uint8_t* scales /*8 bytes*/,
                           float* out /*512*/);
// Same, addressing token `offset` (0 <= offset < block_size) inside one block-planar block starting
// at block_base: feature at block_base + offset*576, scales at block_base + block_size*576 +
// offset*8.
void DecodeQuantMode2BlockToken(const uint8_t* block_base, int64_t block_size, int64_t offset,
                                float* out /*512*/);

enum class SparseMlaFloat16Kind { kBf16, kFp16 };  // dtype of q / attn_out / mode-3 ori_kv

// Which centroid values TQ4 dequantisation multiplies.
enum class Tq4Centroids {
  kFp32,  // kTq4Codebook as fp32 (NPU slow path; the vllm-ascend CPU oracle) -- the default
  kBf16,  // kTq4CodebookBf16Bits (NPU fast path)
};

// The 4-bit code of logical dim d (0..511) in a TQ4 slot: byte d / 2, low nibble for even d, high
// nibble for odd d.
int Tq4Code(const uint8_t* slot, int d);

// quant_mode 3 cmp slot: out[2t] = round(centroid[slot[t] & 15] * float(fp16 scale)),
// out[2t+1] = round(centroid[slot[t] >> 4] * scale); product in fp32, then RNE to `kv_dtype`
// (bf16, or fp16 for an fp16 path). No inverse rotation.
void DecodeTq4Token(const uint8_t* slot /*258 bytes*/, float* out /*512*/,
                    Tq4Centroids centroids = Tq4Centroids::kFp32,
                    SparseMlaFloat16Kind kv_dtype = SparseMlaFloat16Kind::kBf16);

// quant_mode 3 ori token: 512 little-endian 16-bit values of `dtype`, copied (exact).
void DecodeFloat16Token(const uint8_t* token /*1024 bytes*/, float* out /*512*/,
                        SparseMlaFloat16Kind dtype = SparseMlaFloat16Kind::kBf16);

// ---- operator inputs ----------------------------------------------------------------------------
enum class SparseMlaScenario {
  kSWA,  // ori_kv only; cmp_kv and cmp_sparse_indices null
  kCSA,  // ori_kv + cmp_kv + cmp_sparse_indices
  kHCA,  // ori_kv + cmp_kv, no indices: the visible cmp prefix [0, ncmp)
};

enum class SparseMlaLayout { kBSND, kTND, kPA_BBND };

// Shapes use the operator's "common field" names (README): b, q_s, q_t, q_n, ori_kv_s, ... N2
// (kv_n) is always 1; G = q_n. Pointers are borrowed; optional ones are null when absent.
struct SparseMlaRefInputs {
  SparseMlaScenario scenario = SparseMlaScenario::kSWA;  // must match which inputs are present

  // ---- attributes ----
  int32_t quant_mode = 1;      // 1 (608-byte tokens), 2 (584-byte block-planar, PA only), 3 (TQ4)
  int32_t rope_head_dim = 64;  // only 64
  float softmax_scale = 1.0f;  // s_j = softmax_scale * <q_h, k_j> (no implicit 1/sqrt(D); set it)
  int32_t cmp_ratio = 1;       // r, 1..128; ignored by SWA
  int32_t ori_mask_mode = 4;   // 0 none, 3 rightDownCausal, 4 sliding window
  int32_t cmp_mask_mode = 3;   // 0 none (ncmp = S2 / r), 3 rightDownCausal
  int32_t ori_win_left = 127;  // L, -1 = unbounded; used only with ori_mask_mode 4
  int32_t ori_win_right = 0;   // R, -1 = unbounded; used only with ori_mask_mode 4
  SparseMlaLayout layout_q = SparseMlaLayout::kBSND;   // kBSND or kTND
  SparseMlaLayout layout_kv = SparseMlaLayout::kBSND;  // kBSND, kTND or kPA_BBND
  // 1 logical cmp index; 2 physical slot (PA_BBND only); 3 global slot ids in both caches (PA_BBND)
  int32_t topk_value_mode = 1;
  bool return_softmax_lse = false;  // informational: softmax_lse is always computed here
  // dtype of q / attn_out (bf16 for quant_mode 1/2; bf16 or fp16 for quant_mode 3, where mode-3
  // ori_kv has this dtype too).
  SparseMlaFloat16Kind q_dtype = SparseMlaFloat16Kind::kBf16;

  // ---- shapes ----
  int64_t b = 1;    // batch size B
  int64_t q_n = 1;  // N1 query heads (G = q_n since N2 = 1)
  int64_t q_s = 0;  // BSND q: S1 capacity of the shape (B, q_s, q_n, 512)
  int64_t q_t = 0;  // TND q: T1 rows of the shape (q_t, q_n, 512)

  int64_t ori_kv_s = 0;  // BSND kv: S2 capacity, ori_kv shape (b, ori_kv_s, 1, kv_d)
  int64_t ori_kv_t = 0;  // TND kv: rows, ori_kv shape (ori_kv_t, 1, kv_d)
  int64_t ori_kv_block_nums =
      0;  // PA: ori_kv shape (ori_kv_block_nums, ori_kv_block_size, 1, kv_d)
  int64_t ori_kv_block_size = 0;     // PA: tokens per block (1..1024)
  int64_t ori_kv_block_stride = 0;   // PA: bytes between blocks (stride(0)); 0 = block_size * kv_d
  int64_t ori_block_table_cols = 0;  // PA: ori_block_table shape (b, ori_block_table_cols)

  int64_t cmp_kv_s = 0;  // BSND kv: S3 capacity, cmp_kv shape (b, cmp_kv_s, 1, kv_d)
  int64_t cmp_kv_t = 0;  // TND kv: rows, cmp_kv shape (cmp_kv_t, 1, kv_d)
  int64_t cmp_kv_block_nums =
      0;  // PA: cmp_kv shape (cmp_kv_block_nums, cmp_kv_block_size, 1, kv_d)
  int64_t cmp_kv_block_size = 0;     // PA: tokens per block
  int64_t cmp_kv_block_stride = 0;   // PA: bytes between blocks (stride(0)); 0 = block_size * kv_d
  int64_t cmp_block_table_cols = 0;  // PA: cmp_block_table shape (b, cmp_block_table_cols)

  int64_t cmp_kv_k = 0;  // K: last dim of cmp_sparse_indices (CSA)
  int64_t ori_kv_w = 0;  // W: last dim of ori_sparse_indices (topk_value_mode 3 only, >= 1)

  // ---- tensors ----
  // q: bf16/fp16 bits; BSND (b, q_s, q_n, 512) or TND (q_t, q_n, 512). Mode 3: already rotated.
  const uint16_t* q = nullptr;
  // ori_kv: bytes. kv_d per token = 608 (mode 1), 584 (mode 2: block-planar, see above), 1024
  // (mode 3: 512 × q_dtype). Required in every scenario.
  const uint8_t* ori_kv = nullptr;
  // cmp_kv: bytes. kv_d = 608 (mode 1), 584 (mode 2), 258 (mode 3 TQ4 slot). CSA/HCA only.
  const uint8_t* cmp_kv = nullptr;
  // ori_sparse_indices: topk_value_mode 3 only (null otherwise): int32 slot ids into ori_kv,
  // BSND q: (b, q_s, 1, ori_kv_w); TND q: (q_t, 1, ori_kv_w); -1 entries are skipped.
  const int32_t* ori_sparse_indices = nullptr;
  // cmp_sparse_indices: int32, BSND q: (b, q_s, 1, cmp_kv_k); TND q: (q_t, 1, cmp_kv_k). CSA only.
  // -1 ends a row; the golden's scan reads it. topk_value_mode 3: slot ids into cmp_kv, -1 skipped.
  const int32_t* cmp_sparse_indices = nullptr;
  const int32_t* ori_block_table = nullptr;    // PA: (b, ori_block_table_cols) physical block ids
  const int32_t* cmp_block_table = nullptr;    // PA with cmp: (b, cmp_block_table_cols)
  const int32_t* cu_seqlens_q = nullptr;       // (b+1), required with TND q
  const int32_t* cu_seqlens_ori_kv = nullptr;  // (b+1), required with TND kv
  const int32_t* cu_seqlens_cmp_kv = nullptr;  // (b+1), required with TND kv and cmp_kv
  const int32_t* seqused_q = nullptr;          // (b), optional: S1(b) override
  const int32_t* seqused_ori_kv = nullptr;     // (b), optional (required with PA): S2(b)
  const int32_t* seqused_cmp_kv = nullptr;     // (b), optional: cmp_len(b); default S2 / r
  const int32_t* cmp_residual_kv = nullptr;    // (b), optional, each in [0, r): Lc = C*r + res
  const int32_t* ori_topk_length = nullptr;    // reserved: must be null
  const int32_t* cmp_topk_length = nullptr;    // reserved: must be null
  const float* sinks = nullptr;                // fp32 (q_n); null = no sink (m0 = -inf, l0 = 0)
  const int32_t* metadata = nullptr;           // ignored: results never depend on it
};

// ---- numerics of the reference ------------------------------------------------------------------
enum class SparseMlaRounding {
  // The CANN golden: keys tiled by `golden_tile` over the concatenation
  // [ori window keys in position order] ++ [cmp keys in selection order]; online softmax starting
  // at m = sink, l = 1; per tile P = exp(s - running max) rounded to the q dtype (bf16) for the PV
  // product, the running sum uses the unrounded P; out = O / l; lse = m + ln(l). K/V and q are
  // exact in fp32, so the golden's fp32 QK / PV differ from float64 only by accumulation noise.
  kGolden,
  // Pure math on the dequantised K/V (which are part of the format): out = sum_j e^{s_j} v_j /
  // (e^{sink} + sum_j e^{s_j}), all in float64, no intermediate rounding.
  // Note: kGolden and kExact differ by up to 2^-8 * sum_j p_j |v_j| / l per element (the bf16 P),
  // which exceeds rtol 2^-7 wherever the output cancels (a few % of elements on random data).
  // Compare a kernel that rounds P to bf16 against kGolden (the golden's tolerances).
  kExact,
};

struct SparseMlaRefOptions {
  SparseMlaRounding rounding = SparseMlaRounding::kGolden;
  int64_t golden_tile = 128;  // the golden's S2 tile (the docs mention 512)
  // kGolden only. false: scores, running max / sum, rescaling and the O accumulation in float64
  // (the golden's fp32 accumulation modelled without its summation-order noise). true: all of them
  // in fp32 with a sequential summation order: s = fp32(fp32(<q,k>) * scale), per tile
  // l = a*l + sum(p), O = a*O + sum(round(p) * v) (closer to the golden, still not bit-exact with
  // its BLAS). Compile with -ffp-contract=off for a well-defined fp32 path.
  bool fp32_accumulation = false;
  Tq4Centroids tq4_centroids = Tq4Centroids::kFp32;
};

// ---- outputs ------------------------------------------------------------------------------------
struct SparseMlaRefOutputs {
  // attn_out in q's layout and shape: BSND (b, q_s, q_n, 512) / TND (q_t, q_n, 512). The float64
  // value of O / l before the final cast. Invalid rows (thr <= 0) and rows beyond S1(b) /
  // outside every batch's cu_seqlens_q range are 0.
  std::vector<double> attn_out;
  // attn_out cast (RNE) to q_dtype, as bit patterns: what the operator's bf16 output should be.
  std::vector<uint16_t> attn_out_bits;
  // softmax_lse, natural log, sink included: BSND (b, 1, q_s, q_n); TND (1, q_t, q_n).
  // CHOICE: 0 for invalid rows and rows beyond S1(b) (the TQ kernel's zero init).
  std::vector<double> softmax_lse;
  // Per query token (BSND: b * q_s + i; TND: the row t): number of ori keys and of cmp keys
  // (duplicates counted) that the row attends; -1 / -1 for invalid or unused rows.
  std::vector<int32_t> ori_key_count;
  std::vector<int32_t> cmp_key_count;
  std::string error;  // set when SparseMlaReference returns false
};

// Computes attn_out and softmax_lse. Returns false (with outputs->error) for inputs it cannot
// interpret or that would read outside the described buffers (bad layout combination, a block id
// outside [0, block_nums), lengths beyond the shapes, ...). It does not enforce the NPU's narrower
// product restrictions (head counts, K in {512, 1024}, ...).
bool SparseMlaReference(const SparseMlaRefInputs& inputs, SparseMlaRefOutputs* outputs,
                        const SparseMlaRefOptions& options = SparseMlaRefOptions());

// ---- pieces, exported for tests of index handling
// ------------------------------------------------- Effective lengths of batch b.
struct SparseMlaBatchLengths {
  int64_t s1 = 0;       // S1(b)
  int64_t s2 = 0;       // S2(b)
  int64_t cmp_len = 0;  // C(b) (0 without cmp_kv)
  int64_t lc = 0;       // Lc(b) = C*r + residual (0 without cmp_kv)
};
bool SparseMlaGetBatchLengths(const SparseMlaRefInputs& inputs, int64_t batch,
                              SparseMlaBatchLengths* lengths, std::string* error);

// The keys query row i (0 <= i < S1(b)) of batch b attends, in the reference's order.
struct SparseMlaRowKeys {
  bool valid = false;  // false: i >= S1(b) or thr <= 0 (no key: zero output, lse -inf or the sink)
  int64_t ori_lo = 0;  // ori positions [ori_lo, ori_hi)
  int64_t ori_hi = 0;
  int64_t ncmp = 0;  // cmp causal limit, clamped to [0, C]
  // Logical cmp indices (topk_value_mode 2: translated back to logical), in order, with
  // duplicates: HCA [0, ncmp); CSA the filtered index row; SWA empty. topk_value_mode 3: the
  // row's cmp slot ids (-1 entries dropped).
  std::vector<int64_t> cmp;
  // topk_value_mode 3 only: the row's ori slot ids in index order (-1 entries dropped); ori_lo /
  // ori_hi are 0 then.
  std::vector<int64_t> ori_slots;
};
bool SparseMlaGetRowKeys(const SparseMlaRefInputs& inputs, int64_t batch, int64_t i,
                         SparseMlaRowKeys* keys, std::string* error);

// Decodes logical ori token j / logical cmp token j of batch b (through the layout and block
// table) into 512 floats; false if it lies outside the buffers.
bool SparseMlaDecodeOriToken(const SparseMlaRefInputs& inputs, int64_t batch, int64_t j, float* out,
                             std::string* error, Tq4Centroids centroids = Tq4Centroids::kFp32);
bool SparseMlaDecodeCmpToken(const SparseMlaRefInputs& inputs, int64_t batch, int64_t j, float* out,
                             std::string* error, Tq4Centroids centroids = Tq4Centroids::kFp32);

}  // namespace attnrt::testref
