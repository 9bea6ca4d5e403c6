/*
 * Discovery fixtures: one source, built once per failure mode (BROKEN_MODE_*). Each library fails
 * one step of loading by returning an error, never by crashing, so the runtime must skip it with a
 * diagnostic that names the file and the reason.
 *
 *   BROKEN_MODE_BADABI       attnrt_plugin_query returns a table with abi_major 99
 *   BROKEN_MODE_INITFAIL     init() fails with the message "simulated init failure"
 *   BROKEN_MODE_PROBEFAIL    probe() returns ATTNRT_ERROR_INTERNAL
 *   BROKEN_MODE_NULLQUERY    attnrt_plugin_query returns NULL
 *   BROKEN_MODE_SMALLSTRUCT  the table's struct_size stops before init()
 *   BROKEN_MODE_DUPNAME      a valid plugin named "cpu_x86"
 *   BROKEN_MODE_DUPKERNEL    a valid plugin with two kernels of the same name
 *   BROKEN_MODE_DUPFOREIGN   a valid plugin with a kernel named like a cpu_x86 kernel (outside its
 *                            own prefix "dupforeign.")
 *   BROKEN_MODE_VALID        a valid plugin (built under a name discovery must ignore)
 *   BROKEN_MODE_ABI12        a valid plugin that declares ABI 1.2 (built before ABI 1.3)
 */
#include <stddef.h>
#include <stdio.h>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

#ifndef BROKEN_PLUGIN_NAME
#error "BROKEN_PLUGIN_NAME must be defined"
#endif

static int32_t Supports(void* context, const void* problem, char* reason, size_t capacity) {
  (void)context;
  (void)problem;
  snprintf(reason, capacity, "test fixture kernel never runs");
  return 0;
}

static size_t WorkspaceSize(void* context, const void* problem) {
  (void)context;
  (void)problem;
  return 0;
}

static int32_t Run(void* context, const void* args, char* error, size_t capacity) {
  (void)context;
  (void)args;
  snprintf(error, capacity, "test fixture kernel must not run");
  return ATTNRT_ERROR_INTERNAL;
}

#if defined(BROKEN_MODE_DUPNAME)
#define KERNEL_NAME_0 ATTNRT_TEST_CPU_PLUGIN ".gqa.impostor.scalar"
#define KERNEL_NAME_1 ATTNRT_TEST_CPU_PLUGIN ".gqa.impostor2.scalar"
#elif defined(BROKEN_MODE_DUPKERNEL)
#define KERNEL_NAME_0 "dupkernel.gqa.same.scalar"
#define KERNEL_NAME_1 "dupkernel.gqa.same.scalar"
#elif defined(BROKEN_MODE_DUPFOREIGN)
#define KERNEL_NAME_0 ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"
#define KERNEL_NAME_1 "dupforeign.gqa.other.scalar"
#else
#define KERNEL_NAME_0 BROKEN_PLUGIN_NAME ".gqa.fixture.scalar"
#define KERNEL_NAME_1 BROKEN_PLUGIN_NAME ".gqa.fixture2.scalar"
#endif

#define KERNEL_OP_0 ATTNRT_OP_GQA
#define KERNEL_OP_1 ATTNRT_OP_GQA

static const attnrt_kernel_desc kKernels[2] = {
    {sizeof(attnrt_kernel_desc), KERNEL_NAME_0, KERNEL_OP_0, ATTNRT_DEVICE_CPU, 1, Supports,
     WorkspaceSize, Run},
    {sizeof(attnrt_kernel_desc), KERNEL_NAME_1, KERNEL_OP_1, ATTNRT_DEVICE_CPU, 1, Supports,
     WorkspaceSize, Run},
};

static int g_context;

static int32_t Init(const attnrt_host_services* host, void** out_context, char* error,
                    size_t capacity) {
  (void)host;
#if defined(BROKEN_MODE_INITFAIL)
  (void)g_context;
  *out_context = NULL;
  snprintf(error, capacity, "simulated init failure");
  return ATTNRT_ERROR_INTERNAL;
#else
  (void)error;
  (void)capacity;
  *out_context = &g_context;
  return ATTNRT_OK;
#endif
}

static int32_t Probe(void* context, attnrt_probe_result* out) {
  (void)context;
#if defined(BROKEN_MODE_PROBEFAIL)
  (void)out;
  return ATTNRT_ERROR_INTERNAL;
#else
  out->available = 1;
  out->reason = "";
  out->facts = NULL;
  out->num_facts = 0;
  return ATTNRT_OK;
#endif
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

static const attnrt_plugin_api kApi = {
#if defined(BROKEN_MODE_SMALLSTRUCT)
    offsetof(attnrt_plugin_api, init),
#else
    sizeof(attnrt_plugin_api),
#endif
#if defined(BROKEN_MODE_BADABI)
    99,
#else
    ATTNRT_ABI_VERSION_MAJOR,
#endif
#if defined(BROKEN_MODE_ABI12)
    2,
#else
    ATTNRT_ABI_VERSION_MINOR,
#endif
#if defined(BROKEN_MODE_DUPNAME)
    ATTNRT_TEST_CPU_PLUGIN,
#else
    BROKEN_PLUGIN_NAME,
#endif
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
#if defined(BROKEN_MODE_NULLQUERY)
  (void)kApi;
  return NULL;
#else
  return &kApi;
#endif
}
