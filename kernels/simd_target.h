// Which Highway target the kernels dispatch to on this machine.
#ifndef ATTN_KERNELS_SIMD_TARGET_H_
#define ATTN_KERNELS_SIMD_TARGET_H_

namespace attn::kernels {

// Name of the Highway target the kernels dispatch to ("AVX2", ...): every
// kernel is compiled for the same targets and dispatches the same way.
const char* SimdTargetName();

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_SIMD_TARGET_H_
