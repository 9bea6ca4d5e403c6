// Element-wise comparison of two host tensors of the same dtype and shape.
#pragma once

#include "host_tensor.h"

namespace plugin_inspect {

// max |a - b| over all elements, in double. NaN in both at the same element counts as equal (rows
// neither kernel wrote stay poisoned in both); NaN in one of them gives +inf. Throws ToolError when
// dtype or shape differ.
double max_abs_error(const HostTensor& a, const HostTensor& b);

}  // namespace plugin_inspect
