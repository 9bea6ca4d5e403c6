/*
 * A host program as one built against an earlier release of attnrt's headers would be: compiled
 * (C11) against the copy of attnrt.h and ops/gqa.h of one released ABI version
 * (tests/abi/history/1_<minor>, taken unchanged from that release), and run against this
 * library. What a minor version promises such a program (attnrt.h, "Versioning"): everything it
 * did keeps working. So it uses every entry point a host of ABI 1.0 could, with the structs as its
 * headers declare them:
 *   - the version checks: this library's ABI has the header's major and a minor at least its own;
 *   - runtime options filled by attnrt_runtime_options_init (an exported function up to ABI 1.1,
 *     a macro over attnrt_runtime_options_init_sized since), a runtime created from them;
 *   - the introspection output structs (plugin info, facts, kernel info, diagnostics), each
 *     filled in the caller's struct_size and not one byte beyond it (a guard after each is
 *     checked);
 *   - a GroupQueryAttention op from attnrt_gqa_attributes_init, planned (plan info, a guard
 *     after it too), run on a causal first prompt (float32, 3 tokens, 4 heads over 2 kv heads,
 *     head size 8, present outputs) and checked element by element against a float64
 *     reference computed here from ONNX Runtime's GroupQueryAttention definition, the outputs
 *     poisoned with NaN before the run;
 *   - attnrt_op_explain's candidates in the header's struct, the plan cache counters, and a
 *     bad input (a wrong head count in the query's shape) refused with INVALID_ARGUMENT and a
 *     message, the output left untouched.
 * Exit status 0 when all hold; otherwise the first failure is printed.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"

#define B 1
#define S 3
#define N 4
#define NKV 2
#define H 8

static int g_failed = 0;

#define EXPECT(cond, ...)                                                                      \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "ABI 1.%d host: %s:%d: ", ATTNRT_ABI_VERSION_MINOR, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fprintf(stderr, "\n");                                                                   \
      g_failed = 1;                                                                            \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

#define CALL(call)                                                                         \
  do {                                                                                     \
    attnrt_status status_ = (call);                                                        \
    EXPECT(status_ == ATTNRT_OK, "%s returned %s: %s", #call, attnrt_status_name(status_), \
           attnrt_last_error_message());                                                   \
  } while (0)

/* A struct followed by bytes the library must not write. */
#define GUARDED(type)        \
  struct {                   \
    type value;              \
    unsigned char guard[64]; \
  }

static int GuardIntact(const unsigned char* guard) {
  for (int i = 0; i < 64; ++i) {
    if (guard[i] != 0xA5) return 0;
  }
  return 1;
}

static attnrt_tensor Tensor(void* data, int32_t ndim, const int64_t* shape, uint8_t code,
                            uint8_t bits) {
  attnrt_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = ATTNRT_DEVICE_CPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* Fixed pseudo-random values in [-2, 2) (a linear congruential generator, seeded per run). */
static float NextValue(unsigned* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) & 0xFFFF) / 16384.0f - 2.0f;
}

static int Introspect(attnrt_runtime* runtime) {
  size_t plugins = 0;
  CALL(attnrt_runtime_plugin_count(runtime, &plugins));
  EXPECT(plugins >= 1, "no plugin found (expected the CPU plugin beside the library)");
  size_t kernels_seen = 0;
  for (size_t p = 0; p < plugins; ++p) {
    GUARDED(attnrt_plugin_info) info;
    memset(&info, 0xA5, sizeof info);
    info.value.struct_size = sizeof info.value;
    CALL(attnrt_runtime_plugin_info(runtime, p, &info.value));
    EXPECT(GuardIntact(info.guard), "attnrt_runtime_plugin_info wrote past struct_size %zu",
           sizeof info.value);
    EXPECT(info.value.name != NULL && info.value.name[0] != '\0', "plugin %zu has no name", p);
#ifdef ATTNRT_PLUGIN_INFO_STRUCT_SIZE
    /* ABI 1.13: the padding between available and reason comes back 0, not as whatever the
     * library's stack held. */
    for (size_t b = offsetof(attnrt_plugin_info, available) + sizeof(int32_t);
         b < offsetof(attnrt_plugin_info, reason); ++b) {
      EXPECT(((const unsigned char*)&info.value)[b] == 0,
             "attnrt_runtime_plugin_info left padding byte %zu as 0x%02x", b,
             ((const unsigned char*)&info.value)[b]);
    }
#endif
    EXPECT(info.value.abi_major == ATTNRT_ABI_VERSION_MAJOR, "plugin %s: ABI major %u",
           info.value.name, (unsigned)info.value.abi_major);
    for (size_t f = 0; f < info.value.num_facts; ++f) {
      const char* key = NULL;
      const char* value = NULL;
      CALL(attnrt_runtime_plugin_fact(runtime, p, f, &key, &value));
      EXPECT(key != NULL && value != NULL, "plugin %s fact %zu is NULL", info.value.name, f);
    }
    for (size_t k = 0; k < info.value.num_kernels; ++k) {
      GUARDED(attnrt_kernel_info) kernel;
      memset(&kernel, 0xA5, sizeof kernel);
      kernel.value.struct_size = sizeof kernel.value;
      CALL(attnrt_runtime_plugin_kernel(runtime, p, k, &kernel.value));
      EXPECT(GuardIntact(kernel.guard), "attnrt_runtime_plugin_kernel wrote past struct_size %zu",
             sizeof kernel.value);
#ifdef ATTNRT_KERNEL_INFO_STRUCT_SIZE
      /* ABI 1.13: struct_size the end of the last field, which leaves out the tail padding (4
       * bytes here): nothing is written past it either. */
      memset(&kernel, 0xA5, sizeof kernel);
      kernel.value.struct_size = ATTNRT_KERNEL_INFO_STRUCT_SIZE;
      CALL(attnrt_runtime_plugin_kernel(runtime, p, k, &kernel.value));
      for (size_t b = ATTNRT_KERNEL_INFO_STRUCT_SIZE; b < sizeof kernel; ++b) {
        EXPECT(((const unsigned char*)&kernel)[b] == 0xA5,
               "attnrt_runtime_plugin_kernel wrote byte %zu past struct_size %zu", b,
               (size_t)ATTNRT_KERNEL_INFO_STRUCT_SIZE);
      }
      EXPECT(
          kernel.value.struct_size == ATTNRT_KERNEL_INFO_STRUCT_SIZE && kernel.value.name != NULL,
          "kernel info at struct_size %zu: struct_size %zu, name %p",
          (size_t)ATTNRT_KERNEL_INFO_STRUCT_SIZE, kernel.value.struct_size,
          (const void*)kernel.value.name);
#endif
      EXPECT(kernel.value.name != NULL &&
                 strncmp(kernel.value.name, info.value.name, strlen(info.value.name)) == 0,
             "kernel %zu of plugin %s is named %s", k, info.value.name,
             kernel.value.name != NULL ? kernel.value.name : "(NULL)");
      ++kernels_seen;
    }
  }
  EXPECT(kernels_seen >= 1, "no kernel registered");
  size_t diagnostics = 0;
  CALL(attnrt_runtime_diagnostic_count(runtime, &diagnostics));
  for (size_t d = 0; d < diagnostics; ++d) {
    GUARDED(attnrt_diagnostic) diagnostic;
    memset(&diagnostic, 0xA5, sizeof diagnostic);
    diagnostic.value.struct_size = sizeof diagnostic.value;
    CALL(attnrt_runtime_diagnostic(runtime, d, &diagnostic.value));
    EXPECT(GuardIntact(diagnostic.guard), "attnrt_runtime_diagnostic wrote past struct_size %zu",
           sizeof diagnostic.value);
  }
  return 0;
}

/* out[s][n][d]: causal attention of query token s (head n) over keys 0..s of kv head n / (N/NKV),
 * scale 1/sqrt(H), in double. */
static void Reference(const float* q, const float* k, const float* v, double* out) {
  for (int s = 0; s < S; ++s) {
    for (int n = 0; n < N; ++n) {
      const int g = n / (N / NKV);
      double scores[S];
      double max = -INFINITY;
      for (int j = 0; j <= s; ++j) {
        double dot = 0.0;
        for (int d = 0; d < H; ++d) {
          dot += (double)q[(s * N + n) * H + d] * (double)k[(j * NKV + g) * H + d];
        }
        scores[j] = dot / sqrt((double)H);
        if (scores[j] > max) max = scores[j];
      }
      double sum = 0.0;
      for (int j = 0; j <= s; ++j) {
        scores[j] = exp(scores[j] - max);
        sum += scores[j];
      }
      for (int d = 0; d < H; ++d) {
        double acc = 0.0;
        for (int j = 0; j <= s; ++j) acc += scores[j] / sum * (double)v[(j * NKV + g) * H + d];
        out[(s * N + n) * H + d] = acc;
      }
    }
  }
}

static int RunGqa(attnrt_runtime* runtime, unsigned seed) {
  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  attributes.num_heads = N;
  attributes.kv_num_heads = NKV;
  attnrt_op* op = NULL;
  CALL(attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op));

  static float q[B * S * N * H], k[B * S * NKV * H], v[B * S * NKV * H];
  static float out[B * S * N * H], present_k[B * NKV * S * H], present_v[B * NKV * S * H];
  unsigned state = seed;
  for (int i = 0; i < B * S * N * H; ++i) q[i] = NextValue(&state);
  for (int i = 0; i < B * S * NKV * H; ++i) k[i] = NextValue(&state);
  for (int i = 0; i < B * S * NKV * H; ++i) v[i] = NextValue(&state);
  for (int i = 0; i < B * S * N * H; ++i) out[i] = NAN;
  int32_t seqlens_k[B] = {S - 1};
  int32_t total[1] = {S};
  const int64_t q_shape[3] = {B, S, N * H}, kv_shape[3] = {B, S, NKV * H};
  const int64_t present_shape[4] = {B, NKV, S, H}, seqlens_shape[1] = {B}, total_shape[1] = {1};
  const int64_t bad_shape[3] = {B, S, (N + 1) * H};
  attnrt_tensor tq = Tensor(q, 3, q_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  attnrt_tensor tk = Tensor(k, 3, kv_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  attnrt_tensor tv = Tensor(v, 3, kv_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  attnrt_tensor tseq = Tensor(seqlens_k, 1, seqlens_shape, ATTNRT_DTYPE_CODE_INT, 32);
  attnrt_tensor ttotal = Tensor(total, 1, total_shape, ATTNRT_DTYPE_CODE_INT, 32);
  attnrt_tensor tout = Tensor(out, 3, q_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  attnrt_tensor tpk = Tensor(present_k, 4, present_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  attnrt_tensor tpv = Tensor(present_v, 4, present_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  const attnrt_tensor* inputs[ATTNRT_GQA_NUM_INPUTS] = {0};
  inputs[ATTNRT_GQA_INPUT_QUERY] = &tq;
  inputs[ATTNRT_GQA_INPUT_KEY] = &tk;
  inputs[ATTNRT_GQA_INPUT_VALUE] = &tv;
  inputs[ATTNRT_GQA_INPUT_SEQLENS_K] = &tseq;
  inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &ttotal;
  const attnrt_tensor* outputs[3] = {&tout, &tpk, &tpv};

  attnrt_plan* plan = NULL;
  CALL(attnrt_op_plan(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, 3, &plan));
  GUARDED(attnrt_plan_info) info;
  memset(&info, 0xA5, sizeof info);
  info.value.struct_size = sizeof info.value;
  CALL(attnrt_plan_get_info(plan, &info.value));
  EXPECT(GuardIntact(info.guard), "attnrt_plan_get_info wrote past struct_size %zu",
         sizeof info.value);
  EXPECT(info.value.kernel != NULL && info.value.kernel[0] != '\0', "the plan names no kernel");
  void* workspace = NULL;
  if (info.value.workspace_size > 0) {
    const size_t alignment =
        info.value.workspace_alignment > 0 ? info.value.workspace_alignment : 64;
    workspace = aligned_alloc(alignment,
                              (info.value.workspace_size + alignment - 1) / alignment * alignment);
    EXPECT(workspace != NULL, "no memory for a workspace of %zu bytes", info.value.workspace_size);
  }
  CALL(attnrt_plan_run(plan, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, 3, workspace,
                       info.value.workspace_size, NULL));
  static double want[B * S * N * H];
  Reference(q, k, v, want);
  for (int i = 0; i < B * S * N * H; ++i) {
    EXPECT(fabs((double)out[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i])),
           "output[%d] = %.9g, expected %.9g (kernel %s, seed %u)", i, (double)out[i], want[i],
           info.value.kernel, seed);
  }
  for (int i = 0; i < B * NKV * S * H; ++i) {
    const int g = (i / (S * H)) % NKV, s = (i / H) % S, d = i % H;
    EXPECT(present_k[i] == k[(s * NKV + g) * H + d] && present_v[i] == v[(s * NKV + g) * H + d],
           "present row (kv head %d, token %d) differs from the new key/value at %d", g, s, d);
  }

  attnrt_explanation* explanation = NULL;
  CALL(attnrt_op_explain(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, 3, &explanation));
  size_t candidates = 0;
  CALL(attnrt_explanation_count(explanation, &candidates));
  int selected = 0;
  for (size_t c = 0; c < candidates; ++c) {
    GUARDED(attnrt_candidate) candidate;
    memset(&candidate, 0xA5, sizeof candidate);
    candidate.value.struct_size = sizeof candidate.value;
    CALL(attnrt_explanation_candidate(explanation, c, &candidate.value));
    EXPECT(GuardIntact(candidate.guard), "attnrt_explanation_candidate wrote past struct_size %zu",
           sizeof candidate.value);
    if (candidate.value.status == ATTNRT_CANDIDATE_SELECTED) {
      ++selected;
      EXPECT(strcmp(candidate.value.kernel, info.value.kernel) == 0,
             "explain selects %s, the plan ran %s", candidate.value.kernel, info.value.kernel);
    }
  }
  attnrt_explanation_destroy(explanation);
  EXPECT(selected == 1, "explain selected %d kernels, expected 1", selected);

  attnrt_plan* again = NULL;
  CALL(attnrt_op_plan(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, 3, &again));
  uint64_t hits = 0, misses = 0;
  CALL(attnrt_op_plan_cache_stats(op, &hits, &misses));
  EXPECT(hits == 1 && misses == 1, "plan cache: %llu hits, %llu misses; expected 1 and 1",
         (unsigned long long)hits, (unsigned long long)misses);
  attnrt_plan_release(again);

  /* A query whose last dimension is not num_heads * head_size: refused, output untouched. */
  for (int i = 0; i < B * S * N * H; ++i) out[i] = NAN;
  attnrt_tensor tbad = Tensor(q, 3, bad_shape, ATTNRT_DTYPE_CODE_FLOAT, 32);
  inputs[ATTNRT_GQA_INPUT_QUERY] = &tbad;
  attnrt_plan* bad = NULL;
  const attnrt_status status = attnrt_op_plan(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, 3, &bad);
  EXPECT(status == ATTNRT_ERROR_INVALID_ARGUMENT && bad == NULL,
         "a query of %d columns: %s, expected ATTNRT_ERROR_INVALID_ARGUMENT", (N + 1) * H,
         attnrt_status_name(status));
  EXPECT(strstr(attnrt_last_error_message(), "query") != NULL,
         "the message does not name the query: %s", attnrt_last_error_message());
  for (int i = 0; i < B * S * N * H; ++i) EXPECT(isnan(out[i]), "output[%d] written", i);

  free(workspace);
  attnrt_plan_release(plan);
  attnrt_op_destroy(op);
  return 0;
}

int main(void) {
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  EXPECT(major == ATTNRT_ABI_VERSION_MAJOR && (long)minor - ATTNRT_ABI_VERSION_MINOR >= 0,
         "library ABI %u.%u, headers %d.%d", (unsigned)major, (unsigned)minor,
         ATTNRT_ABI_VERSION_MAJOR, ATTNRT_ABI_VERSION_MINOR);

  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
#ifdef ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE /* ABI 1.13: the end of the last field */
  const size_t options_size = ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE;
#else
  const size_t options_size = sizeof options;
#endif
  EXPECT(options.struct_size == options_size, "options.struct_size %zu, expected %zu",
         options.struct_size, options_size);
  options.num_threads = 2;
  attnrt_runtime* runtime = NULL;
  CALL(attnrt_runtime_create(&options, &runtime));
  int32_t threads = 0;
  CALL(attnrt_runtime_num_threads(runtime, &threads));
  EXPECT(threads == 2, "num_threads %d, expected 2", threads);
  if (Introspect(runtime) != 0) return 1;
  const char* seed_env = getenv("ATTNRT_TEST_SEED");
  const unsigned seed =
      seed_env != NULL ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
  printf("ABI 1.%d host against library ABI %u.%u, seed %u\n", ATTNRT_ABI_VERSION_MINOR,
         (unsigned)major, (unsigned)minor, seed);
  if (RunGqa(runtime, seed) != 0) return 1;
  attnrt_runtime_destroy(runtime);
  return g_failed;
}
