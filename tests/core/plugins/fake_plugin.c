/*
 * libattnrt_fake.so: a GQA "plugin" for ranking and pinning tests. Its kernels do no attention:
 * run() fills the output with the kernel's priority as float, so a test can tell which one ran.
 *
 *   fake.gqa.top.x   500  declines head_size 96 with "head_size 96 unsupported" and a present of
 *                          77 rows with "present length 77 unsupported"
 *   fake.gqa.mid.a   300  (tie with mid.b: name order puts a first)
 *   fake.gqa.mid.b   300
 *   fake.gqa.low.x    50
 * Every kernel asks for a workspace of 1 MiB for a present of 90 rows, else none (plans of a
 * growing cache must not be reused where their workspace is too small).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

static int g_context;

static int32_t AcceptsFloatCpu(const attnrt_gqa_problem* p, char* reason, size_t capacity) {
  if (p->device_type != ATTNRT_DEVICE_CPU) {
    snprintf(reason, capacity, "device_type %d is not CPU", (int)p->device_type);
    return 0;
  }
  if (p->query_dtype.code != ATTNRT_DTYPE_CODE_FLOAT || p->query_dtype.bits != 32) {
    snprintf(reason, capacity, "query dtype is not float32");
    return 0;
  }
  return 1;
}

static int32_t SupportsTop(void* context, const void* problem, char* reason, size_t capacity) {
  const attnrt_gqa_problem* p = (const attnrt_gqa_problem*)problem;
  (void)context;
  if (p->head_size == 96) {
    snprintf(reason, capacity, "head_size 96 unsupported");
    return 0;
  }
  if (p->has_present && p->present_sequence_length == 77) {
    snprintf(reason, capacity, "present length 77 unsupported");
    return 0;
  }
  return AcceptsFloatCpu(p, reason, capacity);
}

static int32_t SupportsAny(void* context, const void* problem, char* reason, size_t capacity) {
  (void)context;
  return AcceptsFloatCpu((const attnrt_gqa_problem*)problem, reason, capacity);
}

static size_t WorkspaceSize(void* context, const void* problem) {
  const attnrt_gqa_problem* p = (const attnrt_gqa_problem*)problem;
  (void)context;
  return p->has_present && p->present_sequence_length == 90 ? (size_t)1 << 20 : 0;
}

static int32_t Fill(const void* args, float value, char* error, size_t capacity) {
  const attnrt_gqa_args* a = (const attnrt_gqa_args*)args;
  const attnrt_gqa_problem* p = a->problem;
  float* out = (float*)a->output;
  int64_t n = p->batch_size * p->sequence_length * p->num_heads * p->head_size;
  int64_t i;
  if (out == NULL) {
    snprintf(error, capacity, "fake: output is NULL");
    return ATTNRT_ERROR_INTERNAL;
  }
  for (i = 0; i < n; ++i) out[i] = value;
  return ATTNRT_OK;
}

static int32_t RunTop(void* c, const void* a, char* e, size_t n) {
  (void)c;
  return Fill(a, 500.0f, e, n);
}
static int32_t RunMidA(void* c, const void* a, char* e, size_t n) {
  (void)c;
  return Fill(a, 300.0f, e, n);
}
static int32_t RunMidB(void* c, const void* a, char* e, size_t n) {
  (void)c;
  return Fill(a, 301.0f, e, n); /* 301: tells mid.b from mid.a */
}
static int32_t RunLow(void* c, const void* a, char* e, size_t n) {
  (void)c;
  return Fill(a, 50.0f, e, n);
}

/* Deliberately not in rank order: the runtime sorts. */
static const attnrt_kernel_desc kKernels[4] = {
    {sizeof(attnrt_kernel_desc), "fake.gqa.low.x", ATTNRT_OP_GQA, ATTNRT_DEVICE_CPU, 50,
     SupportsAny, WorkspaceSize, RunLow},
    {sizeof(attnrt_kernel_desc), "fake.gqa.mid.b", ATTNRT_OP_GQA, ATTNRT_DEVICE_CPU, 300,
     SupportsAny, WorkspaceSize, RunMidB},
    {sizeof(attnrt_kernel_desc), "fake.gqa.top.x", ATTNRT_OP_GQA, ATTNRT_DEVICE_CPU, 500,
     SupportsTop, WorkspaceSize, RunTop},
    {sizeof(attnrt_kernel_desc), "fake.gqa.mid.a", ATTNRT_OP_GQA, ATTNRT_DEVICE_CPU, 300,
     SupportsAny, WorkspaceSize, RunMidA},
};

static const attnrt_plugin_fact kFacts[1] = {{"isa", "fake"}};

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
  out->facts = kFacts;
  out->num_facts = 1;
  return ATTNRT_OK;
}

static size_t KernelCount(void* context) {
  (void)context;
  return 4;
}

static const attnrt_kernel_desc* Kernel(void* context, size_t index) {
  (void)context;
  return index < 4 ? &kKernels[index] : NULL;
}

static void Shutdown(void* context) { (void)context; }

static const attnrt_plugin_api kApi = {sizeof(attnrt_plugin_api),
                                       ATTNRT_ABI_VERSION_MAJOR,
                                       ATTNRT_ABI_VERSION_MINOR,
                                       "fake",
                                       "1.2.3",
                                       Init,
                                       Probe,
                                       KernelCount,
                                       Kernel,
                                       Shutdown};

ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(uint32_t host_abi_major,
                                                                  uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == ATTNRT_ABI_VERSION_MAJOR ? &kApi : NULL;
}
