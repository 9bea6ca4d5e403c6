// Tests of core/ops/gqa_validation.cpp: every rejection of ValidateAttributes, ValidateShapes and
// ValidateRun (status code, and a message naming the input with expected and actual values), the
// valid configurations of gqa-semantics.md, and that ValidateRun never writes to an output.
#include "core/ops/gqa_validation.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa {
namespace {

constexpr attnrt_device kCpu{ATTNRT_DEVICE_CPU, 0};
constexpr attnrt_device kCuda{ATTNRT_DEVICE_CUDA, 0};

// A tensor descriptor together with its shape, strides and (host) data.
struct Owned {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::vector<unsigned char> data;
  attnrt_tensor t{};
};

void ExpectError(const Status& st, attnrt_status code, std::initializer_list<std::string> parts) {
  EXPECT_EQ(st.code, code) << st.message;
  for (const std::string& part : parts) {
    EXPECT_NE(st.message.find(part), std::string::npos)
        << "message \"" << st.message << "\" lacks \"" << part << "\"";
  }
}

#define EXPECT_INVALID(expr, ...) ExpectError((expr), ATTNRT_ERROR_INVALID_ARGUMENT, {__VA_ARGS__})
#define EXPECT_OK(expr)                   \
  do {                                    \
    const Status _st = (expr);            \
    EXPECT_TRUE(_st.ok()) << _st.message; \
  } while (0)

// One GQA call: attributes, inputs and outputs with their storage.
struct Gqa {
  attnrt_gqa_attributes attrs{};
  std::vector<std::unique_ptr<Owned>> owned;
  const attnrt_tensor* in[ATTNRT_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_GQA_NUM_OUTPUTS] = {};
  size_t num_in = ATTNRT_GQA_NUM_INPUTS;
  size_t num_out = ATTNRT_GQA_NUM_OUTPUTS;
  attnrt_gqa_problem problem{};

  Gqa(int32_t n, int32_t nkv) {
    attnrt_gqa_attributes_init(&attrs);
    attrs.num_heads = n;
    attrs.kv_num_heads = nkv;
  }

  attnrt_tensor* New(attnrt_dtype dtype, std::vector<int64_t> shape, attnrt_device device = kCpu) {
    auto o = std::make_unique<Owned>();
    o->shape = std::move(shape);
    int64_t elements = 1;
    for (int64_t d : o->shape) elements *= d;
    o->data.assign(static_cast<size_t>((elements * dtype.bits + 7) / 8), 0);
    o->t.data = o->data.empty() ? nullptr : o->data.data();
    o->t.device = device;
    o->t.ndim = static_cast<int32_t>(o->shape.size());
    o->t.dtype = dtype;
    o->t.shape = o->shape.data();
    o->t.strides = nullptr;
    o->t.byte_offset = 0;
    owned.push_back(std::move(o));
    return &owned.back()->t;
  }
  attnrt_tensor* In(int i, attnrt_dtype dtype, std::vector<int64_t> shape,
                    attnrt_device device = kCpu) {
    attnrt_tensor* t = New(dtype, std::move(shape), device);
    in[i] = t;
    return t;
  }
  attnrt_tensor* Out(int i, attnrt_dtype dtype, std::vector<int64_t> shape,
                     attnrt_device device = kCpu) {
    attnrt_tensor* t = New(dtype, std::move(shape), device);
    out[i] = t;
    return t;
  }
  Owned& OwnerOf(const attnrt_tensor* t) {
    for (auto& o : owned) {
      if (&o->t == t) return *o;
    }
    std::abort();
  }
  // Mutable access to an input / output descriptor.
  attnrt_tensor& I(int i) { return const_cast<attnrt_tensor&>(*in[i]); }
  attnrt_tensor& O(int i) { return const_cast<attnrt_tensor&>(*out[i]); }
  // Replaces the shape of input / output i (data is reallocated to fit).
  void Reshape(attnrt_tensor& t, std::vector<int64_t> shape) {
    Owned& o = OwnerOf(&t);
    o.shape = std::move(shape);
    int64_t elements = 1;
    for (int64_t d : o.shape) elements *= d;
    o.data.assign(static_cast<size_t>((elements * t.dtype.bits + 7) / 8), 0);
    t.data = o.data.empty() ? nullptr : o.data.data();
    t.ndim = static_cast<int32_t>(o.shape.size());
    t.shape = o.shape.data();
  }
  void SetI32(int i, std::vector<int32_t> values) {
    ASSERT_EQ(OwnerOf(in[i]).data.size(), values.size() * 4);
    std::memcpy(I(i).data, values.data(), values.size() * 4);
  }
  void SetI64(int i, std::vector<int64_t> values) {
    ASSERT_EQ(OwnerOf(in[i]).data.size(), values.size() * 8);
    std::memcpy(I(i).data, values.data(), values.size() * 8);
  }
  void SetTotal(int32_t total) { SetI32(ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH, {total}); }

  Status Attributes() {
    attnrt_gqa_attributes normalized;
    Status st = ValidateAttributes(&attrs, &normalized);
    if (st.ok()) attrs = normalized;
    return st;
  }
  Status Shapes() { return ValidateShapes(attrs, in, num_in, out, num_out, &problem); }
  // Attributes and shapes must pass; then the run checks.
  Status Run(attnrt_gqa_args* args) {
    Status st = Attributes();
    if (!st.ok()) return {ATTNRT_ERROR_INTERNAL, "attributes failed: " + st.message};
    st = Shapes();
    if (!st.ok()) return {ATTNRT_ERROR_INTERNAL, "shapes failed: " + st.message};
    return ValidateRun(problem, in, num_in, out, num_out, args);
  }
  Status Run() {
    attnrt_gqa_args args;
    return Run(&args);
  }
};

// A first prompt without past: query (B,S,N*H), key/value (B,S,Nkv*H), seqlens_k = S-1, T = S,
// output and present (B,Nkv,S,H).
Gqa Prompt(int64_t B = 1, int64_t S = 4, int32_t N = 2, int32_t Nkv = 1, int64_t H = 8,
           attnrt_dtype dtype = kFloat32) {
  Gqa g(N, Nkv);
  g.In(ATTNRT_GQA_INPUT_QUERY, dtype, {B, S, N * H});
  g.In(ATTNRT_GQA_INPUT_KEY, dtype, {B, S, Nkv * H});
  g.In(ATTNRT_GQA_INPUT_VALUE, dtype, {B, S, Nkv * H});
  g.In(ATTNRT_GQA_INPUT_SEQLENS_K, kInt32, {B});
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, std::vector<int32_t>(B, static_cast<int32_t>(S - 1)));
  g.In(ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH, kInt32, {1});
  g.SetTotal(static_cast<int32_t>(S));
  g.Out(ATTNRT_GQA_OUTPUT_OUTPUT, dtype, {B, S, N * H});
  g.Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY, dtype, {B, Nkv, S, H});
  g.Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE, dtype, {B, Nkv, S, H});
  return g;
}

// One decode step: S = 1, past (B,Nkv,P,H) holding P rows, seqlens_k = P, T = P+1, present P+1.
Gqa Decode(int64_t B = 2, int64_t P = 8, int32_t N = 2, int32_t Nkv = 1, int64_t H = 8) {
  Gqa g = Prompt(B, 1, N, Nkv, H);
  g.In(ATTNRT_GQA_INPUT_PAST_KEY, kFloat32, {B, Nkv, P, H});
  g.In(ATTNRT_GQA_INPUT_PAST_VALUE, kFloat32, {B, Nkv, P, H});
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, std::vector<int32_t>(B, static_cast<int32_t>(P)));
  g.SetTotal(static_cast<int32_t>(P + 1));
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {B, Nkv, P + 1, H});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {B, Nkv, P + 1, H});
  return g;
}

// A quantized first prompt with a zero-length past (the reference's quantized prompt setup).
Gqa QuantizedPrompt(int32_t quant_type, int32_t bits, int64_t H = 16) {
  const int64_t B = 1, S = 4, Nkv = 1;
  Gqa g = Prompt(B, S, 2, 1, H);
  g.attrs.k_quant_type = quant_type;
  g.attrs.v_quant_type = quant_type;
  g.attrs.kv_cache_bit_width = bits;
  const attnrt_dtype cache = bits == 4 ? kUInt8 : kInt8;
  const int64_t hc = bits == 4 ? H / 2 : H;
  g.In(ATTNRT_GQA_INPUT_PAST_KEY, cache, {B, Nkv, 0, hc});
  g.In(ATTNRT_GQA_INPUT_PAST_VALUE, cache, {B, Nkv, 0, hc});
  g.Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY, cache, {B, Nkv, S, hc});
  g.Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE, cache, {B, Nkv, S, hc});
  const int64_t scales = quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL ? Nkv * H : 1;
  g.In(ATTNRT_GQA_INPUT_K_SCALE, kFloat32, {scales});
  g.In(ATTNRT_GQA_INPUT_V_SCALE, kFloat32, {scales});
  return g;
}

// Adds cos/sin caches (M, R/2).
void AddRotary(Gqa& g, int64_t M, int64_t half) {
  g.In(ATTNRT_GQA_INPUT_COS_CACHE, kFloat32, {M, half});
  g.In(ATTNRT_GQA_INPUT_SIN_CACHE, kFloat32, {M, half});
}

// ================================ ValidateAttributes =========================================

TEST(GqaAttributes, AcceptsDefaultsAndNormalizes) {
  Gqa g(4, 2);
  g.attrs.do_rotary = 2;  // only 1 enables it
  g.attrs.rotary_interleaved = 1;
  g.attrs.local_window_size = -5;                      // any negative value disables the window
  g.attrs.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;  // ignored while k_quant_type is NONE
  g.attrs.struct_size = 12345;  // a caller compiled against a later minor version
  attnrt_gqa_attributes out;
  EXPECT_OK(ValidateAttributes(&g.attrs, &out));
  EXPECT_EQ(out.struct_size, sizeof(attnrt_gqa_attributes));
  EXPECT_EQ(out.num_heads, 4);
  EXPECT_EQ(out.kv_num_heads, 2);
  EXPECT_EQ(out.do_rotary, 0);
  EXPECT_EQ(out.rotary_interleaved, 1);
  EXPECT_EQ(out.smooth_softmax, 0);
  EXPECT_EQ(out.local_window_size, -1);
  EXPECT_EQ(out.v_quant_type, ATTNRT_GQA_QUANT_NONE);
  EXPECT_FLOAT_EQ(out.qk_norm_epsilon, 1e-6f);
}

TEST(GqaAttributes, RejectsNullPointers) {
  Gqa g(2, 1);
  attnrt_gqa_attributes out;
  EXPECT_INVALID(ValidateAttributes(nullptr, &out), "attributes");
  EXPECT_INVALID(ValidateAttributes(&g.attrs, nullptr), "out");
}

TEST(GqaAttributes, RejectsSmallStructSize) {
  Gqa g(2, 1);
  g.attrs.struct_size = ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE - 4;
  attnrt_gqa_attributes out;
  ExpectError(ValidateAttributes(&g.attrs, &out), ATTNRT_ERROR_ABI_MISMATCH,
              {"struct_size", std::to_string(ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE),
               std::to_string(ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE - 4)});
  // The end of the last field is enough (sizeof adds the tail padding), and so is sizeof.
  for (const size_t size : {ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE, sizeof(attnrt_gqa_attributes)}) {
    g.attrs.struct_size = size;
    EXPECT_EQ(ValidateAttributes(&g.attrs, &out).code, ATTNRT_OK) << size;
  }
}

TEST(GqaAttributes, RejectsEachInvalidValue) {
  struct Case {
    void (*set)(attnrt_gqa_attributes&);
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {[](attnrt_gqa_attributes& a) { a.num_heads = 0; }, {"num_heads must be positive, got 0"}},
      {[](attnrt_gqa_attributes& a) { a.kv_num_heads = -1; },
       {"kv_num_heads must be positive, got -1"}},
      {[](attnrt_gqa_attributes& a) { a.causal = 2; }, {"causal must be 0 or 1, got 2"}},
      {[](attnrt_gqa_attributes& a) {
         a.causal = 0;
         a.local_window_size = 1;
       },
       {"GroupQueryAttention (CPU): local_window_size must be -1 when causal is 0",
        "local_window_size=1"}},
      {[](attnrt_gqa_attributes& a) { a.sliding_window_cache = 2; },
       {"sliding_window_cache must be 0 or 1, got 2"}},
      {[](attnrt_gqa_attributes& a) { a.sliding_window_cache = 1; },
       {"sliding_window_cache=1 requires local_window_size > 0", "local_window_size=-1"}},
      {[](attnrt_gqa_attributes& a) { a.k_quant_type = 4; },
       {"Invalid KV quantization type", "k_quant_type", "3 (PER_BLOCK_32)", "got 4"}},
      {[](attnrt_gqa_attributes& a) { a.v_quant_type = -1; },
       {"Invalid KV quantization type", "v_quant_type", "got -1"}},
      {[](attnrt_gqa_attributes& a) {
         a.k_quant_type = 1;
         a.v_quant_type = 2;
         a.kv_cache_bit_width = 8;
       },
       {"k_quant_type == v_quant_type", "k_quant_type=PER_TENSOR", "v_quant_type=PER_CHANNEL"}},
      {[](attnrt_gqa_attributes& a) {
         a.k_quant_type = 1;
         a.v_quant_type = 1;
         a.kv_cache_bit_width = 2;
       },
       {"kv_cache_bit_width must be 4 or 8 when quantization is enabled, got 2"}},
      {[](attnrt_gqa_attributes& a) {
         a.k_quant_type = 1;
         a.v_quant_type = 1;
       },
       {"kv_cache_bit_width must be 4 or 8 when quantization is enabled, got 0"}},
      // v_quant_type alone does not enable quantization (reference item 2).
      {[](attnrt_gqa_attributes& a) {
         a.v_quant_type = 1;
         a.kv_cache_bit_width = 8;
       },
       {"kv_cache_bit_width must be 0 when quantization is disabled, got 8"}},
      {[](attnrt_gqa_attributes& a) {
         a.num_heads = 6;
         a.kv_num_heads = 4;
       },
       {"num_heads must be a multiple of kv_num_heads, got num_heads=6 kv_num_heads=4"}},
      {[](attnrt_gqa_attributes& a) { a.qk_output = 3; },
       {"qk_output attribute received unsupported value 3"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    Gqa g(2, 1);
    cases[i].set(g.attrs);
    attnrt_gqa_attributes out;
    const Status st = ValidateAttributes(&g.attrs, &out);
    EXPECT_EQ(st.code, ATTNRT_ERROR_INVALID_ARGUMENT) << st.message;
    for (const std::string& part : cases[i].parts) {
      EXPECT_NE(st.message.find(part), std::string::npos) << st.message << " / " << part;
    }
  }
}

TEST(GqaAttributes, AcceptsCausalZeroAndQuantizedConfigurations) {
  Gqa g(2, 1);
  g.attrs.causal = 0;
  EXPECT_OK(g.Attributes());
  for (int32_t q : {1, 2}) {
    for (int32_t bits : {4, 8}) {
      Gqa h(2, 1);
      h.attrs.k_quant_type = q;
      h.attrs.v_quant_type = q;
      h.attrs.kv_cache_bit_width = bits;
      EXPECT_OK(h.Attributes());
    }
  }
  Gqa w(2, 1);
  w.attrs.sliding_window_cache = 1;
  w.attrs.local_window_size = 4;
  EXPECT_OK(w.Attributes());
}

// ================================ ValidateShapes: accepted ===================================

TEST(GqaShapes, AcceptsPromptAndFillsProblem) {
  Gqa g = Prompt(2, 4, 4, 2, 16);
  ASSERT_TRUE(g.Attributes().ok());
  EXPECT_OK(g.Shapes());
  const attnrt_gqa_problem& p = g.problem;
  EXPECT_EQ(p.struct_size, sizeof(attnrt_gqa_problem));
  EXPECT_EQ(p.attributes.num_heads, 4);
  EXPECT_EQ(p.batch_size, 2);
  EXPECT_EQ(p.sequence_length, 4);
  EXPECT_EQ(p.kv_sequence_length, 4);
  EXPECT_EQ(p.num_heads, 4);
  EXPECT_EQ(p.kv_num_heads, 2);
  EXPECT_EQ(p.head_size, 16);
  EXPECT_EQ(p.past_sequence_length, 0);
  EXPECT_EQ(p.present_sequence_length, 4);
  EXPECT_TRUE(DtypeEquals(p.query_dtype, kFloat32));
  EXPECT_TRUE(DtypeEquals(p.cache_dtype, kFloat32));
  EXPECT_EQ(p.device_type, ATTNRT_DEVICE_CPU);
  EXPECT_FALSE(p.packed_qkv);
  EXPECT_FALSE(p.has_past);
  EXPECT_TRUE(p.has_present);
  EXPECT_FALSE(p.has_rotary_cache);
  EXPECT_FALSE(p.has_output_qk);
  EXPECT_EQ(p.k_scale_count, 0);
}

TEST(GqaShapes, AcceptsPromptWithoutPresentAndWithFewerInputsAndOutputs) {
  Gqa g = Prompt();
  g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = nullptr;
  g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = nullptr;
  g.num_in = 7;
  g.num_out = 1;
  EXPECT_OK(g.Run());
  EXPECT_FALSE(g.problem.has_present);
  EXPECT_EQ(g.problem.present_sequence_length, 0);
}

TEST(GqaShapes, AcceptsPackedQkvFloat16AndBfloat16) {
  for (attnrt_dtype dtype : {kFloat16, kBFloat16}) {
    Gqa g = Prompt(2, 4, 4, 2, 16, dtype);
    g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, (4 + 2 * 2) * 16});
    g.in[ATTNRT_GQA_INPUT_KEY] = nullptr;
    g.in[ATTNRT_GQA_INPUT_VALUE] = nullptr;
    EXPECT_OK(g.Run());
    EXPECT_TRUE(g.problem.packed_qkv);
    EXPECT_EQ(g.problem.head_size, 16);
    EXPECT_EQ(g.problem.kv_sequence_length, 4);
    EXPECT_TRUE(DtypeEquals(g.problem.cache_dtype, dtype));
  }
}

TEST(GqaShapes, AcceptsAllOptionalInputs) {
  Gqa g = Prompt(2, 4, 4, 2, 16);
  g.attrs.do_rotary = 1;
  g.attrs.qk_output = 2;
  AddRotary(g, 32, 8);
  g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {2, 6});
  g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {1, 4, 4, 4});
  g.In(ATTNRT_GQA_INPUT_HEAD_SINK, kFloat32, {4});
  g.In(ATTNRT_GQA_INPUT_K_SCALE, kFloat32, {3});  // ignored without quantization
  g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {2, 4, 4, 4});
  EXPECT_OK(g.Run());
  const attnrt_gqa_problem& p = g.problem;
  EXPECT_TRUE(p.has_rotary_cache);
  EXPECT_EQ(p.rotary_cache_length, 32);
  EXPECT_EQ(p.rotary_dim, 16);
  EXPECT_TRUE(p.has_position_ids);
  EXPECT_EQ(p.position_ids_length, 6);
  EXPECT_TRUE(p.has_attention_bias);
  EXPECT_TRUE(p.attention_bias_broadcast_batch);
  EXPECT_FALSE(p.attention_bias_broadcast_heads);
  EXPECT_EQ(p.attention_bias_total_length, 4);
  EXPECT_TRUE(p.has_head_sink);
  EXPECT_EQ(p.k_scale_count, 0);
  EXPECT_TRUE(p.has_output_qk);
}

TEST(GqaShapes, AcceptsQuantizedInt8Int4AndFloat8) {
  for (int32_t q : {ATTNRT_GQA_QUANT_PER_TENSOR, ATTNRT_GQA_QUANT_PER_CHANNEL}) {
    for (int32_t bits : {8, 4}) {
      SCOPED_TRACE(q * 10 + bits);
      Gqa g = QuantizedPrompt(q, bits);
      EXPECT_OK(g.Run());
      EXPECT_TRUE(DtypeEquals(g.problem.cache_dtype, bits == 4 ? kUInt8 : kInt8));
      EXPECT_EQ(g.problem.k_scale_count, q == ATTNRT_GQA_QUANT_PER_CHANNEL ? 16 : 1);
      EXPECT_EQ(g.problem.v_scale_count, g.problem.k_scale_count);
    }
  }
  // float8_e4m3fn 8-bit cache (beyond the CPU reference; CUDA has it).
  Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8);
  for (int i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE})
    g.I(i).dtype = kFloat8E4M3FN;
  for (int i : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
    g.O(i).dtype = kFloat8E4M3FN;
  }
  EXPECT_OK(g.Run());
  // Scales of any shape with the right element count, e.g. (1, Nkv, 1, H).
  Gqa c = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_CHANNEL, 8);
  c.Reshape(c.I(ATTNRT_GQA_INPUT_K_SCALE), {1, 1, 1, 16});
  EXPECT_OK(c.Run());
}

TEST(GqaShapes, AcceptsLegacySeqlensShapes) {
  struct Case {
    int64_t B;
    std::vector<int64_t> shape;
  };
  for (const Case& c : std::vector<Case>{{1, {1, 1}}, {2, {2, 1}}, {2, {1, 2}}}) {
    SCOPED_TRACE(c.shape.size());
    Gqa g = Prompt(c.B);
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SEQLENS_K), c.shape);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, std::vector<int32_t>(c.B, 3));
    EXPECT_OK(g.Run());
  }
  // total_sequence_length as a scalar.
  Gqa g = Prompt();
  g.Reshape(g.I(ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH), {});
  g.SetTotal(4);
  EXPECT_OK(g.Run());
}

TEST(GqaShapes, AcceptsCompactStridesAndAnyStrideOnUnitDims) {
  Gqa g = Prompt(1, 4, 2, 1, 8);
  const int64_t compact[3] = {64, 16, 1};
  g.I(ATTNRT_GQA_INPUT_QUERY).strides = compact;
  const int64_t unit_any[3] = {999, 8, 1};  // dimension 0 has extent 1
  g.I(ATTNRT_GQA_INPUT_KEY).strides = unit_any;
  EXPECT_OK(g.Run());
}

TEST(GqaShapes, AcceptsCudaTensorsWithHostLengths) {
  Gqa g = Prompt(1, 4, 2, 1, 16, kFloat16);
  for (int i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    g.I(i).device = kCuda;
  }
  for (int i = 0; i < 3; ++i) g.O(i).device = kCuda;
  ASSERT_TRUE(g.Attributes().ok());
  EXPECT_OK(g.Shapes());
  EXPECT_EQ(g.problem.device_type, ATTNRT_DEVICE_CUDA);
}

// ================================ ValidateShapes: rejected ===================================

TEST(GqaShapes, RejectsInputAndOutputCounts) {
  Gqa g = Prompt();
  ASSERT_TRUE(g.Attributes().ok());
  g.num_in = 6;
  EXPECT_INVALID(g.Shapes(), "at least 7 inputs", "got 6");
  g.num_in = 17;
  EXPECT_INVALID(g.Shapes(), "at most 16 inputs", "got 17");
  g.num_in = 16;
  g.num_out = 0;
  EXPECT_INVALID(g.Shapes(), "1 to 4 outputs", "got 0");
  g.num_out = 5;
  EXPECT_INVALID(g.Shapes(), "1 to 4 outputs", "got 5");
  g.num_out = 4;
  EXPECT_INVALID(ValidateShapes(g.attrs, nullptr, 16, g.out, 4, &g.problem), "inputs");
  EXPECT_INVALID(ValidateShapes(g.attrs, g.in, 16, nullptr, 4, &g.problem), "outputs");
  EXPECT_INVALID(ValidateShapes(g.attrs, g.in, 16, g.out, 4, nullptr), "problem");
}

TEST(GqaShapes, RejectsMissingRequiredTensors) {
  for (int i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_SEQLENS_K,
                ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH}) {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.in[i] = nullptr;
    static const char* names[] = {
        "'query'", "", "", "", "", "'seqlens_k'", "'total_sequence_length'"};
    EXPECT_INVALID(g.Shapes(), names[i], "required");
  }
  Gqa g = Prompt();
  ASSERT_TRUE(g.Attributes().ok());
  g.out[ATTNRT_GQA_OUTPUT_OUTPUT] = nullptr;
  EXPECT_INVALID(g.Shapes(), "'output'", "required");
}

TEST(GqaShapes, RejectsAttributesThatSkippedValidation) {
  Gqa g = Prompt();
  g.attrs.num_heads = 3;  // never passed through ValidateAttributes
  g.attrs.kv_num_heads = 2;
  EXPECT_INVALID(g.Shapes(), "num_heads must be a multiple of kv_num_heads");
}

TEST(GqaShapes, RejectsMalformedDescriptors) {
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_KEY).ndim = -1;
    EXPECT_INVALID(g.Shapes(), "key: ndim must be in [0, 8], got -1");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_VALUE).shape = nullptr;
    EXPECT_INVALID(g.Shapes(), "value: shape is NULL");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.OwnerOf(g.in[ATTNRT_GQA_INPUT_QUERY]).shape[1] = -4;
    EXPECT_INVALID(g.Shapes(), "query: dimension 1 must be non-negative, got -4");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.OwnerOf(g.out[ATTNRT_GQA_OUTPUT_OUTPUT]).shape[1] = int64_t{1} << 40;
    EXPECT_INVALID(g.Shapes(), "output: dimension 1 is 1099511627776", "maximum 2147483647");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    auto& shape = g.OwnerOf(g.in[ATTNRT_GQA_INPUT_KEY]).shape;
    shape = {INT32_MAX, INT32_MAX, INT32_MAX};
    g.I(ATTNRT_GQA_INPUT_KEY).shape = shape.data();
    EXPECT_INVALID(g.Shapes(), "key: shape [2147483647, 2147483647, 2147483647]",
                   "more elements than the supported maximum");
  }
}

TEST(GqaShapes, RejectsNonCompactStrides) {
  Gqa g = Prompt(1, 4, 2, 1, 8);
  ASSERT_TRUE(g.Attributes().ok());
  const int64_t strides[3] = {64, 1, 4};
  g.I(ATTNRT_GQA_INPUT_QUERY).strides = strides;
  EXPECT_INVALID(g.Shapes(),
                 "query: only compact row-major tensors are supported, got strides [64, 1, 4] for "
                 "shape [1, 4, 16]");
  g.I(ATTNRT_GQA_INPUT_QUERY).strides = nullptr;
  const int64_t present_strides[4] = {32, 32, 1, 4};
  g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY).strides = present_strides;
  EXPECT_INVALID(g.Shapes(), "present_key: only compact row-major", "[32, 32, 1, 4]",
                 "[1, 1, 4, 8]");
}

TEST(GqaShapes, RejectsDevices) {
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_KEY).device = kCuda;
    EXPECT_INVALID(g.Shapes(), "key: expected device cpu:0 (the device of query), got cuda:0");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_SEQLENS_K).device = kCuda;
    EXPECT_INVALID(g.Shapes(), "seqlens_k: must be in host memory", "got cuda:0");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH).device = kCuda;
    EXPECT_INVALID(g.Shapes(), "total_sequence_length: must be in host memory");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.I(ATTNRT_GQA_INPUT_QUERY).device = attnrt_device{7, 0};
    EXPECT_INVALID(g.Shapes(), "query: unsupported device device_type 7:0");
  }
  {
    Gqa g = Prompt(1, 4, 2, 1, 16, kFloat16);
    ASSERT_TRUE(g.Attributes().ok());
    for (int i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
      g.I(i).device = kCuda;
    }
    for (int i = 0; i < 3; ++i) g.O(i).device = kCuda;
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE).device = attnrt_device{ATTNRT_DEVICE_CUDA, 1};
    EXPECT_INVALID(g.Shapes(), "present_value: expected device cuda:0", "got cuda:1");
  }
}

TEST(GqaShapes, RejectsDtypes) {
  struct Case {
    bool quantized;  // 8-bit PER_TENSOR
    bool input;
    int index;
    attnrt_dtype dtype;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {false,
       true,
       ATTNRT_GQA_INPUT_QUERY,
       kInt8,
       {"query: expected dtype float32, float16 or bfloat16, got int8"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_KEY,
       kFloat16,
       {"key: expected dtype float32 (the dtype of query), got float16"}},
      {false, true, ATTNRT_GQA_INPUT_VALUE, kBFloat16, {"value: expected dtype float32"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_SEQLENS_K,
       kInt64,
       {"seqlens_k: expected dtype int32, got int64"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH,
       kInt64,
       {"total_sequence_length: expected dtype int32, got int64"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_POSITION_IDS,
       kInt32,
       {"position_ids: expected dtype int64, got int32"}},
      {false, true, ATTNRT_GQA_INPUT_COS_CACHE, kFloat16, {"cos_cache: expected dtype float32"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_ATTENTION_BIAS,
       kFloat16,
       {"attention_bias: expected dtype float32"}},
      {false, true, ATTNRT_GQA_INPUT_HEAD_SINK, kFloat16, {"head_sink: expected dtype float32"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_PAST_KEY,
       kInt8,
       {"past_key: expected dtype float32", "not quantized", "got int8"}},
      {false,
       false,
       ATTNRT_GQA_OUTPUT_OUTPUT,
       kFloat16,
       {"output: expected dtype float32 (the dtype of query), got float16"}},
      {false,
       false,
       ATTNRT_GQA_OUTPUT_PRESENT_KEY,
       kFloat16,
       {"present_key: expected dtype float32 (the dtype of past_key), got float16"}},
      {false, false, ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat16, {"output_qk: expected dtype float32"}},
      {true,
       true,
       ATTNRT_GQA_INPUT_PAST_KEY,
       kUInt8,
       {"past_key: expected dtype int8, float8_e4m3fn or float8_e5m2 for an 8-bit quantized KV "
        "cache, got "
        "uint8"}},
      {true,
       true,
       ATTNRT_GQA_INPUT_PAST_VALUE,
       kFloat8E4M3FN,
       {"past_value: expected dtype int8 (the dtype of past_key), got float8_e4m3fn"}},
      {true,
       false,
       ATTNRT_GQA_OUTPUT_PRESENT_VALUE,
       kUInt8,
       {"present_value: expected dtype int8 (the dtype of present_key), got uint8"}},
      {true,
       true,
       ATTNRT_GQA_INPUT_K_SCALE,
       kFloat16,
       {"k_scale: expected dtype float32, got float16"}},
      {true,
       true,
       ATTNRT_GQA_INPUT_V_SCALE,
       attnrt_dtype{ATTNRT_DTYPE_CODE_FLOAT, 64, 1},
       {"v_scale: expected dtype float32, got float64"}},
      // Dtypes outside the library's names are named from their fields.
      {false,
       true,
       ATTNRT_GQA_INPUT_QUERY,
       attnrt_dtype{ATTNRT_DTYPE_CODE_INT, 16, 1},
       {"query: expected dtype float32, float16 or bfloat16, got int16"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_QUERY,
       attnrt_dtype{ATTNRT_DTYPE_CODE_FLOAT, 32, 4},
       {"query: expected dtype float32, float16 or bfloat16, got float32x4"}},
      {false,
       true,
       ATTNRT_GQA_INPUT_SEQLENS_K,
       attnrt_dtype{99, 8, 1},
       {"seqlens_k: expected dtype int32, got dtype(code=99, bits=8, lanes=1)"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const Case& c = cases[i];
    Gqa g = c.quantized ? QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8) : Prompt(1, 4, 2, 1, 16);
    if (!c.quantized) {
      g.In(ATTNRT_GQA_INPUT_PAST_KEY, kFloat32, {1, 1, 0, 16});
      g.In(ATTNRT_GQA_INPUT_PAST_VALUE, kFloat32, {1, 1, 0, 16});
      AddRotary(g, 8, 8);
      g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {1, 4});
      g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {1, 2, 4, 4});
      g.In(ATTNRT_GQA_INPUT_HEAD_SINK, kFloat32, {2});
      g.attrs.qk_output = 1;
      g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {1, 2, 4, 4});
    }
    ASSERT_TRUE(g.Attributes().ok());
    ASSERT_TRUE(g.Shapes().ok()) << g.Shapes().message;
    (c.input ? g.I(c.index) : g.O(c.index)).dtype = c.dtype;
    const Status st = g.Shapes();
    EXPECT_EQ(st.code, ATTNRT_ERROR_INVALID_ARGUMENT);
    for (const std::string& part : c.parts) {
      EXPECT_NE(st.message.find(part), std::string::npos) << st.message << " / " << part;
    }
  }
}

TEST(GqaShapes, RejectsMissingScalesAndNormWeights) {
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8);
    ASSERT_TRUE(g.Attributes().ok());
    const attnrt_tensor* k_scale = g.in[ATTNRT_GQA_INPUT_K_SCALE];
    g.in[ATTNRT_GQA_INPUT_K_SCALE] = nullptr;
    EXPECT_INVALID(g.Shapes(), "k_scale must be provided for quantized KV cache",
                   "k_quant_type=PER_TENSOR");
    g.in[ATTNRT_GQA_INPUT_K_SCALE] = k_scale;
    g.num_in = 13;  // v_scale (input 13) lies beyond the count: absent
    EXPECT_INVALID(g.Shapes(), "v_scale must be provided for quantized KV cache");
  }
  {
    Gqa g = Prompt(1, 4, 2, 1, 16);
    ASSERT_TRUE(g.Attributes().ok());
    g.In(ATTNRT_GQA_INPUT_Q_NORM_WEIGHT, kFloat32, {16});
    EXPECT_INVALID(g.Shapes(), "q_norm_weight is not supported by GroupQueryAttention on CPU");
    g.in[ATTNRT_GQA_INPUT_Q_NORM_WEIGHT] = nullptr;
    g.In(ATTNRT_GQA_INPUT_K_NORM_WEIGHT, kFloat32, {16});
    EXPECT_INVALID(g.Shapes(), "k_norm_weight is not supported by GroupQueryAttention on CPU");
  }
  {
    Gqa g = Prompt(1, 4, 2, 1, 16, kFloat16);
    ASSERT_TRUE(g.Attributes().ok());
    for (int i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
      g.I(i).device = kCuda;
    }
    for (int i = 0; i < 3; ++i) g.O(i).device = kCuda;
    g.In(ATTNRT_GQA_INPUT_Q_NORM_WEIGHT, kFloat16, {16}, kCuda);
    ExpectError(g.Shapes(), ATTNRT_ERROR_UNSUPPORTED, {"q_norm_weight is not supported"});
  }
}

TEST(GqaShapes, RejectsQueryKeyValueShapes) {
  auto expect = [](void (*mutate)(Gqa&), std::initializer_list<std::string> parts) {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    ASSERT_TRUE(g.Attributes().ok());
    mutate(g);
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 64});
      },
      {"query: expected rank 3, got 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, 48});
      },
      {"head_size must be a multiple of 8, got 12", "query dimension 2 = 48", "num_heads = 4"});
  expect([](Gqa& g) { g.in[ATTNRT_GQA_INPUT_KEY] = nullptr; },
         {"Input 'key' and 'value' shall be both present", "key absent and value present"});
  expect([](Gqa& g) { g.in[ATTNRT_GQA_INPUT_VALUE] = nullptr; },
         {"Input 'key' and 'value' shall be both present", "key present and value absent"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, 66});
      },
      {"Input 'query' dimension 2 should be a positive multiple of num_heads = 4, got 66"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, 0});
      },
      {"Input 'query' dimension 2", "got 0"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 128});
      },
      {"key: expected rank 3, got 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {3, 4, 32});
      },
      {"Input 'key' dimension 0 should be batch_size, got 3 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 4, 33});
      },
      {"Input 'key' dimension 2 should be kv_num_heads * head_size, got 33 expected 32"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 4, 32, 1});
      },
      {"value: expected rank 3, got 4"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {1, 4, 32});
      },
      {"Input 'value' dimension 0 should be batch_size, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 3, 32});
      },
      {"Input 'value' dimension 1 should be key dimension 1", "got 3 expected 4"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 4, 16});
      },
      {"Input 'value' dimension 2 should be kv_num_heads * head_size, got 16 expected 32"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 3, 32});
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 3, 32});
      },
      {"Input 'key' dimension 1 (kv_sequence_length) should equal sequence_length when "
       "past_key is absent",
       "got 3 expected 4"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 0, 32});
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 0, 32});
      },
      {"should equal sequence_length when past_key is absent", "got 0 expected 4"});
}

TEST(GqaShapes, RejectsPackedQkvShapes) {
  Gqa g = Prompt(2, 4, 4, 2, 16);
  ASSERT_TRUE(g.Attributes().ok());
  g.in[ATTNRT_GQA_INPUT_KEY] = nullptr;
  g.in[ATTNRT_GQA_INPUT_VALUE] = nullptr;
  g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, 8 * 12});  // H = 12
  EXPECT_INVALID(g.Shapes(), "head_size must be a multiple of 8, got 12",
                 "num_heads + 2 * kv_num_heads = 8");
  g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 4, 8 * 16 + 3});
  EXPECT_INVALID(g.Shapes(),
                 "Input 'query' dimension 2 should be a positive multiple of num_heads + 2 * "
                 "kv_num_heads = 8, got 131");
}

TEST(GqaShapes, RejectsPastShapes) {
  auto expect = [](void (*mutate)(Gqa&), std::initializer_list<std::string> parts) {
    Gqa g = Decode(2, 8, 4, 2, 16);
    ASSERT_TRUE(g.Attributes().ok());
    ASSERT_TRUE(g.Shapes().ok());
    mutate(g);
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect([](Gqa& g) { g.in[ATTNRT_GQA_INPUT_PAST_VALUE] = nullptr; },
         {"Input 'past_key' and 'past_value' shall be both present or both absent",
          "past_key present and past_value absent"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_KEY), {2, 2, 128});
      },
      {"past_key: expected rank 4, got 3"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_VALUE), {2, 2, 8, 16, 1});
      },
      {"past_value: expected rank 4, got 5"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_KEY), {1, 2, 8, 16});
      },
      {"Input 'past_key' dimension 0 should be batch_size, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_VALUE), {3, 2, 8, 16});
      },
      {"Input 'past_value' dimension 0 should be batch_size, got 3 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_VALUE), {2, 2, 7, 16});
      },
      {"Input 'past_value' dimension 2 should be the same as past_key dimension 2, got 7 "
       "expected 8"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_KEY), {2, 4, 8, 16});
      },
      {"Input 'past_key' dimension 1 should be kv_num_heads, got 4 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_VALUE), {2, 1, 8, 16});
      },
      {"Input 'past_value' dimension 1 should be kv_num_heads, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_VALUE), {2, 2, 8, 8});
      },
      {"Input 'past_value' dimension 3 should match the packed KV head dimension, got 8 "
       "expected 16"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {2, 3, 64});
        g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 2, 32});
        g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 2, 32});
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {2, 3, 64});
      },
      {"Input 'key' dimension 1 (kv_sequence_length) should equal sequence_length, or be 0 for "
       "shared KV, when past_key is given, got 2 expected 3"});
}

TEST(GqaShapes, RejectsInt4PastHeadDimension) {
  Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 4, 64);
  ASSERT_TRUE(g.Attributes().ok());
  ASSERT_TRUE(g.Shapes().ok()) << g.Shapes().message;
  g.Reshape(g.I(ATTNRT_GQA_INPUT_PAST_KEY), {1, 1, 0, 64});
  EXPECT_INVALID(g.Shapes(),
                 "Input 'past_key' dimension 3 should match the packed KV head dimension, got 64 "
                 "expected 32");
}

TEST(GqaShapes, RejectsSeqlensAndTotalShapes) {
  {
    Gqa g = Prompt(2);
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SEQLENS_K), {3});
    EXPECT_INVALID(g.Shapes(), "seqlens_k must have batch_size (2) elements, got 3.");
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SEQLENS_K), {});  // 0-d with B = 2
    EXPECT_INVALID(g.Shapes(), "seqlens_k must be at least 1D, got scalar.");
  }
  {
    // 0-d with B = 1 too, as the pinned onnxruntime rejects it.
    Gqa g = Prompt(1);
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SEQLENS_K), {});
    EXPECT_INVALID(g.Shapes(), "seqlens_k must be at least 1D, got scalar.");
  }
  {
    Gqa g = Prompt(4);
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SEQLENS_K), {2, 2});
    EXPECT_INVALID(g.Shapes(),
                   "seqlens_k has unexpected shape. Each dimension must be 1 or batch_size (4), "
                   "got dim[0] = 2.");
  }
  {
    Gqa g = Prompt();
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH), {2});
    EXPECT_INVALID(g.Shapes(), "total_sequence_length must have exactly one element, got 2");
  }
}

TEST(GqaShapes, RejectsOutputAndPresentShapes) {
  auto expect = [](void (*mutate)(Gqa&), std::initializer_list<std::string> parts) {
    Gqa g = Decode(2, 8, 4, 2, 16);
    ASSERT_TRUE(g.Attributes().ok());
    mutate(g);
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {2, 64});
      },
      {"output: expected rank 3, got 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {1, 1, 64});
      },
      {"Output 'output' dimension 0 should be batch_size, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {2, 2, 64});
      },
      {"Output 'output' dimension 1 should be sequence_length, got 2 expected 1"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {2, 1, 32});
      },
      {"Output 'output' dimension 2 should be num_heads * head_size, got 32 expected 64"});
  expect([](Gqa& g) { g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = nullptr; },
         {"Output 'present_key' and 'present_value' shall be both present or both absent",
          "present_key present and present_value absent"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 9});
      },
      {"present_key: expected rank 4, got 3"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 2, 9});
      },
      {"present_value: expected rank 4, got 3"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 2, 9, 16});
      },
      {"Output 'present_key' dimension 0 should be batch_size, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 4, 9, 16});
      },
      {"Output 'present_value' dimension 1 should be kv_num_heads, got 4 expected 2"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 7, 16});
      },
      {"Output 'present_key' dimension 2 should be at least past_sequence_length, got 7 "
       "expected >= 8"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 9, 8});
      },
      {"Output 'present_key' dimension 3 should match the packed KV head dimension, got 8 "
       "expected 16"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 2, 10, 16});
      },
      {"Output 'present_value' dimension 2 should be the same as present_key dimension 2, got "
       "10 expected 9"});
}

TEST(GqaShapes, RejectsQuantizedWithoutPresentOrPast) {
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8);
    ASSERT_TRUE(g.Attributes().ok());
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = nullptr;
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = nullptr;
    EXPECT_INVALID(g.Shapes(),
                   "present_key and present_value must be provided for quantized KV cache");
  }
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8);
    ASSERT_TRUE(g.Attributes().ok());
    g.in[ATTNRT_GQA_INPUT_PAST_KEY] = nullptr;
    g.in[ATTNRT_GQA_INPUT_PAST_VALUE] = nullptr;
    EXPECT_INVALID(g.Shapes(), "past_key and past_value must be provided for quantized KV cache");
  }
}

TEST(GqaShapes, RejectsSlidingWindowCacheShapes) {
  auto windowed = [] {
    Gqa g = Decode(1, 8, 2, 1, 16);
    g.attrs.sliding_window_cache = 1;
    g.attrs.local_window_size = 4;
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 8, 16});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 8, 16});
    return g;
  };
  {
    Gqa g = windowed();
    EXPECT_OK(g.Run());  // seqlens_k = 8 = P is fine: absolute lengths are not bounded by P
  }
  {
    Gqa g = windowed();
    ASSERT_TRUE(g.Attributes().ok());
    g.in[ATTNRT_GQA_INPUT_PAST_KEY] = nullptr;
    g.in[ATTNRT_GQA_INPUT_PAST_VALUE] = nullptr;
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 1, 16});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 1, 16});
    EXPECT_INVALID(g.Shapes(), "sliding_window_cache=1 requires past_key and past_value");
  }
  {
    Gqa g = windowed();
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {1, 0, 16});
    g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {1, 0, 16});
    EXPECT_INVALID(g.Shapes(), "sliding_window_cache=1 requires new key/value rows",
                   "kv_sequence_length 0");
  }
  {
    Gqa g = windowed();
    g.attrs.local_window_size = 9;
    ASSERT_TRUE(g.Attributes().ok());
    EXPECT_INVALID(g.Shapes(), "past_key dimension 2 >= local_window_size, got 8 expected >= 9");
  }
  {
    Gqa g = windowed();
    g.attrs.k_quant_type = g.attrs.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    g.attrs.kv_cache_bit_width = 4;
    for (int i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
      g.I(i).dtype = kUInt8;
      g.Reshape(g.I(i), {1, 1, 8, 8});
    }
    for (int i : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
      g.O(i).dtype = kUInt8;
      g.Reshape(g.O(i), {1, 1, 8, 8});
    }
    g.In(ATTNRT_GQA_INPUT_K_SCALE, kFloat32, {1});
    g.In(ATTNRT_GQA_INPUT_V_SCALE, kFloat32, {1});
    ASSERT_TRUE(g.Attributes().ok());
    EXPECT_INVALID(g.Shapes(),
                   "head_size must be a multiple of 32 for a 4-bit windowed KV cache, got 16");
  }
  {
    Gqa g = windowed();
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 9, 16});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 9, 16});
    EXPECT_INVALID(g.Shapes(),
                   "Output 'present_key' dimension 2 should be the window cache capacity",
                   "got 9 expected 8");
  }
  {
    Gqa g = windowed();
    ASSERT_TRUE(g.Attributes().ok());
    g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {1, 1, 1, 9});
    EXPECT_INVALID(g.Shapes(), "attention_bias cannot be combined with sliding_window_cache=1");
  }
  {
    Gqa g = windowed();
    g.attrs.qk_output = 1;
    ASSERT_TRUE(g.Attributes().ok());
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {1, 2, 1, 9});
    EXPECT_INVALID(g.Shapes(), "qk_output is not implemented with sliding_window_cache=1");
  }
}

TEST(GqaShapes, RejectsRotaryCacheShapes) {
  auto expect = [](void (*mutate)(Gqa&), std::initializer_list<std::string> parts) {
    Gqa g = Prompt(1, 4, 2, 1, 32);
    AddRotary(g, 16, 16);
    ASSERT_TRUE(g.Attributes().ok());
    ASSERT_TRUE(g.Shapes().ok());
    mutate(g);
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect([](Gqa& g) { g.in[ATTNRT_GQA_INPUT_SIN_CACHE] = nullptr; },
         {"Input 'cos_cache' and 'sin_cache' shall be both present or both absent",
          "cos_cache present and sin_cache absent"});
  expect([](Gqa& g) { g.Reshape(g.I(ATTNRT_GQA_INPUT_COS_CACHE), {256}); },
         {"cos_cache: expected rank 2, got 1"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_SIN_CACHE), {16, 16, 1});
      },
      {"sin_cache: expected rank 2, got 3"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_COS_CACHE), {16, 24});
      },
      {"Input 'cos_cache' dimension 1 must be <= head_size / 2 = 16 and a multiple of 8, got "
       "24"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_SIN_CACHE), {16, 12});
      },
      {"Input 'sin_cache' dimension 1 must be <= head_size / 2 = 16 and a multiple of 8, got "
       "12"});
  expect(
      [](Gqa& g) {
        g.Reshape(g.I(ATTNRT_GQA_INPUT_SIN_CACHE), {16, 8});
      },
      {"Input 'cos_cache' and 'sin_cache' dimension 1 must be the same, got 16 and 8"});
  // H % 16 is checked whenever both caches are given, even with do_rotary = 0.
  Gqa g = Prompt(1, 4, 2, 1, 24);
  AddRotary(g, 16, 8);
  ASSERT_TRUE(g.Attributes().ok());
  EXPECT_INVALID(
      g.Shapes(),
      "head_size must be a multiple of 16 when cos_cache and sin_cache are given, got 24");
}

TEST(GqaShapes, RejectsDoRotaryWithoutCaches) {
  Gqa g = Prompt(1, 4, 2, 1, 16);
  g.attrs.do_rotary = 1;
  ASSERT_TRUE(g.Attributes().ok());
  EXPECT_INVALID(g.Shapes(), "cos_cache and sin_cache must be provided when do_rotary is true");
}

TEST(GqaShapes, RejectsCustomAttentionInputShapes) {
  auto expect = [](void (*mutate)(Gqa&), std::initializer_list<std::string> parts) {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    ASSERT_TRUE(g.Attributes().ok());
    mutate(g);
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect([](Gqa& g) { g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {8}); },
         {"position_ids: expected rank 2, got 1"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {1, 4});
      },
      {"Input 'position_ids' dimension 0 should be batch_size, got 1 expected 2"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {2, 3});
      },
      {"Input 'position_ids' dimension 1 should be at least sequence_length, got 3 expected "
       ">= 4"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {2, 4, 4});
      },
      {"attention_bias: expected rank 4, got 3"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {3, 4, 4, 4});
      },
      {"Input 'attention_bias' dimension 0 should be batch_size or 1, got 3 expected 2 or 1"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {2, 2, 4, 4});
      },
      {"Input 'attention_bias' dimension 1 should be num_heads or 1, got 2 expected 4 or 1"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {2, 4, 1, 4});
      },
      {"Input 'attention_bias' dimension 2 should be sequence_length, got 1 expected 4"});
  expect(
      [](Gqa& g) {
        g.In(ATTNRT_GQA_INPUT_HEAD_SINK, kFloat32, {1, 4});
      },
      {"head_sink: expected rank 1, got 2"});
  expect([](Gqa& g) { g.In(ATTNRT_GQA_INPUT_HEAD_SINK, kFloat32, {2}); },
         {"Input 'head_sink' dimension 0 should be num_heads, got 2 expected 4"});
}

TEST(GqaShapes, RejectsScaleElementCounts) {
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 8);
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_K_SCALE), {2});
    EXPECT_INVALID(g.Shapes(), "k_scale shape mismatch: expected 1 elements, got 2");
  }
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_CHANNEL, 4);
    ASSERT_TRUE(g.Attributes().ok());
    g.Reshape(g.I(ATTNRT_GQA_INPUT_V_SCALE), {1});
    EXPECT_INVALID(g.Shapes(), "v_scale shape mismatch: expected 16 elements, got 1");
  }
}

TEST(GqaShapes, RejectsOutputQkConfiguration) {
  {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    g.attrs.qk_output = 1;
    ASSERT_TRUE(g.Attributes().ok());
    EXPECT_INVALID(g.Shapes(),
                   "qk_output attribute was configured but output buffer was not provided");
    g.num_out = 3;
    EXPECT_INVALID(g.Shapes(), "qk_output attribute was configured");
  }
  {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    ASSERT_TRUE(g.Attributes().ok());
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {2, 4, 4, 4});
    EXPECT_INVALID(g.Shapes(),
                   "Output QK buffer was provided but qk_output attribute was not configured");
  }
  auto expect = [](std::vector<int64_t> shape, std::initializer_list<std::string> parts) {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    g.attrs.qk_output = 2;
    ASSERT_TRUE(g.Attributes().ok());
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, std::move(shape));
    ExpectError(g.Shapes(), ATTNRT_ERROR_INVALID_ARGUMENT, parts);
  };
  expect({2, 4, 16}, {"output_qk: expected rank 4, got 3"});
  expect({1, 4, 4, 4}, {"Output 'output_qk' dimension 0 should be batch_size, got 1 expected 2"});
  expect({2, 2, 4, 4}, {"Output 'output_qk' dimension 1 should be num_heads, got 2 expected 4"});
  expect({2, 4, 3, 4},
         {"Output 'output_qk' dimension 2 should be sequence_length, got 3 expected 4"});
}

// ================================ ValidateRun: accepted ======================================

TEST(GqaRun, PromptFillsArgsWithByteOffsets) {
  Gqa g = Prompt(2, 4, 4, 2, 16);
  // Shift query by one element inside a larger buffer.
  auto& q = g.OwnerOf(g.in[ATTNRT_GQA_INPUT_QUERY]);
  q.data.resize(q.data.size() + 4);
  g.I(ATTNRT_GQA_INPUT_QUERY).data = q.data.data();
  g.I(ATTNRT_GQA_INPUT_QUERY).byte_offset = 4;
  attnrt_gqa_args args;
  std::memset(&args, 0xAB, sizeof args);
  EXPECT_OK(g.Run(&args));
  EXPECT_EQ(args.struct_size, sizeof(attnrt_gqa_args));
  EXPECT_EQ(args.problem, &g.problem);
  EXPECT_EQ(args.total_sequence_length, 4);
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_FIRST_PROMPT);
  EXPECT_FALSE(args.present_shares_past);
  EXPECT_EQ(args.query, q.data.data() + 4);
  EXPECT_EQ(args.key, g.in[ATTNRT_GQA_INPUT_KEY]->data);
  EXPECT_EQ(args.value, g.in[ATTNRT_GQA_INPUT_VALUE]->data);
  EXPECT_EQ(args.past_key, nullptr);
  EXPECT_EQ(args.past_value, nullptr);
  EXPECT_EQ(static_cast<const void*>(args.seqlens_k), g.in[ATTNRT_GQA_INPUT_SEQLENS_K]->data);
  EXPECT_EQ(args.cos_cache, nullptr);
  EXPECT_EQ(args.position_ids, nullptr);
  EXPECT_EQ(args.attention_bias, nullptr);
  EXPECT_EQ(args.head_sink, nullptr);
  EXPECT_EQ(args.k_scale, nullptr);
  EXPECT_EQ(args.output, g.out[ATTNRT_GQA_OUTPUT_OUTPUT]->data);
  EXPECT_EQ(args.present_key, g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY]->data);
  EXPECT_EQ(args.present_value, g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE]->data);
  EXPECT_EQ(args.output_qk, nullptr);
  EXPECT_EQ(args.workspace, nullptr);
  EXPECT_EQ(args.workspace_size, 0u);
  EXPECT_EQ(args.stream, nullptr);
}

TEST(GqaRun, AcceptsRightPaddedPromptAndPromptWithPastBuffer) {
  Gqa g = Prompt(3, 6, 4, 2, 16);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {3, 1, 5});
  EXPECT_OK(g.Run());
  // First prompt with a past buffer (content ignored): present = max(T, P).
  Gqa h = Prompt(1, 4, 2, 1, 8);
  h.In(ATTNRT_GQA_INPUT_PAST_KEY, kFloat32, {1, 1, 12, 8});
  h.In(ATTNRT_GQA_INPUT_PAST_VALUE, kFloat32, {1, 1, 12, 8});
  h.Reshape(h.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 12, 8});
  h.Reshape(h.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 12, 8});
  attnrt_gqa_args args;
  EXPECT_OK(h.Run(&args));
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_FIRST_PROMPT);
}

TEST(GqaRun, AcceptsDecodeWithPastAndRaggedLengths) {
  Gqa g = Decode(2, 8, 4, 2, 16);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8, 3});
  attnrt_gqa_args args;
  EXPECT_OK(g.Run(&args));
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_DECODE);
  EXPECT_EQ(args.total_sequence_length, 9);
  EXPECT_EQ(args.past_key, g.in[ATTNRT_GQA_INPUT_PAST_KEY]->data);
  EXPECT_EQ(args.past_value, g.in[ATTNRT_GQA_INPUT_PAST_VALUE]->data);
}

TEST(GqaRun, AcceptsSubsequentPromptWithAndWithoutPast) {
  Gqa g = Decode(1, 8, 2, 1, 8);
  g.Reshape(g.I(ATTNRT_GQA_INPUT_QUERY), {1, 3, 16});
  g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {1, 3, 8});
  g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {1, 3, 8});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_OUTPUT), {1, 3, 16});
  g.SetTotal(11);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {10});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 11, 8});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 11, 8});
  attnrt_gqa_args args;
  EXPECT_OK(g.Run(&args));
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT);
  // Observed in the reference: B = 1, no past, S = 3, T = 5, seqlens_k = 4 is accepted.
  Gqa h = Prompt(1, 3, 2, 1, 8);
  h.SetTotal(5);
  h.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {4});
  h.Reshape(h.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 5, 8});
  h.Reshape(h.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 5, 8});
  EXPECT_OK(h.Run(&args));
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT);
}

TEST(GqaRun, AcceptsSharedPastPresentBuffer) {
  // A decode step writing into the same max-length buffer: P = 16, T = 9.
  Gqa g = Decode(2, 16, 4, 2, 16);
  g.SetTotal(9);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8, 5});
  g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g.in[ATTNRT_GQA_INPUT_PAST_KEY];
  g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g.in[ATTNRT_GQA_INPUT_PAST_VALUE];
  attnrt_gqa_args args;
  EXPECT_OK(g.Run(&args));
  EXPECT_TRUE(args.present_shares_past);
  EXPECT_EQ(args.present_key, args.past_key);
  EXPECT_EQ(args.present_value, args.past_value);
}

TEST(GqaRun, AcceptsSharedKv) {
  // L = 0: the past supplies every key (decode and first prompt).
  Gqa g = Decode(2, 8, 4, 2, 16);
  g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {2, 0, 32});
  g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {2, 0, 32});
  g.SetTotal(8);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {7, 4});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 8, 16});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 2, 8, 16});
  attnrt_gqa_args args;
  EXPECT_OK(g.Run(&args));
  EXPECT_EQ(g.problem.kv_sequence_length, 0);
  EXPECT_EQ(args.key, nullptr);  // no elements, NULL data
  EXPECT_EQ(args.phase, ATTNRT_GQA_PHASE_DECODE);
}

TEST(GqaRun, AcceptsQuantizedAndZeroLengthPast) {
  for (int32_t bits : {8, 4}) {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_CHANNEL, bits);
    attnrt_gqa_args args;
    EXPECT_OK(g.Run(&args));
    EXPECT_EQ(args.k_scale, g.in[ATTNRT_GQA_INPUT_K_SCALE]->data);
    EXPECT_EQ(args.v_scale, g.in[ATTNRT_GQA_INPUT_V_SCALE]->data);
    EXPECT_EQ(args.past_key, nullptr);  // zero-length past
    EXPECT_FALSE(args.present_shares_past);
  }
}

TEST(GqaRun, AcceptsRotaryPositions) {
  Gqa g = Decode(2, 8, 2, 1, 16);
  g.attrs.do_rotary = 1;
  AddRotary(g, 16, 8);
  g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {2, 2});
  g.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {15, 999, 0, -7});  // column 1 is beyond S = 1
  EXPECT_OK(g.Run());
  Gqa p = Prompt(1, 4, 2, 1, 16);
  p.attrs.do_rotary = 1;
  AddRotary(p, 16, 8);
  p.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {1, 4});
  p.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {12, -1, -1, -1});  // only flat[0] counts: 12 <= 16-4
  EXPECT_OK(p.Run());
}

TEST(GqaRun, NeverWritesOutputs) {
  auto poison = [](Gqa& g) {
    for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
      if (g.out[i] == nullptr) continue;
      auto& data = g.OwnerOf(g.out[i]).data;
      std::fill(data.begin(), data.end(), 0x5A);
    }
  };
  auto untouched = [](Gqa& g) {
    for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
      if (g.out[i] == nullptr) continue;
      for (unsigned char c : g.OwnerOf(g.out[i]).data) {
        if (c != 0x5A) return false;
      }
    }
    return true;
  };
  {
    Gqa g = Prompt(2, 4, 4, 2, 16);
    g.attrs.qk_output = 1;
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {2, 4, 4, 4});
    poison(g);
    EXPECT_OK(g.Run());
    EXPECT_TRUE(untouched(g));
  }
  {
    Gqa g = Decode(2, 8, 4, 2, 16);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8, 99});
    poison(g);
    EXPECT_INVALID(g.Run(), "seqlens_k[1] = 99");
    EXPECT_TRUE(untouched(g));
  }
  {
    Gqa g = QuantizedPrompt(ATTNRT_GQA_QUANT_PER_TENSOR, 4);
    poison(g);
    EXPECT_OK(g.Run());
    EXPECT_TRUE(untouched(g));
  }
}

// ================================ ValidateRun: rejected ======================================

TEST(GqaRun, RejectsPresenceDifferentFromPlan) {
  Gqa g = Decode(2, 8, 4, 2, 16);
  ASSERT_TRUE(g.Attributes().ok());
  ASSERT_TRUE(g.Shapes().ok());
  attnrt_gqa_args args;
  const attnrt_tensor* past = g.in[ATTNRT_GQA_INPUT_PAST_KEY];
  g.in[ATTNRT_GQA_INPUT_PAST_KEY] = nullptr;
  ExpectError(ValidateRun(g.problem, g.in, g.num_in, g.out, g.num_out, &args),
              ATTNRT_ERROR_PLAN_MISMATCH, {"past_key", "present", "absent"});
  g.in[ATTNRT_GQA_INPUT_PAST_KEY] = past;
  attnrt_tensor* bias = g.New(kFloat32, {2, 4, 1, 9});
  g.in[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = bias;
  ExpectError(ValidateRun(g.problem, g.in, g.num_in, g.out, g.num_out, &args),
              ATTNRT_ERROR_PLAN_MISMATCH, {"attention_bias", "absent"});
  g.in[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = nullptr;
  g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = nullptr;
  ExpectError(ValidateRun(g.problem, g.in, g.num_in, g.out, g.num_out, &args),
              ATTNRT_ERROR_PLAN_MISMATCH, {"Output 'present_key'"});
}

TEST(GqaRun, RejectsBadArguments) {
  Gqa g = Prompt();
  ASSERT_TRUE(g.Attributes().ok());
  ASSERT_TRUE(g.Shapes().ok());
  EXPECT_INVALID(ValidateRun(g.problem, g.in, g.num_in, g.out, g.num_out, nullptr), "args");
  attnrt_gqa_args args;
  attnrt_gqa_problem bad = g.problem;
  bad.struct_size = 8;
  EXPECT_INVALID(ValidateRun(bad, g.in, g.num_in, g.out, g.num_out, &args), "problem.struct_size",
                 "got 8");
  EXPECT_INVALID(ValidateRun(g.problem, g.in, 6, g.out, g.num_out, &args), "at least 7 inputs");
  EXPECT_INVALID(ValidateRun(g.problem, g.in, g.num_in, g.out, 0, &args), "got 0");
}

TEST(GqaRun, RejectsNullDataAndWrappingRanges) {
  {
    Gqa g = Prompt();
    g.I(ATTNRT_GQA_INPUT_KEY).data = nullptr;
    EXPECT_INVALID(g.Run(), "key: data is NULL", "[1, 4, 8]");
  }
  {
    Gqa g = Prompt();
    g.O(ATTNRT_GQA_OUTPUT_OUTPUT).byte_offset = UINT64_MAX - 8;
    EXPECT_INVALID(g.Run(), "output: data + byte_offset", "wraps around");
  }
}

TEST(GqaRun, RejectsTotalSequenceLengthValue) {
  for (int32_t total : {0, -3}) {
    Gqa g = Prompt();
    g.SetTotal(total);
    EXPECT_INVALID(g.Run(), "total_sequence_length must be positive, got " + std::to_string(total));
  }
}

TEST(GqaRun, RejectsPresentLength) {
  Gqa g = Decode(2, 8, 4, 2, 16);
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 10, 16});
  g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 2, 10, 16});
  EXPECT_INVALID(g.Run(),
                 "present_key dimension 2 must be max(total_sequence_length, "
                 "past_sequence_length) = 9, got 10");
}

TEST(GqaRun, RejectsSharedBufferViolations) {
  {
    // Shared buffer, T > P.
    Gqa g = Decode(2, 8, 4, 2, 16);
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g.in[ATTNRT_GQA_INPUT_PAST_KEY];
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g.in[ATTNRT_GQA_INPUT_PAST_VALUE];
    EXPECT_INVALID(g.Run(),
                   "total_sequence_length must not exceed the shared past/present buffer "
                   "length 8",
                   "got 9");
  }
  {
    // Same start but a longer present: the BNSH rows would not line up.
    Gqa g = Decode(1, 8, 2, 1, 8);
    auto& past_k = g.OwnerOf(g.in[ATTNRT_GQA_INPUT_PAST_KEY]);
    auto& past_v = g.OwnerOf(g.in[ATTNRT_GQA_INPUT_PAST_VALUE]);
    past_k.data.resize(9 * 8 * 4);
    past_v.data.resize(9 * 8 * 4);
    g.I(ATTNRT_GQA_INPUT_PAST_KEY).data = past_k.data.data();
    g.I(ATTNRT_GQA_INPUT_PAST_VALUE).data = past_v.data.data();
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY).data = past_k.data.data();
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE).data = past_v.data.data();
    EXPECT_INVALID(g.Run(),
                   "present_key shares memory with past_key, so its dimension 2 must "
                   "equal past_key's, got 9 expected 8");
  }
  {
    // Only key shares.
    Gqa g = Decode(2, 16, 4, 2, 16);
    g.SetTotal(9);
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g.in[ATTNRT_GQA_INPUT_PAST_KEY];
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 2, 16, 16});
    EXPECT_INVALID(g.Run(),
                   "present_key shares past_key's memory, so Output 'present_value' must start "
                   "exactly at input 'past_value', but it does not");
  }
  {
    Gqa g = Decode(2, 16, 4, 2, 16);
    g.SetTotal(9);
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g.in[ATTNRT_GQA_INPUT_PAST_VALUE];
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 2, 16, 16});
    EXPECT_INVALID(g.Run(),
                   "present_value shares past_value's memory, so Output 'present_key' must start "
                   "exactly at input 'past_key', but it does not");
  }
}

TEST(GqaRun, RejectsPartialOverlaps) {
  {
    // output starts inside query.
    Gqa g = Prompt(1, 4, 2, 1, 8);
    g.O(ATTNRT_GQA_OUTPUT_OUTPUT).data = g.I(ATTNRT_GQA_INPUT_QUERY).data;
    g.O(ATTNRT_GQA_OUTPUT_OUTPUT).byte_offset = 8;
    EXPECT_INVALID(g.Run(), "Output 'output' overlaps input 'query'");
  }
  {
    // output exactly equal to query is an overlap as well (only past/present may alias).
    Gqa g = Prompt(1, 4, 2, 1, 8);
    g.out[ATTNRT_GQA_OUTPUT_OUTPUT] = g.in[ATTNRT_GQA_INPUT_QUERY];
    EXPECT_INVALID(g.Run(), "Output 'output' overlaps input 'query'");
  }
  {
    // present_key shifted by one row inside past_key.
    Gqa g = Decode(1, 16, 2, 1, 8);
    g.SetTotal(9);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 16, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 16, 8});
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY).data = g.I(ATTNRT_GQA_INPUT_PAST_KEY).data;
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY).byte_offset = 32;
    // The shifted present_key also runs 32 bytes past past_key's end, into whatever buffer the
    // heap placed there, so the message may name that input instead of past_key.
    EXPECT_INVALID(g.Run(), "Output 'present_key' overlaps input '");
  }
  {
    // Two outputs overlapping each other.
    Gqa g = Prompt(1, 4, 2, 1, 8);
    g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE).data = g.O(ATTNRT_GQA_OUTPUT_OUTPUT).data;
    EXPECT_INVALID(g.Run(), "Output 'output' overlaps output 'present_value'");
  }
  {
    // present_key exactly past_value's memory (crossed).
    Gqa g = Decode(1, 16, 2, 1, 8);
    g.SetTotal(9);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8});
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g.in[ATTNRT_GQA_INPUT_PAST_VALUE];
    g.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g.in[ATTNRT_GQA_INPUT_PAST_KEY];
    EXPECT_INVALID(g.Run(), "Output 'present_key' overlaps input 'past_value'");
  }
}

TEST(GqaRun, RejectsRotaryCacheBounds) {
  {
    Gqa g = Decode(2, 8, 2, 1, 16);
    AddRotary(g, 8, 8);  // M = 8 < T = 9
    EXPECT_INVALID(g.Run(),
                   "Input 'cos_cache' dimension 0 shall not be less than total_sequence_length, "
                   "got 8 expected >= 9");
  }
  {
    Gqa g = Decode(2, 8, 2, 1, 16);
    AddRotary(g, 9, 8);
    g.Reshape(g.I(ATTNRT_GQA_INPUT_SIN_CACHE), {8, 8});
    EXPECT_INVALID(g.Run(),
                   "Input 'sin_cache' dimension 0 shall not be less than "
                   "total_sequence_length, got 8 expected >= 9");
  }
  {
    // P = 16 > T: seqlens_k may exceed M while staying below present_len.
    Gqa g = Decode(2, 16, 2, 1, 16);
    g.SetTotal(9);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {8, 12});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 1, 16, 16});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 1, 16, 16});
    AddRotary(g, 10, 8);
    EXPECT_INVALID(g.Run(), "seqlens_k[1] = 12 is out of range for rotary cache dimension 0 (10)");
  }
}

TEST(GqaRun, RejectsPhase) {
  {
    Gqa g = Prompt(2, 3, 2, 1, 8);
    g.SetTotal(5);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {4, 4});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {2, 1, 5, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {2, 1, 5, 8});
    EXPECT_INVALID(g.Run(),
                   "batch_size must be 1 when sequence_length > 1 and past context is given.",
                   "batch_size=2", "sequence_length=3", "total_sequence_length=5");
  }
  {
    // S = 0 is neither a prompt nor a decode step.
    Gqa g = Prompt(1, 0, 2, 1, 8);
    g.SetTotal(3);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {2});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 3, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 3, 8});
    EXPECT_INVALID(g.Run(), "sequence_length shall be 1 when it is not prompt", "sequence_length=0",
                   "total_sequence_length=3");
  }
}

TEST(GqaRun, RejectsAttentionBiasAndOutputQkTotalLength) {
  {
    Gqa g = Decode(2, 8, 4, 2, 16);
    g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {2, 1, 1, 8});
    EXPECT_INVALID(g.Run(),
                   "Input 'attention_bias' dimension 3 should match total_sequence_length, got 8 "
                   "expected 9");
  }
  {
    Gqa g = Decode(2, 8, 4, 2, 16);
    g.attrs.qk_output = 1;
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {2, 4, 1, 10});
    EXPECT_INVALID(g.Run(),
                   "Output 'output_qk' dimension 3 should match total_sequence_length, got 10 "
                   "expected 9");
  }
  // P > T: T_b may exceed T, which would index bias / output_qk columns beyond T.
  auto big_past = [] {
    Gqa g = Decode(1, 16, 2, 1, 8);
    g.SetTotal(9);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {12});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 16, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 16, 8});
    return g;
  };
  {
    Gqa g = big_past();
    EXPECT_OK(g.Run());
    g.In(ATTNRT_GQA_INPUT_ATTENTION_BIAS, kFloat32, {1, 2, 1, 9});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = 12 exceeds the attention_bias sequence dimension 9");
  }
  {
    Gqa g = big_past();
    g.attrs.qk_output = 2;
    g.Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK, kFloat32, {1, 2, 1, 9});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = 12 exceeds the output_qk sequence dimension 9");
  }
}

TEST(GqaRun, RejectsSeqlensValues) {
  {
    // Upper bound: present length 8 (prompt B = 2, S = T = 8).
    Gqa g = Prompt(2, 8, 2, 1, 8);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {7, 9});
    EXPECT_INVALID(g.Run(), "seqlens_k[1] = 9 is out of range [0, 8)");
  }
  {
    Gqa g = Prompt(2, 8, 2, 1, 8);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {-1, 7});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = -1 is out of range [0, 8)");
  }
  {
    Gqa g = Prompt(1, 4, 2, 1, 8);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {INT32_MAX});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = 2147483647 is out of range [0, 4)");
  }
  {
    // Without present outputs the bound is max(T, P).
    Gqa g = Decode(1, 8, 2, 1, 8);
    g.num_out = 1;
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {9});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = 9 is out of range [0, 9)");
  }
  {
    // Subsequent prompt: seqlens_k + 1 >= S.
    Gqa g = Prompt(1, 3, 2, 1, 8);
    g.SetTotal(5);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {1});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 5, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 5, 8});
    EXPECT_INVALID(g.Run(), "seqlens_k[0] = 1 is too small for sequence_length 3");
  }
  {
    // Decode: past rows needed beyond the past buffer (P = 4, present 8).
    Gqa g = Decode(1, 4, 2, 1, 8);
    g.SetTotal(8);
    g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {6});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_KEY), {1, 1, 8, 8});
    g.Reshape(g.O(ATTNRT_GQA_OUTPUT_PRESENT_VALUE), {1, 1, 8, 8});
    EXPECT_INVALID(g.Run(),
                   "seqlens_k[0] = 6 requires 6 past KV rows, which exceeds the past buffer "
                   "sequence length 4.");
  }
}

TEST(GqaRun, RejectsRotaryPositions) {
  {
    Gqa g = Prompt(1, 4, 2, 1, 16);
    g.attrs.do_rotary = 1;
    AddRotary(g, 16, 8);
    g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {1, 4});
    g.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {13, 0, 0, 0});
    EXPECT_INVALID(g.Run(), "position_ids value 13 at index 0 is out of range [0, 12]");
    g.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {-1, 0, 0, 0});
    EXPECT_INVALID(g.Run(), "position_ids value -1 at index 0 is out of range [0, 12]");
  }
  {
    Gqa g = Decode(2, 8, 2, 1, 16);
    g.attrs.do_rotary = 1;
    AddRotary(g, 16, 8);
    g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {2, 3});
    g.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {3, 0, 0, 16, 0, 0});
    EXPECT_INVALID(g.Run(), "position_ids value 16 at index 3 is out of range [0, 16)");
    g.SetI64(ATTNRT_GQA_INPUT_POSITION_IDS, {-2, 0, 0, 1, 0, 0});
    EXPECT_INVALID(g.Run(), "position_ids value -2 at index 0 is out of range [0, 16)");
  }
}

// position_ids on a CUDA device live in device memory: the core must not read them (the CUDA
// kernels clamp positions). The descriptor points at an address that faults if dereferenced.
TEST(GqaRun, NeverReadsCudaPositionIds) {
  for (bool first_prompt : {true, false}) {
    Gqa g = first_prompt ? Prompt(2, 4, 2, 1, 16) : Decode(2, 8, 2, 1, 16);
    g.attrs.do_rotary = 1;
    AddRotary(g, 16, 8);
    g.In(ATTNRT_GQA_INPUT_POSITION_IDS, kInt64, {2, first_prompt ? 4 : 1});
    for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
      if (g.in[i] == nullptr || i == ATTNRT_GQA_INPUT_SEQLENS_K ||
          i == ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH) {
        continue;
      }
      g.I(i).device = kCuda;
      g.I(i).dtype = i == ATTNRT_GQA_INPUT_POSITION_IDS ? kInt64 : kFloat16;
    }
    for (int o = 0; o < 3; ++o) {
      g.O(o).device = kCuda;
      g.O(o).dtype = kFloat16;
    }
    void* unreadable = reinterpret_cast<void*>(uintptr_t{1} << 12);
    g.I(ATTNRT_GQA_INPUT_POSITION_IDS).data = unreadable;
    attnrt_gqa_args args;
    EXPECT_OK(g.Run(&args));
    EXPECT_EQ(args.position_ids, unreadable);
  }
}

TEST(GqaRun, RejectsSharedKvBeyondPast) {
  Gqa g = Decode(1, 8, 2, 1, 8);
  g.Reshape(g.I(ATTNRT_GQA_INPUT_KEY), {1, 0, 8});
  g.Reshape(g.I(ATTNRT_GQA_INPUT_VALUE), {1, 0, 8});
  g.SetTotal(9);
  g.SetI32(ATTNRT_GQA_INPUT_SEQLENS_K, {7});
  EXPECT_INVALID(g.Run(),
                 "total_sequence_length must not exceed past_sequence_length with shared KV "
                 "(kv_sequence_length 0), got 9 expected <= 8");
}

}  // namespace
}  // namespace attnrt::core::gqa
