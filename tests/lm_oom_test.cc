// LmBatch::Step when an allocation fails part-way through: no sequence
// changes, no logits are left, and the step then runs as on a batch that
// never failed. Allocations fail through a replaced operator new, on the
// calling thread outside OpenMP regions (an exception cannot leave one).
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "gtest/gtest.h"

namespace {

// Allocations left before one fails; below 0, none fails.
std::atomic<long> g_allocations_left{-1};

}  // namespace

void* operator new(std::size_t size) {
  if (omp_get_level() == 0 && g_allocations_left.load() >= 0 &&
      g_allocations_left.fetch_sub(1) == 0) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace attn {
namespace {

const std::string kModel = std::string(ATTN_SOURCE_DIR) +
                           "/tests/golden/lm/gpt_book_3l/model.safetensors";

// Sequence 0 holds a 6-token prompt; sequence 1 is empty.
std::unique_ptr<LmBatch> Prepared(std::shared_ptr<const LanguageModel> model) {
  auto batch = LmBatch::Create(std::move(model), {2, 0}).value();
  EXPECT_EQ(batch->Add().value(), 0);
  EXPECT_EQ(batch->Add().value(), 1);
  static const int64_t prompt[] = {1, 2, 3, 4, 5, 6};
  const LmBatch::Request first{0, prompt, 6, false};
  EXPECT_TRUE(batch->Step(&first, 1).ok());
  return batch;
}

TEST(LmStepOutOfMemory, AFailedStepChangesNoSequence) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's operator new is the one that runs";
#endif
  LmOptions options;
  options.num_threads = 1;
  auto model = LanguageModel::Load(kModel, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t vocab = (*model)->config().vocab_size;
  // A decode token of sequence 0 and a new 9-token prompt of sequence 1.
  static const int64_t next[] = {7}, other[] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  const LmBatch::Request step[] = {{0, next, 1, false}, {1, other, 9, false}};
  std::vector<float> expected;
  {
    auto batch = Prepared(*model);
    ASSERT_TRUE(batch->Step(step, 2).ok());
    for (size_t i = 0; i < 2; ++i) {
      expected.insert(expected.end(), batch->logits(i),
                      batch->logits(i) + vocab);
    }
  }
  int failed = 0;
  for (long k = 0;; k += 1 + k / 16) {
    auto batch = Prepared(*model);
    g_allocations_left = k;
    const Status s = batch->Step(step, 2);
    g_allocations_left = -1;
    if (!s.ok()) {
      ++failed;
      EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << k << ": " << s.message();
      EXPECT_EQ(batch->length(0), 6) << k;
      EXPECT_EQ(batch->length(1), 0) << k;
      EXPECT_EQ(batch->logits(0), nullptr) << k;
      ASSERT_TRUE(batch->Step(step, 2).ok()) << k;
    }
    for (size_t i = 0; i < 2; ++i) {
      const float* logits = batch->logits(i);
      ASSERT_NE(logits, nullptr) << k;
      for (int64_t v = 0; v < vocab; ++v) {
        ASSERT_NEAR(logits[v], expected[i * vocab + v], 1e-5) << k << " " << v;
      }
    }
    if (s.ok()) break;  // no allocation left to fail
  }
  EXPECT_GT(failed, 10);
}

}  // namespace
}  // namespace attn
