// The memory cap (MhaOptions::max_memory_bytes): requests over it are
// refused with kOutOfMemory and a one-line message before anything is
// allocated, for the weights of a model and for a session's buffers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "tests/hostile_files.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

MhaConfig Config(int64_t d_in, int64_t d_out, int64_t heads) {
  MhaConfig c;
  c.d_in = d_in;
  c.d_out = d_out;
  c.num_heads = heads;
  return c;
}

struct Weights {
  std::vector<float> wq, wk, wv, wo, bo;
  MhaWeights view() const {
    MhaWeights w;
    w.w_query = wq.data();
    w.w_key = wk.data();
    w.w_value = wv.data();
    w.w_out = wo.data();
    w.b_out = bo.data();
    return w;
  }
};

Weights MakeWeights(int64_t d_in, int64_t d_out) {
  const auto io = static_cast<size_t>(d_in * d_out);
  const auto oo = static_cast<size_t>(d_out * d_out);
  return {std::vector<float>(io, 0.01f), std::vector<float>(io, 0.02f),
          std::vector<float>(io, 0.03f), std::vector<float>(oo, 0.04f),
          std::vector<float>(static_cast<size_t>(d_out), 0.0f)};
}

void ExpectOverCap(const Status& status, const std::string& what) {
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory) << status.message();
  EXPECT_NE(status.message().find(what), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("over the memory limit"), std::string::npos)
      << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos);
}

TEST(LimitsTest, DefaultIsAFractionOfTheMachine) {
  const uint64_t cap = DefaultMaxMemoryBytes();
  EXPECT_GT(cap, uint64_t{64} << 20);
  EXPECT_LT(cap, uint64_t{1} << 50);
}

TEST(LimitsTest, ModelWeightsOverTheCapAreRefused) {
  const Weights w = MakeWeights(64, 64);  // 4 * 64 * 64 floats = 64 KiB
  MhaOptions options;
  options.max_memory_bytes = 32 << 10;
  auto model = MhaModel::Create(Config(64, 64, 4), w.view(), options);
  ASSERT_FALSE(model.ok());
  ExpectOverCap(model.status(), "the model's weights");
  options.max_memory_bytes = 1 << 20;
  EXPECT_TRUE(MhaModel::Create(Config(64, 64, 4), w.view(), options).ok());
}

TEST(LimitsTest, LoadingOverTheCapIsRefused) {
  test::TempDir dir;
  const std::string path = dir.Write("w.safetensors", test::TinyWeights());
  MhaOptions options;
  // The weights are 96 bytes, read twice; the header's parse, checked
  // first, needs 4 bytes a header byte and 1 KiB a tensor.
  options.max_memory_bytes = 100;
  auto model = MhaModel::Load(path, options);
  ASSERT_FALSE(model.ok());
  ExpectOverCap(model.status(), "parsing the header of '" + path + "'");
  EXPECT_TRUE(MhaModel::Load(path).ok());
  // Weights of 64 KiB under a cap of 32 KiB: the parse (8 KiB) passes.
  std::string header = "{\"__metadata__\":{\"num_heads\":\"2\"},";
  const uint64_t matrix = 64 * 64 * 4;
  const char* const names[] = {"W_query.weight", "W_key.weight",
                               "W_value.weight", "out_proj.weight"};
  for (uint64_t i = 0; i < 4; ++i) {
    header +=
        test::Entry(names[i], "F32", "[64,64]", i * matrix, (i + 1) * matrix) +
        ",";
  }
  header += test::Entry("out_proj.bias", "F32", "[64]", 4 * matrix,
                        4 * matrix + 256) +
            "}";
  const std::string wide = dir.Write(
      "wide.safetensors",
      test::SafetensorsBytes(header, test::Floats(4 * 64 * 64 + 64, 0.5f)));
  options.max_memory_bytes = 32 << 10;
  model = MhaModel::Load(wide, options);
  ASSERT_FALSE(model.ok());
  ExpectOverCap(model.status(), "loading the weights");
}

TEST(LimitsTest, SessionBuffersOverTheCapAreRefused) {
  const Weights w = MakeWeights(16, 16);
  MhaOptions options;
  options.max_memory_bytes = 1 << 20;
  options.num_threads = 1;
  auto model = MhaModel::Create(Config(16, 16, 2), w.view(), options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  MhaSession session(*model);
  // 4 x 1024 rows x 64 floats of activations alone is 1 MiB.
  ExpectOverCap(session.Prepare(4, 1024), "a run of batch 4 x seq_len 1024");
  EXPECT_EQ(session.workspace_bytes(), 0u);
  ASSERT_TRUE(session.Prepare(2, 8).ok());
  std::vector<float> x(2 * 8 * 16, 0.5f), y(2 * 8 * 16);
  EXPECT_TRUE(session.Run(x.data(), 2, 8, y.data()).ok());
}

// Shapes whose byte counts overflow 64 bits are refused, not wrapped.
TEST(LimitsTest, HugeShapesAreRefusedWithoutAllocating) {
  const Weights w = MakeWeights(8, 8);
  auto model = MhaModel::Create(Config(8, 8, 2), w.view());
  ASSERT_TRUE(model.ok()) << model.status().message();
  MhaSession session(*model);
  const Status status = session.Prepare(int64_t{1} << 24, int64_t{1} << 24);
  EXPECT_FALSE(status.ok());
  EXPECT_FALSE(status.message().empty());
  ExpectOverCap(session.Prepare(int64_t{1} << 20, int64_t{1} << 20),
                "a run of batch");
  EXPECT_FALSE(session.Prepare(-1, 4).ok());
  EXPECT_FALSE(session.Prepare(1, int64_t{1} << 40).ok());
}

// Parsing a safetensors header is charged against the cap before its text
// is read, at 4 bytes a header byte (a 1 MiB metadata string needs 4 MiB),
// and before the DOM is built, at 1 KiB more a tensor or metadata key,
// beside what the caller holds; a model's Load passes its own cap down.
TEST(LimitsTest, HeaderParsingIsChargedAgainstTheCap) {
  test::TempDir dir;
  const std::string tensor = test::Entry("x", "F32", "[1]", 0, 4);
  const std::string big = "{\"__metadata__\":{\"note\":\"" +
                          std::string(1 << 20, 'a') + "\"}," + tensor + "}";
  const std::string path =
      dir.Write("big.safetensors", test::SafetensorsBytes(big, test::Zeros(4)));
  const std::string len = std::to_string(big.size());
  Result<SafetensorsFile> file = SafetensorsFile::Open(path, 4 << 20);
  ASSERT_FALSE(file.ok());
  ExpectOverCap(file.status(),
                "parsing the header of '" + path + "' (" + len + " bytes)");
  EXPECT_NE(file.status().message().find("needs 4.00 MiB"), std::string::npos)
      << file.status().message();
  ASSERT_TRUE(SafetensorsFile::Open(path, 5 << 20).ok());
  ExpectOverCap(SafetensorsFile::Open(path, 5 << 20, 1 << 20).status(),
                "beside 1.00 MiB held");
  // 2000 metadata keys: 2000 KiB more than their 20 KB of text.
  std::string keys = "{\"__metadata__\":{";
  for (int i = 0; i < 2000; ++i) {
    keys += (i ? ",\"" : "\"") + std::to_string(10000 + i) + "\":\"\"";
  }
  keys += "}," + tensor + "}";
  const std::string many = dir.Write(
      "keys.safetensors", test::SafetensorsBytes(keys, test::Zeros(4)));
  file = SafetensorsFile::Open(many, 2 << 20);
  ASSERT_FALSE(file.ok());
  ExpectOverCap(file.status(), "2001 tensors and metadata keys");
  EXPECT_TRUE(SafetensorsFile::Open(many, 3 << 20).ok());
  // A model's Load parses under its own cap.
  MhaOptions options;
  options.max_memory_bytes = 4 << 20;
  ExpectOverCap(MhaModel::Load(path, options).status(),
                "parsing the header of '" + path + "'");
}

// attn_tensor_read_f32 checks capacity before it reads or allocates: a
// 256 GiB tensor (a sparse file) is refused for a 4-float buffer at once,
// where a copy first would run out of memory.
TEST(LimitsTest, TensorReadChecksCapacityBeforeAllocating) {
  test::TempDir dir;
  const uint64_t bytes = uint64_t{1} << 38;
  const std::string header =
      "{" + test::Entry("x", "F32", "[68719476736]", 0, bytes) + "}";
  const std::string path =
      dir.Write("huge.safetensors", test::SafetensorsBytes(header, ""));
  if (truncate(path.c_str(), static_cast<off_t>(8 + header.size() + bytes))) {
    GTEST_SKIP() << "no sparse 256 GiB file here";
  }
  float x[4] = {};
  int64_t shape[ATTN_MAX_RANK];
  int rank = 0;
  EXPECT_EQ(attn_tensor_read_f32(path.c_str(), "x", x, 4, shape, &rank),
            ATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attn_last_error_message())
                .find("has 68719476736 elements, but capacity is 4"),
            std::string::npos)
      << attn_last_error_message();
  EXPECT_EQ(attn_tensor_read_f32(path.c_str(), "x", nullptr, 0, shape, &rank),
            ATTN_OK);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(shape[0], int64_t{1} << 36);
}

}  // namespace
}  // namespace attn
