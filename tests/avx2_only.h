// Included by suites that ctest also runs as on a CPU without AVX-512 (the
// brief's promise: the binary built here gives the same answers on an
// AVX2-only machine). With ATTN_TEST_AVX2_ONLY set, Highway is told the CPU
// stops at AVX2; ctest caps oneDNN with ONEDNN_MAX_CPU_ISA=AVX2. Before any
// test runs, the run fails unless both dispatches really went to AVX2.
#ifndef ATTN_TESTS_AVX2_ONLY_H_
#define ATTN_TESTS_AVX2_ONLY_H_

#include <gtest/gtest.h>

#include <cstdlib>

#include "attn/attn.hpp"
#include "hwy/targets.h"

namespace attn::test {

class Avx2OnlyEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if ((hwy::SupportedTargets() & HWY_AVX2) == 0) {
      GTEST_SKIP() << "this CPU has no AVX2 to stop at";
    }
    hwy::SetSupportedTargetsForTest(HWY_AVX2 | HWY_SSE4 | HWY_SSSE3 |
                                    HWY_SCALAR);
    const RuntimeInfo info = GetRuntimeInfo();
    ASSERT_EQ(info.simd_target, "AVX2");
    ASSERT_EQ(info.onednn_isa, "avx2") << "run with ONEDNN_MAX_CPU_ISA=AVX2";
  }
};

inline ::testing::Environment* const kAvx2Only =
    std::getenv("ATTN_TEST_AVX2_ONLY")
        ? ::testing::AddGlobalTestEnvironment(new Avx2OnlyEnvironment)
        : nullptr;

}  // namespace attn::test

#endif  // ATTN_TESTS_AVX2_ONLY_H_
