/*
 * ops.i — every op beyond GroupQueryAttention, the block pool, the sparse MLA token encoders and
 * caller-owned workspaces (part of attnrt.i, shared by Python and Java).
 *
 * Ops of every kind are attnrt_op handles made from their attribute struct; the tensor lists are the
 * same TensorList as for GroupQueryAttention, sized by the op's input and output counts. The block
 * pool and the encoders take their arrays as TensorList slots too, so both languages borrow memory
 * the way they already do for ops (no copy, checked shapes and dtypes, the name of the array in
 * every error).
 */

%{
#include <attnrt/block_pool.h>
#include <attnrt/ops/paged_gqa.h>
#include <attnrt/ops/sparse_mla.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace attnrt_bind {

// A zero-initialized, aligned workspace the caller keeps across runs of one plan (a bound call
// allocates it once instead of the runtime allocating it per run).
class Workspace {
 public:
  Workspace(size_t size, size_t alignment) : size_(size) {
    if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
    if (size == 0) return;
    data_ = ::operator new(size, std::align_val_t(alignment), std::nothrow);
    alignment_ = alignment;
    if (data_ == nullptr) {
      fail(ATTNRT_ERROR_OUT_OF_MEMORY, "workspace: cannot allocate " + std::to_string(size) + " bytes");
      size_ = 0;
      return;
    }
    std::memset(data_, 0, size);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    if (data_ != nullptr) ::operator delete(data_, std::align_val_t(alignment_));
  }
  size_t size() const { return size_; }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = 1;
};

// The tensor at `index` of `list`, checked to be present, compact, on the CPU, of `dtype` and of
// `ndim` dimensions (-1: any); nullptr with the error recorded otherwise.
inline const attnrt_tensor* host_array(const TensorList& list, size_t index, const char* name,
                                       attnrt_dtype dtype, int ndim) {
  const attnrt_tensor* t = list.at(index);
  if (t == nullptr) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name) + " is required");
    return nullptr;
  }
  if (t->device.device_type != ATTNRT_DEVICE_CPU) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name) + ": expected host (CPU) memory");
    return nullptr;
  }
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != 1) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name) + ": expected " +
                                            attnrt_dtype_name(dtype) + ", got " +
                                            attnrt_dtype_name(t->dtype));
    return nullptr;
  }
  if (ndim >= 0 && t->ndim != ndim) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name) + ": expected " + std::to_string(ndim) +
                                            " dimensions, got " + std::to_string(t->ndim));
    return nullptr;
  }
  if (t->strides != nullptr) {
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
      if (t->shape[d] != 1 && t->strides[d] != expected) {
        fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name) + ": expected a compact row-major array");
        return nullptr;
      }
      expected *= t->shape[d];
    }
  }
  return t;
}

inline int64_t element_count(const attnrt_tensor* t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

inline char* host_data(const attnrt_tensor* t) {
  return static_cast<char*>(t->data) + t->byte_offset;
}

constexpr attnrt_dtype kInt32 = ATTNRT_DTYPE_INT32;
constexpr attnrt_dtype kInt64 = ATTNRT_DTYPE_INT64;
constexpr attnrt_dtype kUint8 = ATTNRT_DTYPE_UINT8;

// The kv rows of an encoder call: float32 or bfloat16 [num_tokens, 512] (or [512]: one token).
inline const attnrt_tensor* encoder_rows(const TensorList& list, int64_t* num_tokens) {
  const attnrt_tensor* t = list.at(0);
  if (t == nullptr) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, "kv is required");
    return nullptr;
  }
  const bool bf16 = t->dtype.code == ATTNRT_DTYPE_CODE_BFLOAT && t->dtype.bits == 16;
  constexpr attnrt_dtype kBFloat16 = ATTNRT_DTYPE_BFLOAT16;
  constexpr attnrt_dtype kFloat32 = ATTNRT_DTYPE_FLOAT32;
  const attnrt_dtype dtype = bf16 ? kBFloat16 : kFloat32;
  if (!bf16 && !(t->dtype.code == ATTNRT_DTYPE_CODE_FLOAT && t->dtype.bits == 32)) {
    fail(ATTNRT_ERROR_INVALID_ARGUMENT,
         std::string("kv: expected float32 or bfloat16, got ") + attnrt_dtype_name(t->dtype));
    return nullptr;
  }
  if (host_array(list, 0, "kv", dtype, -1) == nullptr) return nullptr;
  if (t->ndim < 1 || t->ndim > 2 || t->shape[t->ndim - 1] != ATTNRT_SPARSE_MLA_HEAD_DIM) {
    std::string shape;
    for (int d = 0; d < t->ndim; ++d) shape += (d ? ", " : "") + std::to_string(t->shape[d]);
    fail(ATTNRT_ERROR_INVALID_ARGUMENT,
         "kv: expected (num_tokens, 512) or (512), got (" + shape + ")");
    return nullptr;
  }
  *num_tokens = t->ndim == 2 ? t->shape[0] : 1;
  return t;
}

}  // namespace attnrt_bind
%}

/* ---- what SWIG sees of the op headers ----------------------------------------------------------- */

%ignore attnrt_paged_gqa_problem;
%ignore attnrt_paged_gqa_args;
%ignore attnrt_sparse_mla_problem;
%ignore attnrt_sparse_mla_batch;
%ignore attnrt_sparse_mla_args;
%ignore attnrt_block_pool_options;
%ignore attnrt_block_pool_stats;
%rename(PagedGqaAttributes) attnrt_paged_gqa_attributes;
%rename(SparseMlaAttributes) attnrt_sparse_mla_attributes;
#ifdef SWIGJAVA
// Java: the copy is returned as the value class org.attnrt.BlockCopy (bindings/java/org/attnrt/).
%rename(RawBlockCopy) attnrt_block_copy;
#else
%rename(BlockCopy) attnrt_block_copy;
#endif
%rename(BlockPool) attnrt_block_pool;
%rename(Workspace) attnrt_bind::Workspace;
%immutable attnrt_block_copy::src_block;
%immutable attnrt_block_copy::dst_block;
%immutable attnrt_block_copy::num_tokens;

#ifdef SWIGJAVA
%rename(PagedKvLayout) attnrt_paged_kv_layout;
%rename(SparseMlaLayout) attnrt_sparse_mla_layout;
%rename(SparseMlaScenario) attnrt_sparse_mla_scenario;
// The position enums and the mask modes are hand-written Java enums (bindings/java/org/attnrt/):
// SWIG's enum items share one C scope, so PagedGqaInput.QUERY would collide with GqaInput.QUERY
// (and SparseMlaMaskMode.NONE with GqaQuantType.NONE). The others lose their prefix here.
%ignore attnrt_paged_gqa_input;
%ignore attnrt_paged_gqa_output;
%ignore attnrt_sparse_mla_input;
%ignore attnrt_sparse_mla_output;
%ignore attnrt_sparse_mla_mask_mode;
%rename(BSNH) ATTNRT_PAGED_KV_LAYOUT_BSNH;
%rename(BNSH) ATTNRT_PAGED_KV_LAYOUT_BNSH;
%rename(BSND) ATTNRT_SPARSE_MLA_LAYOUT_BSND;
%rename(TND) ATTNRT_SPARSE_MLA_LAYOUT_TND;
%rename(PA_BBND) ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
%rename(SWA) ATTNRT_SPARSE_MLA_SWA;
%rename(CSA) ATTNRT_SPARSE_MLA_CSA;
%rename(HCA) ATTNRT_SPARSE_MLA_HCA;
#endif

%include "attnrt/ops/paged_gqa.h"
%include "attnrt/ops/sparse_mla.h"
%include "attnrt/block_pool.h"

%extend attnrt_paged_gqa_attributes {
  /** Paged GroupQueryAttention attributes: ONNX Runtime's GQA defaults, block_size 0 (to be set),
   *  kv_layout BSNH. */
  attnrt_paged_gqa_attributes() {
    auto* a = new attnrt_paged_gqa_attributes;
    attnrt_paged_gqa_attributes_init(a);
    return a;
  }
  ~attnrt_paged_gqa_attributes() { delete $self; }
}

%extend attnrt_sparse_mla_attributes {
  /** Sparse MLA attributes with the operator's defaults; quant_mode 0 (to be set). */
  attnrt_sparse_mla_attributes() {
    auto* a = new attnrt_sparse_mla_attributes;
    attnrt_sparse_mla_attributes_init(a);
    return a;
  }
  ~attnrt_sparse_mla_attributes() { delete $self; }
}

%extend attnrt_op {
  /**
   * Creates a GroupQueryAttention op over a paged KV cache from validated attributes.
   * Errors: INVALID_ARGUMENT naming the attribute with the expected and actual values.
   */
  attnrt_op(attnrt_runtime* runtime, const attnrt_paged_gqa_attributes* attributes) {
    attnrt_op* op = nullptr;
    if (attnrt_bind::check_open(runtime, "runtime") && attnrt_bind::check_open(attributes, "attributes")) {
      attnrt_bind::check(attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, attributes, &op));
    }
    return op;
  }
  /**
   * Creates paged GroupQueryAttention over packed variable-length batches (varlen true,
   * attnrt/ops/paged_gqa_varlen.h) or the padded paged op (varlen false) from validated attributes.
   */
  attnrt_op(attnrt_runtime* runtime, const attnrt_paged_gqa_attributes* attributes, bool varlen) {
    attnrt_op* op = nullptr;
    if (attnrt_bind::check_open(runtime, "runtime") && attnrt_bind::check_open(attributes, "attributes")) {
      attnrt_bind::check(attnrt_op_create(
          runtime, varlen ? ATTNRT_OP_PAGED_GQA_VARLEN : ATTNRT_OP_PAGED_GQA, attributes, &op));
    }
    return op;
  }
  /**
   * Creates a sparse MLA op (metadata false) or its metadata op (metadata true) from validated
   * attributes. Errors: INVALID_ARGUMENT naming the attribute with the expected and actual values.
   */
  attnrt_op(attnrt_runtime* runtime, const attnrt_sparse_mla_attributes* attributes, bool metadata) {
    attnrt_op* op = nullptr;
    if (attnrt_bind::check_open(runtime, "runtime") && attnrt_bind::check_open(attributes, "attributes")) {
      attnrt_bind::check(attnrt_op_create(
          runtime, metadata ? ATTNRT_OP_SPARSE_MLA_METADATA : ATTNRT_OP_SPARSE_MLA, attributes, &op));
    }
    return op;
  }
}

%extend attnrt_plan {
  /**
   * Runs the plan as run() does, with a caller-owned workspace of at least the plan's
   * workspace_size bytes (the runtime allocates none). Python releases the GIL while it runs.
   */
  void run_in_(const attnrt_bind::TensorList& inputs, const attnrt_bind::TensorList& outputs,
               const attnrt_bind::Workspace& workspace) {
    if (!attnrt_bind::check_open($self, "plan")) return;
    attnrt_status status;
    ATTNRT_BIND_ALLOW_THREADS_BEGIN
    status = attnrt_plan_run($self, inputs.pointers(), inputs.size(), outputs.pointers(),
                             outputs.size(), workspace.data(), workspace.size(), nullptr);
    ATTNRT_BIND_ALLOW_THREADS_END
    attnrt_bind::check(status);
  }
}

namespace attnrt_bind {
/** An aligned, zeroed buffer a caller passes to Plan.run_in on every run of one plan. */
class Workspace {
 public:
  /** `size` bytes aligned to `alignment` (at least the platform's maximal alignment). */
  Workspace(size_t size, size_t alignment);
  ~Workspace();
  /** Size in bytes. */
  size_t size() const;
};
}

/* ---- block pool -------------------------------------------------------------------------------------- */

%nodefaultctor attnrt_block_pool;
%nodefaultdtor attnrt_block_pool;
struct attnrt_block_pool {};

%extend attnrt_block_copy {
  attnrt_block_copy() {
    auto* c = new attnrt_block_copy{};
    c->struct_size = sizeof(attnrt_block_copy);
    return c;
  }
  ~attnrt_block_copy() { delete $self; }
}

%extend attnrt_block_pool {
  /**
   * A pool of `num_blocks` blocks of `block_size` tokens, every block free.
   * Errors: INVALID_ARGUMENT (num_blocks or block_size out of range), OUT_OF_MEMORY.
   */
  attnrt_block_pool(int64_t num_blocks, int32_t block_size) {
    attnrt_block_pool_options options{};
    options.struct_size = sizeof(options);
    options.num_blocks = num_blocks;
    options.block_size = block_size;
    attnrt_block_pool* pool = nullptr;
    attnrt_bind::check(attnrt_block_pool_create(&options, &pool));
    return pool;
  }
  ~attnrt_block_pool() { attnrt_block_pool_destroy($self); }

  /** Adds an empty sequence; returns its id. */
  int64_t add_sequence_() {
    int64_t id = -1;
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_add_sequence($self, &id));
    return id;
  }
  /** Adds a sequence sharing every block and the length of `parent`; returns its id. */
  int64_t fork_(int64_t parent) {
    int64_t id = -1;
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_fork($self, parent, &id));
    return id;
  }
  /** Grows `sequence` by `num_tokens`; `out_copy` receives the copy-on-write rows (num_tokens 0:
   *  none). */
  void append_(int64_t sequence, int64_t num_tokens, attnrt_block_copy* out_copy) {
    if (!attnrt_bind::check_open($self, "block pool") || !attnrt_bind::check_open(out_copy, "out_copy")) return;
    out_copy->struct_size = sizeof(*out_copy);
    attnrt_bind::check(attnrt_block_pool_append($self, sequence, num_tokens, out_copy));
  }
  /** Shortens `sequence` to `new_length` tokens. */
  void truncate_(int64_t sequence, int64_t new_length) {
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_truncate($self, sequence, new_length));
  }
  /** Removes `sequence`, releasing its blocks. */
  void remove_(int64_t sequence) {
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_remove($self, sequence));
  }
  /** Length of `sequence` in tokens. */
  int64_t sequence_length_(int64_t sequence) const {
    int64_t length = 0;
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_sequence_info($self, sequence, &length, nullptr));
    return length;
  }
  /** Number of blocks `sequence` holds. */
  int64_t sequence_num_blocks_(int64_t sequence) const {
    int64_t blocks = 0;
    if (attnrt_bind::check_open($self, "block pool")) attnrt_bind::check(attnrt_block_pool_sequence_info($self, sequence, nullptr, &blocks));
    return blocks;
  }
  /**
   * Writes the block table of the sequences in slot 0 of `arrays` (int64 [n]) into slot 1 (int32
   * [n, max_blocks_per_seq]) and, when slot 2 holds an int32 [n] array, seqlens_k = length - 1.
   */
  void block_table_(const attnrt_bind::TensorList& arrays) const {
    if (!attnrt_bind::check_open($self, "block pool")) return;
    const attnrt_tensor* seqs = attnrt_bind::host_array(arrays, 0, "sequences", attnrt_bind::kInt64, 1);
    if (seqs == nullptr) return;
    const attnrt_tensor* table = attnrt_bind::host_array(arrays, 1, "block_table", attnrt_bind::kInt32, 2);
    if (table == nullptr) return;
    const int64_t n = seqs->shape[0];
    if (table->shape[0] != n) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "block_table: expected " + std::to_string(n) +
                        " rows (one per sequence), got " + std::to_string(table->shape[0]));
      return;
    }
    int32_t* seqlens = nullptr;
    if (arrays.has(2)) {
      const attnrt_tensor* s = attnrt_bind::host_array(arrays, 2, "seqlens_k", attnrt_bind::kInt32, 1);
      if (s == nullptr) return;
      if (s->shape[0] != n) {
        attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "seqlens_k: expected " + std::to_string(n) +
                          " values (one per sequence), got " + std::to_string(s->shape[0]));
        return;
      }
      seqlens = reinterpret_cast<int32_t*>(attnrt_bind::host_data(s));
    }
    attnrt_bind::check(attnrt_block_pool_block_table(
        $self, reinterpret_cast<const int64_t*>(attnrt_bind::host_data(seqs)), static_cast<size_t>(n),
        table->shape[1], reinterpret_cast<int32_t*>(attnrt_bind::host_data(table)), seqlens));
  }
  /** Occupancy counters: 0 num_blocks, 1 block_size, 2 num_sequences, 3 blocks_used, 4 blocks_free,
   *  5 blocks_shared, 6 tokens_held, 7 tokens_stored. */
  int64_t stat_(int32_t which) const {
    attnrt_block_pool_stats s{};
    s.struct_size = sizeof(s);
    if (!attnrt_bind::check_open($self, "block pool") || !attnrt_bind::check(attnrt_block_pool_get_stats($self, &s))) return 0;
    const int64_t values[] = {s.num_blocks, s.block_size, s.num_sequences, s.blocks_used,
                              s.blocks_free, s.blocks_shared, s.tokens_held, s.tokens_stored};
    if (which < 0 || which >= 8) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "which: expected 0..7, got " + std::to_string(which));
      return 0;
    }
    return values[which];
  }
  /** utilization (0) or internal_fragmentation (1). */
  double ratio_(int32_t which) const {
    attnrt_block_pool_stats s{};
    s.struct_size = sizeof(s);
    if (!attnrt_bind::check_open($self, "block pool") || !attnrt_bind::check(attnrt_block_pool_get_stats($self, &s))) return 0;
    return which == 0 ? s.utilization : s.internal_fragmentation;
  }
}

/* ---- sparse MLA token encoders ------------------------------------------------------------------------ */

%inline %{
/**
 * Encodes the kv rows in slot 0 of `arrays` (float32 or bfloat16, (num_tokens, 512) or (512)) into
 * slot 1 (uint8): quant_mode 1 (num_tokens, 608) tokens; quant_mode 3 TQ4 (num_tokens, 258)
 * tokens; quant_mode 2 a block of block_size * 584 bytes (any shape of that many bytes), rows into
 * slots [slot, slot + num_tokens). Every row is validated before any output byte is written.
 */
void sparse_mla_encode(int32_t quant_mode, const attnrt_bind::TensorList& arrays,
                       int64_t block_size = 0, int64_t slot = 0) {
  int64_t n = 0;
  const attnrt_tensor* kv = attnrt_bind::encoder_rows(arrays, &n);
  if (kv == nullptr) return;
  const attnrt_tensor* out = attnrt_bind::host_array(arrays, 1, "out", attnrt_bind::kUint8, -1);
  if (out == nullptr) return;
  const int64_t out_bytes = attnrt_bind::element_count(out);
  const char* rows = attnrt_bind::host_data(kv);
  uint8_t* dst = reinterpret_cast<uint8_t*>(attnrt_bind::host_data(out));
  if (quant_mode == 1 || quant_mode == 3) {
    const int64_t token = quant_mode == 1 ? ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES : ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES;
    if (out_bytes != n * token) {
      attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "out: expected " + std::to_string(n) + " x " +
                        std::to_string(token) + " bytes, got " + std::to_string(out_bytes));
      return;
    }
    attnrt_bind::check(quant_mode == 1
                           ? attnrt_sparse_mla_encode_mode1(rows, kv->dtype, static_cast<size_t>(n), dst)
                           : attnrt_sparse_mla_encode_tq4(rows, kv->dtype, static_cast<size_t>(n), dst));
    return;
  }
  if (quant_mode != 2) {
    attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT,
                      "quant_mode: expected 1, 2 or 3, got " + std::to_string(quant_mode));
    return;
  }
  if (block_size < ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE || block_size > ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) {
    attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT,
                      "block_size: expected 1..1024, got " + std::to_string(block_size));
    return;
  }
  if (out_bytes != block_size * ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES) {
    attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "out: expected one block of " + std::to_string(block_size) +
                      " x 584 bytes, got " + std::to_string(out_bytes));
    return;
  }
  if (slot < 0 || n > block_size - slot) {
    attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "slot: rows [" + std::to_string(slot) + ", " +
                      std::to_string(slot + n) + ") do not fit a block of " + std::to_string(block_size));
    return;
  }
  // The C encoder writes one row per call: encode into a copy so that a bad row leaves `out` whole.
  std::vector<uint8_t> block(dst, dst + out_bytes);
  const size_t row_bytes = static_cast<size_t>(kv->dtype.bits / 8) * ATTNRT_SPARSE_MLA_HEAD_DIM;
  for (int64_t i = 0; i < n; ++i) {
    attnrt_status status = attnrt_sparse_mla_encode_mode2(rows + i * row_bytes, kv->dtype, block.data(),
                                                          block_size, slot + i);
    if (status != ATTNRT_OK) {
      attnrt_bind::fail(status, "kv row " + std::to_string(i) + ": " + attnrt_last_error_message());
      return;
    }
  }
  std::memcpy(dst, block.data(), block.size());
}

/** TQ4 codebook value `index` (0..15, ascending). */
float sparse_mla_tq4_codebook(int32_t index) {
  if (index < 0 || index >= 16) {
    attnrt_bind::fail(ATTNRT_ERROR_INVALID_ARGUMENT, "index: expected 0..15, got " + std::to_string(index));
    return 0.0f;
  }
  return attnrt_sparse_mla_tq4_codebook()[index];
}

/** The reference op's name of input `index` of op kind `kind`, "" when out of range. */
const char* op_input_name(int32_t kind, size_t index) {
  const char* name = attnrt_op_input_name(kind, index);
  return name ? name : "";
}
/** The reference op's name of output `index` of op kind `kind`, "" when out of range. */
const char* op_output_name(int32_t kind, size_t index) {
  const char* name = attnrt_op_output_name(kind, index);
  return name ? name : "";
}
%}
