// GGML_OP_FLASH_ATTN_EXT on attnrt's paged GroupQueryAttention (docs/llama-cpp.md).
//
// A node is served by planning attnrt's ATTNRT_OP_PAGED_GQA for it: every query row sees every key
// of its stream (causal = 0) plus ggml's additive F16 mask as attention_bias, the K/V views read in
// place as one block pool per stream (their token and head strides as they are), the pool's blocks
// in order (block_table 0, 1, 2, ...). Whatever attnrt's planner refuses is declined, so the node
// stays on the CPU backend; the claim is decided from shapes, types and strides alone, which is all
// ggml's scheduler knows when it asks.
#ifndef ATTNRT_GGML_FLASH_ATTN_EXT_H_
#define ATTNRT_GGML_FLASH_ATTN_EXT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/attnrt.h"
#include "ggml.h"

namespace attnrt_ggml {

// Every attnrt object the backend uses, made on first use. Thread-safe: ggml's scheduler asks
// supports_op while a backend may be computing.
class FlashAttnServer {
 public:
  FlashAttnServer();
  ~FlashAttnServer();
  FlashAttnServer(const FlashAttnServer&) = delete;
  FlashAttnServer& operator=(const FlashAttnServer&) = delete;

  // Whether attnrt serves `node` (a FLASH_ATTN_EXT node); when not, *reason says why.
  bool Supports(const ggml_tensor* node, std::string* reason);

  // Computes `node` with a team of n_threads on the caller's OpenMP threads. Returns "" or the
  // error; on an error the node's output is not meaningful and the caller fails the graph.
  std::string Compute(const ggml_tensor* node, int n_threads);

  // Nodes computed since the library was loaded, and attnrt calls that ran causal attention
  // because the mask hid every key after the diagonal (tests and diagnostics).
  uint64_t nodes_computed() const;
  uint64_t causal_calls() const;
  // Output rows computed again by ggml's own algorithm (ggml_rows.h).
  uint64_t ggml_rows() const;

 private:
  struct Runtime;
  // The runtime for a team size (its ops keyed by attributes), created on first use.
  Runtime* RuntimeFor(int n_threads, std::string* error);

  std::mutex mutex_;
  std::map<int, std::unique_ptr<Runtime>> runtimes_;
  std::atomic<uint64_t> nodes_computed_{0};
  std::atomic<uint64_t> causal_calls_{0};
  std::atomic<uint64_t> ggml_rows_{0};
};

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_FLASH_ATTN_EXT_H_
