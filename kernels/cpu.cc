#include "kernels/cpu.h"

#include <cstring>

#include "hwy/base.h"

#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#include <cpuid.h>
#endif

namespace attn::kernels {

bool IsIntelCpu() {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  unsigned max_leaf, ebx, ecx, edx;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx)) return false;
  char vendor[12];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::memcmp(vendor, "GenuineIntel", sizeof(vendor)) == 0;
#else
  return false;
#endif
}

bool HasAvx512Vnni() {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  static const bool vnni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return vnni;
#else
  return false;
#endif
}

}  // namespace attn::kernels
