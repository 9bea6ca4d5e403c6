// The run and the checks of paged_gqa_non_causal_test.cpp: one call (a Scenario of
// paged_gqa_non_causal_support.h with the op's tensors) on every kernel the plugins register for
// its op, each pinned, and on the runtime's own choice (paged_gqa_mixed_kv_types_support.h's
// RunOnEveryKernel), the pools and the output guarded (paged_gqa_head_size_support.h's Guarded);
// after each run every output element against the non-causal reference, the output against the
// causal one (the negative control), both pools byte for byte and every guard.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/test_support.h"
#include "paged_gqa_head_size_support.h"
#include "paged_gqa_mixed_kv_types_support.h"
#include "paged_gqa_non_causal_support.h"

namespace attnrt_test {
namespace non_causal {

using head_size::Guarded;

// Negative control: in every sequence of several query rows, some element of the causal reference
// lies at least this many tolerances from the non-causal one.
inline constexpr double kSeparation = 20.0;

inline std::string Sanitized(std::string name) {
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// A pool tensor with a block of poisoned rows on each side.
inline Guarded GuardedPool(const Scenario& s, const Codec& c, std::mt19937_64& rng) {
  const int64_t rows = s.block_size * s.Nkv, rb = c.RowBytes();
  std::vector<uint8_t> guard(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) c.Poison(rng, guard.data() + r * rb);
  return Guarded(c.Dtype(), s.paging.Shape(c.LastDim()), static_cast<int64_t>(guard.size()),
                 std::move(guard));
}

// Names output element i: its sequence, row, head and element.
inline std::string Describe(const Scenario& s, int64_t i) {
  const int64_t row = i / (s.N * s.H);
  std::string where = "output row " + std::to_string(row);
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const Seq& q = s.seqs[b];
    if (row >= q.first && row < q.first + q.rows) {
      where += " (sequence " + std::to_string(b) + ", token " +
               std::to_string(q.offset + row - q.first) + " of T_b " + std::to_string(q.tb) + ")";
    }
  }
  return where + ", head " + std::to_string(i / s.H % s.N) + ", element " + std::to_string(i % s.H);
}

inline void ExpectPool(const Scenario& s, const char* name, const std::vector<uint8_t>& want,
                       const uint8_t* got, int64_t row_bytes) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return;
  const int64_t row = first / row_bytes, per_block = s.block_size * s.Nkv;
  ADD_FAILURE() << name << " (" << CacheName(s.cache) << "): " << bad << " of " << want.size()
                << " bytes differ; first in block " << row / per_block << ", row "
                << row % per_block << " of the block, byte " << first % row_bytes << ": got "
                << int{got[first]} << ", want " << int{want[static_cast<size_t>(first)]};
}

// Runs the call (its tensors `in`, pools at key_index/value_index, output of `out_shape`) on every
// kernel and on the runtime's own choice, checking each run.
inline void RunEverywhere(Scenario& s, int32_t op_kind, std::vector<Tensor>& in, size_t key_index,
                          size_t value_index, std::vector<int64_t> out_shape,
                          std::mt19937_64& rng) {
  const attnrt_paged_gqa_attributes attributes =
      Attributes(s.cache, s.N, s.Nkv, s.block_size, s.layout, s.f);
  Guarded pools[2] = {GuardedPool(s, s.kc, rng), GuardedPool(s, s.vc, rng)};
  Guarded output = head_size::GuardedOutput(s.t, std::move(out_shape));
  bool prefill = false;
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    if (s.seqs[b].rows < 2) continue;
    prefill = true;
    std::printf(
        "[negative control] %s: sequence %zu (%lld rows, T_b %lld): causal vs non-causal "
        "reference differ by %.3g tolerances\n",
        s.name.c_str(), b, static_cast<long long>(s.seqs[b].rows),
        static_cast<long long>(s.seqs[b].tb), s.separation[b]);
    EXPECT_GE(s.separation[b], kSeparation)
        << "sequence " << b << ": the causal reference is within " << s.separation[b]
        << " tolerances of the non-causal one; the case cannot tell them apart";
  }
  std::printf("[observed] %s: mean distance from uniform attention %.3f\n", s.name.c_str(),
              s.mean_tv);
  EXPECT_GE(s.mean_tv, 0.3) << "attention too uniform for the test to see a causal mask";

  mixed_kv::Call call;
  call.op_kind = op_kind;
  call.attributes = &attributes;
  for (Tensor& x : in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.inputs[key_index] = pools[0].get();
  call.inputs[value_index] = pools[1].get();
  call.outputs.push_back(output.get());
  call.reset = [&] {
    std::copy(s.k_before.begin(), s.k_before.end(), pools[0].body());
    std::copy(s.v_before.begin(), s.v_before.end(), pools[1].body());
    for (Guarded& p : pools) p.RestoreGuards();
    head_size::PoisonOutput(output, s.t);
    output.RestoreGuards();
  };
  call.check = [&](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    int64_t bad = 0, first = -1, worst = -1, causal_outside = 0;
    double max_error = 0.0, max_ratio = 0.0;
    for (size_t i = 0; i < s.want.size(); ++i) {
      const double g = head_size::LoadOutput(output, s.t, static_cast<int64_t>(i));
      const double w = s.want[i];
      bool ok;
      if (std::isnan(w)) {
        ok = std::isnan(g);  // engine padding: never written
      } else {
        const double error = std::fabs(g - w);
        ok = error <= s.tol[i];
        if (ok) max_ratio = std::max(max_ratio, error / s.tol[i]);
        if (!(std::fabs(g - s.causal[i]) <= s.causal_tol[i])) ++causal_outside;
      }
      if (ok) continue;
      if (bad++ == 0) first = static_cast<int64_t>(i);
      const double error = std::isnan(w) || std::isnan(g) ? INFINITY : std::fabs(g - w);
      if (worst < 0 || error > max_error) max_error = error, worst = static_cast<int64_t>(i);
    }
    if (bad > 0) {
      const size_t wi = static_cast<size_t>(worst);
      const double g = head_size::LoadOutput(output, s.t, worst);
      const double gc = std::fabs(g - s.causal[wi]) <= s.causal_tol[wi] ? 1.0 : 0.0;
      std::printf(
          "[mismatch] kernel=%s case=%s bad=%lld/%zu max_error=%.6g at %s: got %.9g, "
          "want %.9g (tolerance %.3g; causal reference %.9g, %s)\n",
          kernel.c_str(), s.name.c_str(), static_cast<long long>(bad), s.want.size(), max_error,
          Describe(s, worst).c_str(), g, s.want[wi], s.tol[wi], s.causal[wi],
          gc > 0 ? "matches it" : "does not match it either");
      ADD_FAILURE() << "output: " << bad << " of " << s.want.size()
                    << " elements outside the bound; largest error " << max_error << " at "
                    << Describe(s, worst) << " (got " << g << ", want " << s.want[wi]
                    << ", tolerance " << s.tol[wi] << ", causal reference " << s.causal[wi]
                    << "); first at " << Describe(s, first);
    }
    std::printf(
        "[observed] %s on %s: max error / tolerance %.3g; %lld elements outside the "
        "causal reference's bound\n",
        s.name.c_str(), kernel.c_str(), max_ratio, static_cast<long long>(causal_outside));
    if (prefill) {
      EXPECT_GT(causal_outside, 0) << "the output matches the causal reference everywhere";
    }
    output.ExpectGuards("output");
    ExpectPool(s, "key_cache", s.k_after, pools[0].body(), s.kc.RowBytes());
    ExpectPool(s, "value_cache", s.v_after, pools[1].body(), s.vc.RowBytes());
    pools[0].ExpectGuards("key_cache");
    pools[1].ExpectGuards("value_cache");
  };
  const mixed_kv::Outcome o = mixed_kv::RunOnEveryKernel(call);
  std::string line = "[verdict] " + s.name + ": auto " + o.chosen + "; accepted";
  for (const std::string& k : o.accepted) line += " " + k;
  line += "; declined";
  for (const auto& [k, reason] : o.declined) line += " " + k;
  std::printf("%s\n", line.c_str());
}

inline Tensor Scales(const Codec& c) {
  Tensor t = F32({static_cast<int64_t>(c.scale.size())});
  std::copy(c.scale.begin(), c.scale.end(), t.f32());
  return t;
}

}  // namespace non_causal
}  // namespace attnrt_test
