// Batch::Step when an allocation fails part-way through: no sequence
// changes, no logits are left, and the step then runs as on a batch that
// never failed; and what a step, Add and Remove allocate follows their
// work, not max_sequences. Allocations fail, and are counted, through a
// replaced operator new, on the calling thread outside OpenMP regions (an
// exception cannot leave one). Not under ASan, whose own operator new
// keeps its checks.
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "attn/decode.hpp"
#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "gtest/gtest.h"

#if !defined(__SANITIZE_ADDRESS__)
// The replaced pair below is malloc and free; GCC 12 takes a free in a
// replaced operator delete for a mismatch with operator new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

// Allocations left before one fails; below 0, none fails.
std::atomic<long> g_allocations_left{-1};
// Bytes asked for while g_counting is set.
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_bytes_asked{0};

}  // namespace

void* operator new(std::size_t size) {
  if (omp_get_level() == 0 && g_allocations_left.load() >= 0 &&
      g_allocations_left.fetch_sub(1) == 0) {
    throw std::bad_alloc();
  }
  if (omp_get_level() == 0 && g_counting.load()) g_bytes_asked += size;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace attn {
namespace {

// Two layers, a context long enough for a fresh prompt through the causal
// core (64 tokens or more).
std::shared_ptr<const LanguageModel> SmallModel() {
  LmConfig config;
  config.vocab_size = 50;
  config.context_length = 96;
  config.emb_dim = 32;
  config.hidden_dim = 64;
  config.num_layers = 2;
  config.num_heads = 4;
  LmOptions options;
  options.num_threads = 1;
  auto model = LanguageModel::Random(config, 3, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? *model : nullptr;
}

// Sequence 0 holds a 6-token prompt; sequence 1 is empty.
std::unique_ptr<Batch> Prepared(std::shared_ptr<const LanguageModel> model) {
  auto batch = Batch::Create(Model::Of(std::move(model)), {2, 0}).value();
  EXPECT_EQ(batch->Add().value(), 0);
  EXPECT_EQ(batch->Add().value(), 1);
  static const int64_t prompt[] = {1, 2, 3, 4, 5, 6};
  const Batch::Request first{0, prompt, 6, false};
  EXPECT_TRUE(batch->Step(&first, 1).ok());
  return batch;
}

// Fails the step's k-th allocation for every k in turn, until one runs
// through: each failure leaves the lengths, no logits, and a retry with the
// logits of a batch that never failed.
void ExpectEveryFailureRollsBack(const std::vector<Batch::Request>& step) {
  const std::shared_ptr<const LanguageModel> model = SmallModel();
  ASSERT_TRUE(model);
  const int64_t vocab = model->config().vocab_size;
  std::vector<float> expected;
  {
    auto batch = Prepared(model);
    ASSERT_TRUE(batch->Step(step.data(), step.size()).ok());
    for (size_t i = 0; i < step.size(); ++i) {
      expected.insert(expected.end(), batch->logits(i),
                      batch->logits(i) + vocab);
    }
  }
  int failed = 0;
  for (long k = 0;; ++k) {
    auto batch = Prepared(model);
    g_allocations_left = k;
    const Status s = batch->Step(step.data(), step.size());
    g_allocations_left = -1;
    if (!s.ok()) {
      ++failed;
      EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << k << ": " << s.message();
      EXPECT_EQ(batch->length(0), 6) << k;
      EXPECT_EQ(batch->length(1), 0) << k;
      EXPECT_EQ(batch->logits(0), nullptr) << k;
      ASSERT_TRUE(batch->Step(step.data(), step.size()).ok()) << k;
    }
    for (size_t i = 0; i < step.size(); ++i) {
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

// A decode token of sequence 0 beside a new 9-token prompt of sequence 1:
// rows through the decode kernel.
TEST(LmStepOutOfMemory, AMixedStepChangesNoSequence) {
  static const int64_t next[] = {7}, other[] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  ExpectEveryFailureRollsBack({{0, next, 1, false}, {1, other, 9, false}});
}

// A fresh 70-token prompt alone: the causal core and its shared buffers.
TEST(LmStepOutOfMemory, AFreshLongPromptChangesNoSequence) {
  static std::vector<int64_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t(i % 50);
  ExpectEveryFailureRollsBack({{1, prompt.data(), 70, true}});
}

// The bytes `work` asks operator new for.
template <class Work>
size_t BytesAskedBy(Work work) {
  g_bytes_asked = 0;
  g_counting = true;
  work();
  g_counting = false;
  return g_bytes_asked.load();
}

// A batch of 2^16 sequences where a step advances two: the step's lists
// follow its requests and rows, so a second step of the same shape
// allocates (almost) nothing, and Remove and Add nothing, where a pass
// over every slot would ask for bytes per slot each time.
TEST(LmStepAllocations, FollowTheRequestsNotMaxSequences) {
  LmConfig config;
  config.vocab_size = 16;
  config.context_length = 2;
  config.emb_dim = 8;
  config.hidden_dim = 16;
  config.num_layers = 1;
  config.num_heads = 1;
  LmOptions options;
  options.num_threads = 1;
  auto model = LanguageModel::Random(config, 3, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  constexpr int64_t kSequences = int64_t{1} << 16;
  auto batch = Batch::Create(Model::Of(*model), {kSequences, 0});
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  Batch& b = **batch;
  for (int64_t s = 0; s < 3; ++s) ASSERT_EQ(b.Add().value(), s);
  static const int64_t token = 5;
  const Batch::Request step[] = {{2, &token, 1, false}, {0, &token, 1, false}};
  ASSERT_TRUE(b.Step(step, 2).ok());
  Status second;
  const size_t step_bytes = BytesAskedBy([&] { second = b.Step(step, 2); });
  ASSERT_TRUE(second.ok()) << second.message();
  EXPECT_LT(step_bytes, 1024u);  // a message string or two, not per slot
  int64_t again = -1;
  const size_t slot_bytes = BytesAskedBy([&] {
    ASSERT_TRUE(b.Remove(1).ok());
    again = b.Add().value();
  });
  EXPECT_EQ(again, 1);
  EXPECT_EQ(slot_bytes, 0u);
}

// MhaDecoder::Create holds what a one-token-per-sequence step needs, so
// Decode asks for no memory at all, the first after a prompt included.
TEST(DecoderAllocations, DecodeAllocatesNothing) {
  const int64_t e = 16;
  std::vector<float> w(static_cast<size_t>(e * e));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 7) / 7.0f - 0.4f;
  MhaConfig config;
  config.d_in = config.d_out = e;
  config.num_heads = 2;
  config.context_length = 16;
  MhaWeights weights;
  weights.w_query = weights.w_key = weights.w_value = weights.w_out = w.data();
  MhaOptions options;
  options.num_threads = 1;
  auto model = MhaModel::Create(config, weights, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto decoder = MhaDecoder::Create(*model, {2, 0});
  ASSERT_TRUE(decoder.ok()) << decoder.status().message();
  std::vector<float> x(static_cast<size_t>(5 * e), 0.25f), y(x.size());
  const int64_t counts[] = {3, 2};
  ASSERT_TRUE((*decoder)->Prefill(x.data(), counts, y.data()).ok());
  Status decoded;
  const size_t bytes = BytesAskedBy([&] {
    for (int step = 0; step < 3 && decoded.ok(); ++step) {
      decoded = (*decoder)->Decode(x.data(), 2, y.data());
    }
  });
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_EQ(bytes, 0u);
}

}  // namespace
}  // namespace attn
#endif  // !__SANITIZE_ADDRESS__
