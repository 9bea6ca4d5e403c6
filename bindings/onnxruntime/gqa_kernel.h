// The GroupQueryAttention kernel of libattnrt_onnxruntime.so: one per ONNX Runtime node, over an
// attnrt op made once from the node's attributes; plans come from the op's plan cache.
#ifndef ATTNRT_BINDINGS_ONNXRUNTIME_GQA_KERNEL_H_
#define ATTNRT_BINDINGS_ONNXRUNTIME_GQA_KERNEL_H_

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <string>

#include "attnrt/attnrt.h"

namespace attnrt_ort {

// What each registered OrtCustomOp carries: ONNX Runtime's struct first, so that the OrtCustomOp*
// it hands back can be cast to this.
struct GqaCustomOp {
  OrtCustomOp base;
  ONNXTensorElementDataType query_type;  // T
  ONNXTensorElementDataType cache_type;  // T_CACHE
  const OrtApi* api;
  int32_t num_threads;  // of the runtime the op's kernels run on; 0 = attnrt's default
};

// An OrtStatus for an error of node `node_name` (ORT_FAIL unless `code` says otherwise).
OrtStatus* NodeError(const OrtApi* api, const std::string& node_name, const std::string& message,
                     OrtErrorCode code = ORT_FAIL);

// OrtCustomOp::CreateKernelV2 / KernelComputeV2 / KernelDestroy.
OrtStatus* ORT_API_CALL CreateGqaKernel(const OrtCustomOp* op, const OrtApi* api,
                                        const OrtKernelInfo* info, void** kernel) noexcept;
OrtStatus* ORT_API_CALL ComputeGqaKernel(void* kernel, OrtKernelContext* context) noexcept;
void ORT_API_CALL DestroyGqaKernel(void* kernel) noexcept;

// The runtime for `num_threads` (0 = attnrt's default: ATTNRT_NUM_THREADS, else the hardware
// threads), made on first use and kept for the life of the process; NULL with `error` set when it
// cannot be made.
attnrt_runtime* SharedRuntime(int32_t num_threads, std::string& error);

}  // namespace attnrt_ort

#endif  // ATTNRT_BINDINGS_ONNXRUNTIME_GQA_KERNEL_H_
