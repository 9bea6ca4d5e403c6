// GGML_OP_FLASH_ATTN_EXT on attnrt's paged GroupQueryAttention (see flash_attn_ext.h).
//
// ggml's node (ggml.h, ggml_flash_attn_ext): q F32 [D, S, H, B] (any row strides), k and v
// [D, T, Hkv, B] views of a KV cache with contiguous rows, an optional F16 additive mask
// [>= T, >= S, H / r2, B / r3] broadcast over heads and streams by modulo, optional F32 sinks [H],
// op_params scale, max_bias (ALiBi), logit_softcap; the output F32 [D, H, S, B] contiguous. Per
// stream b and head h, row i: softmax over the keys of (scale * q.k, then softcap, then + mask)
// with the sink as one more logit, times V; keys of head h are those of kv head h / (H / Hkv).
//
// attnrt's paged GroupQueryAttention computes exactly that with causal = 0, the mask as
// attention_bias (B|1, N|1, S, T) and the sinks as head_sink, over the K/V views taken in place as
// block pools. Its query, bias, sink and output are of the cache's type, so q (and the output) are
// converted once per call; ggml's CPU backend converts q to the cache's type too. Q8_0/Q4_0 K/V are
// attnrt's PER_BLOCK_32 caches, dequantized in the kernels as they read them, under a float32
// query (ggml's CPU backend quantizes q to Q8_0 for them instead).
#include "flash_attn_ext.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "convert.h"
#include "ggml_rows.h"
#include "node_shape.h"
#include "sparse_mask.h"
#include "views.h"

namespace attnrt_ggml {
namespace {

// Runs every member of the team on OpenMP threads: the same team ggml's CPU backend uses, so its
// threads are the ones doing attnrt's work instead of spinning beside it.
void OmpExecutor(void* /*context*/, int32_t team_size, attnrt_team_fn fn, void* user_data) {
#pragma omp parallel num_threads(team_size)
  fn(user_data, omp_get_thread_num());
}

// ATTNRT_GGML_THREADS=pool (read once): attnrt's own thread pool instead of the host's OpenMP
// team, to measure what sharing the team saves.
bool OwnPool() {
  static const bool on = [] {
    const char* v = std::getenv("ATTNRT_GGML_THREADS");
    return v != nullptr && std::strcmp(v, "pool") == 0;
  }();
  return on;
}

std::string AttnrtError(attnrt_status status) {
  return std::string(attnrt_status_name(status)) + ": " + attnrt_last_error_message();
}

using OpKey =
    std::tuple<int64_t, int64_t, int64_t, int32_t, float, float, bool, int32_t, bool, int32_t>;

OpKey KeyOf(const NodeShape& s, bool causal) {
  return {s.num_heads, s.kv_num_heads, s.block_size, s.kv_layout, s.scale,
          s.softcap,   causal,         s.kv_bits,    s.two_types, s.v_bits};
}

// Whether rows [r0, r0 + rows) of the mask hide every key after the causal diagonal attnrt aligns
// bottom-right (row i sees keys j <= T - rows + i): then causal attention with the same bias gives
// the same result and skips the hidden tiles. -inf only: a NaN there must still reach the output.
bool MaskIsCausal(const ggml_tensor* mask, int64_t stream, int64_t r0, int64_t rows,
                  int64_t total) {
  constexpr uint16_t kMinusInf = 0xFC00;
  const char* base = static_cast<const char*>(mask->data) + (stream % mask->ne[3]) * mask->nb[3];
  for (int64_t h = 0; h < mask->ne[2]; ++h) {
    for (int64_t i = 0; i < rows; ++i) {
      const char* row = base + h * mask->nb[2] + (r0 + i) * mask->nb[1];
      for (int64_t j = total - rows + i + 1; j < total; ++j) {
        uint16_t bits;  // copied: the mask may start at any byte
        std::memcpy(&bits, row + j * sizeof bits, sizeof bits);
        if (bits != kMinusInf) return false;
      }
    }
  }
  return true;
}

// The attnrt tensors of one call: `batch` sequences of `q_rows` query rows over `keys` keys of one
// stream (one sequence of every key, or a sparse mask's one-row sequences of their visible keys).
// Data pointers are set by the caller (planning reads none).
struct CallTensors {
  int64_t query_shape[3];
  int64_t kv_new_shape[3];
  int64_t v_new_shape[3];
  int64_t output_shape[3];
  int64_t one[1] = {1};
  int64_t batch_shape[1];
  int64_t bias_shape[4];
  int64_t sink_shape[1];
  int64_t table_shape[2];
  attnrt_tensor query{}, key{}, value{}, key_cache{}, value_cache{}, seqlens_k{}, total{}, bias{},
      sink{}, block_table{}, output{};
  const attnrt_tensor* inputs[ATTNRT_PAGED_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* outputs[1] = {};

  CallTensors(const NodeShape& s, int64_t batch, int64_t q_rows, int64_t keys) {
    const attnrt_device host = {ATTNRT_DEVICE_CPU, 0};
    const attnrt_dtype i32 = ATTNRT_DTYPE_INT32;
    auto make = [&](attnrt_tensor* t, int32_t ndim, const int64_t* shape, attnrt_dtype dtype,
                    const int64_t* strides = nullptr) {
      t->device = host;
      t->ndim = ndim;
      t->shape = shape;
      t->dtype = dtype;
      t->strides = strides;
    };
    query_shape[0] = batch;
    query_shape[1] = q_rows;
    query_shape[2] = s.num_heads * s.head_size;
    kv_new_shape[0] = batch;
    kv_new_shape[1] = 0;
    kv_new_shape[2] = s.kv_num_heads * s.head_size;
    v_new_shape[0] = batch;
    v_new_shape[1] = 0;
    v_new_shape[2] = s.kv_num_heads * s.v_head_size;
    output_shape[0] = batch;
    output_shape[1] = q_rows;
    output_shape[2] = s.num_heads * s.v_head_size;
    batch_shape[0] = batch;
    bias_shape[0] = batch;
    bias_shape[1] = s.bias_heads;
    bias_shape[2] = q_rows;
    bias_shape[3] = keys;
    sink_shape[0] = s.num_heads;
    table_shape[0] = batch;
    table_shape[1] = keys / s.block_size;
    make(&query, 3, query_shape, s.dtype);
    make(&key, 3, kv_new_shape, s.dtype);
    make(&value, 3, v_new_shape, s.dtype);
    make(&key_cache, 4, s.pool_shape, s.cache_dtype, s.k_strides);
    make(&value_cache, 4, s.v_pool_shape, s.v_cache_dtype, s.v_strides);
    make(&seqlens_k, 1, batch_shape, i32);
    make(&total, 1, one, i32);
    make(&bias, 4, bias_shape, s.dtype);
    make(&sink, 1, sink_shape, s.dtype);
    make(&block_table, 2, table_shape, i32);
    make(&output, 3, output_shape, s.dtype);
    inputs[ATTNRT_PAGED_GQA_INPUT_QUERY] = &query;
    inputs[ATTNRT_PAGED_GQA_INPUT_KEY] = &key;
    inputs[ATTNRT_PAGED_GQA_INPUT_VALUE] = &value;
    inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = &key_cache;
    inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = &value_cache;
    inputs[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = &seqlens_k;
    inputs[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &total;
    inputs[ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS] = s.bias_heads > 0 ? &bias : nullptr;
    inputs[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = s.sinks ? &sink : nullptr;
    inputs[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = &block_table;
    outputs[0] = &output;
  }
};

// The test-only fault ATTNRT_GGML_TEST_FAULT names (read once; "" without one): "output" adds 1 to
// the first element of every node's output, so that a comparison with ggml's own CPU backend must
// fail; "last-key" makes every row miss the last key of its stream, an off-by-one in the key range
// that end-to-end checks must catch.
const std::string& TestFault() {
  static const std::string fault = [] {
    const char* v = std::getenv("ATTNRT_GGML_TEST_FAULT");
    return std::string(v != nullptr ? v : "");
  }();
  return fault;
}

// Buffers of a call, kept per thread across calls: a prompt's bias is megabytes, and fresh pages
// for every layer cost more than filling them.
struct Scratch {
  std::vector<char> query, output, bias;
  std::vector<uint16_t> q_rounded;  // a q row in K's 16-bit type (NodeShape::q_rounding)
  SparseRows sparse;
  std::vector<uint8_t> inexact, inexact_heads;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

struct FlashAttnServer::Runtime {
  attnrt_runtime* runtime = nullptr;
  std::map<OpKey, attnrt_op*> ops;
  ~Runtime() {
    for (auto& entry : ops) attnrt_op_destroy(entry.second);
    attnrt_runtime_destroy(runtime);
  }
  attnrt_op* OpFor(const NodeShape& s, bool causal, std::string* error) {
    const OpKey key = KeyOf(s, causal);
    auto it = ops.find(key);
    if (it != ops.end()) return it->second;
    attnrt_paged_gqa_attributes a;
    attnrt_paged_gqa_attributes_init(&a);
    a.gqa.num_heads = static_cast<int32_t>(s.num_heads);
    a.gqa.kv_num_heads = static_cast<int32_t>(s.kv_num_heads);
    a.gqa.causal = causal ? 1 : 0;
    a.gqa.scale = s.scale;
    a.gqa.softcap = s.softcap;
    if (s.kv_bits != 0) {
      a.gqa.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
      a.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
      a.gqa.kv_cache_bit_width = s.kv_bits;
    }
    if (s.two_types) {  // V's own type (ABI 1.9)
      a.gqa.v_quant_type = s.v_bits != 0 ? ATTNRT_GQA_QUANT_PER_BLOCK_32 : ATTNRT_GQA_QUANT_NONE;
      a.v_cache_own_type = 1;
      a.v_cache_bit_width = s.v_bits;
    }
    a.block_size = static_cast<int32_t>(s.block_size);
    a.kv_layout = s.kv_layout;
    attnrt_op* op = nullptr;
    const attnrt_status status = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &a, &op);
    if (status != ATTNRT_OK) {
      *error = AttnrtError(status);
      return nullptr;
    }
    ops.emplace(key, op);
    return op;
  }
};

FlashAttnServer::FlashAttnServer() = default;
FlashAttnServer::~FlashAttnServer() = default;

uint64_t FlashAttnServer::causal_calls() const {
  return causal_calls_.load(std::memory_order_relaxed);
}

uint64_t FlashAttnServer::ggml_rows() const { return ggml_rows_.load(std::memory_order_relaxed); }

uint64_t FlashAttnServer::nodes_computed() const {
  return nodes_computed_.load(std::memory_order_relaxed);
}

FlashAttnServer::Runtime* FlashAttnServer::RuntimeFor(int n_threads, std::string* error) {
  auto it = runtimes_.find(n_threads);
  if (it != runtimes_.end()) return it->second.get();
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = n_threads;
  if (n_threads > 1 && !OwnPool()) options.executor = OmpExecutor;
  auto runtime = std::make_unique<Runtime>();
  const attnrt_status status = attnrt_runtime_create(&options, &runtime->runtime);
  if (status != ATTNRT_OK) {
    *error = "creating an attnrt runtime: " + AttnrtError(status);
    return nullptr;
  }
  Runtime* raw = runtime.get();
  runtimes_.emplace(n_threads, std::move(runtime));
  return raw;
}

bool FlashAttnServer::Supports(const ggml_tensor* node, std::string* reason) {
  NodeShape s;
  if (!Describe(node, &s, reason)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Runtime* rt = RuntimeFor(omp_get_max_threads(), reason);
  if (rt == nullptr) return false;
  attnrt_op* op = rt->OpFor(s, /*causal=*/false, reason);
  if (op == nullptr) return false;
  // Planning reads shapes, types and strides only; any aligned address stands for the data.
  alignas(64) static char placeholder[64];
  CallTensors t(s, s.sparse ? s.rows_per_call : 1, s.sparse ? 1 : s.rows_per_call,
                s.sparse ? s.n_kv_max : s.total);
  for (const attnrt_tensor* in : t.inputs) {
    if (in != nullptr) const_cast<attnrt_tensor*>(in)->data = placeholder;
  }
  t.output.data = placeholder;
  attnrt_plan* plan = nullptr;
  const attnrt_status status =
      attnrt_op_plan(op, t.inputs, ATTNRT_PAGED_GQA_NUM_INPUTS, t.outputs, 1, &plan);
  if (status != ATTNRT_OK) {
    *reason = "attnrt declines: " + AttnrtError(status);
    return false;
  }
  attnrt_plan_release(plan);
  return true;
}

std::string FlashAttnServer::Compute(const ggml_tensor* node, int n_threads) {
  NodeShape s;
  std::string error;
  if (!Describe(node, &s, &error)) return error;
  attnrt_op* op = nullptr;         // every key of the stream, the mask deciding
  attnrt_op* causal_op = nullptr;  // the same where the mask hides the keys after the diagonal
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Runtime* rt = RuntimeFor(std::max(1, n_threads), &error);
    if (rt == nullptr) return error;
    op = rt->OpFor(s, /*causal=*/false, &error);
    if (op == nullptr) return error;
    if (node->src[3] != nullptr && !s.sparse) causal_op = rt->OpFor(s, /*causal=*/true, &error);
  }
  nodes_computed_.fetch_add(1, std::memory_order_relaxed);
  const ggml_tensor* q = node->src[0];
  const ggml_tensor* k = node->src[1];
  const ggml_tensor* v = node->src[2];
  const ggml_tensor* mask = node->src[3];
  const ggml_tensor* sinks = node->src[4];
  const size_t es = s.dtype.bits / 8;
  const int64_t width = s.num_heads * s.head_size;        // of a query row
  const int64_t out_width = s.num_heads * s.v_head_size;  // of an output row
  // A mask not read in place is converted into a bias of bias_heads x rows x T elements per call
  // (an ALiBi prompt of 512 rows over 32k keys and 32 heads: 1 GiB at once); rows are taken in
  // calls that keep it within kMaxBiasBytes.
  // The mask is attention_bias as it lies where it is float16 rows of exactly T entries on an
  // element boundary, without ALiBi's slopes: shared by the heads, or one per head when a call
  // takes all its rows.
  const bool mask_is_bias = mask != nullptr && s.dtype.code == ATTNRT_DTYPE_CODE_FLOAT &&
                            s.dtype.bits == 16 && s.max_bias == 0.0f && mask->ne[0] == s.total &&
                            Misalignment(mask) == 0;
  if (mask != nullptr && !s.sparse && !(mask_is_bias && s.bias_heads == 1)) {
    const int64_t row_bytes = s.bias_heads * s.total * static_cast<int64_t>(es);
    s.rows_per_call = std::min(s.rows_per_call, std::max<int64_t>(1, kMaxBiasBytes / row_bytes));
  }

  // V may be a view of K (MLA: V rows are the leading elements of K rows): attnrt reads both
  // pools in place, and a call that writes no rows may read them from shared elements.
  Scratch& scratch = ThreadScratch();

  std::vector<char>& query = scratch.query;
  std::vector<uint16_t>& q_rounded = scratch.q_rounded;
  if (s.q_rounding.bits == 16) q_rounded.resize(static_cast<size_t>(s.head_size));
  query.resize(static_cast<size_t>(s.rows_per_call * width) * es);
  // f32 output written in place where it lies on an element boundary, else through a buffer.
  const bool out_in_place = s.dtype.bits == 32 && Misalignment(node) == 0;
  std::vector<char>& output = scratch.output;
  output.resize(out_in_place ? 0 : static_cast<size_t>(s.rows_per_call * out_width) * es);
  std::vector<char>& bias = scratch.bias;
  const int team = std::max(1, n_threads);
  std::vector<char> sink(static_cast<size_t>(s.num_heads) * es);
  if (s.sinks) FromFloat(static_cast<const float*>(sinks->data), sink.data(), s.num_heads, s.dtype);
  const bool drop_last_key = TestFault() == "last-key";
  // Every key of the stream in order (a sparse mask's rows have tables of their own).
  std::vector<int32_t> table(static_cast<size_t>(s.sparse ? 0 : s.num_blocks));
  for (size_t j = 0; j < table.size(); ++j) table[j] = static_cast<int32_t>(j);
  int32_t seqlens_k = static_cast<int32_t>(s.total - (drop_last_key && s.total > 1 ? 2 : 1));
  int32_t total = static_cast<int32_t>(s.total);
  SparseRows& sparse = scratch.sparse;
  static char no_rows[64];

  for (int64_t b = 0; b < s.streams; ++b) {
    for (int64_t r0 = 0; r0 < s.rows; r0 += s.rows_per_call) {
      const int64_t rows = std::min(s.rows_per_call, s.rows - r0);
      if (s.sparse) {
        GatherSparseRows(mask, b, r0, rows, s.total, s.bias_heads, s.num_heads, s.max_bias, s.dtype,
                         /*shift=*/!s.sinks, team, &sparse);
        total = static_cast<int32_t>(sparse.keys);
        for (int32_t& n : sparse.seqlens_k) n -= drop_last_key && n > 0 ? 1 : 0;
      }
      // Sparse: one sequence per query row, of its visible keys; else one of every key.
      CallTensors t(s, s.sparse ? rows : 1, s.sparse ? 1 : rows, s.sparse ? sparse.keys : s.total);
      // q rows [r0, r0 + rows) of stream b to (1, rows, H * D) in T.
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t h = 0; h < s.num_heads; ++h) {
          const float* src =
              reinterpret_cast<const float*>(static_cast<const char*>(q->data) +
                                             (r0 + i) * q->nb[1] + h * q->nb[2] + b * q->nb[3]);
          char* dst = query.data() + static_cast<size_t>((i * s.num_heads + h) * s.head_size) * es;
          if (s.q_rounding.bits == 16) {  // to K's type and back to the float32 query
            FromFloat(src, q_rounded.data(), s.head_size, s.q_rounding);
            ToFloat(q_rounded.data(), reinterpret_cast<float*>(dst), s.head_size, s.q_rounding);
          } else {
            FromFloat(src, dst, s.head_size, s.dtype);
          }
        }
      }
      t.query.data = query.data();
      t.key.data = no_rows;
      t.value.data = no_rows;
      t.key_cache.data = static_cast<char*>(k->data) + b * k->nb[3];
      t.value_cache.data = static_cast<char*>(v->data) + b * v->nb[3];
      t.seqlens_k.data = s.sparse ? sparse.seqlens_k.data() : &seqlens_k;
      t.total.data = &total;
      t.block_table.data = s.sparse ? sparse.table.data() : table.data();
      t.sink.data = sink.data();
      // Rows whose converted mask rounding moved too far (MaskRow): computed as ggml does.
      std::vector<uint8_t>& inexact = scratch.inexact;
      inexact.assign(static_cast<size_t>(rows), 0);
      std::vector<uint8_t>& inexact_heads = scratch.inexact_heads;
      if (s.sparse) {
        t.bias.data = sparse.bias.data();
      } else if (mask != nullptr) {
        const char* base = static_cast<const char*>(mask->data) + (b % mask->ne[3]) * mask->nb[3];
        const bool in_place =
            mask_is_bias &&
            (s.bias_heads == 1 || (mask->ne[2] == s.num_heads && mask->ne[1] == rows && r0 == 0));
        if (in_place) {
          t.bias.data = const_cast<char*>(base + r0 * mask->nb[1]);
        } else {
          bias.resize(static_cast<size_t>(s.bias_heads * rows * s.total) * es);
          // Rows converted on the team (a prompt's bias is rows x T elements per head).
          const int64_t bias_rows = s.bias_heads * rows;
          inexact_heads.assign(static_cast<size_t>(bias_rows), 0);
#pragma omp parallel num_threads(team)
          {
            std::vector<float> row(static_cast<size_t>(s.total));
#pragma omp for schedule(static)
            for (int64_t hi = 0; hi < bias_rows; ++hi) {
              const int64_t h = hi / rows;
              const int64_t i = hi % rows;
              if (!MaskRow(reinterpret_cast<const ggml_fp16_t*>(base + (r0 + i) * mask->nb[1] +
                                                                (h % mask->ne[2]) * mask->nb[2]),
                           bias.data() + static_cast<size_t>(hi * s.total) * es, s.total, s.dtype,
                           AlibiSlope(s.max_bias, s.num_heads, h), /*shift=*/!s.sinks,
                           row.data())) {
                inexact_heads[static_cast<size_t>(hi)] = 1;
              }
            }
          }
          for (int64_t hi = 0; hi < bias_rows; ++hi) {
            if (inexact_heads[static_cast<size_t>(hi)] != 0)
              inexact[static_cast<size_t>(hi % rows)] = 1;
          }
          t.bias.data = bias.data();
        }
      }
      // The output (1, rows, H * D) is the node's rows [r0, r0 + rows) of stream b: in place for
      // f32, else converted after the run.
      char* dst = static_cast<char*>(node->data) + b * node->nb[3] + r0 * node->nb[2];
      t.output.data = out_in_place ? static_cast<void*>(dst) : output.data();

      attnrt_plan* plan = nullptr;
      attnrt_status status = ATTNRT_ERROR_UNSUPPORTED;
      if (causal_op != nullptr && rows > 1 && MaskIsCausal(mask, b, r0, rows, s.total)) {
        status =
            attnrt_op_plan(causal_op, t.inputs, ATTNRT_PAGED_GQA_NUM_INPUTS, t.outputs, 1, &plan);
        if (status == ATTNRT_OK) causal_calls_.fetch_add(1, std::memory_order_relaxed);
      }
      if (status != ATTNRT_OK) {
        status = attnrt_op_plan(op, t.inputs, ATTNRT_PAGED_GQA_NUM_INPUTS, t.outputs, 1, &plan);
      }
      if (status == ATTNRT_OK) {
        status = attnrt_plan_run(plan, t.inputs, ATTNRT_PAGED_GQA_NUM_INPUTS, t.outputs, 1, nullptr,
                                 0, nullptr);
        attnrt_plan_release(plan);
      }
      if (status != ATTNRT_OK) return "attnrt: " + AttnrtError(status);
      if (!out_in_place)
        ToFloat(output.data(), reinterpret_cast<float*>(dst), rows * out_width, s.dtype);
      // Rows attnrt's answer cannot stand for (ggml_rows.h): computed again as ggml does.
      const uint8_t* redo = s.sparse ? sparse.inexact.data() : inexact.data();
      ggml_rows_.fetch_add(RedoRowsAsGgml(node, b, r0, rows, dst, redo), std::memory_order_relaxed);
    }
  }
  if (TestFault() == "output") static_cast<float*>(node->data)[0] += 1.0f;
  return {};
}

}  // namespace attnrt_ggml
