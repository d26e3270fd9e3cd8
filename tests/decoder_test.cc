// The KV-cache decoder (attn/decode.hpp) against the full causal forward:
// token by token, prompt then tokens, mixed-length batches, truncation; its
// errors; bitwise identity across thread counts; and `attn run
// --incremental` on PyTorch's golden files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

struct Shape {
  int64_t d_in, d_out, heads;
  bool qkv_bias;
  int64_t context;  // 0: none
};

// The attention of current models (MhaConfig): plain when all zero.
struct Variant {
  int64_t kv_heads = 0;  // 0: one per query head
  RopeConfig rope;
  int64_t window = 0;
};

// Seeded random weights (nn.Linear's range), kept alive for the model.
struct Weights {
  std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;
  Shape shape;
  Variant variant;

  Weights(const Shape& s, uint32_t seed, const Variant& v = {})
      : shape(s), variant(v) {
    std::mt19937 rng(seed);
    const auto in = static_cast<size_t>(s.d_in);
    const auto out = static_cast<size_t>(s.d_out);
    const auto kv = v.kv_heads ? out / s.heads * v.kv_heads : out;
    const float a = 1.0f / std::sqrt(float(s.d_in));
    const float b = 1.0f / std::sqrt(float(s.d_out));
    wq = test::RandomVector(rng, out * in, -a, a);
    wk = test::RandomVector(rng, kv * in, -a, a);
    wv = test::RandomVector(rng, kv * in, -a, a);
    if (s.qkv_bias) {
      bq = test::RandomVector(rng, out, -a, a);
      bk = test::RandomVector(rng, kv, -a, a);
      bv = test::RandomVector(rng, kv, -a, a);
    }
    wo = test::RandomVector(rng, out * out, -b, b);
    bo = test::RandomVector(rng, out, -b, b);
  }

  // The weights as MhaModel::Create takes them.
  MhaWeights View() const {
    MhaWeights w;
    w.w_query = wq.data();
    w.w_key = wk.data();
    w.w_value = wv.data();
    if (shape.qkv_bias) {
      w.b_query = bq.data();
      w.b_key = bk.data();
      w.b_value = bv.data();
    }
    w.w_out = wo.data();
    w.b_out = bo.data();
    return w;
  }

  MhaConfig Config() const {
    MhaConfig config;
    config.d_in = shape.d_in;
    config.d_out = shape.d_out;
    config.num_heads = shape.heads;
    config.context_length = shape.context;
    config.qkv_bias = shape.qkv_bias;
    config.num_kv_heads = variant.kv_heads;
    config.rope = variant.rope;
    config.sliding_window = variant.window;
    return config;
  }

  std::shared_ptr<const MhaModel> Model(int threads = 0,
                                        uint64_t max_memory = 0,
                                        DType step_weights = DType::kF32,
                                        bool decode = true) const {
    const MhaConfig config = Config();
    const MhaWeights w = View();
    MhaOptions options;
    options.num_threads = threads;
    options.max_memory_bytes = max_memory;
    options.step_weights = step_weights;
    options.decode = decode;
    auto model = MhaModel::Create(config, w, options);
    EXPECT_TRUE(model.ok()) << model.status().message();
    return model.ok() ? *model : nullptr;
  }

  // The double reference over x [batch, T, d_in].
  std::vector<double> Reference(const std::vector<float>& x, int64_t batch,
                                int64_t T) const {
    reference::MhaWeights w;
    w.w_query = wq.data();
    w.w_key = wk.data();
    w.w_value = wv.data();
    if (shape.qkv_bias) {
      w.b_query = bq.data();
      w.b_key = bk.data();
      w.b_value = bv.data();
    }
    w.w_out = wo.data();
    w.b_out = bo.data();
    return reference::MhaForward(x.data(), batch, T, shape.d_in, shape.d_out,
                                 shape.heads, w);
  }
};

std::unique_ptr<MhaDecoder> MakeDecoder(std::shared_ptr<const MhaModel> model,
                                        int64_t batch, int64_t max_length) {
  DecoderOptions options;
  options.batch = batch;
  options.max_length = max_length;
  auto decoder = MhaDecoder::Create(std::move(model), options);
  EXPECT_TRUE(decoder.ok()) << decoder.status().message();
  return decoder.ok() ? std::move(decoder).value() : nullptr;
}

// Runs x [B, T, d_in] through the decoder: the first `prompt` tokens of every
// sequence in one Prefill, then one Decode per further token. Returns
// [B, T, d_out].
std::vector<float> Incremental(MhaDecoder& decoder, const std::vector<float>& x,
                               int64_t B, int64_t T, int64_t d_in,
                               int64_t d_out, int64_t prompt) {
  std::vector<float> y(static_cast<size_t>(B * T * d_out));
  const auto in = static_cast<size_t>(d_in), out = static_cast<size_t>(d_out);
  std::vector<float> xs(static_cast<size_t>(B * prompt) * in),
      ys(static_cast<size_t>(B * prompt) * out);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(&x[static_cast<size_t>(b * T) * in],
                static_cast<size_t>(prompt) * in,
                &xs[static_cast<size_t>(b * prompt) * in]);
  }
  Status st = decoder.Prefill(xs.data(), prompt, ys.data());
  EXPECT_TRUE(st.ok()) << st.message();
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(&ys[static_cast<size_t>(b * prompt) * out],
                static_cast<size_t>(prompt) * out,
                &y[static_cast<size_t>(b * T) * out]);
  }
  std::vector<float> x1(static_cast<size_t>(B) * in),
      y1(static_cast<size_t>(B) * out);
  for (int64_t t = prompt; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(&x[static_cast<size_t>(b * T + t) * in], in,
                  &x1[static_cast<size_t>(b) * in]);
    }
    st = decoder.Decode(x1.data(), B, y1.data());
    EXPECT_TRUE(st.ok()) << st.message();
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(&y1[static_cast<size_t>(b) * out], out,
                  &y[static_cast<size_t>(b * T + t) * out]);
    }
  }
  return y;
}

// One random sequence [lengths[i], d_in] per length.
std::vector<std::vector<float>> RandomSequences(
    std::mt19937& rng, const std::vector<int64_t>& lengths, int64_t d_in) {
  std::vector<std::vector<float>> seqs;
  for (int64_t n : lengths) {
    seqs.push_back(
        test::RandomVector(rng, static_cast<size_t>(n * d_in), -1.0f, 1.0f));
  }
  return seqs;
}

// The engine's full forward of `x` [batch, T, d_in], as doubles.
std::vector<double> FullForward(std::shared_ptr<const MhaModel> model,
                                const std::vector<float>& x, int64_t batch,
                                int64_t T) {
  std::vector<float> y(static_cast<size_t>(batch * T * model->config().d_out));
  const Status st = MhaSession(model).Run(x.data(), batch, T, y.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return {y.begin(), y.end()};
}

// One Prefill of every sequence's first prompts[b] rows of seqs[b] ([len,
// d_in] each), then `steps` Decodes of one row each: every sequence's
// outputs, in order.
std::vector<std::vector<float>> RaggedPrefillThenDecode(
    MhaDecoder& decoder, const std::vector<std::vector<float>>& seqs,
    const std::vector<int64_t>& prompts, int64_t steps, int64_t d_in,
    int64_t d_out) {
  const auto B = static_cast<int64_t>(seqs.size());
  std::vector<float> packed;
  for (int64_t b = 0; b < B; ++b) {
    packed.insert(packed.end(), seqs[b].begin(),
                  seqs[b].begin() + prompts[b] * d_in);
  }
  std::vector<float> out(packed.size() / d_in * d_out);
  const Status st = decoder.Prefill(packed.data(), prompts.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> ys(B);
  size_t row = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < prompts[b]; ++t, ++row) {
      ys[b].insert(ys[b].end(), out.begin() + row * d_out,
                   out.begin() + (row + 1) * d_out);
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<float> x1, y1(B * d_out);
    for (int64_t b = 0; b < B; ++b) {
      const auto at = seqs[b].begin() + (prompts[b] + s) * d_in;
      x1.insert(x1.end(), at, at + d_in);
    }
    const Status step = decoder.Decode(x1.data(), B, y1.data());
    EXPECT_TRUE(step.ok()) << step.message();
    for (int64_t b = 0; b < B; ++b) {
      ys[b].insert(ys[b].end(), y1.begin() + b * d_out,
                   y1.begin() + (b + 1) * d_out);
    }
  }
  return ys;
}

void ExpectMatches(const std::vector<double>& expected,
                   const std::vector<float>& actual, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  test::ExpectAllClose(expected, actual.data(),
                       1e-5 * std::max(1.0, test::MaxAbs(expected)), what);
}

TEST(DecoderTest, TokenByTokenMatchesFullForward) {
  struct Case {
    Shape shape;
    int64_t B, T, prompt;
  };
  const Case cases[] = {
      {{3, 2, 2, false, 6}, 2, 6, 1},          // the book's example shape
      {{4, 4, 1, false, 0}, 1, 1, 1},          // T = 1
      {{7, 6, 2, true, 0}, 3, 9, 1},           // qkv bias, head_dim 3
      {{5, 10, 2, false, 0}, 2, 13, 4},        // prompt, then tokens
      {{16, 32, 4, true, 40}, 2, 40, 1},       // T = context_length
      {{8, 16, 1, false, 0}, 1, 300, 1},       // crosses the 256-key chunk
      {{12, 48, 3, false, 600}, 1, 530, 200},  // head_dim 16, 3 chunks
      {{6, 160, 2, false, 0}, 2, 20, 1},       // head_dim 80
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE("d_in " + std::to_string(c.shape.d_in) + " d_out " +
                 std::to_string(c.shape.d_out) + " B " + std::to_string(c.B) +
                 " T " + std::to_string(c.T));
    const Weights w(c.shape, seed++);
    auto model = w.Model();
    ASSERT_TRUE(model);
    auto decoder = MakeDecoder(model, c.B, c.shape.context ? 0 : c.T);
    ASSERT_TRUE(decoder);
    std::mt19937 rng(seed++);
    const auto x = test::RandomVector(
        rng, static_cast<size_t>(c.B * c.T * c.shape.d_in), -1.0f, 1.0f);
    const auto y = Incremental(*decoder, x, c.B, c.T, c.shape.d_in,
                               c.shape.d_out, c.prompt);
    ExpectMatches(w.Reference(x, c.B, c.T), y, "vs reference");
    EXPECT_EQ(decoder->length(0), c.T);
    // And against the engine's own full forward.
    ExpectMatches(FullForward(model, x, c.B, c.T), y, "vs MhaSession");
  }
}

TEST(DecoderTest, MixedLengthBatchEqualsEachSequenceAlone) {
  const Shape shape{10, 24, 3, true, 0};
  const Weights w(shape, 42);
  auto model = w.Model();
  ASSERT_TRUE(model);
  // Three sequences: prompts of 5, 1 and 270 tokens, then 4 decode steps.
  const std::vector<int64_t> prompts = {5, 1, 270};
  const int64_t steps = 4, B = 3, d_in = 10, d_out = 24;
  auto decoder = MakeDecoder(model, B, 300);
  ASSERT_TRUE(decoder);
  std::mt19937 rng(3);
  // Each [prompt + steps, d_in].
  const auto seqs = RandomSequences(
      rng, {prompts[0] + steps, prompts[1] + steps, prompts[2] + steps}, d_in);
  const auto ys =
      RaggedPrefillThenDecode(*decoder, seqs, prompts, steps, d_in, d_out);
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    EXPECT_EQ(decoder->length(b), prompts[b] + steps);
    ExpectMatches(w.Reference(seqs[b], 1, prompts[b] + steps), ys[b],
                  "mixed batch vs alone");
  }
  // A sequence may also sit out a Prefill (count 0) and grow later.
  const std::vector<int64_t> only_middle = {0, 2, 0};
  std::vector<float> x2(2 * d_in, 0.5f), y2(2 * d_out);
  ASSERT_TRUE(decoder->Prefill(x2.data(), only_middle.data(), y2.data()).ok());
  EXPECT_EQ(decoder->length(0), prompts[0] + steps);
  EXPECT_EQ(decoder->length(1), prompts[1] + steps + 2);
}

TEST(DecoderTest, TruncateThenRedecodeRepeatsTheOutputs) {
  const Shape shape{8, 16, 2, false, 64};
  const Weights w(shape, 5);
  auto model = w.Model();
  auto decoder = MakeDecoder(model, 2, 0);
  ASSERT_TRUE(decoder);
  EXPECT_EQ(decoder->max_length(), 64);
  std::mt19937 rng(8);
  const auto x = test::RandomVector(rng, 2 * 20 * 8, -1.0f, 1.0f);
  const auto first = Incremental(*decoder, x, 2, 20, 8, 16, 1);
  // Rewind both sequences to their first token and decode the rest again.
  ASSERT_TRUE(decoder->Truncate(0, 1).ok());
  ASSERT_TRUE(decoder->Truncate(1, 1).ok());
  std::vector<float> x1(2 * 8), y1(2 * 16);
  for (int64_t t = 1; t < 20; ++t) {
    for (int64_t b = 0; b < 2; ++b) {
      std::copy_n(&x[(b * 20 + t) * 8], 8, &x1[b * 8]);
    }
    ASSERT_TRUE(decoder->Decode(x1.data(), 2, y1.data()).ok());
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_EQ(0, std::memcmp(&y1[b * 16], &first[(b * 20 + t) * 16],
                               16 * sizeof(float)))
          << "b " << b << " t " << t;
    }
  }
  // Reset, then the same tokens again from scratch.
  decoder->Reset();
  EXPECT_EQ(decoder->length(0), 0);
  EXPECT_EQ(Incremental(*decoder, x, 2, 20, 8, 16, 1), first);
}

// A prompt of a new length replaces the decoder's prompt operator, which
// takes over the last one's packed weights where its tiles lay them out
// alike (from 128 rows on) and packs its own otherwise: either way its
// output has the bits of a fresh decoder's.
TEST(DecoderTest, PromptsOfNewLengthsEqualAFreshDecoders) {
  const Shape shape{256, 256, 4, true, 512};
  const Weights w(shape, 9);
  auto model = w.Model(1);
  auto decoder = MakeDecoder(model, 1, 0);
  ASSERT_TRUE(decoder);
  std::mt19937 rng(10);
  for (const int64_t T : {130, 200, 131, 60, 150}) {
    SCOPED_TRACE(T);
    const auto x = test::RandomVector(rng, size_t(T * 256), -1.0f, 1.0f);
    std::vector<float> y(x.size()), fresh_y(x.size());
    decoder->Reset();
    ASSERT_TRUE(decoder->Prefill(x.data(), T, y.data()).ok());
    auto fresh = MakeDecoder(model, 1, 0);
    ASSERT_TRUE(fresh);
    ASSERT_TRUE(fresh->Prefill(x.data(), T, fresh_y.data()).ok());
    EXPECT_EQ(y, fresh_y);
  }
}

// Steps of more than 8 rows run a matmul, whose op is remade whenever the
// number of sequences stepped changes and takes over the last one's packed
// weights: every sequence's outputs still match the reference over its
// tokens.
TEST(DecoderTest, StepsOfChangingRowCountsMatchTheReference) {
  const Shape shape{64, 64, 4, true, 0};
  const Weights w(shape, 11);
  constexpr int64_t kB = 12, kSteps = 6;
  auto decoder = MakeDecoder(w.Model(2), kB, kSteps);
  ASSERT_TRUE(decoder);
  // Sequences stepped at each step: the first `rows[t]` of them.
  const int64_t rows[kSteps] = {12, 9, 11, 9, 10, 12};
  std::mt19937 rng(12);
  std::vector<std::vector<float>> xs(kB), ys(kB);
  for (const int64_t R : rows) {
    std::vector<int64_t> counts(kB, 0);
    std::fill_n(counts.begin(), R, 1);
    const auto x = test::RandomVector(rng, size_t(R * 64), -1.0f, 1.0f);
    std::vector<float> y(x.size());
    ASSERT_TRUE(decoder->Prefill(x.data(), counts.data(), y.data()).ok());
    for (int64_t b = 0; b < R; ++b) {
      xs[b].insert(xs[b].end(), &x[b * 64], &x[(b + 1) * 64]);
      ys[b].insert(ys[b].end(), &y[b * 64], &y[(b + 1) * 64]);
    }
  }
  for (int64_t b = 0; b < kB; ++b) {
    SCOPED_TRACE(b);
    const auto T = static_cast<int64_t>(xs[b].size()) / 64;
    ExpectMatches(w.Reference(xs[b], 1, T), ys[b], "sequence vs reference");
  }
}

TEST(DecoderTest, Errors) {
  const Shape shape{4, 8, 2, false, 5};
  const Weights w(shape, 9);
  auto model = w.Model();
  ASSERT_TRUE(model);
  auto decoder = MakeDecoder(model, 2, 0);
  ASSERT_TRUE(decoder);
  std::vector<float> x(2 * 5 * 4, 0.25f), y(2 * 5 * 8);

  // Decode before any prompt (and after Reset): the sequences are empty.
  Status st = decoder->Decode(x.data(), 2, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("empty"), std::string::npos) << st.message();

  // Mismatched batch.
  ASSERT_TRUE(decoder->Prefill(x.data(), 4, y.data()).ok());
  st = decoder->Decode(x.data(), 3, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("batch is 3"), std::string::npos) << st.message();

  // Decode past context_length (5): the fifth token fits, the sixth not,
  // and a refused step changes nothing.
  ASSERT_TRUE(decoder->Decode(x.data(), 2, y.data()).ok());
  st = decoder->Decode(x.data(), 2, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("exceed max_length 5"), std::string::npos)
      << st.message();
  EXPECT_EQ(decoder->length(0), 5);
  EXPECT_EQ(decoder->length(1), 5);
  const std::vector<int64_t> counts = {0, 1};
  EXPECT_FALSE(decoder->Prefill(x.data(), counts.data(), y.data()).ok());
  const std::vector<int64_t> negative = {-1, 0};
  EXPECT_FALSE(decoder->Prefill(x.data(), negative.data(), y.data()).ok());

  // Use after Reset: empty again.
  decoder->Reset();
  st = decoder->Decode(x.data(), 2, y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(decoder->Prefill(x.data(), 1, y.data()).ok());
  ASSERT_TRUE(decoder->Reset(1).ok());
  EXPECT_FALSE(decoder->Decode(x.data(), 2, y.data()).ok());

  // Truncate and Reset arguments.
  EXPECT_FALSE(decoder->Truncate(0, 2).ok());  // holds 1
  EXPECT_FALSE(decoder->Truncate(2, 0).ok());  // no sequence 2
  EXPECT_FALSE(decoder->Reset(-1).ok());
  EXPECT_EQ(decoder->length(7), -1);
  EXPECT_FALSE(decoder->Decode(nullptr, 2, y.data()).ok());

  // Creation: max_length past context_length; no length at all; bad batch.
  DecoderOptions options;
  options.max_length = 6;
  auto too_long = MhaDecoder::Create(model, options);
  EXPECT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("context_length 5"),
            std::string::npos);
  const Weights unbounded(Shape{4, 8, 2, false, 0}, 10);
  auto no_length = MhaDecoder::Create(unbounded.Model(), DecoderOptions{});
  EXPECT_FALSE(no_length.ok());
  options.max_length = 0;
  options.batch = 0;
  EXPECT_FALSE(MhaDecoder::Create(model, options).ok());
  EXPECT_FALSE(MhaDecoder::Create(nullptr, DecoderOptions{}).ok());

  // A cache over the memory cap is refused before anything is allocated.
  auto capped = unbounded.Model(0, uint64_t{1} << 20);
  ASSERT_TRUE(capped);
  options.batch = 4;
  options.max_length = int64_t{1} << 20;
  auto too_big = MhaDecoder::Create(capped, options);
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(too_big.status().message().find("memory limit"), std::string::npos)
      << too_big.status().message();
}

// A refusal is one line holding `needle`.
void ExpectOneLineWith(const std::string& message, const std::string& needle) {
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// A model made for decoding holds, from load, the projections as decoders
// read them: their panels (bf16 steps: half the bytes) and a packed copy of
// the fused projection in the model's dtype (out_proj's is the one sessions
// read too). memory_bytes counts them and stays put while decoders come and go;
// a cap they do not fit under refuses the model in one line, and a model made
// without them refuses decoders.
TEST(DecoderTest, DecodeLayoutsAreHeldFromLoadCountedAndCapped) {
  const Weights w(Shape{256, 256, 4, false, 16}, 12);
  DecoderOptions options;
  options.batch = 1;
  // [W_query; W_key; W_value] 768 x 256 and out_proj 256 x 256, in panels
  // of 32 columns: 262144 weights, 4 or 2 bytes each.
  constexpr uint64_t kPanelWeights = 262144;
  constexpr uint64_t kQkvWeights = 768 * 256;
  auto sessions_only = w.Model(0, 0, DType::kF32, /*decode=*/false);
  ASSERT_TRUE(sessions_only);
  for (const DType type : {DType::kF32, DType::kBF16}) {
    auto model = w.Model(0, 0, type);
    ASSERT_TRUE(model);
    const uint64_t held = model->memory_bytes();
    EXPECT_GE(held - sessions_only->memory_bytes(),
              kPanelWeights * (type == DType::kBF16 ? 2 : 4) + 4 * kQkvWeights);
    auto first = MhaDecoder::Create(model, options);
    auto second = MhaDecoder::Create(model, options);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(model->memory_bytes(), held);
    first->reset();
    second->reset();
    EXPECT_EQ(model->memory_bytes(), held);
  }

  auto refused = MhaDecoder::Create(sessions_only, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  ExpectOneLineWith(refused.status().message(), "MhaOptions::decode");

  MhaConfig config;
  config.d_in = config.d_out = 256;
  config.num_heads = 4;
  MhaOptions capped;
  capped.max_memory_bytes = sessions_only->memory_bytes();
  const Result<std::shared_ptr<const MhaModel>> too_big =
      MhaModel::Create(config, w.View(), capped);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
  ExpectOneLineWith(too_big.status().message(),
                    "the model's packed and decode weights");
}

// The bytes a Decode step reads: every held key and the new one, or with a
// sliding window its last `window` keys (K/V heads of 8 dims: 2 x 8 x 4
// bytes a key and head).
TEST(DecoderTest, DecodeKvBytesCountTheKeysAStepReads) {
  const Shape shape{16, 32, 4, false, 0};
  Variant windowed;
  windowed.kv_heads = 2;
  windowed.window = 8;
  for (const Variant& v : {Variant{}, windowed}) {
    SCOPED_TRACE(v.window ? "window 8" : "no window");
    const Weights w(shape, 5, v);
    auto decoder = MakeDecoder(w.Model(1), 2, 64);
    ASSERT_TRUE(decoder);
    const int64_t counts[2] = {20, 3};
    std::mt19937 rng(6);
    const auto x = test::RandomVector(rng, 23 * 16, -1.0f, 1.0f);
    std::vector<float> y(23 * 32);
    ASSERT_TRUE(decoder->Prefill(x.data(), counts, y.data()).ok());
    const size_t kv_heads = v.kv_heads ? 2 : 4;
    const size_t keys = v.window ? 8 + 4 : 21 + 4;
    EXPECT_EQ(decoder->decode_kv_bytes(), 2 * keys * kv_heads * 8 * 4);
  }
}

// Plain, and with one K/V head of 8, RoPE and a window of 300 keys.
TEST(DecoderTest, BitwiseIdenticalAtOneAndTwoThreads) {
  const Shape shape{32, 64, 8, true, 0};
  Variant variant;
  variant.kv_heads = 1;
  variant.rope.theta = 10000.0;
  variant.window = 300;
  for (const Variant& v : {Variant{}, variant}) {
    SCOPED_TRACE(v.kv_heads ? "variant" : "plain");
    const Weights w(shape, 77, v);
    std::mt19937 rng(4);
    // B x heads < 2 threads x chunks: the keys are split across threads.
    const int64_t B = 1, T = 600;
    const auto x = test::RandomVector(rng, B * T * 32, -1.0f, 1.0f);
    std::vector<float> results[2];
    for (int threads : {1, 2}) {
      auto decoder = MakeDecoder(w.Model(threads), B, T);
      ASSERT_TRUE(decoder);
      results[threads - 1] = Incremental(*decoder, x, B, T, 32, 64, 100);
    }
    EXPECT_EQ(results[0], results[1]) << "1 and 2 threads differ";
  }
}

// bf16 to nearest, ties to even, as oneDNN rounds (finite values only).
float RoundToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The bf16 tests' attention: grouped K/V heads with RoPE, d_in 32, d_out 64.
Weights RopeGqaWeights(uint32_t seed) {
  Variant variant;
  variant.kv_heads = 2;
  variant.rope.theta = 10000.0;
  return Weights(Shape{32, 64, 8, true, 0}, seed, variant);
}

// w with its projections' weights rounded to bf16.
Weights RoundedToBf16(Weights w) {
  for (auto* m : {&w.wq, &w.wk, &w.wv, &w.wo}) {
    for (float& v : *m) v = RoundToBf16(v);
  }
  return w;
}

// step_weights bf16: prompts and steps (1 to 8 rows, through the bf16
// kernel) give the bits of an fp32 model of the weights rounded to bf16.
TEST(DecoderTest, Bf16StepWeightsAreTheRoundedWeights) {
  const Weights w = RopeGqaWeights(91), rounded = RoundedToBf16(w);
  std::mt19937 rng(5);
  const int64_t B = 8, T = 12;
  const auto x = test::RandomVector(rng, B * T * 32, -1.0f, 1.0f);
  auto bf16 = MakeDecoder(w.Model(2, 0, DType::kBF16), B, T);
  auto f32 = MakeDecoder(rounded.Model(2), B, T);
  ASSERT_TRUE(bf16 && f32);
  EXPECT_EQ(Incremental(*bf16, x, B, T, 32, 64, 3),
            Incremental(*f32, x, B, T, 32, 64, 3));
}

// dtype bf16 with sessions false: a decoder's prompts, short (the steps'
// path, past the panels' 8 rows) and of 64 tokens or more (the prompt
// core), project q, k, v and out as bf16 matmuls on activations rounded to
// bf16 (unlike the fp32 projections of the rounded weights above), even
// with RoPE, which turns fp32 rows; the same bits at 1 and 2 threads.
// Sessions would rotate bf16 planes: a model for them, or without decoders,
// is refused, and so is an MhaSession on the decoders' model.
TEST(DecoderTest, Bf16PromptsProjectInBf16) {
  if (!GetRuntimeInfo().native_bf16) GTEST_SKIP() << "no native bf16";
  const Weights w = RopeGqaWeights(93), rounded = RoundedToBf16(w);
  const MhaConfig config = w.Config();
  MhaOptions options;
  options.dtype = options.step_weights = DType::kBF16;
  for (const bool sessions : {true, false}) {
    options.sessions = sessions;
    options.decode = sessions;
    const auto refused = MhaModel::Create(config, w.View(), options);
    ASSERT_FALSE(refused.ok());
    ExpectOneLineWith(refused.status().message(), "decoders only");
  }
  options.sessions = false;
  options.decode = true;
  auto decoders_only = MhaModel::Create(config, w.View(), options);
  ASSERT_TRUE(decoders_only.ok()) << decoders_only.status().message();
  std::vector<float> x1(32), y1(64);
  const Status session =
      MhaSession(*decoders_only).Run(x1.data(), 1, 1, y1.data());
  ASSERT_FALSE(session.ok());
  ExpectOneLineWith(session.message(), "decoders only");

  struct Case {
    int64_t B, T;
  };
  for (const Case c : {Case{8, 12}, Case{2, 80}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T));
    std::mt19937 rng(7);
    const auto x = test::RandomVector(rng, c.B * c.T * 32, -1.0f, 1.0f);
    auto f32 = MakeDecoder(rounded.Model(2), c.B, c.T);
    ASSERT_TRUE(f32);
    const std::vector<float> fp32 = Incremental(*f32, x, c.B, c.T, 32, 64, c.T);
    std::vector<float> first;
    for (const int threads : {1, 2}) {
      options.num_threads = threads;
      auto model = MhaModel::Create(config, w.View(), options);
      ASSERT_TRUE(model.ok()) << model.status().message();
      auto bf16 = MakeDecoder(*model, c.B, c.T);
      ASSERT_TRUE(bf16);
      const std::vector<float> y = Incremental(*bf16, x, c.B, c.T, 32, 64, c.T);
      EXPECT_NE(y, fp32) << "the prompt ran in fp32";
      test::ExpectAllClose(std::vector<double>(fp32.begin(), fp32.end()),
                           y.data(), 2e-2 * test::MaxAbs(fp32), "vs fp32");
      if (first.empty()) first = y;
      EXPECT_EQ(first, y) << "threads changed the bits";
    }
  }
}

// Model::Load of an attention in bf16 with sessions false (attn run
// --incremental --dtype bf16): its decoders' steps read bf16 weights, the
// bits of MhaModel::Load with step_weights bf16, not those of fp32 steps.
TEST(DecoderTest, LoadedBf16AttentionStepsOnBf16Weights) {
  if (!GetRuntimeInfo().native_bf16) GTEST_SKIP() << "no native bf16";
  const std::string file =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_gqa_rope.safetensors";
  LoadOptions load;
  load.dtype = DType::kBF16;
  load.sessions = false;
  auto loaded = Model::Load({file, ""}, load);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const std::shared_ptr<const MhaModel>& model = (*loaded)->attention();
  ASSERT_TRUE(model);
  const int64_t B = 2, T = 9, d_in = model->config().d_in,
                d_out = model->config().d_out;
  std::mt19937 rng(11);
  const auto x = test::RandomVector(rng, B * T * d_in, -1.0f, 1.0f);
  const auto decode = [&](std::shared_ptr<const MhaModel> m) {
    auto decoder = MakeDecoder(std::move(m), B, T);
    return decoder ? Incremental(*decoder, x, B, T, d_in, d_out, 1)
                   : std::vector<float>();
  };
  const std::vector<float> y = decode(model);
  for (const DType steps : {DType::kBF16, DType::kF32}) {
    MhaOptions options;
    options.dtype = DType::kBF16;
    options.step_weights = steps;
    options.sessions = false;
    auto direct = MhaModel::Load(file, options);
    ASSERT_TRUE(direct.ok()) << direct.status().message();
    const std::vector<float> expected = decode(*direct);
    ASSERT_EQ(y.size(), expected.size());
    if (steps == DType::kBF16) {
      EXPECT_EQ(y, expected) << "not the bf16 steps' bits";
    } else {
      EXPECT_NE(y, expected) << "the steps read fp32 weights";
    }
  }
}

// Grouped K/V heads, RoPE (plain and Llama-3.1-scaled) and windows: token
// by token through the cache, across its 256-key chunks and windows that
// end inside them, as the full forward (which the PyTorch goldens check).
// Ungrouped heads with RoPE keep a head-major cache (DecodeBlocksHeads),
// their 70-token prompt rotated there and read through a window, with rows
// padded from 8 floats to 16.
TEST(DecoderTest, VariantsTokenByTokenMatchFullForward) {
  RopeConfig rope, scaled;
  rope.theta = 10000.0;
  scaled = {500000.0, 8.0, 1.0, 4.0, 64};
  struct Case {
    Shape shape;
    Variant variant;
    int64_t B, T, prompt;
  };
  const Case cases[] = {
      {{16, 32, 4, true, 0}, {2, {}, 0}, 2, 20, 1},         // groups of 2
      {{12, 48, 6, false, 0}, {1, rope, 0}, 1, 300, 5},     // MQA, RoPE
      {{16, 64, 8, true, 0}, {2, scaled, 32}, 2, 280, 40},  // all, window 32
      {{8, 32, 4, false, 0}, {4, {}, 1}, 1, 30, 1},         // window 1
      {{8, 32, 2, false, 600}, {1, rope, 260}, 1, 530, 3},  // window > chunk
      {{16, 32, 4, true, 0}, {4, rope, 24}, 2, 90, 70},     // ungrouped
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    SCOPED_TRACE("kv_heads " + std::to_string(c.variant.kv_heads) + " window " +
                 std::to_string(c.variant.window) + " T " +
                 std::to_string(c.T));
    const Weights w(c.shape, seed++, c.variant);
    auto model = w.Model();
    ASSERT_TRUE(model);
    auto decoder = MakeDecoder(model, c.B, c.shape.context ? 0 : c.T);
    ASSERT_TRUE(decoder);
    std::mt19937 rng(seed++);
    const auto x = test::RandomVector(
        rng, static_cast<size_t>(c.B * c.T * c.shape.d_in), -1.0f, 1.0f);
    const auto y = Incremental(*decoder, x, c.B, c.T, c.shape.d_in,
                               c.shape.d_out, c.prompt);
    ExpectMatches(FullForward(model, x, c.B, c.T), y, "vs MhaSession");
  }
}

// A ragged batch of a grouped, rotated, windowed model: each sequence's
// prompt and steps land at its own positions.
// Fresh prompts of 80 tokens (>= 64: the operator projects their K and V
// straight into the cache and rotates them there) into sequences 1 and 2 of
// 3, sequence 0 sitting out; then 3 tokens into sequence 0 alone, then
// steps for all: the grouped, biased, Llama-3.1-rotated, windowed decoder
// equals each sequence alone.
TEST(DecoderTest, VariantFreshPromptsIntoTheCacheEqualEachSequenceAlone) {
  const Shape shape{24, 64, 8, true, 0};
  Variant variant;
  variant.kv_heads = 2;
  variant.rope = {500000.0, 8.0, 1.0, 4.0, 64};
  variant.window = 33;
  const Weights w(shape, 123, variant);
  auto model = w.Model();
  ASSERT_TRUE(model);
  const int64_t lengths[] = {3 + 4, 80 + 4, 80 + 4}, d_in = 24, d_out = 64;
  auto decoder = MakeDecoder(model, 3, 90);
  ASSERT_TRUE(decoder);
  std::mt19937 rng(9);
  const auto seqs = RandomSequences(
      rng, std::vector<int64_t>(std::begin(lengths), std::end(lengths)), d_in);
  std::vector<std::vector<float>> ys(3);
  // Prefills {0, 80, 80}, then {3, 0, 0}: rows of the sequences in order.
  for (const std::vector<int64_t>& counts :
       {std::vector<int64_t>{0, 80, 80}, std::vector<int64_t>{3, 0, 0}}) {
    std::vector<float> x;
    for (size_t b = 0; b < 3; ++b) {
      const auto at =
          seqs[b].begin() + static_cast<int64_t>(ys[b].size()) / d_out * d_in;
      x.insert(x.end(), at, at + counts[b] * d_in);
    }
    std::vector<float> y(x.size() / d_in * d_out);
    ASSERT_TRUE(decoder->Prefill(x.data(), counts.data(), y.data()).ok());
    auto row = y.begin();
    for (size_t b = 0; b < 3; ++b) {
      ys[b].insert(ys[b].end(), row, row + counts[b] * d_out);
      row += counts[b] * d_out;
    }
  }
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<float> x1, y1(3 * d_out);
    for (size_t b = 0; b < 3; ++b) {
      const auto at = seqs[b].begin() + (lengths[b] - 4 + s) * d_in;
      x1.insert(x1.end(), at, at + d_in);
    }
    ASSERT_TRUE(decoder->Decode(x1.data(), 3, y1.data()).ok());
    for (size_t b = 0; b < 3; ++b) {
      ys[b].insert(ys[b].end(), y1.begin() + b * d_out,
                   y1.begin() + (b + 1) * d_out);
    }
  }
  for (size_t b = 0; b < 3; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    ExpectMatches(FullForward(model, seqs[b], 1, lengths[b]), ys[b],
                  "fresh prompts vs alone");
  }
}

TEST(DecoderTest, VariantRaggedBatchEqualsEachSequenceAlone) {
  const Shape shape{12, 32, 4, true, 0};
  Variant variant;
  variant.kv_heads = 2;
  variant.rope.theta = 10000.0;
  variant.window = 7;
  const Weights w(shape, 99, variant);
  auto model = w.Model();
  ASSERT_TRUE(model);
  const std::vector<int64_t> prompts = {3, 1, 12};
  const int64_t steps = 5, B = 3, d_in = 12, d_out = 32;
  auto decoder = MakeDecoder(model, B, 20);
  ASSERT_TRUE(decoder);
  std::mt19937 rng(8);
  const auto seqs = RandomSequences(
      rng, {prompts[0] + steps, prompts[1] + steps, prompts[2] + steps}, d_in);
  const auto ys =
      RaggedPrefillThenDecode(*decoder, seqs, prompts, steps, d_in, d_out);
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    ExpectMatches(FullForward(model, seqs[b], 1, prompts[b] + steps), ys[b],
                  "ragged vs alone");
  }
}

// `attn run --incremental` on every golden file matches PyTorch's forward.
TEST(DecoderTest, CliIncrementalMatchesGoldenFiles) {
  const fs::path golden = fs::path(ATTN_SOURCE_DIR) / "tests" / "golden";
  const fs::path out_dir = fs::temp_directory_path() /
                           ("attn_decoder_test_" + std::to_string(::getpid()));
  fs::create_directories(out_dir);
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(golden)) {
    if (entry.path().extension() != ".safetensors") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const fs::path out = out_dir / entry.path().filename();
    for (const char* threads : {"1", "2"}) {
      const std::string command =
          std::string(ATTN_CLI) + " run --incremental --threads " + threads +
          " --weights " + entry.path().string() + " --input " +
          entry.path().string() + " --output " + out.string();
      ASSERT_EQ(std::system(command.c_str()), 0) << command;
      auto file = SafetensorsFile::Open(entry.path().string());
      ASSERT_TRUE(file.ok());
      auto expected = file->ReadF32("expected");
      ASSERT_TRUE(expected.ok());
      auto written = SafetensorsFile::Open(out.string());
      ASSERT_TRUE(written.ok()) << written.status().message();
      auto y = written->ReadF32("output");
      ASSERT_TRUE(y.ok());
      std::vector<double> e(expected->begin(), expected->end());
      ExpectMatches(e, *y, std::string("threads ") + threads);
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
  fs::remove_all(out_dir);
}

}  // namespace
}  // namespace attn
