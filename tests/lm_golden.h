// The language-model golden cases of tests/golden/lm (tools/make_golden.py):
// reading a case, loading its folder, and running its prompts through a
// Batch. Shared by lm_test and lm_quant_test.
#ifndef ATTN_TESTS_LM_GOLDEN_H_
#define ATTN_TESTS_LM_GOLDEN_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "tests/test_util.h"

namespace attn {

inline const std::string kLmDir =
    std::string(ATTN_SOURCE_DIR) + "/tests/golden/lm/";

// An I64 or I32 tensor of `file`, read from its bytes.
inline std::vector<int64_t> ReadIds(const SafetensorsFile& file,
                                    const std::string& name) {
  const TensorInfo* info = file.Find(name);
  if (!info) return {};
  std::ifstream in(file.path(), std::ios::binary);
  in.seekg(static_cast<std::streamoff>(info->offset));
  std::vector<char> raw(info->size_bytes);
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  std::vector<int64_t> ids(info->num_elements);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (info->dtype == "I32") {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      ids[i] = v;
    } else {
      std::memcpy(&ids[i], raw.data() + 8 * i, 8);
    }
  }
  return ids;
}

// One golden case: prompts (right-padded rows of their own lengths), the
// logits over each prompt and the greedy continuation.
struct Case {
  std::string name;
  int64_t b = 0, T = 0, vocab = 0, new_tokens = 0;
  std::vector<int64_t> ids, lengths, tokens;
  std::vector<float> logits;
  double tolerance = 0.0;

  const int64_t* prompt(int64_t row) const { return ids.data() + row * T; }
};

inline Case ReadCase(const std::string& name) {
  Case c;
  c.name = name;
  Result<SafetensorsFile> io =
      SafetensorsFile::Open(kLmDir + name + "/io.safetensors");
  EXPECT_TRUE(io.ok()) << io.status().message();
  if (!io.ok()) return c;
  const TensorInfo* ids = io->Find("input_ids");
  c.b = ids->shape[0];
  c.T = ids->shape[1];
  c.ids = ReadIds(*io, "input_ids");
  c.lengths = ReadIds(*io, "lengths");
  if (c.lengths.empty()) c.lengths.assign(size_t(c.b), c.T);
  c.tokens = ReadIds(*io, "tokens");
  c.new_tokens = io->Find("tokens")->shape[1];
  c.logits = *io->ReadF32("logits");
  c.vocab = io->Find("logits")->shape[2];
  c.tolerance =
      std::stod(io->metadata().at("tolerance")) * test::MaxAbs(c.logits);
  return c;
}

inline std::shared_ptr<const LanguageModel> Load(const std::string& name,
                                                 int threads,
                                                 DType dtype = DType::kF32) {
  LmOptions options;
  options.num_threads = threads;
  options.dtype = dtype;
  // The case's folder, as Hugging Face publishes one.
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(kLmDir + name, options);
  EXPECT_TRUE(model.ok()) << name << ": " << model.status().message();
  return model.ok() ? *model : nullptr;
}

inline std::unique_ptr<Batch> NewBatch(
    std::shared_ptr<const LanguageModel> model, int64_t sequences) {
  Result<std::unique_ptr<Batch>> batch =
      Batch::Create(Model::Of(std::move(model)), {sequences, 0});
  EXPECT_TRUE(batch.ok()) << batch.status().message();
  return batch.ok() ? std::move(*batch) : nullptr;
}

inline int64_t Argmax(const float* logits, int64_t vocab) {
  return std::max_element(logits, logits + vocab) - logits;  // first max
}

// Every prompt in one step, all logits: [b, T, vocab], zeros past a row's
// length, as the golden file holds them.
inline std::vector<float> PromptLogits(Batch& batch, const Case& c) {
  std::vector<Batch::Request> requests;
  for (int64_t row = 0; row < c.b; ++row) {
    requests.push_back({*batch.Add(), c.prompt(row), c.lengths[row], true});
  }
  const Status s = batch.Step(requests.data(), requests.size());
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<float> logits(size_t(c.b * c.T * c.vocab), 0.0f);
  for (int64_t row = 0; s.ok() && row < c.b; ++row) {
    std::copy_n(batch.logits(size_t(row)), c.lengths[row] * c.vocab,
                logits.begin() + row * c.T * c.vocab);
  }
  return logits;
}

}  // namespace attn

#endif  // ATTN_TESTS_LM_GOLDEN_H_
