/*
 * A sparse MLA plugin built against the ABI 1.4 headers (tests/abi/history/1_4, copies of
 * abi/attnrt as they were before ABI 1.6 appended the block strides and global slot ids to
 * attnrt_sparse_mla_problem and attnrt_sparse_mla_args), as a third party's plugin built then is:
 *
 *   abi14sparse.sparse_mla.fixture.scalar  (priority 100) accepts every problem whose struct sizes
 *       are at least the ABI 1.4 ones (a newer core appends fields), else declines naming the
 *       field; run() zeroes attn_out (and softmax_lse when given) and writes what it read into the
 *       first attn_out elements (abi14_sparse_mla_plugin.h), as bfloat16.
 *
 * It reads the caches as compact and knows no slot ids: the runtime must not give it a problem
 * that uses either feature of ABI 1.6.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "abi14_sparse_mla_plugin.h"
#include "attnrt/ops/sparse_mla.h"
#include "attnrt/plugin.h"

#if ATTNRT_ABI_VERSION_MAJOR != 1 || ATTNRT_ABI_VERSION_MINOR != 4
#error \
    "abi14_sparse_mla_plugin.c must be built against the ABI 1.4 headers of tests/abi/history/1_4"
#endif

static int32_t Supports(void* context, const void* problem, char* reason, size_t capacity) {
  const attnrt_sparse_mla_problem* p = (const attnrt_sparse_mla_problem*)problem;
  (void)context;
  if (p->struct_size < sizeof(*p)) {
    snprintf(reason, capacity, "problem.struct_size %zu, expected at least %zu (ABI 1.4)",
             p->struct_size, sizeof(*p));
    return 0;
  }
  if (p->attributes.struct_size < sizeof(p->attributes)) {
    snprintf(reason, capacity, "problem.attributes.struct_size %zu, expected at least %zu",
             p->attributes.struct_size, sizeof(p->attributes));
    return 0;
  }
  return 1;
}

static size_t NoWorkspace(void* context, const void* problem) {
  (void)context;
  (void)problem;
  return 0;
}

/* float -> bfloat16 by truncation: exact for the small integers written here. */
static uint16_t Bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return (uint16_t)(u >> 16);
}

static int32_t Run(void* context, const void* args, char* error, size_t capacity) {
  const attnrt_sparse_mla_args* a = (const attnrt_sparse_mla_args*)args;
  const attnrt_sparse_mla_problem* p = a->problem;
  int64_t rows;
  size_t elements;
  uint16_t* out = (uint16_t*)a->attn_out;
  (void)context;
  if (a->struct_size < sizeof(*a) || p == NULL || p->struct_size < sizeof(*p)) {
    snprintf(error, capacity, "args.struct_size %zu (expected at least %zu) or no problem",
             a->struct_size, sizeof(*a));
    return ATTNRT_ERROR_INTERNAL;
  }
  rows = p->attributes.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND ? p->q_rows
                                                                : p->batch_size * p->q_rows;
  elements = (size_t)(rows * p->num_heads) * ATTNRT_SPARSE_MLA_HEAD_DIM;
  if (elements < kMlaOutCount) {
    snprintf(error, capacity, "attn_out holds fewer than %d elements", (int)kMlaOutCount);
    return ATTNRT_ERROR_INTERNAL;
  }
  memset(out, 0, elements * sizeof(uint16_t));
  if (a->softmax_lse != NULL) memset(a->softmax_lse, 0, (size_t)(rows * p->num_heads) * 4);
  out[kMlaOutMarker] = Bf16((float)ABI14_SPARSE_MLA_MARKER);
  out[kMlaOutQuantMode] = Bf16((float)p->attributes.quant_mode);
  out[kMlaOutTopkValueMode] = Bf16((float)p->attributes.topk_value_mode);
  out[kMlaOutLayoutKv] = Bf16((float)p->attributes.layout_kv);
  out[kMlaOutScenario] = Bf16((float)p->scenario);
  out[kMlaOutNumHeads] = Bf16((float)p->num_heads);
  out[kMlaOutOriBlockSize] = Bf16((float)p->ori_block_size);
  out[kMlaOutOriRows] = Bf16((float)p->ori_rows);
  out[kMlaOutCmpBlockSize] = Bf16((float)p->cmp_block_size);
  out[kMlaOutTopk] = Bf16((float)p->topk);
  return ATTNRT_OK;
}

static const attnrt_kernel_desc kKernel = {sizeof(attnrt_kernel_desc),
                                           ABI14_SPARSE_MLA_KERNEL,
                                           ATTNRT_OP_SPARSE_MLA,
                                           ATTNRT_DEVICE_CPU,
                                           ABI14_SPARSE_MLA_PRIORITY,
                                           Supports,
                                           NoWorkspace,
                                           Run};

static int g_context;

static int32_t Init(const attnrt_host_services* host, void** out_context, char* error,
                    size_t capacity) {
  (void)host;
  (void)error;
  (void)capacity;
  *out_context = &g_context;
  return ATTNRT_OK;
}

static int32_t Probe(void* context, attnrt_probe_result* out) {
  (void)context;
  out->available = 1;
  out->reason = "";
  out->facts = NULL;
  out->num_facts = 0;
  return ATTNRT_OK;
}

static size_t KernelCount(void* context) {
  (void)context;
  return 1;
}

static const attnrt_kernel_desc* Kernel(void* context, size_t index) {
  (void)context;
  return index == 0 ? &kKernel : NULL;
}

static void Shutdown(void* context) { (void)context; }

static const attnrt_plugin_api kApi = {sizeof(attnrt_plugin_api),
                                       ATTNRT_ABI_VERSION_MAJOR,
                                       ATTNRT_ABI_VERSION_MINOR,
                                       "abi14sparse",
                                       "0.0.1",
                                       Init,
                                       Probe,
                                       KernelCount,
                                       Kernel,
                                       Shutdown};

ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(uint32_t host_abi_major,
                                                                  uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return &kApi;
}
