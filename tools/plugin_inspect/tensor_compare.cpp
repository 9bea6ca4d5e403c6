#include "tensor_compare.h"

#include <cmath>
#include <limits>

#include "dtypes.h"
#include "errors.h"

namespace plugin_inspect {

double max_abs_error(const HostTensor& a, const HostTensor& b) {
  if (!same_dtype(a.dtype(), b.dtype()) || a.shape() != b.shape()) {
    throw ToolError("cannot compare " + dtype_name(a.dtype()) + a.shape_string() + " with " +
                    dtype_name(b.dtype()) + b.shape_string());
  }
  double worst = 0;
  const std::size_t count = a.numel();
  for (std::size_t i = 0; i < count; ++i) {
    const double x = load_element(a.data(), a.dtype(), i);
    const double y = load_element(b.data(), b.dtype(), i);
    const bool x_nan = std::isnan(x), y_nan = std::isnan(y);
    if (x_nan && y_nan) continue;
    if (x_nan || y_nan) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

}  // namespace plugin_inspect
