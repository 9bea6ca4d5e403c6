// Cross-kernel agreement for the fuzzers: the same call run on runtimes pinned to each kernel of
// the op kind must give one answer, non-finite inputs included (docs/gqa-semantics.md and
// docs/sparse-mla.md, non-finite values): NaN exactly where the first kernel has NaN, the same
// infinities, finite elements within a tolerance of float rounding, and bitwise equal bytes where
// the caller asks (quantized present rows). Header-only: each fuzzer includes it once.
#pragma once

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"

namespace fuzz_agreement {

// One runtime per kernel of `op_kind` of every available plugin, each allowed only that kernel.
struct PinnedRuntimes {
  std::vector<std::string> kernels;
  std::vector<attnrt_runtime*> runtimes;

  PinnedRuntimes() = default;
  PinnedRuntimes(const PinnedRuntimes&) = delete;
  PinnedRuntimes& operator=(const PinnedRuntimes&) = delete;
  ~PinnedRuntimes() {
    for (attnrt_runtime* r : runtimes) attnrt_runtime_destroy(r);
  }

  void Create(int32_t op_kind, int32_t num_threads) {
    attnrt_runtime* any = nullptr;
    if (attnrt_runtime_create(nullptr, &any) != ATTNRT_OK) return;
    size_t plugins = 0;
    attnrt_runtime_plugin_count(any, &plugins);
    for (size_t p = 0; p < plugins; ++p) {
      attnrt_plugin_info info{};
      info.struct_size = sizeof(info);
      if (attnrt_runtime_plugin_info(any, p, &info) != ATTNRT_OK || !info.available) continue;
      for (size_t i = 0; i < info.num_kernels; ++i) {
        attnrt_kernel_info k{};
        k.struct_size = sizeof(k);
        if (attnrt_runtime_plugin_kernel(any, p, i, &k) != ATTNRT_OK || k.op_kind != op_kind ||
            k.device_type != ATTNRT_DEVICE_CPU) {
          continue;
        }
        attnrt_runtime_options options;
        attnrt_runtime_options_init(&options);
        options.num_threads = num_threads;
        options.kernel = k.name;
        options.disable = "";
        attnrt_runtime* pinned = nullptr;
        if (attnrt_runtime_create(&options, &pinned) == ATTNRT_OK) {
          kernels.push_back(k.name);
          runtimes.push_back(pinned);
        }
      }
    }
    attnrt_runtime_destroy(any);
  }
};

// A float output to compare: `count` elements of `bits` (32, or 16 with bf16 = true for bfloat16,
// false for float16) at `data`; `compare(i)` says whether element i is defined (unspecified
// elements, e.g. padded rows, are skipped). Bytes outputs (bits 8) compare bitwise.
struct Output {
  const char* name;
  const void* data;
  int64_t count;
  int bits;
  bool bf16 = false;
  std::function<bool(int64_t)> compare;
};

inline float ToFloat(const Output& o, int64_t i) {
  if (o.bits == 32) {
    float f;
    std::memcpy(&f, static_cast<const unsigned char*>(o.data) + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const unsigned char*>(o.data) + 2 * i, 2);
  if (o.bf16) {
    const uint32_t x = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
                  : e == 31 ? (m == 0 ? INFINITY : NAN)
                            : std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

// Element i of a and b agree: both NaN, the same infinity, or within tolerance of each other.
// The tolerance is relative to `scale` (the largest finite magnitude of a), as the kernels sum in
// different orders.
inline bool Agree(float a, float b, double tolerance, double scale) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(static_cast<double>(a) - b) <= tolerance * (1.0 + scale);
}

// Copies of outputs' bytes (what the first kernel wrote).
inline std::vector<std::vector<unsigned char>> Save(const std::vector<Output>& outputs) {
  std::vector<std::vector<unsigned char>> saved;
  for (const Output& o : outputs) {
    const auto* p = static_cast<const unsigned char*>(o.data);
    saved.emplace_back(p, p + (o.count * o.bits + 7) / 8);
  }
  return saved;
}

// Compares the outputs now in memory with `saved`; on disagreement returns a description.
inline std::string Compare(const std::vector<Output>& outputs,
                           const std::vector<std::vector<unsigned char>>& saved, double tolerance) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    Output now = outputs[k];
    Output before = now;
    before.data = saved[k].data();
    if (now.bits == 8) {
      if (std::memcmp(now.data, before.data, saved[k].size()) != 0) {
        return std::string(now.name) + ": bytes differ";
      }
      continue;
    }
    double scale = 0.0;
    for (int64_t i = 0; i < now.count; ++i) {
      const float a = ToFloat(before, i);
      if (std::isfinite(a) && (!now.compare || now.compare(i))) {
        scale = std::fmax(scale, std::fabs(a));
      }
    }
    for (int64_t i = 0; i < now.count; ++i) {
      if (now.compare && !now.compare(i)) continue;
      const float a = ToFloat(before, i), b = ToFloat(now, i);
      if (!Agree(a, b, tolerance, scale)) {
        char text[160];
        std::snprintf(text, sizeof(text), "%s[%lld]: %g, then %g", now.name,
                      static_cast<long long>(i), static_cast<double>(a), static_cast<double>(b));
        return text;
      }
    }
  }
  return "";
}

// Plans and runs one call on `runtime` (op created from attributes), with a workspace of the
// planned size. Returns the plan's status (UNSUPPORTED: the kernel declines) or the run's.
inline attnrt_status PlanAndRun(attnrt_runtime* runtime, int32_t op_kind, const void* attributes,
                                const attnrt_tensor* const* inputs, size_t num_inputs,
                                const attnrt_tensor* const* outputs, size_t num_outputs) {
  attnrt_op* op = nullptr;
  attnrt_status st = attnrt_op_create(runtime, op_kind, attributes, &op);
  if (st != ATTNRT_OK) return st;
  std::unique_ptr<attnrt_op, decltype(&attnrt_op_destroy)> op_owner(op, &attnrt_op_destroy);
  attnrt_plan* plan = nullptr;
  st = attnrt_op_plan(op, inputs, num_inputs, outputs, num_outputs, &plan);
  if (st != ATTNRT_OK) return st;
  std::unique_ptr<attnrt_plan, decltype(&attnrt_plan_release)> plan_owner(plan,
                                                                          &attnrt_plan_release);
  return attnrt_plan_run(plan, inputs, num_inputs, outputs, num_outputs, nullptr, 0, nullptr);
}

}  // namespace fuzz_agreement
