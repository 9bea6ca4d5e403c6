/*
 * crosscheck.c — the reference half of bindings.java's bitwise check (CrossCheckTest.java): runs
 * paged GQA (a prompt then two decode steps over a block pool) and sparse MLA (quant_mode 1, HCA,
 * with its metadata) through the C ABI on inputs from a seeded LCG that the Java test reproduces,
 * and writes the outputs as raw bytes: DIR/paged_gqa.bin, DIR/sparse_mla.bin.
 * Usage: attnrt_java_crosscheck DIR. Pure C11 over the C ABI.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnrt/attnrt.h"
#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/sparse_mla.h"

#define CHECK(call)                                                       \
  do {                                                                    \
    attnrt_status status_ = (call);                                       \
    if (status_ != ATTNRT_OK) {                                           \
      fprintf(stderr, "%s: %s: %s\n", #call, attnrt_status_name(status_), \
              attnrt_last_error_message());                               \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

/* The generator CrossCheckTest.java repeats: values in [-1, 1). */
static uint32_t seed;
static float next_value(void) {
  seed = seed * 1103515245u + 12345u;
  return (float)((seed >> 8) & 0xFFFFu) / 32768.0f - 1.0f;
}
static float* random_floats(size_t count) {
  float* values = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) values[i] = next_value();
  return values;
}
static uint16_t bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

static const attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
static const attnrt_dtype kBf16 = ATTNRT_DTYPE_BFLOAT16;
static const attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
static const attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;

typedef struct {
  attnrt_tensor tensor;
  int64_t shape[4];
} tensor_slot;

static const attnrt_tensor* describe(tensor_slot* slot, void* data, attnrt_dtype dtype, int ndim,
                                     int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t dims[4] = {d0, d1, d2, d3};
  memset(slot, 0, sizeof *slot);
  memcpy(slot->shape, dims, sizeof dims);
  slot->tensor.data = data;
  slot->tensor.device.device_type = ATTNRT_DEVICE_CPU;
  slot->tensor.ndim = ndim;
  slot->tensor.dtype = dtype;
  slot->tensor.shape = slot->shape;
  return &slot->tensor;
}

static void write_file(const char* dir, const char* name, const void* data, size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

enum { N = 4, NKV = 2, H = 16, BLOCK = 4, NUM_BLOCKS = 8, MAX_BLOCKS = 4, PROMPT = 6, STEPS = 2 };

static void paged_gqa(attnrt_runtime* rt, const char* dir) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = N;
  a.gqa.kv_num_heads = NKV;
  a.block_size = BLOCK;
  attnrt_op* op = NULL;
  CHECK(attnrt_op_create(rt, ATTNRT_OP_PAGED_GQA, &a, &op));
  attnrt_block_pool_options po = {sizeof po, NUM_BLOCKS, BLOCK};
  attnrt_block_pool* pool = NULL;
  CHECK(attnrt_block_pool_create(&po, &pool));
  int64_t seq = 0;
  CHECK(attnrt_block_pool_add_sequence(pool, &seq));

  const size_t pool_floats = (size_t)NUM_BLOCKS * BLOCK * NKV * H;
  float* key_cache = calloc(pool_floats, sizeof(float));
  float* value_cache = calloc(pool_floats, sizeof(float));
  const size_t out_floats = (size_t)(PROMPT + STEPS) * N * H;
  float* outputs = calloc(out_floats, sizeof(float));
  float* out = outputs;
  seed = 11;
  for (int step = 0; step <= STEPS; ++step) {
    const int s = step == 0 ? PROMPT : 1;
    float* q = random_floats((size_t)s * N * H);
    float* k = random_floats((size_t)s * NKV * H);
    float* v = random_floats((size_t)s * NKV * H);
    attnrt_block_copy copy = {sizeof copy, 0, 0, 0};
    CHECK(attnrt_block_pool_append(pool, seq, s, &copy));
    int32_t table[MAX_BLOCKS];
    int32_t seqlens_k = 0;
    CHECK(attnrt_block_pool_block_table(pool, &seq, 1, MAX_BLOCKS, table, &seqlens_k));
    int32_t total = seqlens_k + 1;
    tensor_slot slots[8];
    const attnrt_tensor* in[ATTNRT_PAGED_GQA_NUM_INPUTS] = {0};
    const attnrt_tensor* outs[ATTNRT_PAGED_GQA_NUM_OUTPUTS] = {0};
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = describe(&slots[0], q, kF32, 3, 1, s, N * H, 0);
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = describe(&slots[1], k, kF32, 3, 1, s, NKV * H, 0);
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = describe(&slots[2], v, kF32, 3, 1, s, NKV * H, 0);
    in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] =
        describe(&slots[3], key_cache, kF32, 4, NUM_BLOCKS, BLOCK, NKV, H);
    in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
        describe(&slots[4], value_cache, kF32, 4, NUM_BLOCKS, BLOCK, NKV, H);
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = describe(&slots[5], &seqlens_k, kI32, 1, 1, 0, 0, 0);
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] =
        describe(&slots[6], &total, kI32, 1, 1, 0, 0, 0);
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] =
        describe(&slots[7], table, kI32, 2, 1, MAX_BLOCKS, 0, 0);
    tensor_slot out_slot;
    outs[ATTNRT_PAGED_GQA_OUTPUT_OUTPUT] = describe(&out_slot, out, kF32, 3, 1, s, N * H, 0);
    attnrt_plan* plan = NULL;
    CHECK(attnrt_op_plan(op, in, ATTNRT_PAGED_GQA_NUM_INPUTS, outs, ATTNRT_PAGED_GQA_NUM_OUTPUTS,
                         &plan));
    CHECK(attnrt_plan_run(plan, in, ATTNRT_PAGED_GQA_NUM_INPUTS, outs, ATTNRT_PAGED_GQA_NUM_OUTPUTS,
                          NULL, 0, NULL));
    attnrt_plan_release(plan);
    out += (size_t)s * N * H;
    free(q);
    free(k);
    free(v);
  }
  /* The outputs of every run, then both pools. */
  const size_t bytes = out_floats * sizeof(float) + 2 * pool_floats * sizeof(float);
  char* all = malloc(bytes);
  memcpy(all, outputs, out_floats * sizeof(float));
  memcpy(all + out_floats * sizeof(float), key_cache, pool_floats * sizeof(float));
  memcpy(all + out_floats * sizeof(float) + pool_floats * sizeof(float), value_cache,
         pool_floats * sizeof(float));
  write_file(dir, "paged_gqa.bin", all, bytes);
  free(all);
  free(outputs);
  free(key_cache);
  free(value_cache);
  attnrt_block_pool_destroy(pool);
  attnrt_op_destroy(op);
}

enum { MN = 8, D = 512, S2 = 16, RATIO = 4, C = S2 / RATIO, TOKEN = 608 };

static void sparse_mla(attnrt_runtime* rt, const char* dir) {
  seed = 7;
  uint16_t* q = malloc((size_t)MN * D * sizeof(uint16_t));
  for (size_t i = 0; i < (size_t)MN * D; ++i) q[i] = bf16(next_value());
  float* ori_rows = random_floats((size_t)S2 * D);
  float* cmp_rows = random_floats((size_t)C * D);
  uint8_t* ori_kv = malloc((size_t)S2 * TOKEN);
  uint8_t* cmp_kv = malloc((size_t)C * TOKEN);
  CHECK(attnrt_sparse_mla_encode_mode1(ori_rows, kF32, S2, ori_kv));
  CHECK(attnrt_sparse_mla_encode_mode1(cmp_rows, kF32, C, cmp_kv));

  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = 1;
  a.cmp_ratio = RATIO;
  a.ori_mask_mode = ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW;
  a.ori_win_left = 7;
  a.ori_win_right = 0;
  a.cmp_mask_mode = ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL;
  attnrt_op* meta_op = NULL;
  attnrt_op* op = NULL;
  CHECK(attnrt_op_create(rt, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &meta_op));
  CHECK(attnrt_op_create(rt, ATTNRT_OP_SPARSE_MLA, &a, &op));

  tensor_slot slots[4];
  const attnrt_tensor* in[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {0};
  in[ATTNRT_SPARSE_MLA_INPUT_Q] = describe(&slots[0], q, kBf16, 4, 1, 1, MN, D);
  in[ATTNRT_SPARSE_MLA_INPUT_ORI_KV] = describe(&slots[1], ori_kv, kU8, 4, 1, S2, 1, TOKEN);
  in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV] = describe(&slots[2], cmp_kv, kU8, 4, 1, C, 1, TOKEN);
  int32_t metadata[ATTNRT_SPARSE_MLA_METADATA_SIZE];
  tensor_slot meta_slot;
  const attnrt_tensor* meta_out[1] = {
      describe(&meta_slot, metadata, kI32, 1, ATTNRT_SPARSE_MLA_METADATA_SIZE, 0, 0, 0)};
  attnrt_plan* plan = NULL;
  CHECK(attnrt_op_plan(meta_op, in, ATTNRT_SPARSE_MLA_NUM_INPUTS, meta_out, 1, &plan));
  CHECK(attnrt_plan_run(plan, in, ATTNRT_SPARSE_MLA_NUM_INPUTS, meta_out, 1, NULL, 0, NULL));
  attnrt_plan_release(plan);

  in[ATTNRT_SPARSE_MLA_INPUT_METADATA] =
      describe(&slots[3], metadata, kI32, 1, ATTNRT_SPARSE_MLA_METADATA_SIZE, 0, 0, 0);
  uint16_t* attn_out = calloc((size_t)MN * D, sizeof(uint16_t));
  tensor_slot out_slot;
  const attnrt_tensor* outs[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {
      describe(&out_slot, attn_out, kBf16, 4, 1, 1, MN, D), NULL};
  CHECK(attnrt_op_plan(op, in, ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, ATTNRT_SPARSE_MLA_NUM_OUTPUTS,
                       &plan));
  CHECK(attnrt_plan_run(plan, in, ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, ATTNRT_SPARSE_MLA_NUM_OUTPUTS,
                        NULL, 0, NULL));
  attnrt_plan_release(plan);
  write_file(dir, "sparse_mla.bin", attn_out, (size_t)MN * D * sizeof(uint16_t));
  free(attn_out);
  free(q);
  free(ori_rows);
  free(cmp_rows);
  free(ori_kv);
  free(cmp_kv);
  attnrt_op_destroy(op);
  attnrt_op_destroy(meta_op);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = 2;
  attnrt_runtime* rt = NULL;
  CHECK(attnrt_runtime_create(&options, &rt));
  paged_gqa(rt, argv[1]);
  sparse_mla(rt, argv[1]);
  attnrt_runtime_destroy(rt);
  return 0;
}
