// GetRuntimeInfo (attn/attn.hpp): what this build and machine run with.
#include <string>

#include "attn/attn.hpp"
#include "engine/runtime/threads.h"
#include "kernels/matmul.h"
#include "kernels/simd_target.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attn {

RuntimeInfo GetRuntimeInfo() {
  RuntimeInfo info;
  info.version = ATTN_VERSION;
  info.simd_target = kernels::SimdTargetName();
  info.onednn_isa = kernels::MatMulIsaName();
  const dnnl_version_t* v = dnnl_version();
  info.onednn_version = std::to_string(v->major) + "." +
                        std::to_string(v->minor) + "." +
                        std::to_string(v->patch);
  info.native_bf16 = kernels::HasNativeBF16();
  Result<int> threads = ResolveNumThreads(0);
  info.default_threads = threads.ok() ? *threads : AffinityCores();
  return info;
}

}  // namespace attn
