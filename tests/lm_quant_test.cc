// Language models quantized at load (LmOptions::dtype q8_0 and q4_0),
// black-box, against PyTorch on the dequantized weights with every
// linear's input quantized per block as llama.cpp's q8_0 (tools/
// make_golden.py's quant.safetensors): token by token and whole prompts,
// within the goldens' tolerance, the same bits at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "tests/lm_golden.h"
#include "tests/test_util.h"

namespace attn {
namespace {

// The golden cases whose linears take whole blocks of 32 inputs: GPT-2's
// Conv1D weights ([in, out]) with an own head and a tied one, and the
// Llama-style families.
const char* const kQuantCases[] = {"hf_gpt2", "hf_gpt2_tied", "hf_qwen2",
                                   "hf_llama_tied_biases", "hf_mistral_window"};

struct QuantDType {
  DType dtype;
  const char* name;
};
const QuantDType kQuantDTypes[] = {{DType::kQ8_0, "q8_0"},
                                   {DType::kQ4_0, "q4_0"}};

// quant.safetensors' logits of the case's first prompt as `what` ("q8_0"
// or "q4_0"): [n, vocab].
std::vector<float> QuantLogits(const std::string& name,
                               const std::string& what) {
  Result<SafetensorsFile> file =
      SafetensorsFile::Open(kLmDir + name + "/quant.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return {};
  Result<std::vector<float>> logits = file->ReadF32(what);
  EXPECT_TRUE(logits.ok()) << name << " " << what;
  return logits.ok() ? *logits : std::vector<float>{};
}

// The first prompt token by token: every step's logits, [n, vocab].
std::vector<float> StepLogits(const std::shared_ptr<const LanguageModel>& model,
                              const Case& c) {
  auto batch = NewBatch(model, 1);
  std::vector<float> logits;
  if (!batch || !batch->Add().ok()) return logits;
  for (int64_t t = 0; t < c.lengths[0]; ++t) {
    const Batch::Request r{0, c.prompt(0) + t, 1, false};
    const Status s = batch->Step(&r, 1);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) break;
    logits.insert(logits.end(), batch->logits(0), batch->logits(0) + c.vocab);
  }
  return logits;
}

// The first prompt in one step, all its logits: [n, vocab].
std::vector<float> OneStepLogits(
    const std::shared_ptr<const LanguageModel>& model, const Case& c) {
  auto batch = NewBatch(model, 1);
  std::vector<float> logits;
  if (!batch || !batch->Add().ok()) return logits;
  const Batch::Request r{0, c.prompt(0), c.lengths[0], true};
  const Status s = batch->Step(&r, 1);
  EXPECT_TRUE(s.ok()) << s.message();
  if (s.ok())
    logits.assign(batch->logits(0), batch->logits(0) + c.lengths[0] * c.vocab);
  return logits;
}

using Run = std::vector<float> (*)(const std::shared_ptr<const LanguageModel>&,
                                   const Case&);

// `run` of every quantized case at 1 and 2 threads against its golden.
void ExpectGoldens(Run run) {
  for (const char* name : kQuantCases) {
    const Case c = ReadCase(name);
    for (const QuantDType& q : kQuantDTypes) {
      const std::string label = std::string(name) + " " + q.name;
      const std::vector<float> want = QuantLogits(name, q.name);
      std::vector<float> first;
      for (const int threads : {1, 2}) {
        auto model = Load(name, threads, q.dtype);
        ASSERT_NE(model, nullptr) << label;
        const std::vector<float> got = run(model, c);
        ASSERT_EQ(got.size(), want.size()) << label;
        test::ExpectAllClose(want, got.data(), c.tolerance, label);
        if (first.empty()) first = got;
        EXPECT_EQ(first, got) << label << ": threads changed the bits";
      }
    }
  }
}

TEST(LmQuantTest, StepsMatchPyTorch) { ExpectGoldens(StepLogits); }

// A prompt of more rows than a step's kernel takes at once (kernels::
// kRowsLinearMaxRows) runs it over groups of rows: the same math.
TEST(LmQuantTest, PromptsMatchPyTorch) { ExpectGoldens(OneStepLogits); }

// Greedy decoding runs the quantized model end to end: the prompt in one
// step, then one token at a time, each the argmax of the last.
TEST(LmQuantTest, GreedyStepsFollowTheirOwnArgmax) {
  const Case c = ReadCase("hf_qwen2");
  for (const QuantDType& q : kQuantDTypes) {
    auto batch = NewBatch(Load("hf_qwen2", 2, q.dtype), 1);
    ASSERT_NE(batch, nullptr);
    ASSERT_TRUE(batch->Add().ok());
    Batch::Request r{0, c.prompt(0), c.lengths[0], false};
    ASSERT_TRUE(batch->Step(&r, 1).ok());
    int64_t token = 0;
    for (int t = 0; t < 4; ++t) {
      token = Argmax(batch->logits(0), c.vocab);
      ASSERT_GE(token, 0);
      ASSERT_LT(token, c.vocab);
      r = {0, &token, 1, false};
      ASSERT_TRUE(batch->Step(&r, 1).ok()) << q.name;
    }
  }
}

// A model whose linears' inputs are not whole blocks is refused in one
// line naming the size; MHA models take no quantized dtype.
TEST(LmQuantTest, ModelsThatCannotBeQuantizedAreRefused) {
  LmOptions options;
  options.dtype = DType::kQ4_0;
  const Result<std::shared_ptr<const LanguageModel>> gemma =
      LanguageModel::Load(kLmDir + "hf_gemma_mqa", options);
  ASSERT_FALSE(gemma.ok());
  EXPECT_EQ(gemma.status().message(),
            "model emb_dim is 48, want a multiple of 32 to quantize (blocks "
            "of 32 along each linear's input)");
  MhaOptions mha;
  mha.dtype = DType::kQ8_0;
  const Result<std::shared_ptr<const MhaModel>> block = MhaModel::Load(
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_book.safetensors", mha);
  ASSERT_FALSE(block.ok());
  EXPECT_NE(block.status().message().find(
                "dtype q8_0 quantizes a language model's linears"),
            std::string::npos)
      << block.status().message();
  // Quantized projections serve decoders alone.
  mha.dtype = DType::kF32;
  mha.step_weights = DType::kQ4_0;
  const Result<std::shared_ptr<const MhaModel>> sessions = MhaModel::Load(
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_book.safetensors", mha);
  ASSERT_FALSE(sessions.ok());
  EXPECT_EQ(sessions.status().message(),
            "MhaOptions::step_weights q4_0 needs sessions false and decode "
            "true: quantized projections serve decoders only");
}

}  // namespace
}  // namespace attn
