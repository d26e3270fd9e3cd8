// What kernels tune by besides the instruction set (which Highway picks):
// the CPU's maker, AVX-512 VNNI, and a prefetch hint.
#ifndef ATTN_KERNELS_CPU_H_
#define ATTN_KERNELS_CPU_H_

#include "hwy/base.h"
#include "hwy/cache_control.h"

namespace attn::kernels {

// Whether cpuid names Intel as this CPU's vendor. Where the best prefetch
// differs between Intel's cores and AMD's, kernels choose by this.
bool IsIntelCpu();

// Whether this CPU runs AVX-512 VNNI (vpdpbusd), checked once. Highway
// 1.0.3 dispatches Zen 4 and Zen 5 to its AVX3 target, which does not
// imply it, so the quantized kernels ask here.
bool HasAvx512Vnni();

// Hints that the cache line at p (which may lie past an array: only an
// address, never read) will be read soon, into L2. Always inlined, as
// hwy::Prefetch: GCC did not inline a plain inline function into the
// Highway targets' code (their target attributes differ), and a call per
// cache line made RowsLinear's 1-row GPT-2 step 25% slower.
HWY_INLINE void PrefetchL2(const void* p) {
#if HWY_COMPILER_GCC || HWY_COMPILER_CLANG
  __builtin_prefetch(p, 0, 1);  // prefetcht2 on x86
#else
  hwy::Prefetch(p);
#endif
}

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_CPU_H_
