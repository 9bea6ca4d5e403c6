#include "sparse_mla_problem.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>

namespace attnrt_bench {
namespace {

constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int64_t kBlock = 64;  // PA_BBND tokens per block
constexpr int64_t kPool = 256;  // distinct random tokens per side, copied into every cache slot
constexpr attnrt_dtype kBf16{ATTNRT_DTYPE_CODE_BFLOAT, 16, 1};
constexpr attnrt_dtype kU8{ATTNRT_DTYPE_CODE_UINT, 8, 1};
constexpr attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};
constexpr attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};

uint16_t Bf16Bits(float v) {  // round to nearest even; finite values only
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

void Check(attnrt_status status, const char* what) {
  if (status != ATTNRT_OK) {
    throw std::runtime_error(std::string(what) + ": " + attnrt_last_error_message());
  }
}

// kPool random KV rows (N(0,1) values) encoded in one side's format; Write copies one of them into
// a cache slot. quant_mode 1: 608-byte tokens; 2: block-planar (block_size x 576 feature bytes,
// then block_size x 8 e8m0 scale bytes); 3: ori tokens as 512 bf16 values, cmp tokens TQ4.
class TokenPool {
 public:
  TokenPool(int32_t quant_mode, bool cmp, std::mt19937_64& rng) : mode_(quant_mode), cmp_(cmp) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> rows(static_cast<size_t>(kPool * kD));
    for (float& v : rows) v = normal(rng);
    bytes_.resize(static_cast<size_t>(kPool * TokenBytes()));
    if (mode_ == 1) {
      Check(attnrt_sparse_mla_encode_mode1(rows.data(), kF32, kPool, bytes_.data()),
            "attnrt_sparse_mla_encode_mode1");
    } else if (mode_ == 2) {
      for (int64_t p = 0; p < kPool; ++p) {
        Check(attnrt_sparse_mla_encode_mode2(rows.data() + p * kD, kF32, bytes_.data(), kPool, p),
              "attnrt_sparse_mla_encode_mode2");
      }
    } else if (cmp_) {
      Check(attnrt_sparse_mla_encode_tq4(rows.data(), kF32, kPool, bytes_.data()),
            "attnrt_sparse_mla_encode_tq4");
    } else {
      auto* bits = reinterpret_cast<uint16_t*>(bytes_.data());
      for (size_t k = 0; k < rows.size(); ++k) bits[k] = Bf16Bits(rows[k]);
    }
  }

  attnrt_dtype Dtype() const { return mode_ == 3 && !cmp_ ? kBf16 : kU8; }
  // The cache tensor's last dimension (elements of Dtype()).
  int64_t KvD() const {
    if (mode_ == 1) return ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES;
    if (mode_ == 2) return ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;
    return cmp_ ? ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES : kD;
  }
  int64_t TokenBytes() const { return KvD() * (Dtype().bits / 8); }

  void Write(uint8_t* block, int64_t block_size, int64_t slot, int64_t p) const {
    if (mode_ == 2) {
      constexpr int64_t kF = ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES;
      constexpr int64_t kS = ATTNRT_SPARSE_MLA_MODE2_SCALE_BYTES;
      std::memcpy(block + slot * kF, bytes_.data() + p * kF, kF);
      std::memcpy(block + block_size * kF + slot * kS, bytes_.data() + kPool * kF + p * kS, kS);
    } else {
      const int64_t n = TokenBytes();
      std::memcpy(block + slot * n, bytes_.data() + p * n, static_cast<size_t>(n));
    }
  }

 private:
  int32_t mode_;
  bool cmp_;
  std::vector<uint8_t> bytes_;
};

// Row i (of s1) of a sequence: the ori window keys it attends and the number of compressed tokens
// its causal mask leaves visible. As the op (docs/sparse-mla.md; CANN's golden): thr = S2 - S1 + i
// + 1; window [max(thr - 1 - ori_win_left, 0), min(thr + ori_win_right, S2)) with left = window - 1
// and right = 0; cmp_mask_mode 3: ncmp = floor((Lc - S1 + i + 1) / r) clamped to [0, cmp_len],
// with cmp_len = S2 / r (no seqused_cmp_kv) and Lc = cmp_len * r + cmp_residual_kv (= S2 here).
struct RowKeys {
  int64_t ori = 0;
  int64_t visible_cmp = 0;
};

RowKeys KeysOfRow(const SparseMlaCase& c, int64_t i) {
  RowKeys k;
  const int64_t thr = c.s2 - c.s1 + i + 1;
  if (thr <= 0) return k;
  k.ori = std::min(thr, c.s2) - std::max<int64_t>(thr - 1 - (c.window - 1), 0);
  if (c.scenario != ATTNRT_SPARSE_MLA_SWA) {
    const int64_t cmp_len = c.s2 / c.ratio;
    const int64_t lc = cmp_len * c.ratio + c.s2 % c.ratio;
    k.visible_cmp = std::clamp<int64_t>((lc - c.s1 + i + 1) / c.ratio, 0, cmp_len);
  }
  return k;
}

// The compressed keys a CSA row attends, from its index row as the op scans it: the first
// min(K, ncmp) entries, stopping at -1, skipping values outside [0, ncmp).
int64_t SelectedCmpKeys(const int32_t* row, int64_t topk, int64_t visible) {
  int64_t n = 0;
  for (int64_t k = 0; k < std::min(topk, visible); ++k) {
    if (row[k] == -1) break;
    n += row[k] >= 0 && row[k] < visible ? 1 : 0;
  }
  return n;
}

}  // namespace

void BenchTensor::Make(attnrt_dtype dtype, std::vector<int64_t> s) {
  shape = std::move(s);
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  bytes = static_cast<size_t>(n * dtype.bits / 8);
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  data = {static_cast<uint8_t*>(std::aligned_alloc(64, rounded)), &std::free};
  if (!data) throw std::runtime_error("out of memory allocating the inputs");
  std::memset(data.get(), 0, rounded);
  t = attnrt_tensor{data.get(), {ATTNRT_DEVICE_CPU, 0}, static_cast<int32_t>(shape.size()),
                    dtype,      shape.data(),           nullptr,
                    0};
}

std::string SparseMlaCase::Name() const {
  const char* kind = scenario == ATTNRT_SPARSE_MLA_SWA   ? "swa"
                     : scenario == ATTNRT_SPARSE_MLA_HCA ? "hca"
                                                         : "csa";
  const std::string phase = s1 == 1 ? "_decode" : "_prefill" + std::to_string(s1);
  return kind + phase + "/q" + std::to_string(quant_mode) + "/h" + std::to_string(heads) + "/B" +
         std::to_string(batch);
}

std::string SparseMlaCase::Describe() const {
  std::string d = "S1 " + std::to_string(s1) + ", S2 " + std::to_string(s2);
  if (scenario == ATTNRT_SPARSE_MLA_CSA) d += ", top-k " + std::to_string(topk);
  if (scenario != ATTNRT_SPARSE_MLA_SWA) d += ", r " + std::to_string(ratio);
  return d + ", window " + std::to_string(window);
}

attnrt_sparse_mla_attributes SparseMlaCase::Attributes() const {
  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = quant_mode;
  a.cmp_ratio = static_cast<int32_t>(ratio);
  a.ori_mask_mode = ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW;
  a.cmp_mask_mode = scenario == ATTNRT_SPARSE_MLA_SWA ? ATTNRT_SPARSE_MLA_MASK_NONE
                                                      : ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL;
  a.ori_win_left = static_cast<int32_t>(window - 1);
  a.ori_win_right = 0;
  a.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  a.return_softmax_lse = 1;
  return a;
}

double SparseMlaProblem::Flops() const {
  return 4.0 * kD * static_cast<double>(c.heads) * static_cast<double>(ori_keys + cmp_keys);
}

std::unique_ptr<SparseMlaProblem> BuildSparseMlaProblem(const SparseMlaCase& c) {
  auto p = std::make_unique<SparseMlaProblem>();
  p->c = c;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = c.batch * c.s1;
  const bool has_cmp = c.scenario != ATTNRT_SPARSE_MLA_SWA;
  BenchTensor& q = p->in[ATTNRT_SPARSE_MLA_INPUT_Q];
  q.Make(kBf16, {rows, c.heads, kD});
  auto* qbits = reinterpret_cast<uint16_t*>(q.data.get());
  for (int64_t k = 0; k < rows * c.heads * kD; ++k) qbits[k] = Bf16Bits(normal(rng));

  // One side of the cache: B sequences of `len` tokens in blocks of kBlock, the blocks of all
  // sequences shuffled in the pool, every slot holding one of the pool's tokens.
  auto build_side = [&](const TokenPool& pool, int64_t len, int kv, int table) {
    const int64_t per_seq = (len + kBlock - 1) / kBlock;
    BenchTensor& cache = p->in[kv];
    cache.Make(pool.Dtype(), {c.batch * per_seq, kBlock, 1, pool.KvD()});
    p->in[table].Make(kI32, {c.batch, per_seq});
    std::vector<int32_t> ids(static_cast<size_t>(c.batch * per_seq));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::copy(ids.begin(), ids.end(), p->in[table].i32());
    for (int64_t block = 0; block < c.batch * per_seq; ++block) {
      uint8_t* base = cache.data.get() + block * kBlock * pool.TokenBytes();
      for (int64_t slot = 0; slot < kBlock; ++slot) {
        pool.Write(base, kBlock, slot, static_cast<int64_t>(rng() % kPool));
      }
    }
  };
  const TokenPool ori_pool(c.quant_mode, false, rng);
  build_side(ori_pool, c.s2, ATTNRT_SPARSE_MLA_INPUT_ORI_KV,
             ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE);
  int64_t cmp_token_bytes = 0;
  if (has_cmp) {
    const TokenPool cmp_pool(c.quant_mode, true, rng);
    cmp_token_bytes = cmp_pool.TokenBytes();
    build_side(cmp_pool, c.s2 / c.ratio, ATTNRT_SPARSE_MLA_INPUT_CMP_KV,
               ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE);
    p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].Make(kI32, {c.batch});
    for (int64_t b = 0; b < c.batch; ++b) {
      p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].i32()[b] =
          static_cast<int32_t>(c.s2 % c.ratio);
    }
  }
  p->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].Make(kI32, {c.batch + 1});
  p->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].Make(kI32, {c.batch});
  for (int64_t b = 0; b <= c.batch; ++b) {
    p->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].i32()[b] = static_cast<int32_t>(b * c.s1);
  }
  for (int64_t b = 0; b < c.batch; ++b) {
    p->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].i32()[b] = static_cast<int32_t>(c.s2);
  }

  // CSA: every index row holds min(K, ncmp) distinct visible compressed tokens in random order
  // (as an indexer would select them), then -1.
  int32_t* idx = nullptr;
  std::vector<int32_t> all(static_cast<size_t>(c.s2 / c.ratio));
  if (c.scenario == ATTNRT_SPARSE_MLA_CSA) {
    p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES].Make(kI32, {rows, 1, c.topk});
    idx = p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES].i32();
  }
  const int64_t ori_token_bytes = ori_pool.TokenBytes();
  for (int64_t r = 0; r < rows; ++r) {
    const RowKeys k = KeysOfRow(c, r % c.s1);
    int64_t cmp = k.visible_cmp;  // HCA: the whole visible prefix
    if (idx != nullptr) {
      int32_t* row = idx + r * c.topk;
      std::iota(all.begin(), all.begin() + k.visible_cmp, 0);
      std::shuffle(all.begin(), all.begin() + k.visible_cmp, rng);
      const int64_t used = std::min(c.topk, k.visible_cmp);
      for (int64_t j = 0; j < c.topk; ++j) row[j] = j < used ? all[static_cast<size_t>(j)] : -1;
      cmp = SelectedCmpKeys(row, c.topk, k.visible_cmp);
    }
    p->ori_keys += k.ori;
    p->cmp_keys += cmp;
    p->kv_bytes += k.ori * ori_token_bytes + cmp * cmp_token_bytes;
  }
  p->in[ATTNRT_SPARSE_MLA_INPUT_SINKS].Make(kF32, {c.heads});
  p->metadata.Make(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
  p->out.Make(kBf16, {rows, c.heads, kD});
  p->lse.Make(kF32, {1, rows, c.heads});
  for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    p->inputs[i] = p->in[i].data ? &p->in[i].t : nullptr;
  }
  p->outputs[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT] = &p->out.t;
  p->outputs[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE] = &p->lse.t;
  p->query_tokens = rows;
  return p;
}

std::vector<SparseMlaCase> SparseMlaCases() {
  std::vector<SparseMlaCase> cases;
  for (int32_t mode : {1, 2, 3}) {
    SparseMlaCase c;
    c.quant_mode = mode;
    // CSA decode (DeepSeek-like: cmp_ratio 4, top-k 2048, window 128) at an 8k context.
    c.scenario = ATTNRT_SPARSE_MLA_CSA;
    c.topk = 2048;
    for (int64_t heads : {64, 128}) {
      for (int64_t batch : {1, 4, 16}) {
        c.heads = heads;
        c.batch = batch;
        cases.push_back(c);
      }
    }
    // CSA prefill: the last 128 query rows of a 4096-token prompt.
    SparseMlaCase prefill = c;
    prefill.heads = 64;
    prefill.batch = 1;
    prefill.s1 = 128;
    prefill.s2 = 4096;
    // SWA decode: the window alone.
    SparseMlaCase swa = c;
    swa.scenario = ATTNRT_SPARSE_MLA_SWA;
    swa.heads = 64;
    swa.batch = 4;
    swa.ratio = 1;
    swa.topk = 0;
    // HCA decode: cmp_ratio 128, every visible compressed token (256 at a 32k context).
    SparseMlaCase hca = swa;
    hca.scenario = ATTNRT_SPARSE_MLA_HCA;
    hca.ratio = 128;
    hca.s2 = 32768;
    cases.push_back(swa);
    cases.push_back(hca);
    cases.push_back(prefill);
  }
  return cases;
}

}  // namespace attnrt_bench
