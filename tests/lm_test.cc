// Whole language models (attn/lm.hpp), black-box: PyTorch's logits and
// greedy tokens for the book's GPTModel, Hugging Face GPT-2 files and the
// book's Llama 3.2 (tests/golden/lm, tools/make_golden.py), through Batch
// at 1 and 2 threads; continuous batching (mixed steps, forks, slots reused)
// against running each sequence alone; and the errors a user can cause.
#include "attn/lm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "tests/lm_golden.h"
#include "tests/test_util.h"

namespace attn {
namespace {

// Greedy continuation of every prompt: the prompts in one step, then one
// step of every sequence's next token at a time. [b, new_tokens].
std::vector<int64_t> Greedy(Batch& batch, const Case& c) {
  std::vector<Batch::Request> requests;
  for (int64_t row = 0; row < c.b; ++row) {
    requests.push_back({*batch.Add(), c.prompt(row), c.lengths[row], false});
  }
  std::vector<int64_t> out(size_t(c.b * c.new_tokens));
  for (int64_t t = 0; t < c.new_tokens; ++t) {
    const Status s = batch.Step(requests.data(), requests.size());
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) break;
    for (int64_t row = 0; row < c.b; ++row) {
      int64_t& next = out[size_t(row * c.new_tokens + t)];
      next = Argmax(batch.logits(size_t(row)), c.vocab);
      requests[row].tokens = &next;
      requests[row].count = 1;
    }
  }
  return out;
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kLmDir)) {
    if (entry.path().filename() != "bad") {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class LmGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LmGolden, LogitsMatchPyTorchAndAreThreadInvariant) {
  const Case c = ReadCase(GetParam());
  std::vector<float> first;
  for (const int threads : {1, 2}) {
    auto model = Load(c.name, threads);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->config().vocab_size, c.vocab);
    auto batch = NewBatch(model, c.b);
    ASSERT_NE(batch, nullptr);
    const std::vector<float> logits = PromptLogits(*batch, c);
    test::ExpectAllClose(
        c.logits, logits.data(), c.tolerance,
        c.name + " at " + std::to_string(threads) + " threads");
    if (first.empty()) first = logits;
    EXPECT_EQ(first, logits) << "threads changed the bits";
  }
}

// Odd rows ask for every position's logits, even rows for their last only:
// the last block's attention output and feed-forward run on those rows
// alone (past 8 of them, in pieces of 8 and through oneDNN), and each still
// matches PyTorch.
TEST_P(LmGolden, LastAndAllLogitsInOneStepMatchPyTorch) {
  const Case c = ReadCase(GetParam());
  std::vector<float> first;
  for (const int threads : {1, 2}) {
    auto batch = NewBatch(Load(c.name, threads), c.b);
    ASSERT_NE(batch, nullptr);
    std::vector<Batch::Request> requests;
    for (int64_t row = 0; row < c.b; ++row) {
      requests.push_back(
          {*batch->Add(), c.prompt(row), c.lengths[row], row % 2 == 1});
    }
    ASSERT_TRUE(batch->Step(requests.data(), requests.size()).ok());
    std::vector<float> got;
    for (int64_t row = 0; row < c.b; ++row) {
      const int64_t from = row % 2 == 1 ? 0 : c.lengths[row] - 1;
      for (int64_t t = from; t < c.lengths[row]; ++t) {
        const float* logits = batch->logits(size_t(row)) + (t - from) * c.vocab;
        const auto golden = c.logits.begin() + (row * c.T + t) * c.vocab;
        test::ExpectAllClose(std::vector<float>(golden, golden + c.vocab),
                             logits, c.tolerance,
                             c.name + " row " + std::to_string(row) +
                                 " position " + std::to_string(t));
        got.insert(got.end(), logits, logits + c.vocab);
      }
    }
    if (first.empty()) first = got;
    EXPECT_EQ(first, got) << "threads changed the bits";
  }
}

TEST_P(LmGolden, GreedyTokensMatchPyTorch) {
  const Case c = ReadCase(GetParam());
  for (const int threads : {1, 2}) {
    auto batch = NewBatch(Load(c.name, threads), c.b);
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(Greedy(*batch, c), c.tokens) << c.name << " at " << threads;
  }
}

// Each sequence alone, one token per step, against the golden logits: the
// decode path (the prompt's rows one step each) agrees with the full one.
TEST_P(LmGolden, TokenByTokenMatchesThePrompt) {
  const Case c = ReadCase(GetParam());
  auto batch = NewBatch(Load(c.name, 1), 1);
  ASSERT_NE(batch, nullptr);
  for (int64_t row = 0; row < c.b; ++row) {
    const int64_t seq = *batch->Add();
    for (int64_t t = 0; t < c.lengths[row]; ++t) {
      const Batch::Request r{seq, c.prompt(row) + t, 1, false};
      ASSERT_TRUE(batch->Step(&r, 1).ok());
      const auto first = c.logits.begin() + (row * c.T + t) * c.vocab;
      test::ExpectAllClose(std::vector<float>(first, first + c.vocab),
                           batch->logits(0), c.tolerance,
                           c.name + " row " + std::to_string(row));
    }
    ASSERT_TRUE(batch->Remove(seq).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LmGolden, ::testing::ValuesIn(CaseNames()));

// bf16 models (LmOptions::dtype) on the golden cases whose files hold BF16
// weights: rounding them changes nothing, so PyTorch's logits of the same
// weights are the reference.
const char* const kBf16Cases[] = {"gpt_book_3l", "llama_gqa"};

class LmBf16Test : public ::testing::Test {
 protected:
  // GTEST_SKIP only ends the test from the test body or SetUp.
  void SetUp() override {
    if (!GetRuntimeInfo().native_bf16) GTEST_SKIP() << "no native bf16";
  }
};

// A step of one token reads the bf16 weights with fp32 activations, in the
// fp32 model's order: the same bits.
TEST_F(LmBf16Test, OneTokenStepsGiveTheFp32ModelsBits) {
  for (const char* name : kBf16Cases) {
    const Case c = ReadCase(name);
    auto f32 = NewBatch(Load(name, 2), 1);
    auto bf16 = NewBatch(Load(name, 2, DType::kBF16), 1);
    ASSERT_NE(f32, nullptr);
    ASSERT_NE(bf16, nullptr);
    for (Batch* batch : {f32.get(), bf16.get()}) ASSERT_TRUE(batch->Add().ok());
    for (int64_t t = 0; t < c.lengths[0]; ++t) {
      const Batch::Request r{0, c.prompt(0) + t, 1, false};
      ASSERT_TRUE(f32->Step(&r, 1).ok());
      ASSERT_TRUE(bf16->Step(&r, 1).ok());
      EXPECT_EQ(std::vector<float>(f32->logits(0), f32->logits(0) + c.vocab),
                std::vector<float>(bf16->logits(0), bf16->logits(0) + c.vocab))
          << name << " token " << t;
    }
  }
}

// Whole prompts run oneDNN's bf16 matmuls on activations rounded to bf16:
// PyTorch's logits within bf16's rounding, the same bits at 1 and 2 threads.
TEST_F(LmBf16Test, PromptLogitsMatchPyTorchWithinBf16Rounding) {
  for (const char* name : kBf16Cases) {
    const Case c = ReadCase(name);
    std::vector<float> first;
    for (const int threads : {1, 2}) {
      auto batch = NewBatch(Load(name, threads, DType::kBF16), c.b);
      ASSERT_NE(batch, nullptr);
      const std::vector<float> logits = PromptLogits(*batch, c);
      test::ExpectAllClose(c.logits, logits.data(),
                           2e-2 * test::MaxAbs(c.logits), name);
      if (first.empty()) first = logits;
      EXPECT_EQ(first, logits) << name << ": threads changed the bits";
    }
  }
}

TEST(LmLayouts, BookAndHuggingFaceNamesGiveTheSameModel) {
  const Case c = ReadCase("gpt_book_2l_bias");
  std::vector<float> book;
  for (const char* name : {"gpt_book_2l_bias", "hf_gpt2", "hf_gpt2_prefixed"}) {
    auto model = Load(name, 1);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->config().layout, name[0] == 'g' ? "book-gpt" : "hf-gpt2");
    auto batch = NewBatch(model, c.b);
    const std::vector<float> logits = PromptLogits(*batch, c);
    if (book.empty()) book = logits;
    EXPECT_EQ(book, logits) << name;
  }
  EXPECT_TRUE(Load("hf_gpt2_tied", 1)->config().tied_head);
  EXPECT_TRUE(Load("llama_scaled_tied", 1)->config().tied_head);
  EXPECT_FALSE(Load("hf_gpt2", 1)->config().tied_head);
}

// A fork continues exactly as its parent; a removed slot is reused clean.
// Grouped heads keep a token-major cache, GPT-2's ungrouped ones a head-major
// one (kernels::DecodeBlocksHeads): the fork copies either.
class BatchForkTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchForkTest, ContinuesAsTheParentAndSlotsAreReused) {
  const Case c = ReadCase(GetParam());
  auto batch = NewBatch(Load(c.name, 2), 3);
  ASSERT_NE(batch, nullptr);
  const int64_t parent = *batch->Add();
  Batch::Request r{parent, c.prompt(0), c.lengths[0], false};
  ASSERT_TRUE(batch->Step(&r, 1).ok());
  const int64_t fork = *batch->Fork(parent);
  EXPECT_EQ(batch->length(fork), c.lengths[0]);
  const int64_t next = 7;
  const Batch::Request both[] = {{parent, &next, 1, false},
                                 {fork, &next, 1, false}};
  ASSERT_TRUE(batch->Step(both, 2).ok());
  const std::vector<float> a(batch->logits(0), batch->logits(0) + c.vocab);
  EXPECT_EQ(a,
            std::vector<float>(batch->logits(1), batch->logits(1) + c.vocab));
  ASSERT_TRUE(batch->Remove(parent).ok());
  EXPECT_EQ(batch->length(parent), -1);
  const int64_t again = *batch->Add();
  EXPECT_EQ(again, parent);
  EXPECT_EQ(batch->length(again), 0);
}

INSTANTIATE_TEST_SUITE_P(CacheLayouts, BatchForkTest,
                         ::testing::Values("llama_gqa", "gpt_book_2l_bias"));

// Add takes the lowest free slot, whatever order sequences were added,
// removed and forked in, checked against a set of the free slots over a
// few thousand operations on a batch of 512; a full batch refuses Add and
// Fork, and Remove refuses a slot that is not live.
// A truncated sequence continues as if the dropped tokens were never run:
// the prompt's last tokens run again give PyTorch's logits.
TEST(BatchTest, TruncatedSequenceContinuesFromItsPrefix) {
  for (const std::string name : {"llama_gqa", "hf_phi3_fused"}) {
    SCOPED_TRACE(name);
    const Case c = ReadCase(name);
    auto batch = NewBatch(Load(name, 1), 1);
    ASSERT_NE(batch, nullptr);
    const int64_t seq = *batch->Add(), n = c.lengths[0];
    Batch::Request all = {seq, c.prompt(0), n, false};
    ASSERT_TRUE(batch->Step(&all, 1).ok());
    EXPECT_FALSE(batch->Truncate(seq, n + 1).ok());
    ASSERT_TRUE(batch->Truncate(seq, n - 3).ok());
    EXPECT_EQ(batch->length(seq), n - 3);
    Batch::Request tail = {seq, c.prompt(0) + n - 3, 3, false};
    ASSERT_TRUE(batch->Step(&tail, 1).ok());
    const float* want = c.logits.data() + (n - 1) * c.vocab;
    for (int64_t v = 0; v < c.vocab; ++v) {
      ASSERT_NEAR(batch->logits(0)[v], want[v], c.tolerance) << "logit " << v;
    }
  }
}

TEST(BatchTest, AddTakesTheLowestFreeSlotAfterAnyRemovals) {
  auto batch = NewBatch(Load("gpt_book_1l", 1), 512);
  ASSERT_NE(batch, nullptr);
  std::set<int64_t> free_slots;
  for (int64_t s = 0; s < 512; ++s) free_slots.insert(s);
  std::vector<int64_t> live;
  uint64_t state = 12345;  // a fixed LCG: the same operations every run
  const auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    return (state >> 33) % n;
  };
  for (int op = 0; op < 4000; ++op) {
    // Mostly adds while the batch is small, mostly removes when it is full.
    const bool add = live.empty() || next(512) >= live.size();
    if (add && free_slots.empty()) {
      EXPECT_FALSE(batch->Add().ok());
      EXPECT_FALSE(batch->Fork(live[0]).ok());
    } else if (add) {
      const bool fork = !live.empty() && next(4) == 0;
      const Result<int64_t> slot =
          fork ? batch->Fork(live[next(live.size())]) : batch->Add();
      ASSERT_TRUE(slot.ok()) << op << ": " << slot.status().message();
      ASSERT_EQ(*slot, *free_slots.begin()) << op;
      free_slots.erase(free_slots.begin());
      live.push_back(*slot);
    } else {
      const size_t i = next(live.size());
      ASSERT_TRUE(batch->Remove(live[i]).ok()) << op;
      EXPECT_FALSE(batch->Remove(live[i]).ok()) << op;
      EXPECT_EQ(batch->length(live[i]), -1);
      free_slots.insert(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  EXPECT_GT(live.size(), 0u);
  // Slots freed high to low come back low to high.
  for (const int64_t s : {500, 300, 100}) {
    if (batch->length(s) >= 0) {
      ASSERT_TRUE(batch->Remove(s).ok());
    }
  }
  for (int64_t s = 0; s < 512; ++s) {
    if (batch->length(s) < 0) {
      EXPECT_EQ(*batch->Add(), s);
    }
  }
  EXPECT_FALSE(batch->Add().ok());
}

// A step names its sequences in any order: each request gets its own
// sequence's logits, those of the sequence run alone; a repeated sequence
// is named at its second request, whichever that is.
TEST(BatchTest, AStepOnAFewSlotsOfALargeBatchTakesThemInAnyOrder) {
  const Case c = ReadCase("gpt_book_1l");
  auto model = Load(c.name, 1);
  auto batch = NewBatch(model, 1024);
  ASSERT_NE(batch, nullptr);
  for (int64_t s = 0; s < 1024; ++s) ASSERT_EQ(*batch->Add(), s);
  const Batch::Request step[] = {{700, c.prompt(0), c.lengths[0], false},
                                 {3, c.prompt(1), c.lengths[1], false}};
  ASSERT_TRUE(batch->Step(step, 2).ok());
  EXPECT_EQ(batch->length(700), c.lengths[0]);
  EXPECT_EQ(batch->length(3), c.lengths[1]);
  EXPECT_EQ(batch->length(4), 0);
  for (int64_t row = 0; row < 2; ++row) {
    const auto last =
        c.logits.begin() + (row * c.T + c.lengths[row] - 1) * c.vocab;
    test::ExpectAllClose(std::vector<float>(last, last + c.vocab),
                         batch->logits(size_t(row)), c.tolerance,
                         "request " + std::to_string(row));
  }
  const int64_t token = 1;
  const Batch::Request twice[] = {{9, &token, 1, false},
                                  {700, &token, 1, false},
                                  {5, &token, 1, false},
                                  {700, &token, 1, false},
                                  {9, &token, 1, false}};
  const Status s = batch->Step(twice, 5);
  EXPECT_NE(s.message().find("step request 3: sequence 700 appears twice"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(batch->length(700), c.lengths[0]);
  EXPECT_EQ(batch->length(9), 0);
}

// The model holds everything its batches read from load: its memory stays
// put while batches come and go, and a batch fits in what a cap leaves
// beyond the model, its caches and 1 KiB (its slots' bookkeeping), not when
// that leaves out half its caches. The caller's bytes take up the rest of
// the cap, which leaves room for the load's own estimate (it counts a
// tensor as read besides what the model keeps).
TEST(BatchTest, BatchesAddOnlyTheirCaches) {
  const std::string name = "llama_gqa";
  auto model = Load(name, 1);
  ASSERT_NE(model, nullptr);
  const uint64_t held = model->memory_bytes();
  auto first = NewBatch(model, 2);
  auto second = NewBatch(model, 2);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(model->memory_bytes(), held);
  EXPECT_EQ(first->cache_bytes(), second->cache_bytes());

  LmOptions options;
  options.num_threads = 1;
  options.max_memory_bytes = 4 * held;
  Result<std::shared_ptr<const LanguageModel>> capped =
      LanguageModel::Load(kLmDir + name + "/model.safetensors", options);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  ASSERT_EQ((*capped)->memory_bytes(), held);
  for (const bool fits : {true, false}) {
    const uint64_t left =
        fits ? first->cache_bytes() + 1024 : first->cache_bytes() / 2;
    Result<std::unique_ptr<Batch>> batch = Batch::Create(
        Model::Of(*capped), {2, 0, options.max_memory_bytes - held - left});
    EXPECT_EQ(batch.status().code(),
              fits ? StatusCode::kOk : StatusCode::kOutOfMemory)
        << batch.status().message();
  }
}

// One step mixing a new prompt with a running sequence's next token gives
// each the logits it gets alone.
TEST(BatchTest, MixedStepMatchesSequencesAlone) {
  const Case c = ReadCase("gpt_book_2l_bias");
  auto batch = NewBatch(Load(c.name, 2), 2);
  ASSERT_NE(batch, nullptr);
  const int64_t running = *batch->Add();
  Batch::Request r{running, c.prompt(0), c.lengths[0] - 1, false};
  ASSERT_TRUE(batch->Step(&r, 1).ok());
  const int64_t fresh = *batch->Add();
  const Batch::Request mixed[] = {
      {fresh, c.prompt(1), c.lengths[1], true},
      {running, c.prompt(0) + c.lengths[0] - 1, 1, false}};
  ASSERT_TRUE(batch->Step(mixed, 2).ok());
  const auto row = [&](int64_t b, int64_t t) {
    const auto first = c.logits.begin() + (b * c.T + t) * c.vocab;
    return std::vector<float>(first, first + c.vocab);
  };
  test::ExpectAllClose(row(0, c.lengths[0] - 1), batch->logits(1), c.tolerance,
                       "the running sequence");
  for (int64_t t = 0; t < c.lengths[1]; ++t) {
    test::ExpectAllClose(row(1, t), batch->logits(0) + t * c.vocab, c.tolerance,
                         "the new prompt");
  }
}

TEST(LmErrors, BadRequestsAreRefusedAndChangeNothing) {
  auto batch = NewBatch(Load("gpt_book_1l", 1), 2);
  ASSERT_NE(batch, nullptr);
  const int64_t seq = *batch->Add();
  const int64_t vocab = 64, out_of_range[] = {1, vocab};
  Batch::Request r{seq, out_of_range, 2, false};
  Status s = batch->Step(&r, 1);
  EXPECT_NE(s.message().find("token id 64"), std::string::npos) << s.message();
  std::vector<int64_t> too_long(17, 1);
  r = {seq, too_long.data(), 17, false};
  s = batch->Step(&r, 1);
  EXPECT_NE(s.message().find("exceed the batch's max_length 16"),
            std::string::npos)
      << s.message();
  r = {seq + 1, too_long.data(), 1, false};
  EXPECT_FALSE(batch->Step(&r, 1).ok());  // not a live sequence
  const Batch::Request twice[] = {{seq, too_long.data(), 1, false},
                                  {seq, too_long.data(), 1, false}};
  EXPECT_FALSE(batch->Step(twice, 2).ok());
  // More requests than the batch holds sequences: refused by their count.
  const Batch::Request three[] = {twice[0], twice[1], twice[0]};
  s = batch->Step(three, 3);
  EXPECT_NE(s.message().find("step has 3 requests, want at most "
                             "max_sequences 2"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(batch->length(seq), 0);
  EXPECT_EQ(batch->logits(0), nullptr);
  ASSERT_TRUE(batch->Add().ok());
  EXPECT_FALSE(batch->Add().ok());  // both slots taken
}

// A refused Step leaves no logits behind, not even the last good step's.
TEST(LmErrors, ARefusedStepLeavesNoLogits) {
  auto batch = NewBatch(Load("gpt_book_1l", 1), 1);
  ASSERT_NE(batch, nullptr);
  const int64_t seq = *batch->Add();
  const int64_t token = 1, out_of_range = 64;
  Batch::Request r{seq, &token, 1, false};
  ASSERT_TRUE(batch->Step(&r, 1).ok());
  ASSERT_NE(batch->logits(0), nullptr);
  r.tokens = &out_of_range;
  EXPECT_FALSE(batch->Step(&r, 1).ok());
  EXPECT_EQ(batch->logits(0), nullptr);
}

TEST(LmErrors, UnknownLayoutNamesWhatWasFound) {
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(kLmDir + "bad/unknown_layout/model.safetensors");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("unknown model layout"),
            std::string::npos);
  EXPECT_NE(model.status().message().find("embeddings.word_embeddings.weight"),
            std::string::npos)
      << model.status().message();
  EXPECT_FALSE(LanguageModel::IsLanguageModelFile(
      kLmDir + "bad/unknown_layout/model.safetensors"));
  EXPECT_TRUE(
      LanguageModel::IsLanguageModelFile(kLmDir + "hf_gpt2/model.safetensors"));
}

TEST(LmErrors, MissingHyperParameterIsNamed) {
  LmOptions options;
  Result<std::shared_ptr<const LanguageModel>> model = LanguageModel::Load(
      ATTN_SOURCE_DIR "/tests/golden/mha_book.safetensors", options);
  EXPECT_FALSE(model.ok());
  // A Hugging Face file without its config.json has no heads.
  const std::string dir = ::testing::TempDir() + "/hf_no_config";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kLmDir + "hf_gpt2/model.safetensors",
                             dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  model = LanguageModel::Load(dir + "/model.safetensors");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("missing hyper-parameter num_heads"),
            std::string::npos)
      << model.status().message();
  options.num_heads = 4;
  EXPECT_TRUE(LanguageModel::Load(dir + "/model.safetensors", options).ok());
}

// A small GPT-2-style config for the seeded random models.
LmConfig SmallConfig(int64_t layers) {
  LmConfig config;
  config.vocab_size = 50;
  config.context_length = 16;
  config.emb_dim = 32;
  config.hidden_dim = 64;
  config.num_layers = layers;
  config.num_heads = 4;
  return config;
}

// A step's activations are held once for all the layers, which run one at
// a time: a batch of a 4-layer model holds, beyond a 1-layer one's, three
// more layers of KV cache and less than one step's activations. (Each
// layer's own step op counts too: its row lists, and where oneDNN's tiles
// cannot read the model's packed weights, as on AVX2, a packed copy of its
// own; enough slots make one step's activations outweigh three of them.)
TEST(BatchTest, StepBuffersAreSharedByTheLayers) {
  constexpr int64_t kSlots = 256;
  uint64_t bytes[2] = {0, 0};
  for (const int64_t layers : {1, 4}) {
    LmOptions options;
    options.num_threads = 1;
    auto model = LanguageModel::Random(SmallConfig(layers), 3, options);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto batch = Batch::Create(Model::Of(*model), {kSlots, 0});
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    bytes[layers / 4] = (*batch)->cache_bytes();
  }
  const LmConfig c = SmallConfig(1);
  const uint64_t head_dim = c.emb_dim / c.num_heads;  // padded to 16
  const uint64_t kv_layer =
      2 * kSlots * c.num_heads * c.context_length * 16 * sizeof(float);
  // q, k and v rows, ctx and the zero-padded q rows of one-token steps.
  const uint64_t activations =
      kSlots * (3 * c.emb_dim + c.emb_dim + c.num_heads * 16) * sizeof(float);
  ASSERT_EQ(head_dim, 8u);
  EXPECT_GE(bytes[1] - bytes[0], 3 * kv_layer);
  EXPECT_LT(bytes[1] - bytes[0], 3 * kv_layer + activations);
}

// The memory cap holds for the whole batch, not layer by layer: a cap just
// under what the model, the caches and a step of long prompts hold after
// it lets the batch's own buffers through, and is passed in the middle of
// the layers, whose decoders count what the others hold: the step is
// refused there (and changes nothing) instead of each layer checking only
// its own share.
TEST(BatchTest, EveryLayersStepBuffersCountAgainstTheCap) {
  LmConfig config = SmallConfig(4);
  config.context_length = 256;
  std::vector<int64_t> prompts(4 * 128);
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = int64_t(i * 7 % 50);
  const auto step = [&](Batch& batch) {
    std::vector<Batch::Request> requests;
    for (int64_t b = 0; b < 4; ++b) {
      requests.push_back({*batch.Add(), prompts.data() + b * 128, 128, false});
    }
    return batch.Step(requests.data(), requests.size());
  };
  // Unlimited: what the model and the batch hold before and after the step.
  LmOptions options;
  options.num_threads = 1;
  auto free_model = LanguageModel::Random(config, 3, options);
  ASSERT_TRUE(free_model.ok()) << free_model.status().message();
  auto free_batch = Batch::Create(Model::Of(*free_model), {4, 0});
  ASSERT_TRUE(free_batch.ok()) << free_batch.status().message();
  const uint64_t before =
      (*free_model)->memory_bytes() + (*free_batch)->cache_bytes();
  ASSERT_TRUE(step(**free_batch).ok());
  const uint64_t after =
      (*free_model)->memory_bytes() + (*free_batch)->cache_bytes();
  ASSERT_GT(after, before + 4096);

  options.max_memory_bytes = after - 1;
  auto model = LanguageModel::Random(config, 3, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto batch = Batch::Create(Model::Of(*model), {4, 0});
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  const Status refused = step(**batch);
  EXPECT_EQ(refused.code(), StatusCode::kOutOfMemory) << refused.message();
  EXPECT_NE(refused.message().find("a prompt of batch 4 x 128"),
            std::string::npos)
      << refused.message();
  EXPECT_LE((*model)->memory_bytes() + (*batch)->cache_bytes(),
            options.max_memory_bytes);
  for (int64_t s = 0; s < 4; ++s) EXPECT_EQ((*batch)->length(s), 0);
}

// A norm epsilon that is not a positive finite float (the norms' type) is
// refused, naming its value and where it comes from.
TEST(LmErrors, BadNormEpsIsRefusedWithItsValue) {
  for (const double eps : {0.0, -1e-5, std::nan(""), HUGE_VAL, 1e39, 1e-50}) {
    LmConfig config = SmallConfig(1);
    config.norm_eps = eps;
    const auto model = LanguageModel::Random(config, 1);
    ASSERT_FALSE(model.ok()) << eps;
    char value[32];
    std::snprintf(value, sizeof(value), "%g", eps);
    EXPECT_NE(model.status().message().find(std::string("norm_eps is ") +
                                            value + ", want a float above 0"),
              std::string::npos)
        << model.status().message();
  }
}

// Fresh prompts of 64 or more tokens run every layer through the causal
// core on one set of buffers that the layers share, resized when a prompt
// of new sizes comes: the logits are those of the same prompts fed in
// pieces (the decode path), and the buffers a batch keeps afterwards do not
// grow with the number of layers.
TEST(BatchTest, LongPromptsShareOneSetOfBuffers) {
  // Two prompts of 80 tokens in one step, then one of 100 in the next.
  const int64_t lengths[] = {80, 80, 100};
  std::vector<int64_t> ids(260);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 11 % 50);
  const int64_t* prompts[] = {ids.data(), ids.data() + 80, ids.data() + 160};
  // Each prompt's last logits, its step run whole or in halves; and the
  // bytes the batch holds after the first step beyond before it.
  const auto run = [&](int64_t layers, bool halves, uint64_t* growth) {
    LmConfig config = SmallConfig(layers);
    config.context_length = 128;
    LmOptions options;
    options.num_threads = 2;
    std::vector<float> logits;
    auto model = LanguageModel::Random(config, 5, options);
    if (!model.ok()) {
      ADD_FAILURE() << model.status().message();
      return logits;
    }
    auto batch = Batch::Create(Model::Of(*model), {3, 0});
    if (!batch.ok()) {
      ADD_FAILURE() << batch.status().message();
      return logits;
    }
    const uint64_t before = (*batch)->cache_bytes();
    for (const std::vector<int64_t>& step :
         {std::vector<int64_t>{0, 1}, std::vector<int64_t>{2}}) {
      std::vector<int64_t> seqs;
      for (size_t i = 0; i < step.size(); ++i) seqs.push_back(*(*batch)->Add());
      const int64_t length = lengths[step[0]];
      const int64_t piece = halves ? length / 2 : length;
      for (int64_t at = 0; at < length; at += piece) {
        std::vector<Batch::Request> requests;
        for (size_t i = 0; i < step.size(); ++i) {
          requests.push_back({seqs[i], prompts[step[i]] + at, piece, false});
        }
        const Status s = (*batch)->Step(requests.data(), requests.size());
        if (!s.ok()) {
          ADD_FAILURE() << s.message();
          return logits;
        }
      }
      if (growth && step[0] == 0) *growth = (*batch)->cache_bytes() - before;
      for (size_t i = 0; i < step.size(); ++i) {
        logits.insert(logits.end(), (*batch)->logits(i),
                      (*batch)->logits(i) + config.vocab_size);
      }
    }
    return logits;
  };
  uint64_t one_layer = 0, four_layers = 0;
  run(1, false, &one_layer);
  const std::vector<float> whole = run(4, false, &four_layers);
  const std::vector<float> halves = run(4, true, nullptr);
  ASSERT_EQ(whole.size(), 3u * 50);
  ASSERT_EQ(halves.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_NEAR(whole[i], halves[i], 1e-4) << "logit " << i;
  }
  // Three more layers add their ops (16 KB each here), not more buffers.
  ASSERT_GT(one_layer, 0u);
  EXPECT_LT(four_layers - one_layer, one_layer / 2)
      << four_layers << " bytes for 4 layers, " << one_layer << " for 1";
}

// Only the rows whose logits were asked for go past the last block's
// attention, yet every row leaves its K and V in that block's cache. Prompts
// asking for their last logits alone (fresh, through the causal core, one
// and ten of them; or continued, through the step path) get the last logits
// they get when asking for every position's, and the next token then finds
// the same caches, bit for bit; each the same at 1 and 2 threads.
TEST(BatchTest, OnlyTheLogitRowsGoPastTheLastAttention) {
  LmConfig config = SmallConfig(2);
  config.context_length = 128;
  const size_t vocab = size_t(config.vocab_size);
  std::vector<int64_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 13 % 50);
  struct Case {
    int64_t sequences;
    std::vector<int64_t> pieces;  // each sequence's prompt, step by step
  };
  // Each sequence's last prompt logits, then its next token's.
  const auto run = [&](const Case& c, bool all, int threads) {
    std::vector<float> out;
    LmOptions options;
    options.num_threads = threads;
    auto model = LanguageModel::Random(config, 11, options);
    if (!model.ok()) return out;
    auto batch = Batch::Create(Model::Of(*model), {c.sequences, 0});
    if (!batch.ok()) return out;
    std::vector<Batch::Request> requests(size_t(c.sequences));
    for (int64_t s = 0; s < c.sequences; ++s)
      requests[s].sequence = *(*batch)->Add();
    int64_t at = 0;
    for (const int64_t n : c.pieces) {
      for (int64_t s = 0; s < c.sequences; ++s) {
        requests[s] = {requests[s].sequence, ids.data() + s * 90 + at, n, all};
      }
      if (!(*batch)->Step(requests.data(), requests.size()).ok()) return out;
      at += n;
    }
    const size_t last = all ? size_t(c.pieces.back() - 1) * vocab : 0;
    for (int64_t s = 0; s < c.sequences; ++s) {
      const float* logits = (*batch)->logits(size_t(s)) + last;
      out.insert(out.end(), logits, logits + vocab);
      requests[s] = {requests[s].sequence, ids.data() + s * 90 + at, 1, false};
    }
    if (!(*batch)->Step(requests.data(), requests.size()).ok()) return out;
    for (int64_t s = 0; s < c.sequences; ++s) {
      out.insert(out.end(), (*batch)->logits(size_t(s)),
                 (*batch)->logits(size_t(s)) + vocab);
    }
    return out;
  };
  for (const Case& c : {Case{1, {80}}, Case{10, {70}}, Case{1, {20, 60}}}) {
    const std::string what = std::to_string(c.sequences) + " x " +
                             std::to_string(c.pieces.size()) + " piece(s)";
    const size_t half = size_t(c.sequences) * vocab;
    std::vector<float> at_one_thread;
    for (const int threads : {1, 2}) {
      const std::vector<float> kept = run(c, false, threads);
      const std::vector<float> every = run(c, true, threads);
      ASSERT_EQ(kept.size(), 2 * half) << what;
      ASSERT_EQ(every.size(), 2 * half) << what;
      test::ExpectAllClose(
          std::vector<float>(every.begin(), every.begin() + half), kept.data(),
          1e-5, what + ": the prompts' last logits");
      EXPECT_TRUE(
          std::equal(kept.begin() + half, kept.end(), every.begin() + half))
          << what << ": the next token's logits";
      if (at_one_thread.empty()) at_one_thread = kept;
      EXPECT_EQ(kept, at_one_thread) << what << ": threads changed the bits";
    }
  }
}

TEST(LmBf16, RefusedWithoutNativeBf16) {
  if (GetRuntimeInfo().native_bf16) GTEST_SKIP() << "native bf16";
  LmOptions options;
  options.dtype = DType::kBF16;
  auto model = LanguageModel::Random(SmallConfig(1), 7, options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("bf16"), std::string::npos)
      << model.status().message();
}

TEST(LmRandom, SizesAreChecked) {
  LmConfig config = SmallConfig(1);
  config.num_kv_heads = 3;
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Random(config, 1);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("num_kv_heads is 3"),
            std::string::npos);
  config.num_kv_heads = 0;
  config.vocab_size = int64_t{1} << 30;
  model = LanguageModel::Random(config, 1);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("vocab_size"), std::string::npos);
}

TEST(LmRandom, SeededModelIsReproducibleAndFinite) {
  LmConfig config = SmallConfig(2);
  config.qkv_bias = true;
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    auto model = LanguageModel::Random(config, 7);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto batch = NewBatch(*model, 1);
    const int64_t ids[] = {1, 2, 3};
    const Batch::Request r{*batch->Add(), ids, 3, false};
    ASSERT_TRUE(batch->Step(&r, 1).ok());
    const std::vector<float> logits(batch->logits(0), batch->logits(0) + 50);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    if (first.empty()) first = logits;
    EXPECT_EQ(first, logits);
  }
}

}  // namespace
}  // namespace attn

namespace attn {
namespace {

// `case_name`'s model rewritten as F32 with `edit` applied to its tensors
// and metadata, in a temporary directory; the new file's path.
using Tensors =
    std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;
std::string Rewrite(
    const std::string& case_name, const std::string& out_name,
    const std::function<void(Tensors&, std::map<std::string, std::string>&)>&
        edit) {
  const SafetensorsFile file = std::move(
      *SafetensorsFile::Open(kLmDir + case_name + "/model.safetensors"));
  Tensors tensors;
  for (const TensorInfo& t : file.tensors()) {
    tensors[t.name] = {t.shape, *file.ReadF32(t.name)};
  }
  std::map<std::string, std::string> metadata = file.metadata();
  edit(tensors, metadata);
  std::vector<F32Tensor> out;
  for (const auto& [name, t] : tensors) {
    out.push_back({name, t.first, t.second.data()});
  }
  const std::string path = ::testing::TempDir() + "/" + out_name;
  EXPECT_TRUE(WriteSafetensors(path, out, metadata).ok());
  return path;
}

// Expects `message` to hold `needle`, on one line.
void ExpectHas(const std::string& message, const std::string& needle) {
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line";
}

std::string LoadError(const std::string& path) {
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(path);
  return model.ok() ? "loaded" : model.status().message();
}

TEST(LmErrors, BrokenFilesNameTheTensorOrKey) {
  ExpectHas(LoadError(Rewrite("gpt_book_1l", "no_key.safetensors",
                              [](Tensors& t, auto&) {
                                t.erase("trf_blocks.0.att.W_key.weight");
                              })),
            "'trf_blocks.0.att.W_key.weight' is missing");
  ExpectHas(
      LoadError(Rewrite("gpt_book_1l", "short_ff.safetensors",
                        [](Tensors& t, auto&) {
                          auto& w = t["trf_blocks.0.ff.layers.2.weight"];
                          w.first[1] -= 1;
                          w.second.resize(size_t(w.first[0] * w.first[1]));
                        })),
      "'trf_blocks.0.ff.layers.2.weight'");
  ExpectHas(
      LoadError(Rewrite("gpt_book_1l", "bad_heads.safetensors",
                        [](Tensors&, auto& meta) { meta["num_heads"] = "x"; })),
      "metadata 'num_heads'");
  ExpectHas(LoadError(Rewrite(
                "gpt_book_1l", "long_ctx.safetensors",
                [](Tensors&, auto& meta) { meta["context_length"] = "17"; })),
            "context_length 17 exceeds 16 rows of 'pos_emb.weight'");
  ExpectHas(LoadError(Rewrite(
                "llama_mqa", "no_theta.safetensors",
                [](Tensors&, auto& meta) { meta.erase("rope_theta"); })),
            "missing hyper-parameter rope_theta");
  ExpectHas(LoadError(Rewrite("gpt_book_3l", "gap.safetensors",
                              [](Tensors& t, auto&) {
                                t.erase("trf_blocks.1.norm1.scale");
                              })),
            "has no 'trf_blocks.1.norm1.scale'");
  ExpectHas(LoadError(Rewrite("gpt_book_1l", "no_ff.safetensors",
                              [](Tensors& t, auto&) {
                                t.erase("trf_blocks.0.ff.layers.0.weight");
                              })),
            "'trf_blocks.0.ff.layers.0.weight'");
  // RoPE values a float cannot hold: 1e-46 would be 0 (no scaling), 1e-45
  // a subnormal that fills the tables with NaN, 1e300 inf.
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"rope_factor", "1e-46"},
           {"rope_factor", "1e-45"},
           {"rope_theta", "1e+300"}}) {
    ExpectHas(
        LoadError(Rewrite("llama_scaled_tied", "rope_float.safetensors",
                          [&](Tensors&, auto& meta) { meta[key] = value; })),
        key + " is " + value + ", want a value float holds");
  }
  // Names and values that hold a newline are escaped: one line still.
  ExpectHas(LoadError(Rewrite("gpt_book_1l", "newline_name.safetensors",
                              [](Tensors& t, auto&) {
                                t["stray\nname"] = {{1}, {0.0f}};
                              })),
            "tensor 'stray\\x0aname' in ");
  ExpectHas(LoadError(Rewrite(
                "gpt_book_1l", "newline_value.safetensors",
                [](Tensors&, auto& meta) { meta["num_heads"] = "2\nx"; })),
            "is '2\\x0ax', want a positive integer");
}

// Files that would load as a different model than they hold: each refused,
// naming the tensor or key.
TEST(LmErrors, FilesThatWouldRunAnotherModelAreRefused) {
  // A LayerNorm without its shift, a feed-forward without its bias, the
  // book's GPT without positions (not taken for Llama).
  const std::pair<const char*, std::string> missing[] = {
      {"gpt_book_3l", "trf_blocks.1.norm1.shift"},
      {"gpt_book_1l", "final_norm.shift"},
      {"gpt_book_3l", "trf_blocks.2.ff.layers.2.bias"},
      {"gpt_book_1l", "pos_emb.weight"}};
  for (const auto& [case_name, tensor] : missing) {
    ExpectHas(LoadError(Rewrite(case_name, "no_" + tensor + ".safetensors",
                                [&tensor = tensor](Tensors& t, auto&) {
                                  ASSERT_EQ(t.erase(tensor), 1u);
                                })),
              "'" + tensor + "' is missing");
  }
  // q/k/v biases in a later layer only, or k and v without q.
  ExpectHas(LoadError(Rewrite(
                "gpt_book_2l_bias", "bias_l1_only.safetensors",
                [](Tensors& t, auto&) {
                  for (const char* w : {"query", "key", "value"}) {
                    t.erase("trf_blocks.0.att.W_" + std::string(w) + ".bias");
                  }
                })),
            "'trf_blocks.0.att.W_query.bias' is missing");
  ExpectHas(LoadError(Rewrite("gpt_book_2l_bias", "kv_bias.safetensors",
                              [](Tensors& t, auto&) {
                                t.erase("trf_blocks.0.att.W_query.bias");
                                t.erase("trf_blocks.1.att.W_query.bias");
                              })),
            "'trf_blocks.0.att.W_query.bias' is missing");
  // A head, or a bias, under a name the layout does not read.
  ExpectHas(LoadError(Rewrite("gpt_book_1l", "lm_head.safetensors",
                              [](Tensors& t, auto&) {
                                t["lm_head.weight"] = t["out_head.weight"];
                                t.erase("out_head.weight");
                              })),
            "tensor 'lm_head.weight' in");
  ExpectHas(LoadError(Rewrite("llama_gqa", "fc1_bias.safetensors",
                              [](Tensors& t, auto&) {
                                const int64_t hidden =
                                    t["trf_blocks.0.ff.fc1.weight"].first[0];
                                t["trf_blocks.0.ff.fc1.bias"] = {
                                    {hidden},
                                    std::vector<float>(size_t(hidden), 5)};
                              })),
            "'trf_blocks.0.ff.fc1.bias' in");
  // Llama 3.1 scaling given in part; scaling on learned positions.
  ExpectHas(LoadError(Rewrite(
                "llama_scaled_tied", "no_factor.safetensors",
                [](Tensors&, auto& meta) { meta.erase("rope_factor"); })),
            "set without 'rope_factor'");
  ExpectHas(LoadError(Rewrite(
                "gpt_book_1l", "gpt_rope.safetensors",
                [](Tensors&, auto& meta) { meta["rope_factor"] = "8"; })),
            "'rope_factor' of");
}

// What the book's state dicts may hold beside the weights still loads: the
// Llama notebooks' per-block mask, cos and sin buffers; and metadata rope
// scaling without rope_theta when the options give the rope.
TEST(LmLayouts, BuffersAndOverriddenMetadataStillLoad) {
  const std::string buffered =
      Rewrite("llama_gqa", "buffers.safetensors", [](Tensors& t, auto&) {
        for (const char* buffer : {"mask", "cos", "sin"}) {
          t["trf_blocks.0.att." + std::string(buffer)] = {{2, 2}, {0, 1, 2, 3}};
        }
      });
  EXPECT_EQ(LoadError(buffered), "loaded");
  const std::string no_theta =
      Rewrite("llama_scaled_tied", "no_theta_scaled.safetensors",
              [](Tensors&, auto& meta) { meta.erase("rope_theta"); });
  EXPECT_NE(LoadError(no_theta), "loaded");
  LmOptions options;
  options.rope.theta = 500000;
  EXPECT_TRUE(LanguageModel::Load(no_theta, options).ok());
}

// hf_gpt2's weights beside config.json `text`; the load's error.
std::string LoadWithConfig(const std::string& name, const std::string& text,
                           const std::string& weights = "hf_gpt2") {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kLmDir + weights + "/model.safetensors",
                             dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/config.json") << text;
  return LoadError(dir + "/model.safetensors");
}

TEST(LmErrors, ConfigJsonMustAgreeWithTheWeights) {
  const std::string dims = R"("n_head": 4, "n_positions": 24)";
  EXPECT_EQ(LoadWithConfig("cfg_ok", "{" + dims + R"(, "n_layer": 2,
      "n_embd": 32, "vocab_size": 96, "n_inner": null,
      "activation_function": "gelu_new", "model_type": "gpt2",
      "scale_attn_weights": true, "scale_attn_by_inverse_layer_idx": false,
      "add_cross_attention": false, "tie_word_embeddings": false})"),
            "loaded");
  // Settings under which Hugging Face computes another model than GPT-2's.
  const std::tuple<std::string, std::string, std::string> settings[] = {
      {"scale_attn_by_inverse_layer_idx", "true", "false"},
      {"scale_attn_weights", "false", "true"},
      {"add_cross_attention", "true", "false"},
      {"model_type", R"("gpt_neo")", R"(one of "gpt2")"}};
  for (const auto& [key, value, want] : settings) {
    ExpectHas(LoadWithConfig("cfg_maths", "{" + dims + R"(, ")" + key +
                                              R"(": )" + value + "}"),
              "'" + key + "' is " + value + ", want " + want);
  }
  // A head other than the one config.json says Hugging Face would use.
  ExpectHas(LoadWithConfig("cfg_tie",
                           "{" + dims + R"(, "tie_word_embeddings": true})"),
            "'tie_word_embeddings' is true, but the weights beside it have "
            "their own 'lm_head.weight'");
  ExpectHas(LoadWithConfig("cfg_untie",
                           "{" + dims + R"(, "tie_word_embeddings": false})",
                           "hf_gpt2_tied"),
            "'tie_word_embeddings' is false, but the weights beside it have "
            "no 'lm_head.weight'");
  ExpectHas(LoadWithConfig("cfg_layers", "{" + dims + R"(, "n_layer": 12})"),
            "'n_layer' is 12, but the weights beside it have 2");
  ExpectHas(LoadWithConfig("cfg_embd", "{" + dims + R"(, "n_embd": 768})"),
            "'n_embd' is 768");
  ExpectHas(LoadWithConfig("cfg_relu",
                           "{" + dims + R"(, "activation_function": "relu"})"),
            "'activation_function' is \"relu\"");
  ExpectHas(LoadWithConfig("cfg_array", "[4, 24]"),
            "is a JSON array, want an object");
}

// Heads that do not fit the weights name where they came from: an option,
// the metadata, config.json, or W_key's rows.
TEST(LmErrors, HeadsThatDoNotFitNameTheirSource) {
  const std::string want_emb =
      "want a positive divisor of emb_dim 32 (the columns of 'tok_emb.weight')";
  LmOptions options;
  options.num_heads = 5;
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(kLmDir + "gpt_book_1l/model.safetensors", options);
  ASSERT_FALSE(model.ok());
  ExpectHas(model.status().message(),
            "num_heads is 5 (from option num_heads, --heads), " + want_emb);
  const std::string meta =
      Rewrite("gpt_book_1l", "meta_heads.safetensors",
              [](Tensors&, auto& metadata) { metadata["num_heads"] = "5"; });
  ExpectHas(LoadError(meta), "num_heads is 5 (from metadata 'num_heads' of '" +
                                 meta + "'), " + want_emb);
  // A file name holding a newline is quoted: one line still.
  const std::string odd =
      Rewrite("gpt_book_1l", "odd\nheads.safetensors",
              [](Tensors&, auto& metadata) { metadata["num_heads"] = "5"; });
  const std::string odd_error = LoadError(odd);
  ExpectHas(odd_error, "odd\\x0aheads.safetensors'), " + want_emb);
  EXPECT_EQ(odd_error.find('\n'), std::string::npos) << odd_error;
  ExpectHas(LoadWithConfig("cfg_heads", R"({"n_head": 5})"),
            "num_heads is 5 (from 'n_head' of '" + ::testing::TempDir() +
                "/cfg_heads/config.json'), want a positive divisor of emb_dim "
                "32 (the "
                "columns of 'wte.weight')");
  // Three K/V heads of 8 dims in W_key's rows, for 4 query heads.
  const std::string key = "trf_blocks.0.att.W_key.weight";
  ExpectHas(LoadError(Rewrite("llama_gqa", "kv_rows.safetensors",
                              [&key](Tensors& t, auto& metadata) {
                                metadata.erase("num_kv_heads");
                                t[key].first = {24, 32};
                                t[key].second.resize(24 * 32);
                              })),
            "num_kv_heads is 3 (from the rows of '" + key +
                "'), want a divisor of num_heads 4");
}

TEST(LmErrors, ConvOneDShapesAreCheckedAsStored) {
  const std::string dir = ::testing::TempDir() + "/hf_bad";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kLmDir + "hf_gpt2/config.json",
                             dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string path =
      Rewrite("hf_gpt2", "hf_bad/model.safetensors", [](Tensors& t, auto&) {
        auto& w = t["h.0.attn.c_attn.weight"];
        std::swap(w.first[0], w.first[1]);
      });
  const std::string message = LoadError(path);
  EXPECT_NE(message.find("'h.0.attn.c_attn.weight'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("Conv1D"), std::string::npos) << message;
}

}  // namespace
}  // namespace attn
