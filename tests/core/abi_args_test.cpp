// The C ABI's argument checks: NULL handles and out-pointers give INVALID_ARGUMENT with a message
// naming the argument (as spelled in attnrt.h), out-of-range indices NOT_FOUND, too-small
// struct_size ABI_MISMATCH; the last-error message is "" after a success and per thread.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

// Checks a failed call: its status and that the thread's message names `argument`.
// Reads the message first, before any other attnrt call can replace it.
void ExpectError(attnrt_status status, attnrt_status expected, const std::string& argument) {
  const std::string message = attnrt_last_error_message();
  EXPECT_EQ(status, expected) << attnrt_status_name(status) << ": " << message;
  EXPECT_FALSE(message.empty());
  if (!argument.empty()) {
    EXPECT_NE(message.find(argument), std::string::npos)
        << "message does not name \"" << argument << "\": " << message;
  }
}

template <typename T>
T Sized(size_t struct_size) {
  T value;
  std::memset(&value, 0, sizeof(value));
  value.struct_size = struct_size;
  return value;
}

class AbiArgsTest : public testing::Test {
 protected:
  void SetUp() override {
    fake_ = ATTNRT_TEST_PLUGINS_FAKE;
    broken_ = ATTNRT_TEST_PLUGINS_BROKEN;
    raw_paths_[0] = fake_.c_str();
    raw_paths_[1] = broken_.c_str();
    attnrt_runtime_options options = DefaultOptions();
    options.plugin_paths = raw_paths_;
    options.num_plugin_paths = 2;
    options.search_default_paths = 0;  // just the fake plugin, plus diagnostics
    runtime_ = CreateRuntime(options);
    ASSERT_TRUE(runtime_);
    const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
    attnrt_op* op = nullptr;
    ASSERT_EQ(attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op), ATTNRT_OK)
        << attnrt_last_error_message();
    op_.reset(op);
    tensors_ = MakeGqaTensors(SimpleGqa{}, rng_);
    plan_ = Plan(op_.get(), tensors_);
    ASSERT_TRUE(plan_);
    attnrt_explanation* e = nullptr;
    ASSERT_EQ(attnrt_op_explain(op_.get(), tensors_.Inputs(), ATTNRT_GQA_NUM_INPUTS,
                                tensors_.Outputs(), ATTNRT_GQA_NUM_OUTPUTS, &e),
              ATTNRT_OK)
        << attnrt_last_error_message();
    explanation_.reset(e);
  }

  CleanAttnrtEnv env_;
  std::mt19937_64 rng_{TestSeed()};
  std::string fake_, broken_;
  const char* raw_paths_[2] = {nullptr, nullptr};
  RuntimePtr runtime_;
  OpPtr op_;
  GqaTensors tensors_;
  PlanPtr plan_;
  ExplanationPtr explanation_;
};

TEST_F(AbiArgsTest, RuntimeEntryPointsRejectNull) {
  attnrt_runtime_options options = DefaultOptions();
  ExpectError(attnrt_runtime_create(&options, nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_runtime");
  int32_t n = 0;
  size_t count = 0;
  ExpectError(attnrt_runtime_num_threads(nullptr, &n), ATTNRT_ERROR_INVALID_ARGUMENT, "runtime");
  ExpectError(attnrt_runtime_num_threads(runtime_.get(), nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_num_threads");
  ExpectError(attnrt_runtime_plugin_count(nullptr, &count), ATTNRT_ERROR_INVALID_ARGUMENT,
              "runtime");
  ExpectError(attnrt_runtime_plugin_count(runtime_.get(), nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_count");
  auto info = Sized<attnrt_plugin_info>(sizeof(attnrt_plugin_info));
  ExpectError(attnrt_runtime_plugin_info(nullptr, 0, &info), ATTNRT_ERROR_INVALID_ARGUMENT,
              "runtime");
  ExpectError(attnrt_runtime_plugin_info(runtime_.get(), 0, nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_info");
  const char* key = nullptr;
  const char* value = nullptr;
  ExpectError(attnrt_runtime_plugin_fact(nullptr, 0, 0, &key, &value),
              ATTNRT_ERROR_INVALID_ARGUMENT, "runtime");
  ExpectError(attnrt_runtime_plugin_fact(runtime_.get(), 0, 0, nullptr, &value),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_key");
  ExpectError(attnrt_runtime_plugin_fact(runtime_.get(), 0, 0, &key, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_value");
  auto kernel = Sized<attnrt_kernel_info>(sizeof(attnrt_kernel_info));
  ExpectError(attnrt_runtime_plugin_kernel(nullptr, 0, 0, &kernel), ATTNRT_ERROR_INVALID_ARGUMENT,
              "runtime");
  ExpectError(attnrt_runtime_plugin_kernel(runtime_.get(), 0, 0, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_info");
  ExpectError(attnrt_runtime_diagnostic_count(nullptr, &count), ATTNRT_ERROR_INVALID_ARGUMENT,
              "runtime");
  ExpectError(attnrt_runtime_diagnostic_count(runtime_.get(), nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_count");
  auto diagnostic = Sized<attnrt_diagnostic>(sizeof(attnrt_diagnostic));
  ExpectError(attnrt_runtime_diagnostic(nullptr, 0, &diagnostic), ATTNRT_ERROR_INVALID_ARGUMENT,
              "runtime");
  ExpectError(attnrt_runtime_diagnostic(runtime_.get(), 0, nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_diagnostic");
}

// A handle that is no live runtime (destroyed already, or an address attnrt_runtime_create never
// returned, as a binding may pass on) is refused by name without being read; destroying it again is
// a no-op.
TEST_F(AbiArgsTest, RuntimeEntryPointsRejectHandlesThatAreNotLiveRuntimes) {
  attnrt_runtime_options options = DefaultOptions();
  attnrt_runtime* destroyed = nullptr;
  ASSERT_EQ(attnrt_runtime_create(&options, &destroyed), ATTNRT_OK) << attnrt_last_error_message();
  attnrt_runtime_destroy(destroyed);
  attnrt_runtime_destroy(destroyed);  // twice: ignored
  // An address inside a live object that is not a runtime (never dereferenced as one).
  int not_a_runtime[16] = {};
  auto* forged = reinterpret_cast<attnrt_runtime*>(not_a_runtime);
  for (attnrt_runtime* handle : {destroyed, forged}) {
    int32_t n = 0;
    size_t count = 0;
    ExpectError(attnrt_runtime_num_threads(handle, &n), ATTNRT_ERROR_INVALID_ARGUMENT,
                "runtime: not a live attnrt_runtime");
    ExpectError(attnrt_runtime_plugin_count(handle, &count), ATTNRT_ERROR_INVALID_ARGUMENT,
                "runtime: not a live attnrt_runtime");
    ExpectError(attnrt_runtime_diagnostic_count(handle, &count), ATTNRT_ERROR_INVALID_ARGUMENT,
                "runtime: not a live attnrt_runtime");
    const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
    attnrt_op* op = nullptr;
    ExpectError(attnrt_op_create(handle, ATTNRT_OP_GQA, &attributes, &op),
                ATTNRT_ERROR_INVALID_ARGUMENT, "runtime: not a live attnrt_runtime");
    EXPECT_EQ(op, nullptr);
    attnrt_runtime_destroy(handle);  // ignored, the memory is not touched
  }
  // A live runtime still answers.
  int32_t n = 0;
  EXPECT_EQ(attnrt_runtime_num_threads(runtime_.get(), &n), ATTNRT_OK);
  EXPECT_GE(n, 1);
}

TEST_F(AbiArgsTest, OpAndPlanEntryPointsRejectNull) {
  const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
  attnrt_op* op = nullptr;
  ExpectError(attnrt_op_create(nullptr, ATTNRT_OP_GQA, &attributes, &op),
              ATTNRT_ERROR_INVALID_ARGUMENT, "runtime");
  ExpectError(attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, nullptr, &op),
              ATTNRT_ERROR_INVALID_ARGUMENT, "attributes");
  ExpectError(attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_op");
  EXPECT_EQ(op, nullptr);

  GqaTensors& t = tensors_;
  attnrt_plan* plan = nullptr;
  ExpectError(attnrt_op_plan(nullptr, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                             ATTNRT_GQA_NUM_OUTPUTS, &plan),
              ATTNRT_ERROR_INVALID_ARGUMENT, "op");
  ExpectError(attnrt_op_plan(op_.get(), nullptr, ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                             ATTNRT_GQA_NUM_OUTPUTS, &plan),
              ATTNRT_ERROR_INVALID_ARGUMENT, "inputs");
  ExpectError(attnrt_op_plan(op_.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, nullptr,
                             ATTNRT_GQA_NUM_OUTPUTS, &plan),
              ATTNRT_ERROR_INVALID_ARGUMENT, "outputs");
  ExpectError(attnrt_op_plan(op_.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                             ATTNRT_GQA_NUM_OUTPUTS, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_plan");
  EXPECT_EQ(plan, nullptr);

  auto plan_info = Sized<attnrt_plan_info>(sizeof(attnrt_plan_info));
  ExpectError(attnrt_plan_get_info(nullptr, &plan_info), ATTNRT_ERROR_INVALID_ARGUMENT, "plan");
  ExpectError(attnrt_plan_get_info(plan_.get(), nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_info");
  ExpectError(attnrt_plan_run(nullptr, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                              ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "plan");
  ExpectError(attnrt_plan_run(plan_.get(), nullptr, ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                              ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "inputs");
  ExpectError(attnrt_plan_run(plan_.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, nullptr,
                              ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "outputs");

  uint64_t hits = 0;
  uint64_t misses = 0;
  ExpectError(attnrt_op_plan_cache_stats(nullptr, &hits, &misses), ATTNRT_ERROR_INVALID_ARGUMENT,
              "op");
  ExpectError(attnrt_op_plan_cache_stats(op_.get(), nullptr, &misses),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_hits");
  ExpectError(attnrt_op_plan_cache_stats(op_.get(), &hits, nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_misses");
}

TEST_F(AbiArgsTest, ExplainEntryPointsRejectNull) {
  GqaTensors& t = tensors_;
  attnrt_explanation* e = nullptr;
  ExpectError(attnrt_op_explain(nullptr, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                ATTNRT_GQA_NUM_OUTPUTS, &e),
              ATTNRT_ERROR_INVALID_ARGUMENT, "op");
  ExpectError(attnrt_op_explain(op_.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                ATTNRT_GQA_NUM_OUTPUTS, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_explanation");
  size_t count = 0;
  ExpectError(attnrt_explanation_count(nullptr, &count), ATTNRT_ERROR_INVALID_ARGUMENT,
              "explanation");
  ExpectError(attnrt_explanation_count(explanation_.get(), nullptr), ATTNRT_ERROR_INVALID_ARGUMENT,
              "out_count");
  auto candidate = Sized<attnrt_candidate>(sizeof(attnrt_candidate));
  ExpectError(attnrt_explanation_candidate(nullptr, 0, &candidate), ATTNRT_ERROR_INVALID_ARGUMENT,
              "explanation");
  ExpectError(attnrt_explanation_candidate(explanation_.get(), 0, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT, "out_candidate");
}

TEST_F(AbiArgsTest, OutOfRangeIndicesAreNotFound) {
  size_t plugins = 0;
  ASSERT_EQ(attnrt_runtime_plugin_count(runtime_.get(), &plugins), ATTNRT_OK);
  ASSERT_EQ(plugins, 1u);  // the fake plugin
  auto info = Sized<attnrt_plugin_info>(sizeof(attnrt_plugin_info));
  ExpectError(attnrt_runtime_plugin_info(runtime_.get(), plugins, &info), ATTNRT_ERROR_NOT_FOUND,
              "");
  ASSERT_EQ(attnrt_runtime_plugin_info(runtime_.get(), 0, &info), ATTNRT_OK);
  const char* key = nullptr;
  const char* value = nullptr;
  ExpectError(attnrt_runtime_plugin_fact(runtime_.get(), plugins, 0, &key, &value),
              ATTNRT_ERROR_NOT_FOUND, "");
  ExpectError(attnrt_runtime_plugin_fact(runtime_.get(), 0, info.num_facts, &key, &value),
              ATTNRT_ERROR_NOT_FOUND, "");
  auto kernel = Sized<attnrt_kernel_info>(sizeof(attnrt_kernel_info));
  ExpectError(attnrt_runtime_plugin_kernel(runtime_.get(), plugins, 0, &kernel),
              ATTNRT_ERROR_NOT_FOUND, "");
  ExpectError(attnrt_runtime_plugin_kernel(runtime_.get(), 0, info.num_kernels, &kernel),
              ATTNRT_ERROR_NOT_FOUND, "");
  size_t diagnostics = 0;
  ASSERT_EQ(attnrt_runtime_diagnostic_count(runtime_.get(), &diagnostics), ATTNRT_OK);
  auto diagnostic = Sized<attnrt_diagnostic>(sizeof(attnrt_diagnostic));
  ExpectError(attnrt_runtime_diagnostic(runtime_.get(), diagnostics, &diagnostic),
              ATTNRT_ERROR_NOT_FOUND, "");
  size_t candidates = 0;
  ASSERT_EQ(attnrt_explanation_count(explanation_.get(), &candidates), ATTNRT_OK);
  ASSERT_EQ(candidates, 4u);
  auto candidate = Sized<attnrt_candidate>(sizeof(attnrt_candidate));
  ExpectError(attnrt_explanation_candidate(explanation_.get(), candidates, &candidate),
              ATTNRT_ERROR_NOT_FOUND, "");
  ExpectError(attnrt_explanation_candidate(explanation_.get(), static_cast<size_t>(-1), &candidate),
              ATTNRT_ERROR_NOT_FOUND, "");
}

TEST_F(AbiArgsTest, TooSmallStructSizeIsAbiMismatch) {
  constexpr size_t kTooSmall = sizeof(size_t);  // nothing but the struct_size field
  auto info = Sized<attnrt_plugin_info>(kTooSmall);
  ExpectError(attnrt_runtime_plugin_info(runtime_.get(), 0, &info), ATTNRT_ERROR_ABI_MISMATCH,
              "struct_size");
  auto kernel = Sized<attnrt_kernel_info>(kTooSmall);
  ExpectError(attnrt_runtime_plugin_kernel(runtime_.get(), 0, 0, &kernel),
              ATTNRT_ERROR_ABI_MISMATCH, "struct_size");
  size_t diagnostics = 0;
  ASSERT_EQ(attnrt_runtime_diagnostic_count(runtime_.get(), &diagnostics), ATTNRT_OK);
  ASSERT_GT(diagnostics, 0u);  // the broken folder
  auto diagnostic = Sized<attnrt_diagnostic>(kTooSmall);
  ExpectError(attnrt_runtime_diagnostic(runtime_.get(), 0, &diagnostic), ATTNRT_ERROR_ABI_MISMATCH,
              "struct_size");
  auto plan_info = Sized<attnrt_plan_info>(kTooSmall);
  ExpectError(attnrt_plan_get_info(plan_.get(), &plan_info), ATTNRT_ERROR_ABI_MISMATCH,
              "struct_size");
  auto candidate = Sized<attnrt_candidate>(kTooSmall);
  ExpectError(attnrt_explanation_candidate(explanation_.get(), 0, &candidate),
              ATTNRT_ERROR_ABI_MISMATCH, "struct_size");

  attnrt_runtime_options options = DefaultOptions();
  options.struct_size = kTooSmall;
  attnrt_runtime* runtime = nullptr;
  ExpectError(attnrt_runtime_create(&options, &runtime), ATTNRT_ERROR_ABI_MISMATCH, "struct_size");
  RuntimePtr owner(runtime);
  EXPECT_EQ(runtime, nullptr);

  attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
  attributes.struct_size = kTooSmall;
  attnrt_op* op = nullptr;
  ExpectError(attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op),
              ATTNRT_ERROR_ABI_MISMATCH, "struct_size");
  OpPtr op_owner(op);
  EXPECT_EQ(op, nullptr);
}

TEST_F(AbiArgsTest, BadOptionValuesAreInvalidArguments) {
  attnrt_runtime_options options = DefaultOptions();
  options.num_plugin_paths = 1;  // but plugin_paths is NULL
  attnrt_runtime* runtime = nullptr;
  ExpectError(attnrt_runtime_create(&options, &runtime), ATTNRT_ERROR_INVALID_ARGUMENT,
              "plugin_paths");
  RuntimePtr owner(runtime);
}

// A tensor without elements may have extents whose product exceeds int64 ({0, 2^63-1, 2^63-1}):
// reading its strides must not overflow (signed overflow aborts the sanitizer build), and each
// entry point rejects it naming the input.
TEST_F(AbiArgsTest, ExtentsWhoseProductOverflowsAreRejectedByName) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::vector<int64_t>> shapes = {
      {0, kMax, kMax}, {0, int64_t{1} << 40, int64_t{1} << 40}, {kMax, kMax, 0}};
  const std::vector<std::vector<int64_t>> strides = {{1, 1, 1}, {kMax, kMax, 1}};
  for (const auto& shape : shapes) {
    for (const auto& stride : strides) {
      SCOPED_TRACE("shape " + std::to_string(shape[0]) + "," + std::to_string(shape[1]) + "," +
                   std::to_string(shape[2]) + " strides " + std::to_string(stride[0]) + "," +
                   std::to_string(stride[1]) + "," + std::to_string(stride[2]));
      attnrt_tensor query = *tensors_.Inputs()[ATTNRT_GQA_INPUT_QUERY];
      query.data = nullptr;
      query.shape = shape.data();
      query.strides = stride.data();
      std::vector<const attnrt_tensor*> inputs(tensors_.Inputs(),
                                               tensors_.Inputs() + ATTNRT_GQA_NUM_INPUTS);
      inputs[ATTNRT_GQA_INPUT_QUERY] = &query;
      attnrt_plan* plan = nullptr;
      ExpectError(attnrt_op_plan(op_.get(), inputs.data(), inputs.size(), tensors_.Outputs(),
                                 ATTNRT_GQA_NUM_OUTPUTS, &plan),
                  ATTNRT_ERROR_INVALID_ARGUMENT, "query");
      PlanPtr plan_owner(plan);
      attnrt_explanation* e = nullptr;
      ExpectError(attnrt_op_explain(op_.get(), inputs.data(), inputs.size(), tensors_.Outputs(),
                                    ATTNRT_GQA_NUM_OUTPUTS, &e),
                  ATTNRT_ERROR_INVALID_ARGUMENT, "query");
      ExplanationPtr e_owner(e);
      ExpectError(attnrt_plan_run(plan_.get(), inputs.data(), inputs.size(), tensors_.Outputs(),
                                  ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr),
                  shape[0] == 0 ? ATTNRT_ERROR_PLAN_MISMATCH : ATTNRT_ERROR_INVALID_ARGUMENT,
                  "query");
    }
  }
}

TEST_F(AbiArgsTest, UnknownOpKindIsRejected) {
  const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
  attnrt_op* op = nullptr;
  const attnrt_status st = attnrt_op_create(runtime_.get(), 4242, &attributes, &op);
  const std::string message = attnrt_last_error_message();
  OpPtr owner(op);
  EXPECT_TRUE(st == ATTNRT_ERROR_INVALID_ARGUMENT || st == ATTNRT_ERROR_NOT_FOUND)
      << attnrt_status_name(st) << ": " << message;
  EXPECT_NE(message.find("4242"), std::string::npos) << message;
}

TEST_F(AbiArgsTest, LastErrorIsEmptyAfterSuccess) {
  size_t count = 0;
  ASSERT_NE(attnrt_runtime_plugin_count(nullptr, &count), ATTNRT_OK);
  ASSERT_STRNE(attnrt_last_error_message(), "");
  ASSERT_EQ(attnrt_runtime_plugin_count(runtime_.get(), &count), ATTNRT_OK);
  EXPECT_STREQ(attnrt_last_error_message(), "");

  ASSERT_NE(attnrt_plan_get_info(nullptr, nullptr), ATTNRT_OK);
  ASSERT_EQ(RunPlan(plan_.get(), tensors_), ATTNRT_OK);
  EXPECT_STREQ(attnrt_last_error_message(), "");
}

TEST_F(AbiArgsTest, LastErrorIsPerThread) {
  size_t count = 0;
  ASSERT_NE(attnrt_runtime_plugin_count(nullptr, &count), ATTNRT_OK);
  std::string other;
  std::thread([&] { other = attnrt_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_STRNE(attnrt_last_error_message(), "");
}

TEST(AbiNames, StatusNames) {
  EXPECT_STREQ(attnrt_status_name(ATTNRT_OK), "ATTNRT_OK");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_INVALID_ARGUMENT), "ATTNRT_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_UNSUPPORTED), "ATTNRT_ERROR_UNSUPPORTED");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_NOT_FOUND), "ATTNRT_ERROR_NOT_FOUND");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_UNAVAILABLE), "ATTNRT_ERROR_UNAVAILABLE");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_OUT_OF_MEMORY), "ATTNRT_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_PLAN_MISMATCH), "ATTNRT_ERROR_PLAN_MISMATCH");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_ABI_MISMATCH), "ATTNRT_ERROR_ABI_MISMATCH");
  EXPECT_STREQ(attnrt_status_name(ATTNRT_ERROR_INTERNAL), "ATTNRT_ERROR_INTERNAL");
  EXPECT_NE(attnrt_status_name(static_cast<attnrt_status>(999)), nullptr);
}

TEST(AbiNames, DtypeNames) {
  const std::pair<attnrt_dtype, const char*> names[] = {
      {ATTNRT_DTYPE_FLOAT32, "float32"},
      {ATTNRT_DTYPE_FLOAT16, "float16"},
      {ATTNRT_DTYPE_BFLOAT16, "bfloat16"},
      {ATTNRT_DTYPE_INT8, "int8"},
      {ATTNRT_DTYPE_UINT8, "uint8"},
      {ATTNRT_DTYPE_INT32, "int32"},
      {ATTNRT_DTYPE_INT64, "int64"},
      {ATTNRT_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn"},
      {ATTNRT_DTYPE_FLOAT8_E8M0FNU, "float8_e8m0fnu"},
      {ATTNRT_DTYPE_INT4, "int4"},
      {{ATTNRT_DTYPE_CODE_FLOAT, 13, 1}, "unknown"},
  };
  for (const auto& [dtype, name] : names) EXPECT_STREQ(attnrt_dtype_name(dtype), name);
}

TEST(AbiNames, OpKindNames) {
  EXPECT_STREQ(attnrt_op_kind_name(ATTNRT_OP_GQA), "gqa");
  EXPECT_STREQ(attnrt_op_kind_name(-7), "unknown");
}

TEST(AbiVersion, MatchesHeaders) {
  uint32_t major = 0;
  uint32_t minor = 0;
  attnrt_abi_version(&major, &minor);
  EXPECT_EQ(major, static_cast<uint32_t>(ATTNRT_ABI_VERSION_MAJOR));
  EXPECT_EQ(minor, static_cast<uint32_t>(ATTNRT_ABI_VERSION_MINOR));
  const std::string version = attnrt_version_string();
  EXPECT_TRUE(std::regex_match(version, std::regex(R"(\d+\.\d+\.\d+)"))) << version;
}

}  // namespace
}  // namespace attnrt_test

namespace attnrt_test {
namespace {

// ONNX Runtime's names of GroupQueryAttention's inputs and outputs, by position (its schema).
TEST(AbiNames, OpInputAndOutputNames) {
  EXPECT_STREQ(attnrt_op_input_name(ATTNRT_OP_GQA, ATTNRT_GQA_INPUT_QUERY), "query");
  EXPECT_STREQ(attnrt_op_input_name(ATTNRT_OP_GQA, ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH),
               "total_sequence_length");
  EXPECT_STREQ(attnrt_op_input_name(ATTNRT_OP_GQA, ATTNRT_GQA_INPUT_K_NORM_WEIGHT),
               "k_norm_weight");
  EXPECT_STREQ(attnrt_op_output_name(ATTNRT_OP_GQA, ATTNRT_GQA_OUTPUT_PRESENT_VALUE),
               "present_value");
  EXPECT_STREQ(attnrt_op_output_name(ATTNRT_OP_GQA, ATTNRT_GQA_OUTPUT_OUTPUT_QK), "output_qk");
  EXPECT_EQ(attnrt_op_input_name(ATTNRT_OP_GQA, ATTNRT_GQA_NUM_INPUTS), nullptr);
  EXPECT_EQ(attnrt_op_output_name(ATTNRT_OP_GQA, ATTNRT_GQA_NUM_OUTPUTS), nullptr);
  EXPECT_EQ(attnrt_op_input_name(99, 0), nullptr);
}

}  // namespace
}  // namespace attnrt_test
