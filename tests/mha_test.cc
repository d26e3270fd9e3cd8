// The whole block (MhaModel + MhaSession) against the double-precision
// reference on many shapes, bitwise repeatability, and every error the
// library reports for a bad configuration or call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "attn/attn.hpp"
#include "engine/models/mha_model.h"
#include "engine/ops/attention_op.h"
#include "kernels/matmul.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

// Random weights for a config, in nn.Linear's init range, plus views of them.
struct RandomMha {
  MhaConfig config;
  std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;

  RandomMha(int64_t d_in, int64_t d_out, int64_t heads, bool qkv_bias,
            unsigned seed) {
    config.d_in = d_in;
    config.d_out = d_out;
    config.num_heads = heads;
    config.qkv_bias = qkv_bias;
    std::mt19937 rng(seed);
    const float a = 1.0f / std::sqrt(float(d_in));
    const float b = 1.0f / std::sqrt(float(d_out));
    const auto in = static_cast<size_t>(d_in), out = static_cast<size_t>(d_out);
    wq = test::RandomVector(rng, out * in, -a, a);
    wk = test::RandomVector(rng, out * in, -a, a);
    wv = test::RandomVector(rng, out * in, -a, a);
    if (qkv_bias) {
      bq = test::RandomVector(rng, out, -a, a);
      bk = test::RandomVector(rng, out, -a, a);
      bv = test::RandomVector(rng, out, -a, a);
    }
    wo = test::RandomVector(rng, out * out, -b, b);
    bo = test::RandomVector(rng, out, -b, b);
  }

  MhaWeights Weights() const {
    MhaWeights w;
    w.w_query = wq.data();
    w.w_key = wk.data();
    w.w_value = wv.data();
    if (config.qkv_bias) {
      w.b_query = bq.data();
      w.b_key = bk.data();
      w.b_value = bv.data();
    }
    w.w_out = wo.data();
    w.b_out = bo.data();
    return w;
  }

  reference::MhaWeights ReferenceWeights() const {
    const MhaWeights w = Weights();
    return {w.w_query, w.w_key,   w.w_value, w.b_query,
            w.b_key,   w.b_value, w.w_out,   w.b_out};
  }
};

std::vector<float> Forward(const RandomMha& m, const std::vector<float>& x,
                           int64_t batch, int64_t seq_len, int threads) {
  MhaOptions options;
  options.num_threads = threads;
  auto model = MhaModel::Create(m.config, m.Weights(), options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  MhaSession session(*model);
  std::vector<float> y(static_cast<size_t>(batch * seq_len * m.config.d_out));
  const Status st = session.Run(x.data(), batch, seq_len, y.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

struct Shape {
  int64_t batch, seq_len, d_in, d_out, heads;
};

TEST(MhaTest, MatchesReferenceOnManyShapes) {
  const Shape shapes[] = {{1, 1, 8, 8, 2},     {2, 7, 5, 6, 2},
                          {1, 13, 20, 10, 2},  {3, 9, 16, 48, 2},
                          {2, 11, 32, 80, 1},  {1, 6, 16, 128, 1},
                          {2, 10, 24, 48, 16}, {2, 70, 40, 96, 3},
                          {1, 129, 64, 64, 4}, {4, 3, 7, 9, 9}};
  unsigned seed = 0;
  for (const Shape& s : shapes) {
    for (bool bias : {false, true}) {
      const RandomMha m(s.d_in, s.d_out, s.heads, bias, ++seed);
      std::mt19937 rng(seed);
      const std::vector<float> x = test::RandomVector(
          rng, static_cast<size_t>(s.batch * s.seq_len * s.d_in), -1.f, 1.f);
      const std::vector<double> expected =
          reference::MhaForward(x.data(), s.batch, s.seq_len, s.d_in, s.d_out,
                                s.heads, m.ReferenceWeights());
      const std::vector<float> y = Forward(m, x, s.batch, s.seq_len, 2);
      test::ExpectAllClose(
          expected, y.data(), 1e-5 * std::max(1.0, test::MaxAbs(expected)),
          "b" + std::to_string(s.batch) + " T" + std::to_string(s.seq_len) +
              " d_in " + std::to_string(s.d_in) + " d_out " +
              std::to_string(s.d_out) + " h" + std::to_string(s.heads) +
              (bias ? " bias" : ""));
    }
  }
}

TEST(MhaTest, BitwiseIdenticalAtOneAndTwoThreadsAndRepeatable) {
  const RandomMha m(96, 64, 4, true, 42);
  std::mt19937 rng(3);
  const std::vector<float> x =
      test::RandomVector(rng, size_t{3} * 100 * 96, -1.f, 1.f);
  const std::vector<float> one = Forward(m, x, 3, 100, 1);
  EXPECT_EQ(one, Forward(m, x, 3, 100, 2));
  EXPECT_EQ(one, Forward(m, x, 3, 100, 1));
}

// A model made without the sessions' layouts (MhaOptions::sessions false,
// as a language model's attention) holds less, and its sessions pack their
// own copy and give the same bits.
TEST(MhaTest, SessionsPackTheirOwnWithoutTheModelsLayouts) {
  const RandomMha m(64, 64, 4, true, 31);
  MhaOptions options;
  options.num_threads = 2;
  auto shared = MhaModel::Create(m.config, m.Weights(), options);
  options.sessions = false;
  auto lean = MhaModel::Create(m.config, m.Weights(), options);
  ASSERT_TRUE(shared.ok() && lean.ok());
  // At least the q, k and v planes: 3 x 64 x 64 floats.
  EXPECT_GE((*shared)->memory_bytes(),
            (*lean)->memory_bytes() + 3 * 64 * 64 * sizeof(float));
  std::mt19937 rng(4);
  const int64_t B = 2, T = 48;
  const auto x = test::RandomVector(rng, B * T * 64, -1.f, 1.f);
  std::vector<float> y_shared(x.size()), y_lean(x.size());
  MhaSession a(*shared), b(*lean);
  ASSERT_TRUE(a.Run(x.data(), B, T, y_shared.data()).ok());
  ASSERT_TRUE(b.Run(x.data(), B, T, y_lean.data()).ok());
  EXPECT_EQ(y_shared, y_lean);
  EXPECT_GE(b.workspace_bytes(),
            a.workspace_bytes() + 3 * 64 * 64 * sizeof(float));
}

// Llama's out_proj has no bias: a null b_out is a bias of zeros, bit for bit.
TEST(MhaTest, MissingOutProjBiasIsZeros) {
  RandomMha m(24, 16, 4, false, 8);
  std::mt19937 rng(4);
  const std::vector<float> x =
      test::RandomVector(rng, size_t{2} * 7 * 24, -1.f, 1.f);
  std::fill(m.bo.begin(), m.bo.end(), 0.0f);
  const std::vector<float> zeros = Forward(m, x, 2, 7, 2);
  MhaWeights w = m.Weights();
  w.b_out = nullptr;
  MhaOptions options;
  options.num_threads = 2;
  auto model = MhaModel::Create(m.config, w, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<float> y(zeros.size());
  ASSERT_TRUE(MhaSession(*model).Run(x.data(), 2, 7, y.data()).ok());
  EXPECT_EQ(y, zeros);
}

TEST(MhaTest, SessionFollowsChangingShapes) {
  const RandomMha m(12, 8, 2, false, 5);
  auto model = MhaModel::Create(m.config, m.Weights());
  ASSERT_TRUE(model.ok());
  MhaSession session(*model);
  std::mt19937 rng(9);
  for (int64_t t : {5, 17, 5, 1}) {
    const std::vector<float> x =
        test::RandomVector(rng, static_cast<size_t>(2 * t * 12), -1.f, 1.f);
    std::vector<float> y(static_cast<size_t>(2 * t * 8));
    ASSERT_TRUE(session.Run(x.data(), 2, t, y.data()).ok());
    test::ExpectAllClose(
        reference::MhaForward(x.data(), 2, t, 12, 8, 2, m.ReferenceWeights()),
        y.data(), 1e-5, "T " + std::to_string(t));
  }
}

TEST(MhaTest, NonFiniteInputStaysInsideItsSequence) {
  const RandomMha m(6, 4, 2, false, 11);
  std::mt19937 rng(4);
  std::vector<float> x = test::RandomVector(rng, 2 * 5 * 6, -1.f, 1.f);
  x[2 * 6 + 1] =
      std::numeric_limits<float>::quiet_NaN();  // sequence 0, token 2
  const std::vector<float> y = Forward(m, x, 2, 5, 2);
  for (int t = 0; t < 5; ++t) {
    for (int c = 0; c < 4; ++c) {
      if (t >= 2) {
        EXPECT_TRUE(std::isnan(y[t * 4 + c])) << "token " << t;
      }
      EXPECT_TRUE(std::isfinite(y[(5 + t) * 4 + c])) << "sequence 1";
    }
  }
}

// Expects `status` to fail with `code` and a message containing `needle`.
void ExpectError(const Status& status, StatusCode code,
                 const std::string& needle) {
  EXPECT_EQ(status.code(), code) << status.message();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "message '" << status.message() << "' lacks '" << needle << "'";
}

TEST(MhaTest, RefusesBadConfigurations) {
  RandomMha m(6, 4, 2, false, 1);
  m.config.num_heads = 3;
  ExpectError(MhaModel::Create(m.config, m.Weights()).status(),
              StatusCode::kInvalidArgument, "not divisible by num_heads 3");
  m.config.num_heads = 0;
  ExpectError(MhaModel::Create(m.config, m.Weights()).status(),
              StatusCode::kInvalidArgument, "num_heads is 0");
  m.config.num_heads = 2;
  MhaWeights w = m.Weights();
  w.b_key = m.wk.data();  // one bias of three
  ExpectError(MhaModel::Create(m.config, w).status(),
              StatusCode::kInvalidArgument, "biases");
  MhaOptions options;
  options.num_threads = -1;
  ExpectError(MhaModel::Create(m.config, m.Weights(), options).status(),
              StatusCode::kInvalidArgument, "num_threads is -1");
  options.num_threads = 1000000;
  ExpectError(MhaModel::Create(m.config, m.Weights(), options).status(),
              StatusCode::kInvalidArgument, "want at most 4096");
}

TEST(MhaTest, RefusesBadCalls) {
  RandomMha m(6, 4, 2, false, 1);
  m.config.context_length = 4;
  auto model = MhaModel::Create(m.config, m.Weights());
  ASSERT_TRUE(model.ok());
  MhaSession session(*model);
  std::vector<float> x(2 * 5 * 6), y(2 * 5 * 4);
  ExpectError(session.Run(x.data(), 2, 5, y.data()),
              StatusCode::kInvalidArgument,
              "sequence length 5 exceeds context_length 4");
  ExpectError(session.Run(x.data(), 0, 3, y.data()),
              StatusCode::kInvalidArgument, "batch is 0");
  ExpectError(session.Run(nullptr, 1, 3, y.data()),
              StatusCode::kInvalidArgument, "null");
  EXPECT_TRUE(session.Run(x.data(), 2, 4, y.data()).ok());
}

TEST(MhaTest, MalformedThreadEnvironmentIsAnError) {
  const RandomMha m(6, 4, 2, false, 1);
  setenv("ATTN_NUM_THREADS", "many", 1);
  ExpectError(MhaModel::Create(m.config, m.Weights()).status(),
              StatusCode::kInvalidArgument, "ATTN_NUM_THREADS is 'many'");
  setenv("ATTN_NUM_THREADS", "3", 1);
  auto model = MhaModel::Create(m.config, m.Weights());
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->num_threads(), 3);
  unsetenv("ATTN_NUM_THREADS");
}

// A run of kMatMulPackedRows rows runs on the weights its model packed at
// load (the head planes of its qkv Linear, out_proj's fp32 copy), holding
// no packed copy of its own, and gives the same bits as an operator that
// packs its own (over Linears made without packed copies).
TEST(MhaTest, LongRunsShareTheModelsPackedWeights) {
  std::mt19937 rng(23);
  const int64_t E = 32, H = 4, B = 64, T = kernels::kMatMulPackedRows / 64;
  const auto w_qkv = test::RandomVector(rng, 3 * E * E, -0.3f, 0.3f);
  const auto b_qkv = test::RandomVector(rng, 3 * E, -0.3f, 0.3f);
  const auto w_out = test::RandomVector(rng, E * E, -0.3f, 0.3f);
  const auto b_out = test::RandomVector(rng, E, -0.3f, 0.3f);
  MhaModelData shared_model, own_model;
  for (MhaModelData* m : {&shared_model, &own_model}) {
    m->config.d_in = m->config.d_out = E;
    m->config.num_heads = m->config.num_kv_heads = H;
    m->config.context_length = T;
    m->config.qkv_bias = true;
    m->num_threads = 2;
    m->max_memory_bytes = uint64_t{1} << 40;
    m->w_qkv.assign(w_qkv.begin(), w_qkv.end());
    m->b_qkv.assign(b_qkv.begin(), b_qkv.end());
    m->w_out.assign(w_out.begin(), w_out.end());
    m->b_out.assign(b_out.begin(), b_out.end());
  }
  ASSERT_TRUE(
      MakeMhaLinears(shared_model, /*sessions=*/true, /*decode=*/true).ok());
  using ops::Weight;
  own_model.qkv = *ops::Linear::Create(
      Weight::Borrow(own_model.w_qkv.data(), 3 * E, E),
      Weight::Borrow(own_model.b_qkv.data(), 3 * E, 1), {}, 2);
  own_model.out =
      *ops::Linear::Create(Weight::Borrow(own_model.w_out.data(), E, E),
                           Weight::Borrow(own_model.b_out.data(), E, 1), {}, 2);
  auto own = PlanMhaRun(own_model, B, T, 0, "own");
  auto shared = PlanMhaRun(shared_model, B, T, 0, "shared");
  ASSERT_TRUE(own.ok() && shared.ok());
  EXPECT_EQ((*shared)->bytes(), 0u);
  EXPECT_GE((*own)->bytes(), 4 * E * E * sizeof(float));
  const auto x = test::RandomVector(rng, B * T * E, -1.f, 1.f);
  std::vector<float> y_own(x.size()), y_shared(x.size());
  for (auto [op, y] :
       {std::pair{own->get(), &y_own}, std::pair{shared->get(), &y_shared}}) {
    OwnedBuffers buffers;
    ASSERT_TRUE(buffers.Allocate(*op, 0, uint64_t{1} << 40, "test").ok());
    op->Forward(x.data(), nullptr, y->data(), buffers.pointers());
  }
  EXPECT_EQ(y_own, y_shared);
}

}  // namespace
}  // namespace attn
