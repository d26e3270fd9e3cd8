// End to end through the public API against files made by PyTorch
// (tools/make_golden.py): every case at 1 and 2 threads, and the bad cases
// refused with a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "tests/avx2_only.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(ATTN_SOURCE_DIR) / "tests" / "golden";
const char* const kRegenerate =
    " (regenerate with /usr/bin/python3 tools/make_golden.py)";

std::vector<fs::path> Files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<float> RunCase(const std::string& path, int threads) {
  MhaOptions options;
  options.num_threads = threads;
  auto model = MhaModel::Load(path, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  auto file = SafetensorsFile::Open(path);
  const TensorInfo* x = file->Find("input");
  EXPECT_TRUE(x && x->shape.size() == 3) << path << kRegenerate;
  if (!x || x->shape.size() != 3) return {};
  auto input = file->ReadF32("input");
  std::vector<float> y(static_cast<size_t>(x->shape[0] * x->shape[1] *
                                           (*model)->config().d_out));
  MhaSession session(*model);
  const Status st =
      session.Run(input->data(), x->shape[0], x->shape[1], y.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

// Case `path` at 1 and 2 threads: within its tolerance of PyTorch, and the
// same both times.
void ExpectMatchesPyTorch(const fs::path& path) {
  SCOPED_TRACE(path.filename().string());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto expected = file->ReadF32("expected");
  ASSERT_TRUE(expected.ok()) << expected.status().message() << kRegenerate;
  const double tolerance = std::stod(file->metadata().at("tolerance"));
  double max_abs = 1.0;
  for (float e : *expected) max_abs = std::max(max_abs, double(std::abs(e)));

  const std::vector<float> one = RunCase(path, 1);
  ASSERT_EQ(one.size(), expected->size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_LE(std::abs(double(one[i]) - (*expected)[i]), tolerance * max_abs)
        << "element " << i << ": expected " << (*expected)[i] << " got "
        << one[i];
  }
  EXPECT_EQ(one, RunCase(path, 2)) << "1 and 2 threads differ";
}

TEST(GoldenTest, EveryCaseMatchesPyTorch) {
  const std::vector<fs::path> files = Files(kGoldenDir);
  ASSERT_GE(files.size(), 10u) << "golden files missing" << kRegenerate;
  for (const fs::path& path : files) ExpectMatchesPyTorch(path);
}

// Weights (and an input) stored as F16 and BF16 are widened on load; PyTorch
// computed "expected" in fp32 from the same rounded values.
TEST(GoldenTest, SixteenBitWeightsMatchPyTorch) {
  const std::pair<const char*, const char*> cases[] = {
      {"mha_weights_f16", "F16"}, {"mha_weights_bf16", "BF16"}};
  for (const auto& [name, dtype] : cases) {
    const fs::path path = kGoldenDir / (std::string(name) + ".safetensors");
    auto file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().message() << kRegenerate;
    for (const char* weight : {"W_query.weight", "out_proj.bias"}) {
      ASSERT_NE(file->Find(weight), nullptr) << name << kRegenerate;
      EXPECT_EQ(file->Find(weight)->dtype, dtype) << name << kRegenerate;
    }
    ExpectMatchesPyTorch(path);
  }
  auto f16 = SafetensorsFile::Open(kGoldenDir / "mha_weights_f16.safetensors");
  EXPECT_EQ(f16->Find("input")->dtype, "F16");
}

TEST(GoldenTest, BookExampleRows) {
  const std::vector<float> y = RunCase(kGoldenDir / "mha_book.safetensors", 1);
  ASSERT_EQ(y.size(), 2u * 6 * 2);
  // The book prints tensor([[[0.3190, 0.4858], ... [0.2575, 0.4028]]]).
  for (int b = 0; b < 2; ++b) {
    EXPECT_NEAR(y[b * 12 + 0], 0.3190, 5e-5);
    EXPECT_NEAR(y[b * 12 + 1], 0.4858, 5e-5);
    EXPECT_NEAR(y[b * 12 + 10], 0.2575, 5e-5);
    EXPECT_NEAR(y[b * 12 + 11], 0.4028, 5e-5);
  }
}

TEST(GoldenTest, BadWeightsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"wkey_transposed", "'W_key.weight' has shape [3, 4], want [4, 3]"},
      {"heads_not_divisible",
       "heads_not_divisible.safetensors'), want a positive divisor of d_out 4 "
       "(the "
       "rows of 'W_query.weight')"},
      {"f64_weight", "has dtype F64, want F32, F16 or BF16"},
      {"missing_out_proj_bias", "'out_proj.bias' is missing"},
      {"partial_qkv_bias", "'W_value.bias' is missing"},
  };
  for (const auto& [name, message] : cases) {
    const fs::path path =
        kGoldenDir / "bad" / (std::string(name) + ".safetensors");
    auto model = MhaModel::Load(path);
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(model.status().message().find(message), std::string::npos)
        << name << ": " << model.status().message();
  }
}

TEST(GoldenTest, OverlongSequenceIsRefused) {
  const fs::path path = kGoldenDir / "bad" / "t_exceeds_context.safetensors";
  auto model = MhaModel::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->config().context_length, 4);
  std::vector<float> x(5 * 3), y(5 * 4);
  const Status st = MhaSession(*model).Run(x.data(), 1, 5, y.data());
  EXPECT_EQ(st.message(), "sequence length 5 exceeds context_length 4");
}

TEST(GoldenTest, ContextLengthFromTheBookMaskBuffer) {
  // mha_t13_hd5_mask carries the book's mask [16, 16] and metadata 16; the
  // option overrides both.
  MhaOptions options;
  options.context_length = 13;
  auto model =
      MhaModel::Load(kGoldenDir / "mha_t13_hd5_mask.safetensors", options);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->config().context_length, 13);
  EXPECT_EQ((*model)->config().d_in, 20);
  EXPECT_EQ((*model)->config().d_out, 10);
  EXPECT_FALSE((*model)->config().qkv_bias);
}

}  // namespace
}  // namespace attn
