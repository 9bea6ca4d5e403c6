// The runtimes the torch operators run on, the attnrt ops made from them (one per attribute set)
// and each op's plans (one per tensor signature), kept between calls so that a call only describes
// its tensors, looks its plan up and runs.
//
// A runtime is the library's own (made on first use with the default options, so the ATTNRT_*
// environment applies), one of the Python package's attnrt.Runtime objects, registered by its
// handle and borrowed (the handle is only used to make ops, which stay valid after the runtime is
// closed: they keep its plugins loaded; the Python package checks that a runtime is open before it
// names it in a call), or a runtime on torch's intra-op threads made here and owned by the
// registry (torch_threads.cpp: its parallel work runs in at::parallel_for).
#ifndef ATTNRT_BINDINGS_TORCH_RUNTIMES_H_
#define ATTNRT_BINDINGS_TORCH_RUNTIMES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/util/Exception.h>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/sparse_mla.h"

namespace attnrt_torch {

// Throws c10::ValueError (INVALID_ARGUMENT) or c10::Error (every other status) carrying
// "<status name>: <the runtime's message for this thread>", as attnrt.Error prints.
[[noreturn]] void ThrowStatus(attnrt_status status);

// TORCH_CHECK_VALUE for the operators' own argument checks, with the same status prefix.
#define ATTNRT_TORCH_CHECK_ARG(cond, ...) \
  TORCH_CHECK_VALUE(cond, "ATTNRT_ERROR_INVALID_ARGUMENT: ", __VA_ARGS__)

// What a plan depends on: per tensor slot its presence, dtype, device, shape and strides.
struct PlanKey {
  static constexpr size_t kCapacity = 192;
  std::array<int64_t, kCapacity> values;
  size_t size = 0;
  size_t hash = 0;

  // Appends a tensor's signature; false when the key is full (the call is then planned uncached).
  bool Add(const attnrt_tensor* t);
  void Finish();
  bool operator==(const PlanKey& other) const;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const { return k.hash; }
};

// A plan and the workspace its runs need.
struct CachedPlan {
  std::shared_ptr<attnrt_plan> plan;
  size_t workspace_size = 0;
  size_t workspace_alignment = 1;
};

// An attnrt op and its plans by signature.
class CachedOp {
 public:
  explicit CachedOp(attnrt_op* op) : op_(op) {}
  ~CachedOp() { attnrt_op_destroy(op_); }
  CachedOp(const CachedOp&) = delete;
  CachedOp& operator=(const CachedOp&) = delete;

  // The plan for these tensors: from the cache, else attnrt_op_plan (throws its error).
  CachedPlan Plan(const attnrt_tensor* const* inputs, size_t num_inputs,
                  const attnrt_tensor* const* outputs, size_t num_outputs);

  uint64_t hits() const;
  uint64_t misses() const;

 private:
  static constexpr size_t kMaxPlans = 64;
  attnrt_op* op_;
  mutable std::mutex mutex_;
  std::unordered_map<PlanKey, CachedPlan, PlanKeyHash> plans_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// The attributes an op is made from (the paged varlen op's, as the torch operator sets them).
struct OpKey {
  int32_t num_heads = 0;
  int32_t kv_num_heads = 0;
  int32_t block_size = 0;
  int32_t kv_layout = 0;
  float scale = 0.0f;
  float softcap = 0.0f;
  int32_t local_window_size = -1;
  int32_t p_precision = 0;          // attnrt_p_precision
  int32_t causal = 1;               // 0: every query row sees every key of its sequence
  int32_t local_window_right = -1;  // causal = 0: keys after the row it sees (-1: all)
  // Quantized caches (int8, float8_e4m3fn or float8_e5m2 with k_scale/v_scale):
  // attnrt_gqa_quant_type and the bit width; 0 for caches of the query's type.
  int32_t quant_type = 0;
  int32_t kv_cache_bit_width = 0;
  bool operator==(const OpKey& other) const;
};

// Sparse MLA's two ops (ATTNRT_OP_SPARSE_MLA_METADATA and ATTNRT_OP_SPARSE_MLA) of one attribute
// set, and the metadata computed for each input signature. Keying metadata by signature is right
// only for calls whose metadata follows from the shapes alone: global slot ids (topk_value_mode 3)
// with cu_seqlens_q = [0, T] and no other value input (block tables, seqused_*, cu_seqlens_*_kv) --
// the one call the operators make (flash_mla_with_kvcache.cpp). The main op checks the metadata it
// is given against its own problem, so a wrong entry is an error, not a wrong result.
class SparseMlaOps {
 public:
  SparseMlaOps(attnrt_op* metadata_op, attnrt_op* op) : metadata_op_(metadata_op), op_(op) {}
  SparseMlaOps(const SparseMlaOps&) = delete;
  SparseMlaOps& operator=(const SparseMlaOps&) = delete;

  // The int32 [ATTNRT_SPARSE_MLA_METADATA_SIZE] metadata for these inputs (the metadata slot
  // empty): cached by signature, else computed (throws the op's error).
  std::shared_ptr<const std::vector<int32_t>> Metadata(const attnrt_tensor* const* inputs,
                                                       size_t num_inputs);
  CachedOp& op() { return op_; }

  uint64_t hits() const;
  uint64_t misses() const;

 private:
  static constexpr size_t kMaxMetadata = 256;
  CachedOp metadata_op_;
  CachedOp op_;
  mutable std::mutex mutex_;
  std::unordered_map<PlanKey, std::shared_ptr<const std::vector<int32_t>>, PlanKeyHash> metadata_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// The attributes of a sparse MLA op pair (every field of attnrt_sparse_mla_attributes).
struct SparseMlaKey {
  attnrt_sparse_mla_attributes attributes;
  bool operator==(const SparseMlaKey& other) const;
};

// Runtime ids: 0 is the library's own runtime; the ids RegisterRuntime returns are > 0, never
// reused. kDefaultRuntime names the one UseRuntime chose (0 until then).
constexpr int64_t kDefaultRuntime = -1;

// ReleaseRuntime drops the runtime's ops and forgets its handle (the runtime is closing), and
// destroys the runtime when the registry owns it; calls that name it then fail with "runtime is
// closed".
int64_t RegisterRuntime(int64_t handle);
// Registers a runtime the registry owns (destroyed by ReleaseRuntime); returns its id (> 0).
int64_t RegisterOwnedRuntime(attnrt_runtime* runtime);
// A runtime whose parallel work runs on torch's intra-op threads (at::parallel_for: OpenMP in
// torch's standard builds) with a team of num_threads (0: at::get_num_threads() now), owned by the
// registry; returns its id. torch.ops.attnrt._torch_threads_runtime.
int64_t TorchThreadsRuntime(int64_t num_threads);
void ReleaseRuntime(int64_t id);
void UseRuntime(int64_t id);

// The paged varlen op of runtime `id` for these attributes, made on first use (throws the
// runtime's error when the attributes are invalid, c10::ValueError for an unknown id).
std::shared_ptr<CachedOp> VarlenOp(int64_t id, const OpKey& key);

// The sparse MLA op pair of runtime `id` for these attributes, made on first use (as VarlenOp).
std::shared_ptr<SparseMlaOps> SparseMlaOpsFor(int64_t id, const SparseMlaKey& key);

// [ops, plan cache hits, plan cache misses] of runtime `id` (for tests and benchmarks; a sparse
// MLA op pair counts as one op, its metadata lookups as its hits and misses).
std::vector<int64_t> RuntimeStats(int64_t id);

}  // namespace attnrt_torch

#endif  // ATTNRT_BINDINGS_TORCH_RUNTIMES_H_
