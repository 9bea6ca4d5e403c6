// Builds one sparse MLA call from a compact description: random bf16/fp16 queries, random KV rows
// quantized with the public encoders into the op's cache formats and layouts (block tables with
// shuffled physical blocks for PA_BBND), index rows with padding, duplicates and out-of-range
// entries; the same buffers are described both as attnrt tensors and as the float64 reference's
// raw inputs (tests/common/sparse_mla_reference.h).
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "common/sparse_mla_reference.h"
#include "common/test_support.h"

namespace attnrt_test {

struct SparseMlaSpec {
  int32_t scenario = ATTNRT_SPARSE_MLA_SWA;
  int32_t quant_mode = 1;
  int32_t layout_q = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  int32_t layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  bool fp16 = false;  // quant_mode 3 only
  // 16 heads: one P rounding flip on a dominant key (an fp32-vs-float64 score difference at a bf16
  // rounding boundary) moves one (row, head) only, a small part of the >= 99.5% budget.
  int64_t num_heads = 16;
  std::vector<int32_t> s1{2, 3};    // query rows per batch (taking part)
  std::vector<int32_t> s2{40, 70};  // ori rows per batch
  int64_t q_extra = 1;              // capacity rows beyond s1 (BSND S1 cap, TND extra rows)
  int64_t kv_extra = 3;             // capacity rows beyond s2 / cmp lengths
  int64_t block_size = 16;
  int64_t topk = 16;
  int32_t cmp_ratio = 4;
  int32_t ori_mask_mode = 4, cmp_mask_mode = 3;
  int32_t ori_win_left = 15, ori_win_right = 0;
  int32_t topk_value_mode = 1;
  bool sinks = true;
  bool lse = true;
  bool seqused_q = false;
  bool seqused_cmp = false;  // pass cmp lengths (else derived from seqused_ori / cu / shape)
  bool residual = true;
  float softmax_scale = 0.04419417382415922f;
  int32_t num_threads = 0;  // the runtime's num_threads option (0: its default)
  // topk_value_mode 3 (PA_BBND): W, entries per row of ori_sparse_indices. The case then holds
  // random global slot ids (some -1, some repeated) in ori_sparse_indices and, for CSA, in
  // cmp_sparse_indices (topk entries per row), and no block table, seqused_*_kv or residual.
  int64_t ori_topk = 8;
  float q_scale = 1.0f;  // multiplies the random queries: larger values make the softmax peaked
};

// A topk_value_mode 3 spec: PA_BBND, mask modes 0, no residual, `scenario` SWA or CSA.
SparseMlaSpec SlotsSpec(int32_t scenario, int32_t quant_mode);

class SparseMlaCase {
 public:
  SparseMlaCase(const SparseMlaSpec& spec, std::mt19937_64& rng);

  attnrt_sparse_mla_attributes Attributes() const;
  const attnrt_tensor* const* Inputs();
  const attnrt_tensor* const* Outputs();
  std::array<Tensor, ATTNRT_SPARSE_MLA_NUM_INPUTS>& in() { return in_; }
  std::array<Tensor, ATTNRT_SPARSE_MLA_NUM_OUTPUTS>& out() { return out_; }
  // The metadata op's inputs: the same array without the metadata.
  const attnrt_tensor* const* MetadataInputs();
  // The reference's description of the same buffers.
  attnrt::testref::SparseMlaRefInputs RefInputs() const;
  void Poison();
  const SparseMlaSpec& spec() const { return spec_; }

  // Passes ori_kv or cmp_kv (`input`) to the op as a view into `storage` (bytes) with `strides`
  // (elements, the compact tensor's shape) at `byte_offset`; the reference reads the same bytes
  // with block stride strides[0] * element size. in()[input] keeps the compact tensor.
  void SetKvView(int input, Tensor storage, std::vector<int64_t> strides, uint64_t byte_offset);
  void ClearKvViews();

 private:
  // topk_value_mode 3: slot ids instead of block tables and kv lengths (sparse_mla_slots_case.cpp).
  void MakeSlotIndices(std::mt19937_64& rng, int64_t total_q_rows);
  struct KvView {
    bool set = false;
    Tensor storage;
    std::vector<int64_t> strides;
    uint64_t byte_offset = 0;
    attnrt_tensor desc{};
  };
  const attnrt_tensor* ViewDescriptor(int input);

  SparseMlaSpec spec_;
  std::array<KvView, 2> views_;  // ori_kv, cmp_kv
  std::array<Tensor, ATTNRT_SPARSE_MLA_NUM_INPUTS> in_;
  std::array<Tensor, ATTNRT_SPARSE_MLA_NUM_OUTPUTS> out_;
  std::array<const attnrt_tensor*, ATTNRT_SPARSE_MLA_NUM_INPUTS> in_ptrs_{};
  std::array<const attnrt_tensor*, ATTNRT_SPARSE_MLA_NUM_OUTPUTS> out_ptrs_{};
  int64_t q_rows_ = 0, ori_rows_ = 0, cmp_rows_ = 0, ori_cols_ = 0, cmp_cols_ = 0;
};

// Every sparse MLA kernel, and whether this CPU runs it (the plugin's "isa" fact has its features).
const std::vector<std::string>& SparseMlaKernels();
// A kernel's name in test names: its ISA suffix ("avx2", "amx_bf16", ...).
inline std::string KernelTestName(const std::string& kernel) {
  return kernel.substr(kernel.rfind('.') + 1);
}
bool SparseMlaKernelRuns(const std::string& kernel);

// Runs the metadata op then the main op through the ABI, with `kernel` pinned ("" = default).
// Returns the status of the first failing call; `error` gets its message.
attnrt_status RunSparseMla(SparseMlaCase& c, const std::string& kernel, std::string* error,
                           std::string* chosen_kernel = nullptr);

// The two halves of RunSparseMla: the metadata op (writes the case's metadata input) and the main
// op (attributes, plan and run).
attnrt_status RunSparseMlaMetadata(SparseMlaCase& c, const std::string& kernel, std::string* error);
attnrt_status RunSparseMlaMain(SparseMlaCase& c, const std::string& kernel, std::string* error,
                               std::string* chosen_kernel = nullptr);

// Element-wise check of attn_out against the reference (rtol 2^-7, atol 1e-4 on >= 99.5% of the
// elements, or min_close_fraction, and every element written), softmax_lse in fp32 (within
// 1e-4 + 2e-5|lse| + lse_slack); writes a summary to *report.
bool CompareWithReference(SparseMlaCase& c, std::string* report, double* max_abs_error = nullptr,
                          double min_close_fraction = 0.995, double lse_slack = 0.0);

// min_close_fraction for one query row of `heads` heads. The spec rounds P to bfloat16, so a score
// an fp32 ulp from the float64 one can round one key's P to the other neighbour; that moves every
// element of the head by 2^-8 (p_j / l) |v_jd|, past rtol 2^-7 wherever the head's output nearly
// cancels. Measured: 41 of a head's 512 elements (ATTNRT_TEST_SEED=16629789355008663471, 4 heads,
// sparse_mla_split_test), 1.6% of 8 heads (10793922833261011975, sparse_mla_slots_test). A fifth
// of one head's elements is allowed; with many rows (the conformance suites) 0.5% of all is.
inline double OneRowCloseFraction(int64_t heads) { return 1.0 - 0.2 / static_cast<double>(heads); }

// One call's results in float64: attn_out (rows * heads * 512) and softmax_lse (rows * heads).
struct SparseMlaResult {
  std::vector<double> out;
  std::vector<double> lse;
};

// Poisons the outputs, runs the case with `kernel` pinned (expecting success and that kernel) and
// returns its outputs.
SparseMlaResult RunSparseMlaCall(SparseMlaCase& c, const std::string& kernel);

inline constexpr attnrt_dtype kBf16 = ATTNRT_DTYPE_BFLOAT16;
inline constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
inline constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;

// Copies the compact PA_BBND cache `input` (ori_kv or cmp_kv) of c into a buffer shared by `layers`
// interleaved layers (vLLM style): block k of layer l lies at lead_bytes + (k * layers + l) *
// page_bytes, page_bytes >= the block's bytes; this cache is layer `layer`. The other layers' pages
// hold other blocks of the same cache (finite, wrong values), the padding after each block and the
// lead bytes 0xFF (NaN in every token format). Installs the view (SetKvView), dim 2 (extent 1)
// getting stride `dim2_stride`.
void UseInterleavedCache(SparseMlaCase& c, int input, int64_t page_bytes, int64_t layers,
                         int64_t layer, int64_t lead_bytes, int64_t dim2_stride = -1);
}  // namespace attnrt_test
