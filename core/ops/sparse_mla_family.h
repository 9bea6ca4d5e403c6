// Entry points of the sparse MLA op families for CreateOpFamily and the ABI's name queries.
#pragma once

#include <cstddef>
#include <memory>

#include "core/ops/op_family.h"

namespace attnrt::core {

// kind is ATTNRT_OP_SPARSE_MLA or ATTNRT_OP_SPARSE_MLA_METADATA; validates the attributes.
Status CreateSparseMlaFamily(int32_t kind, const void* attributes, std::unique_ptr<OpFamily>* out);

// The reference's input/output names of either op, or NULL out of range.
const char* SparseMlaInputName(int32_t kind, size_t index);
const char* SparseMlaOutputName(int32_t kind, size_t index);

}  // namespace attnrt::core
