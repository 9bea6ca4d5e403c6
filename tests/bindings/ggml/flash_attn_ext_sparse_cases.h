// The sparse-mask FLASH_ATTN_EXT cases of flash_attn_ext_sparse_test.cpp and
// flash_attn_ext_sparse_values_test.cpp: which keys a row sees, the masks, and checks on what the
// backend computed again with ggml's algorithm.
#ifndef ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_SPARSE_CASES_H_
#define ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_SPARSE_CASES_H_

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "flash_attn_ext_harness.h"

namespace fa_sparse {

using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Shared;
using fa_harness::Spec;

// Whether key j is visible to row i of stream b: about one key in `every`, at positions that differ
// by row and stream, with row 2 seeing none and, where `crowded`, row 3 seeing every key.
inline bool Visible(int64_t j, int64_t i, int64_t b, int64_t every, bool crowded) {
  if (i == 2) return false;
  if (crowded && i == 3) return true;
  return static_cast<uint64_t>(j * 37 + i * 11 + b * 5) % static_cast<uint64_t>(every) == 0;
}

// The most keys a row sees when one in `every` of `total` are.
inline int32_t Bound(int64_t total, int64_t every) {
  return static_cast<int32_t>(total / every + 1);
}

// The sparse mask: a visible key's entry in [-1, 1) (different per key, row and stream), -inf
// elsewhere.
inline std::function<float(int64_t, int64_t, int64_t, int64_t)> SparseMask(int64_t every,
                                                                           bool crowded = false) {
  return [=](int64_t j, int64_t i, int64_t, int64_t b) {
    return Visible(j, i, b, every, crowded)
               ? static_cast<float>((j * 13 + i * 7 + b * 3) % 16) / 8.0f - 1.0f
               : -kInf;
  };
}

// NaN in every K and V element of a key the row's mask hides from every row: a gather that read a
// hidden key would turn its row NaN (ggml's algorithm would then compute it, counted by GgmlRows).
inline std::function<float(bool, int64_t, int64_t, int64_t, int64_t, float)> NaNWhereHidden(
    int64_t rows, int64_t every) {
  return [=](bool, int64_t, int64_t j, int64_t, int64_t b, float x) {
    for (int64_t i = 0; i < rows; ++i) {
      if (Visible(j, i, b, every, false)) return x;
    }
    return kNaN;
  };
}

// The sparse node most tests build: SparseMask(every) over s's rows, n_kv_max its bound, and NaN
// K/V in the keys no row sees. Set s->rows and s->total first.
inline void SparseWithNaNHidden(Spec* s, int64_t every) {
  s->mask_fn = SparseMask(every);
  s->n_kv_max = Bound(s->total, every);
  s->edit_kv = NaNWhereHidden(s->rows, every);
}

using MaskFn = std::function<float(int64_t, int64_t, int64_t, int64_t)>;

// NaN in every K and V element of a key that `mask` hides from every row of its stream (head 0's
// slice: the masks here have one).
inline std::function<float(bool, int64_t, int64_t, int64_t, int64_t, float)> NaNWhereMaskHides(
    MaskFn mask, int64_t rows) {
  return [=](bool, int64_t, int64_t j, int64_t, int64_t b, float x) {
    for (int64_t i = 0; i < rows; ++i) {
      if (mask(j, i, 0, b) != -kInf) return x;
    }
    return kNaN;
  };
}

// Rows computed again by ggml's algorithm since `before`: at most row 2's (it sees no key under
// SparseMask; one row per head and stream), never a row whose hidden keys hold NaN.
inline void ExpectOnlyRowTwoRedone(uint64_t before, const Spec& s) {
  EXPECT_LE(Shared().GgmlRows() - before,
            s.rows > 2 ? static_cast<uint64_t>(s.heads * s.streams) : 0u)
      << "rows computed again: a hidden key was read";
}

// Check(), with `edit` applied to the built node before the reference and the runs.
inline fa_harness::Outcome CheckEdited(const Spec& s, uint64_t seed, const std::string& what,
                                       const std::function<void(fa_harness::Node*)>& edit,
                                       ggml_backend_t attnrt = nullptr, bool check_cpu = true) {
  fa_harness::Backends& be = Shared();
  fa_harness::Outcome o;
  EXPECT_NE(be.attnrt, nullptr);
  if (be.attnrt == nullptr) return o;
  if (attnrt == nullptr) attnrt = be.attnrt;
  fa_harness::Node n;
  fa_harness::Build(s, seed, &n);
  edit(&n);
  const std::vector<double> want = fa_harness::Reference(n);
  const double tol = fa_harness::Tolerance(s.kv_type);
  std::vector<float> got;
  o.claimed = ggml_backend_supports_op(attnrt, n.out);
  if (o.claimed) {
    EXPECT_EQ(fa_harness::Run(attnrt, n, &got), GGML_STATUS_SUCCESS) << what;
    o.attnrt_bad = fa_harness::Mismatches("attnrt " + what, got, want, tol);
    EXPECT_EQ(o.attnrt_bad, 0u) << what << " (seed " << seed << ")";
  }
  if (check_cpu) {
    EXPECT_EQ(fa_harness::Run(be.cpu, n, &got), GGML_STATUS_SUCCESS) << what;
    o.cpu_bad = fa_harness::Mismatches("ggml CPU " + what, got, want, 5 * tol);
    EXPECT_EQ(o.cpu_bad, 0u) << what << ": the reference is not ggml's op";
  }
  return o;
}

// Non-finite and extreme entries among a row's visible keys, 64 keys, n_kv_max 6. ggml: a NaN entry
// turns its row NaN, one +inf entry takes all the weight (the row is that key's V), two +inf
// entries give NaN (inf - inf), -65504 (float16's lowest finite value) is a visible key like any
// other (a row whose only key has it is that key's V), and a row of -inf only is 0. A gather that
// tested "finite" instead of "not -inf", or took a huge negative entry for hidden, differs.
inline MaskFn NonFiniteEntries() {
  return [](int64_t j, int64_t i, int64_t, int64_t b) -> float {
    const int64_t k = (j + 64 - 7 * b) % 64;  // stream 1: the same pattern 7 keys on
    auto at = [&](std::initializer_list<int64_t> keys) {
      for (int64_t x : keys) {
        if (k == x) return true;
      }
      return false;
    };
    switch (i) {
      case 0:  // a NaN among finite entries
        return k == 20 ? kNaN : at({3, 17, 40}) ? 0.25f * static_cast<float>(k % 4) : -kInf;
      case 1:  // one +inf among finite entries
        return k == 5 ? kInf : at({9, 30, 31}) ? 0.5f : -kInf;
      case 2:  // two +inf entries
        return at({5, 50}) ? kInf : -kInf;
      case 3:  // one key, at float16's lowest finite value
        return k == 63 ? -65504.0f : -kInf;
      case 4:  // the first and the last key
        return k == 0 ? -0.75f : k == 63 ? 0.5f : -kInf;
      case 5:  // a single +inf entry, nothing else
        return k == 11 ? kInf : -kInf;
      case 6:  // nothing
        return -kInf;
      default:  // float16's extremes: -65504 next to 0 and 1 (-65504 gets no weight)
        return k == 2 ? -65504.0f : k == 33 ? 0.0f : k == 34 ? 1.0f : -kInf;
    }
  };
}

// Mask entries of large magnitude (float16 values near 1024, -2000, 30000 and -60000, steps of 1,
// 16 or 32 between a row's keys): the softmax depends on the gaps between a row's logits only, so
// a bias rounded to bfloat16 (8 bits) must be rounded after the row's largest entry is taken out.
inline MaskFn LargeEntries(int64_t every) {
  return [=](int64_t j, int64_t i, int64_t, int64_t b) {
    if (!Visible(j, i, b, every, false)) return -kInf;
    const float base[] = {1024.0f, -2000.0f, 30000.0f, -60000.0f, 0.0f};
    const float step[] = {1.0f, 1.0f, 16.0f, 32.0f, 1.0f};
    const int64_t r = i % 5;
    return base[r] + step[r] * static_cast<float>((j * 7 + i) % 5);
  };
}

}  // namespace fa_sparse

#endif  // ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_SPARSE_CASES_H_
