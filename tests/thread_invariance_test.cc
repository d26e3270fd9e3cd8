// The promise that every result is bitwise identical at any thread count:
// the MHA, the KV-cache decoder (prompts and steps) and the graph runner at
// 1, 2, 3 and 7 threads, on odd shapes whose matmuls span several tiles and
// tails. ctest runs it natively and again as on an AVX2-only CPU.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "tests/avx2_only.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace attn {
namespace {

constexpr int kThreadCounts[] = {1, 2, 3, 7};
constexpr int64_t kSeqLens[] = {1, 7, 63, 64, 65, 100, 129, 200};
// Widths whose projections (B = 2) take narrow column tiles at T <= 63,
// 256-column tiles at T = 64 to 100 and several full-width row tiles from
// T = 129; steps of the decoder take kernels::RowsLinear.
constexpr int64_t kBatch = 2, kDIn = 96, kDOut = 320, kHeads = 5;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Random weights for the MHA, owned here; `variant`: one K/V head, RoPE and
// a window of 40 keys.
struct Weights {
  std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;
  bool variant;
  explicit Weights(uint32_t seed, bool variant_model = false)
      : variant(variant_model) {
    const int64_t kv = variant ? kDOut / kHeads : kDOut;
    std::mt19937 rng(seed);
    const auto square = [&](int64_t rows, int64_t cols) {
      return test::RandomVector(rng, static_cast<size_t>(rows * cols), -0.2f,
                                0.2f);
    };
    wq = square(kDOut, kDIn);
    wk = square(kv, kDIn);
    wv = square(kv, kDIn);
    bq = square(1, kDOut);
    bk = square(1, kv);
    bv = square(1, kv);
    wo = square(kDOut, kDOut);
    bo = square(1, kDOut);
  }
  std::shared_ptr<const MhaModel> Model(int threads) const {
    MhaConfig config;
    config.d_in = kDIn;
    config.d_out = kDOut;
    config.num_heads = kHeads;
    config.qkv_bias = true;
    if (variant) {
      config.num_kv_heads = 1;
      config.rope.theta = 10000.0;
      config.sliding_window = 40;
    }
    MhaWeights w{wq.data(), wk.data(), wv.data(), bq.data(),
                 bk.data(), bv.data(), wo.data(), bo.data()};
    MhaOptions options;
    options.num_threads = threads;
    auto model = MhaModel::Create(config, w, options);
    EXPECT_TRUE(model.ok()) << model.status().message();
    return model.ok() ? *model : nullptr;
  }
};

std::vector<float> Input(int64_t rows, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  return test::RandomVector(rng, static_cast<size_t>(rows * width), -1.0f,
                            1.0f);
}

std::vector<float> RunMha(const Weights& w, int threads, int64_t T) {
  const auto model = w.Model(threads);
  if (!model) return {};
  const auto x = Input(kBatch * T, kDIn, 11);
  std::vector<float> y(static_cast<size_t>(kBatch * T * kDOut));
  MhaSession session(model);
  const Status st = session.Run(x.data(), kBatch, T, y.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

// Ragged prompts (T and T/2 + 1 tokens) in one call, a second prompt of T
// tokens for both, then three decode steps; every output, concatenated.
std::vector<float> RunDecoder(const Weights& w, int threads, int64_t T) {
  const auto model = w.Model(threads);
  if (!model) return {};
  DecoderOptions options;
  options.batch = kBatch;
  options.max_length = 2 * T + 8;
  auto decoder = MhaDecoder::Create(model, options);
  EXPECT_TRUE(decoder.ok()) << decoder.status().message();
  if (!decoder.ok()) return {};
  std::vector<float> all;
  const auto step = [&](const std::vector<float>& x, int64_t rows,
                        const auto& call) {
    std::vector<float> y(static_cast<size_t>(rows * kDOut));
    const Status st = call(x.data(), y.data());
    EXPECT_TRUE(st.ok()) << st.message();
    all.insert(all.end(), y.begin(), y.end());
  };
  const int64_t counts[] = {T, T / 2 + 1};
  step(Input(counts[0] + counts[1], kDIn, 21), counts[0] + counts[1],
       [&](const float* x, float* y) {
         return (*decoder)->Prefill(x, counts, y);
       });
  step(Input(kBatch * T, kDIn, 22), kBatch * T,
       [&](const float* x, float* y) { return (*decoder)->Prefill(x, T, y); });
  for (uint32_t s = 0; s < 3; ++s) {
    step(Input(kBatch, kDIn, 30 + s), kBatch, [&](const float* x, float* y) {
      return (*decoder)->Decode(x, kBatch, y);
    });
  }
  return all;
}

// Two layers of the book's TransformerBlock (tools/graphs/
// transformer_block.json, names prefixed "trf_blocks.{i}.") with random
// weights of width kDOut, written once per test binary.
class BlockFile {
 public:
  BlockFile() {
    std::mt19937 rng(5);
    const int64_t e = kDOut, hidden = 4 * kDOut;
    const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
        {"att.W_query.weight", {e, e}},
        {"att.W_key.weight", {e, e}},
        {"att.W_value.weight", {e, e}},
        {"att.out_proj.weight", {e, e}},
        {"att.out_proj.bias", {e}},
        {"ff.layers.0.weight", {hidden, e}},
        {"ff.layers.0.bias", {hidden}},
        {"ff.layers.2.weight", {e, hidden}},
        {"ff.layers.2.bias", {e}},
        {"norm1.scale", {e}},
        {"norm1.shift", {e}},
        {"norm2.scale", {e}},
        {"norm2.shift", {e}}};
    std::vector<F32Tensor> tensors;
    for (int layer = 0; layer < kLayers; ++layer) {
      for (const auto& [name, shape] : shapes) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        data_.push_back(
            test::RandomVector(rng, static_cast<size_t>(n), -0.1f, 0.1f));
        tensors.push_back({"trf_blocks." + std::to_string(layer) + "." + name,
                           shape, data_.back().data()});
      }
    }
    path_ = dir_.Path("block.safetensors");
    const Status st = WriteSafetensors(path_, tensors,
                                       {{"num_heads", std::to_string(kHeads)},
                                        {"n_layers", std::to_string(kLayers)}});
    EXPECT_TRUE(st.ok()) << st.message();
  }
  const std::string& path() const { return path_; }
  static constexpr int kLayers = 2;

 private:
  test::TempDir dir_;
  std::string path_;
  std::vector<std::vector<float>> data_;
};

std::vector<float> RunGraph(const BlockFile& file, int threads, int64_t T) {
  GraphOptions options;
  options.num_threads = threads;
  auto graph = GraphModel::Load(
      std::string(ATTN_SOURCE_DIR) + "/tools/graphs/transformer_block.json",
      file.path(), options);
  EXPECT_TRUE(graph.ok()) << graph.status().message();
  if (!graph.ok()) return {};
  const auto x = Input(kBatch * T, kDOut, 41);
  std::vector<float> y(x.size());
  const Status st = GraphSession(*graph).Run(x.data(), kBatch, T, y.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

// `run(threads)` gives the same bits at every count of kThreadCounts.
void ExpectSameBitsAtEveryThreadCount(
    const std::function<std::vector<float>(int)>& run) {
  const auto one = run(1);
  ASSERT_FALSE(one.empty());
  for (int threads : kThreadCounts) {
    EXPECT_TRUE(SameBits(one, run(threads)))
        << threads << " threads differ from 1";
  }
}

class ThreadInvarianceTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ThreadInvarianceTest, Mha) {
  const Weights w(1);
  ExpectSameBitsAtEveryThreadCount(
      [&](int threads) { return RunMha(w, threads, GetParam()); });
}

TEST_P(ThreadInvarianceTest, Decoder) {
  const Weights w(2);
  ExpectSameBitsAtEveryThreadCount(
      [&](int threads) { return RunDecoder(w, threads, GetParam()); });
}

TEST_P(ThreadInvarianceTest, MhaGroupedRotatedWindowed) {
  const Weights w(3, true);
  ExpectSameBitsAtEveryThreadCount(
      [&](int threads) { return RunMha(w, threads, GetParam()); });
}

TEST_P(ThreadInvarianceTest, DecoderGroupedRotatedWindowed) {
  const Weights w(4, true);
  ExpectSameBitsAtEveryThreadCount(
      [&](int threads) { return RunDecoder(w, threads, GetParam()); });
}

TEST_P(ThreadInvarianceTest, Graph) {
  static const BlockFile file;
  ExpectSameBitsAtEveryThreadCount(
      [&](int threads) { return RunGraph(file, threads, GetParam()); });
}

INSTANTIATE_TEST_SUITE_P(SeqLens, ThreadInvarianceTest,
                         ::testing::ValuesIn(kSeqLens), [](const auto& info) {
                           return "T" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace attn
