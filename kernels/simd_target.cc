// SimdTargetName: one function compiled per target, dispatched like every
// kernel, so it names the target the kernels run on.
#include "kernels/simd_target.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

const char* TargetNameOfThisTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(TargetNameOfThisTarget);

const char* SimdTargetName() {
  return HWY_DYNAMIC_DISPATCH(TargetNameOfThisTarget)();
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
