// The inputs of one bench_sparse_mla case (TND queries over PA_BBND blocks of 64 tokens, bf16 q,
// window 128, sinks, softmax_lse returned) and what the op does with them: the keys each query row
// attends, counted from the generated inputs with the op's masks (docs/sparse-mla.md), and the
// fp32-equivalent FLOPs that follow.
#ifndef ATTNRT_BENCH_SPARSE_MLA_SPARSE_MLA_PROBLEM_H_
#define ATTNRT_BENCH_SPARSE_MLA_SPARSE_MLA_PROBLEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"

namespace attnrt_bench {

struct SparseMlaCase {
  int32_t scenario = ATTNRT_SPARSE_MLA_CSA;  // attnrt_sparse_mla_scenario
  int32_t quant_mode = 1;
  int64_t heads = 64;
  int64_t batch = 1;
  int64_t s1 = 1;     // query rows per sequence: the last s1 positions of its s2 tokens
  int64_t s2 = 8192;  // ori_kv tokens per sequence (the context)
  int64_t ratio = 4;  // cmp_ratio (1 for SWA)
  int64_t topk = 0;   // CSA: width of cmp_sparse_indices
  int64_t window = 128;

  // "csa_decode/q1/h64/B4", "csa_prefill128/q1/h64/B1", ...
  std::string Name() const;
  // "S2 8192, top-k 2048, r 4, window 128" and the like.
  std::string Describe() const;
  attnrt_sparse_mla_attributes Attributes() const;
};

// An owned, 64-byte aligned tensor.
struct BenchTensor {
  std::vector<int64_t> shape;
  std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
  size_t bytes = 0;
  attnrt_tensor t{};
  void Make(attnrt_dtype dtype, std::vector<int64_t> s);
  int32_t* i32() { return reinterpret_cast<int32_t*>(data.get()); }
};

struct SparseMlaProblem {
  SparseMlaCase c;
  BenchTensor in[ATTNRT_SPARSE_MLA_NUM_INPUTS];
  BenchTensor out, lse, metadata;
  const attnrt_tensor* inputs[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {};
  const attnrt_tensor* outputs[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {};
  int64_t query_tokens = 0;  // query rows of one run
  int64_t ori_keys = 0;      // sum over the rows of the ori window keys each attends
  int64_t cmp_keys = 0;      // sum over the rows of the compressed keys each attends
  int64_t kv_bytes = 0;      // bytes of those tokens (each row's distinct tokens, once per row)
  // 4 * 512 * heads per (row, key): QK^T and P.V, 2 FLOP per multiply-add.
  double Flops() const;
};

// Builds the inputs (seeded, deterministic) and counts the keys; the metadata input is left for
// the metadata op to fill.
std::unique_ptr<SparseMlaProblem> BuildSparseMlaProblem(const SparseMlaCase& c);

// The cases bench_sparse_mla runs, in order.
std::vector<SparseMlaCase> SparseMlaCases();

}  // namespace attnrt_bench

#endif  // ATTNRT_BENCH_SPARSE_MLA_SPARSE_MLA_PROBLEM_H_
