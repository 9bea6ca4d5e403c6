// How attnrt may read a node's K/V views in place (see views.h).
#include "views.h"

#include <utility>

namespace attnrt_ggml {

size_t Misalignment(const ggml_tensor* t) {
  const uintptr_t start = t->data != nullptr ? reinterpret_cast<uintptr_t>(t->data)
                                             : static_cast<uintptr_t>(t->view_offs);
  return static_cast<size_t>(start % ggml_type_size(t->type));
}

bool DistinctElements(int64_t token_stride, int64_t tokens, int64_t head_stride, int64_t heads,
                      int64_t head_size) {
  std::pair<int64_t, int64_t> dims[2] = {{token_stride, tokens}, {head_stride, heads}};
  if (dims[1].first < dims[0].first) std::swap(dims[0], dims[1]);
  int64_t extent = head_size;
  for (const auto& [stride, count] : dims) {
    if (count <= 1) continue;
    if (stride < extent) return false;
    extent = stride * (count - 1) + extent;
  }
  return true;
}

}  // namespace attnrt_ggml
