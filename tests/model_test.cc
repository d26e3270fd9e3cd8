// The one vocabulary (attn/model.hpp), black-box: Model::Load tells the
// three kinds apart, a Session runs each as its own class does, bit for
// bit, a language model's Session gives PyTorch's logits for every
// position, and the wrong input or kind is one clear line.
#include "attn/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/safetensors.hpp"

namespace attn {
namespace {

const std::string kSource = ATTN_SOURCE_DIR;
const std::string kGolden = kSource + "/tests/golden/";
const std::string kLm = kGolden + "lm/";

std::shared_ptr<const Model> Load(const ModelFiles& files, int threads = 2) {
  LoadOptions options;
  options.num_threads = threads;
  Result<std::shared_ptr<const Model>> model = Model::Load(files, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? *model : nullptr;
}

TEST(ModelTest, LoadTellsTheKindsApart) {
  const auto mha = Load({kGolden + "mha_book.safetensors", ""});
  ASSERT_TRUE(mha);
  EXPECT_EQ(mha->kind(), ModelKind::kAttention);
  EXPECT_FALSE(mha->token_input());
  EXPECT_EQ(mha->input_width(), mha->attention()->config().d_in);
  EXPECT_EQ(mha->output_width(), mha->attention()->config().d_out);

  const auto lm = Load({kLm + "hf_gpt2/model.safetensors", ""});
  ASSERT_TRUE(lm);
  EXPECT_EQ(lm->kind(), ModelKind::kLanguageModel);
  EXPECT_TRUE(lm->token_input());
  EXPECT_EQ(lm->input_width(), 0);
  EXPECT_EQ(lm->output_width(), lm->language_model()->config().vocab_size);
  EXPECT_EQ(lm->memory_bytes(), lm->language_model()->memory_bytes());

  const auto graph = Load({kLm + "hf_gpt2/model.safetensors",
                           kSource + "/tools/graphs/gpt_model.json"});
  ASSERT_TRUE(graph);
  EXPECT_EQ(graph->kind(), ModelKind::kGraph);
  EXPECT_TRUE(graph->token_input());
  EXPECT_EQ(graph->output_width(), lm->output_width());
  EXPECT_GT(graph->memory_bytes(), 0u);
  EXPECT_FALSE(graph->attention());
  EXPECT_FALSE(graph->language_model());
}

// Every position's logits of each golden prompt (its own tokens only: a
// padded row's later positions saw padding PyTorch did not) within the
// case's tolerance, at 1 and 2 threads and bitwise equal between them.
TEST(ModelTest, LanguageModelSessionMatchesPyTorch) {
  for (const char* name : {"gpt_book_3l", "hf_gpt2", "llama_gqa"}) {
    SCOPED_TRACE(name);
    const SafetensorsFile io =
        SafetensorsFile::Open(kLm + name + "/io.safetensors").value();
    const std::vector<int64_t> ids = io.ReadI64("input_ids").value();
    const std::vector<float> want = io.ReadF32("logits").value();
    const int64_t b = io.Find("input_ids")->shape[0];
    const int64_t t = io.Find("input_ids")->shape[1];
    const std::vector<int64_t> lengths =
        io.Find("lengths") ? io.ReadI64("lengths").value()
                           : std::vector<int64_t>(size_t(b), t);
    double largest = 0.0;
    for (float v : want) largest = std::max(largest, std::fabs(double{v}));
    const double bound = std::stod(io.metadata().at("tolerance")) * largest;
    std::vector<std::vector<float>> got;
    for (const int threads : {1, 2}) {
      Session session(Load({kLm + name + "/model.safetensors", ""}, threads));
      got.emplace_back(want.size());
      const Status run = session.Run(ids.data(), b, t, got.back().data());
      ASSERT_TRUE(run.ok()) << run.message();
    }
    const size_t vocab = want.size() / size_t(b * t);
    double worst = 0.0;
    for (int64_t r = 0; r < b; ++r) {
      for (size_t i = size_t(r * t) * vocab;
           i < size_t(r * t + lengths[size_t(r)]) * vocab; ++i) {
        worst = std::max(worst, std::fabs(double{got[0][i]} - want[i]));
      }
    }
    EXPECT_LE(worst, bound);
    EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(),
                             got[0].size() * sizeof(float)));
  }
}

// The same bits as the kinds' own sessions, and a Batch of the same
// prompts (a language model's Session is a Batch of fresh sequences).
TEST(ModelTest, SessionsGiveTheirKindsBits) {
  const auto mha = Load({kGolden + "mha_book.safetensors", ""});
  const SafetensorsFile file =
      SafetensorsFile::Open(kGolden + "mha_book.safetensors").value();
  const std::vector<float> x = file.ReadF32("input").value();
  const int64_t b = file.Find("input")->shape[0];
  const int64_t t = file.Find("input")->shape[1];
  std::vector<float> ours(size_t(b * t * mha->output_width()));
  std::vector<float> theirs(ours.size());
  ASSERT_TRUE(Session(mha).Run(x.data(), b, t, ours.data()).ok());
  ASSERT_TRUE(
      MhaSession(mha->attention()).Run(x.data(), b, t, theirs.data()).ok());
  EXPECT_EQ(
      0, std::memcmp(ours.data(), theirs.data(), ours.size() * sizeof(float)));

  const auto lm = Load({kLm + "gpt_book_3l/model.safetensors", ""});
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  std::vector<float> logits(ids.size() * size_t(lm->output_width()));
  Session session(lm);
  for (int repeat = 0; repeat < 2; ++repeat) {  // the second reuses the batch
    ASSERT_TRUE(session.Run(ids.data(), 2, 6, logits.data()).ok());
  }
  auto batch = Batch::Create(lm, {2, 6}).value();
  std::vector<Batch::Request> requests;
  for (int64_t r = 0; r < 2; ++r) {
    requests.push_back({batch->Add().value(), ids.data() + r * 6, 6, true});
  }
  ASSERT_TRUE(batch->Step(requests.data(), requests.size()).ok());
  const size_t row = 6 * size_t(lm->output_width());
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(0, std::memcmp(logits.data() + r * row, batch->logits(r),
                             row * sizeof(float)));
  }
}

TEST(ModelTest, WrongInputOrKindIsOneClearLine) {
  const auto mha = Load({kGolden + "mha_book.safetensors", ""});
  const auto lm = Load({kLm + "hf_gpt2/model.safetensors", ""});
  std::vector<float> out(1 << 16);
  const std::vector<int64_t> ids(4, 1);
  const std::vector<float> x(1 << 10, 0.0f);
  Session on_lm(lm);
  Status s = on_lm.Run(x.data(), 1, 2, out.data());
  EXPECT_EQ(s.message(),
            "the model's input is token ids, want Run with int64_t ids");
  s = Session(mha).Run(ids.data(), 1, 2, out.data());
  EXPECT_NE(s.message().find("want Run with float input"), std::string::npos)
      << s.message();
  s = on_lm.Run(ids.data(), 1, 100, out.data());
  EXPECT_NE(s.message().find("input shape [1, 100] is invalid"),
            std::string::npos)
      << s.message();
  const std::vector<int64_t> bad = {1, 96};
  s = on_lm.Run(bad.data(), 1, 2, out.data());
  EXPECT_EQ(s.message(), "token ids[0, 1] is 96, want 0 to 95");
  auto batch = Batch::Create(mha);
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().message(),
            "batch: the model is an attention layer, want a language model");
  // A refused run leaves the session as it was.
  EXPECT_TRUE(on_lm.Run(ids.data(), 2, 2, out.data()).ok());
  EXPECT_EQ(Model::Load({kGolden + "missing.safetensors", ""}).status().code(),
            StatusCode::kIoError);
}

}  // namespace
}  // namespace attn
