// Names of dtypes, op kinds, statuses and candidate statuses (attnrt.h).
#include "attnrt/attnrt.h"

extern "C" {

ATTNRT_API const char* attnrt_dtype_name(attnrt_dtype dtype) {
  if (dtype.lanes != 1) return "unknown";
  switch (dtype.code) {
    case ATTNRT_DTYPE_CODE_FLOAT:
      return dtype.bits == 32 ? "float32" : dtype.bits == 16 ? "float16" : "unknown";
    case ATTNRT_DTYPE_CODE_BFLOAT:
      return dtype.bits == 16 ? "bfloat16" : "unknown";
    case ATTNRT_DTYPE_CODE_INT:
      switch (dtype.bits) {
        case 4:
          return "int4";
        case 8:
          return "int8";
        case 32:
          return "int32";
        case 64:
          return "int64";
        default:
          return "unknown";
      }
    case ATTNRT_DTYPE_CODE_UINT:
      return dtype.bits == 8 ? "uint8" : "unknown";
    case ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN:
      return dtype.bits == 8 ? "float8_e4m3fn" : "unknown";
    case ATTNRT_DTYPE_CODE_FLOAT8_E5M2:
      return dtype.bits == 8 ? "float8_e5m2" : "unknown";
    case ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU:
      return dtype.bits == 8 ? "float8_e8m0fnu" : "unknown";
    default:
      return "unknown";
  }
}

ATTNRT_API const char* attnrt_op_kind_name(int32_t op_kind) {
  switch (op_kind) {
    case ATTNRT_OP_GQA:
      return "gqa";
    case ATTNRT_OP_PAGED_GQA:
      return "paged_gqa";
    case ATTNRT_OP_SPARSE_MLA:
      return "sparse_mla";
    case ATTNRT_OP_SPARSE_MLA_METADATA:
      return "sparse_mla_metadata";
    case ATTNRT_OP_PAGED_GQA_VARLEN:
      return "paged_gqa_varlen";
    default:
      return "unknown";
  }
}

ATTNRT_API const char* attnrt_status_name(attnrt_status status) {
  switch (status) {
    case ATTNRT_OK:
      return "ATTNRT_OK";
    case ATTNRT_ERROR_INVALID_ARGUMENT:
      return "ATTNRT_ERROR_INVALID_ARGUMENT";
    case ATTNRT_ERROR_UNSUPPORTED:
      return "ATTNRT_ERROR_UNSUPPORTED";
    case ATTNRT_ERROR_NOT_FOUND:
      return "ATTNRT_ERROR_NOT_FOUND";
    case ATTNRT_ERROR_UNAVAILABLE:
      return "ATTNRT_ERROR_UNAVAILABLE";
    case ATTNRT_ERROR_OUT_OF_MEMORY:
      return "ATTNRT_ERROR_OUT_OF_MEMORY";
    case ATTNRT_ERROR_PLAN_MISMATCH:
      return "ATTNRT_ERROR_PLAN_MISMATCH";
    case ATTNRT_ERROR_ABI_MISMATCH:
      return "ATTNRT_ERROR_ABI_MISMATCH";
    case ATTNRT_ERROR_INTERNAL:
      return "ATTNRT_ERROR_INTERNAL";
  }
  return "ATTNRT_ERROR_UNKNOWN";
}

ATTNRT_API const char* attnrt_candidate_status_name(int32_t status) {
  switch (status) {
    case ATTNRT_CANDIDATE_SELECTED:
      return "selected";
    case ATTNRT_CANDIDATE_ELIGIBLE:
      return "eligible";
    case ATTNRT_CANDIDATE_DECLINED:
      return "declined";
    case ATTNRT_CANDIDATE_DISABLED:
      return "disabled";
    case ATTNRT_CANDIDATE_NOT_PINNED:
      return "not-pinned";
    case ATTNRT_CANDIDATE_UNAVAILABLE:
      return "unavailable";
    case ATTNRT_CANDIDATE_WRONG_DEVICE:
      return "wrong-device";
    default:
      return "unknown";
  }
}

}  // extern "C"
