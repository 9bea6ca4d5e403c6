// The sparse MLA fuzzer's (tests/fuzz/sparse_mla_fuzzer.cpp) decoding helpers and the call it
// decodes: tensors with heap buffers of exactly the bytes they describe, so AddressSanitizer
// reports any access beyond them. Header-only: the fuzzer includes it once.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"
#include "fuzz_rng.h"

namespace sparse_mla_fuzz {

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
constexpr int kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int kInputs = ATTNRT_SPARSE_MLA_NUM_INPUTS;
constexpr int kOutputs = ATTNRT_SPARSE_MLA_NUM_OUTPUTS;

class Choices {
 public:
  explicit Choices(FuzzedDataProvider& fdp) : fdp_(fdp) {}
  uint32_t Pick(uint32_t n) { return n <= 1 ? 0 : fdp_.ConsumeIntegralInRange<uint32_t>(0, n - 1); }
  bool OneIn(uint32_t n) { return Pick(n) == n - 1; }
  template <typename T, size_t K>
  T From(const T (&table)[K]) {
    return table[Pick(static_cast<uint32_t>(K))];
  }
  uint64_t Bits64() { return fdp_.ConsumeIntegral<uint64_t>(); }

 private:
  FuzzedDataProvider& fdp_;
};

using fuzz_rng::Rng;

// A tensor with a heap buffer of exactly its bytes.
struct Tensor {
  attnrt_dtype dtype{};
  std::vector<int64_t> shape;
  size_t bytes = 0;
  std::unique_ptr<unsigned char[]> data;
  std::vector<int64_t> strides;  // empty: compact
  uint64_t byte_offset = 0;
  attnrt_tensor desc{};

  void Make(attnrt_dtype d, std::vector<int64_t> s) {
    dtype = d;
    shape = std::move(s);
    uint64_t n = 1;
    for (int64_t e : shape) n *= static_cast<uint64_t>(std::max<int64_t>(e, 0));
    bytes = static_cast<size_t>(n * dtype.bits / 8);
    data.reset(new unsigned char[bytes]());
  }
  bool present() const { return data != nullptr; }
  int32_t* i32() { return reinterpret_cast<int32_t*>(data.get()); }
  const attnrt_tensor* Get() {
    if (!present()) return nullptr;
    desc = attnrt_tensor{
        data.get(), {ATTNRT_DEVICE_CPU, 0}, static_cast<int32_t>(shape.size()),
        dtype,      shape.data(),           strides.empty() ? nullptr : strides.data(),
        byte_offset};
    return &desc;
  }
};

struct Case {
  attnrt_sparse_mla_attributes a{};
  Tensor in[kInputs];
  Tensor out[kOutputs];
  bool encoded = true;      // KV tokens from the encoders (false: raw bytes)
  bool finite = true;       // q and sinks finite
  int metadata_change = 0;  // 0 none; 1 a word; 2 made for other attributes
  uint32_t metadata_word = 0;
  bool mutated = false;  // a caller's mistake was made (see Decode)
  // ABI 1.6 choices (sparse_mla_fuzz_abi16.h): an input the runtime must refuse; PA_BBND caches
  // with a valid block stride, and their compact copies (ori, cmp) to compare the answer with.
  bool expect_refused = false;
  std::string refused_because;  // what must be refused, for the report
  bool strided = false;
  Tensor compact_kv[2];

  void Refuse(const std::string& what) {
    expect_refused = true;
    refused_because += (refused_because.empty() ? "" : "; ") + what;
  }
};

}  // namespace sparse_mla_fuzz
