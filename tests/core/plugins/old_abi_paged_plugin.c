/*
 * A plugin built against older ABI headers, as a third party's plugin built then is: compiled once
 * against copies of the ABI 1.4 headers (tests/abi/history/1_4, before ABI 1.5 appended
 * p_precision to attnrt_paged_gqa_problem) as plugin 'abi14paged', once against copies of the
 * ABI 1.7 headers (tests/abi/history/1_7, before ABI 1.8 appended v_head_size) as
 * 'abi17paged', and once against copies of the ABI 1.8 headers (tests/abi/history/1_8, before
 * ABI 1.9 appended value_cache_dtype and v_cache_bit_width) as 'abi18paged'. Its kernels read the
 * problem and args through that version's structs:
 *
 *   <name>.paged_gqa.fixture.scalar         paged op: declines every problem ("test fixture
 *                                           kernel never runs")
 *   <name>.paged_gqa_varlen.fixture.scalar  paged varlen op, float32: accepts a problem whose
 *       struct sizes are that version's and whose num_tokens equals paged.gqa.sequence_length
 *       (the header's rule), else declines saying which field is wrong; workspace_size() is
 *       num_tokens * 64 + has_slot_mapping; run() checks the args' problem pointers and writes
 *       what it read into the first output elements (kOut* below), then returns OK.
 */
#include <stddef.h>
#include <stdio.h>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "attnrt/plugin.h"
#include "old_abi_paged_plugin.h"

#if ATTNRT_ABI_VERSION_MAJOR == 1 && ATTNRT_ABI_VERSION_MINOR == 4
#define FIXTURE_NAME "abi14paged"
#define FIXTURE_ABI "ABI 1.4"
#elif ATTNRT_ABI_VERSION_MAJOR == 1 && ATTNRT_ABI_VERSION_MINOR == 7
#define FIXTURE_NAME "abi17paged"
#define FIXTURE_ABI "ABI 1.7"
#elif ATTNRT_ABI_VERSION_MAJOR == 1 && ATTNRT_ABI_VERSION_MINOR == 8
#define FIXTURE_NAME "abi18paged"
#define FIXTURE_ABI "ABI 1.8"
#else
#error \
    "old_abi_paged_plugin.c must be built against the headers of tests/abi/history/1_4, 1_7 or 1_8"
#endif

/* The fields the fixture's version has: p_precision since ABI 1.5, v_head_size since ABI 1.8. */
#define FIXTURE_HAS_P_PRECISION (ATTNRT_ABI_VERSION_MINOR >= 5)
#define FIXTURE_HAS_V_HEAD_SIZE (ATTNRT_ABI_VERSION_MINOR >= 8)

/* The problem workspace_size() saw last: run() reports whether it gets the same one (the copy the
 * runtime keeps with the plan). */
static const void* g_planned_problem;

static int32_t DeclinePaged(void* context, const void* problem, char* reason, size_t capacity) {
  (void)context;
  (void)problem;
  snprintf(reason, capacity, "test fixture kernel never runs");
  return 0;
}

static size_t NoWorkspace(void* context, const void* problem) {
  (void)context;
  (void)problem;
  return 0;
}

static int32_t MustNotRun(void* context, const void* args, char* error, size_t capacity) {
  (void)context;
  (void)args;
  snprintf(error, capacity, "test fixture kernel must not run");
  return ATTNRT_ERROR_INTERNAL;
}

static int32_t VarlenSupports(void* context, const void* problem, char* reason, size_t capacity) {
  const attnrt_paged_gqa_varlen_problem* p = (const attnrt_paged_gqa_varlen_problem*)problem;
  (void)context;
  if (p->struct_size != sizeof(*p)) {
    snprintf(reason, capacity, "problem.struct_size %zu, expected %zu (" FIXTURE_ABI ")",
             p->struct_size, sizeof(*p));
    return 0;
  }
  if (p->paged.struct_size != sizeof(p->paged)) {
    snprintf(reason, capacity, "problem.paged.struct_size %zu, expected %zu (" FIXTURE_ABI ")",
             p->paged.struct_size, sizeof(p->paged));
    return 0;
  }
  if (p->paged.gqa.struct_size != sizeof(p->paged.gqa)) {
    snprintf(reason, capacity, "problem.paged.gqa.struct_size %zu, expected %zu",
             p->paged.gqa.struct_size, sizeof(p->paged.gqa));
    return 0;
  }
  if (p->num_tokens != p->paged.gqa.sequence_length) {
    snprintf(reason, capacity, "num_tokens %lld, expected paged.gqa.sequence_length %lld",
             (long long)p->num_tokens, (long long)p->paged.gqa.sequence_length);
    return 0;
  }
  if (p->paged.gqa.query_dtype.code != ATTNRT_DTYPE_CODE_FLOAT ||
      p->paged.gqa.query_dtype.bits != 32) {
    snprintf(reason, capacity, "the fixture runs float32 only");
    return 0;
  }
  return 1;
}

static size_t VarlenWorkspaceSize(void* context, const void* problem) {
  const attnrt_paged_gqa_varlen_problem* p = (const attnrt_paged_gqa_varlen_problem*)problem;
  (void)context;
  g_planned_problem = problem;
  return (size_t)p->num_tokens * 64 + (p->has_slot_mapping ? 1 : 0);
}

static int32_t VarlenRun(void* context, const void* args, char* error, size_t capacity) {
  const attnrt_paged_gqa_varlen_args* a = (const attnrt_paged_gqa_varlen_args*)args;
  const attnrt_paged_gqa_varlen_problem* p = a->problem;
  const int64_t batch = p->paged.gqa.batch_size;
  float* out = (float*)a->paged.gqa.output;
  (void)context;
  if (a->struct_size != sizeof(*a) || a->paged.problem != &p->paged ||
      a->paged.gqa.problem != &p->paged.gqa) {
    snprintf(error, capacity,
             "args: struct_size %zu (expected %zu) or problem pointers not into "
             "args->problem",
             a->struct_size, sizeof(*a));
    return ATTNRT_ERROR_INTERNAL;
  }
#if FIXTURE_HAS_V_HEAD_SIZE
  const int64_t output_head_size = p->paged.v_head_size;
#else
  const int64_t output_head_size = p->paged.gqa.head_size;
#endif
  if (p->num_tokens * p->paged.gqa.num_heads * output_head_size < kOutCount) {
    snprintf(error, capacity, "the output holds fewer than %d elements", (int)kOutCount);
    return ATTNRT_ERROR_INTERNAL;
  }
  out[kOutNumTokens] = (float)p->num_tokens;
  out[kOutHasSlotMapping] = p->has_slot_mapping ? 1.0f : 0.0f;
  out[kOutMaxBlocksPerSeq] = (float)p->paged.max_blocks_per_seq;
  out[kOutBlockSize] = (float)p->paged.block_size;
  out[kOutNumBlocks] = (float)p->paged.num_blocks;
  out[kOutKvLayout] = (float)p->paged.kv_layout;
  out[kOutBatchSize] = (float)batch;
  out[kOutNumHeads] = (float)p->paged.gqa.num_heads;
  out[kOutKvNumHeads] = (float)p->paged.gqa.kv_num_heads;
  out[kOutHeadSize] = (float)p->paged.gqa.head_size;
  out[kOutKeyCacheStride0] = (float)p->paged.key_cache_strides[0];
  out[kOutValueCacheStride0] = (float)p->paged.value_cache_strides[0];
  out[kOutMaxQueryLen] = (float)a->max_query_len;
  out[kOutLastQueryStart] = (float)a->query_start_loc[batch];
  out[kOutWorkspaceSize] = (float)a->paged.gqa.workspace_size;
  out[kOutSameProblemAsPlan] = (const void*)p == g_planned_problem ? 1.0f : 0.0f;
  out[kOutVarlenProblemSize] = (float)sizeof(*p);
  out[kOutPagedProblemSize] = (float)sizeof(p->paged);
  out[kOutNumTokensOffset] = (float)offsetof(attnrt_paged_gqa_varlen_problem, num_tokens);
  out[kOutHasSlotMappingOffset] =
      (float)offsetof(attnrt_paged_gqa_varlen_problem, has_slot_mapping);
#if FIXTURE_HAS_P_PRECISION
  out[kOutPPrecision] = (float)p->paged.p_precision;
#else
  out[kOutPPrecision] = -1.0f;
#endif
#if FIXTURE_HAS_V_HEAD_SIZE
  out[kOutValueHeadSize] = (float)p->paged.v_head_size;
#else
  out[kOutValueHeadSize] = -1.0f;
#endif
  out[kOutKQuantType] = (float)p->paged.gqa.attributes.k_quant_type;
  out[kOutVQuantType] = (float)p->paged.gqa.attributes.v_quant_type;
  out[kOutKvCacheBitWidth] = (float)p->paged.gqa.attributes.kv_cache_bit_width;
  out[kOutCacheDtypeCode] = (float)p->paged.gqa.cache_dtype.code;
  out[kOutCacheDtypeBits] = (float)p->paged.gqa.cache_dtype.bits;
  return ATTNRT_OK;
}

static const attnrt_kernel_desc kKernels[2] = {
    {sizeof(attnrt_kernel_desc), FIXTURE_NAME ".paged_gqa.fixture.scalar", ATTNRT_OP_PAGED_GQA,
     ATTNRT_DEVICE_CPU, 1, DeclinePaged, NoWorkspace, MustNotRun},
    {sizeof(attnrt_kernel_desc), FIXTURE_NAME ".paged_gqa_varlen.fixture.scalar",
     ATTNRT_OP_PAGED_GQA_VARLEN, ATTNRT_DEVICE_CPU, 1, VarlenSupports, VarlenWorkspaceSize,
     VarlenRun},
};

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
  return 2;
}

static const attnrt_kernel_desc* Kernel(void* context, size_t index) {
  (void)context;
  return index < 2 ? &kKernels[index] : NULL;
}

static void Shutdown(void* context) { (void)context; }

static const attnrt_plugin_api kApi = {sizeof(attnrt_plugin_api),
                                       ATTNRT_ABI_VERSION_MAJOR,
                                       ATTNRT_ABI_VERSION_MINOR,
                                       FIXTURE_NAME,
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
