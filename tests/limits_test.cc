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
  options.max_memory_bytes = 100;  // the weights are 96 bytes, read twice
  auto model = MhaModel::Load(path, options);
  ASSERT_FALSE(model.ok());
  ExpectOverCap(model.status(), "loading the weights");
  EXPECT_TRUE(MhaModel::Load(path).ok());
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
