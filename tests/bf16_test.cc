// DType::kBF16 against a double-precision forward pass that also carries the
// standard deviation of the error bf16 rounding adds, element by element.
// Each bf16 rounding (8 significand bits, to nearest) has relative error
// |e| <= u = 2^-8; modelled as independent, zero-mean and uniform, its
// variance is at most u^2/3 of the value squared. The engine rounds x, the
// weights, q/k/v, the probabilities and ctx; it accumulates and runs the
// softmax in fp32 (2^-24: negligible here). To first order the variances
// propagate as (sums over the contracted index, V = u^2/3):
//   q = x Wq^T        var dq <= V (2 sum (x Wq)^2 + q^2)      (x, Wq, q)
//   s = scale q.k     var ds <= scale^2 sum (var dq k^2 + q^2 var dk)
//   p = softmax(s)    var dp_t <= 2 p_t^2 (var ds_t + sum p^2 var ds) + V p_t^2
//   c = sum_t p_t v_t var dc <= sum_t (var dp_t v_t^2 + p_t^2 var dv_t) + V c^2
//   y = c Wo^T + bo   var dy <= sum_d Wo^2 (var dc + 2 V c^2)   (Wo, c)
// The test asserts |y_bf16 - y| <= 6 sigma everywhere (a Gaussian passes
// 6 sigma once in 5e8 draws; the inputs are seeded, so it is not flaky) and
// prints the observed error against fp32, which is the figure users need.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attn/attn.hpp"
#include "tests/test_util.h"

namespace attn {
namespace {

constexpr double kV = 1.0 / (256.0 * 256.0 * 3.0);  // u^2/3, u = 2^-8

struct Bf16Case {
  int64_t batch, seq_len, d_in, d_out, heads;
  bool qkv_bias;
};

struct Block {
  MhaConfig config;
  std::vector<float> w[4], b[4];  // q, k, v, out; b[0..2] empty w/o bias
  std::vector<float> x;

  explicit Block(const Bf16Case& c, unsigned seed) {
    config.d_in = c.d_in;
    config.d_out = c.d_out;
    config.num_heads = c.heads;
    config.qkv_bias = c.qkv_bias;
    std::mt19937 rng(seed);
    const auto in = static_cast<size_t>(c.d_in);
    const auto out = static_cast<size_t>(c.d_out);
    const float a = 1.0f / std::sqrt(float(c.d_in));
    const float o = 1.0f / std::sqrt(float(c.d_out));
    for (int i = 0; i < 3; ++i) {
      w[i] = test::RandomVector(rng, out * in, -a, a);
      if (c.qkv_bias) b[i] = test::RandomVector(rng, out, -a, a);
    }
    w[3] = test::RandomVector(rng, out * out, -o, o);
    b[3] = test::RandomVector(rng, out, -o, o);
    x = test::RandomVector(rng, static_cast<size_t>(c.batch * c.seq_len) * in,
                           -1.f, 1.f);
  }

  std::vector<float> Run(DType dtype, int64_t batch, int64_t seq_len) const {
    MhaWeights wts;
    wts.w_query = w[0].data();
    wts.w_key = w[1].data();
    wts.w_value = w[2].data();
    if (config.qkv_bias) {
      wts.b_query = b[0].data();
      wts.b_key = b[1].data();
      wts.b_value = b[2].data();
    }
    wts.w_out = w[3].data();
    wts.b_out = b[3].data();
    MhaOptions options;
    options.dtype = dtype;
    auto model = MhaModel::Create(config, wts, options);
    EXPECT_TRUE(model.ok()) << model.status().message();
    if (!model.ok()) return {};
    MhaSession session(*model);
    std::vector<float> y(static_cast<size_t>(batch * seq_len * config.d_out));
    const Status st = session.Run(x.data(), batch, seq_len, y.data());
    EXPECT_TRUE(st.ok()) << st.message();
    return y;
  }

  // The exact output (double) and the standard deviation of bf16's error.
  void Reference(int64_t B, int64_t T, std::vector<double>* y,
                 std::vector<double>* sigma) const {
    const int64_t Din = config.d_in, C = config.d_out, H = config.num_heads;
    const int64_t D = C / H, R = B * T;
    const double scale = 1.0 / std::sqrt(double(D));
    // proj[m][r*C + j] and its error variance var[m][...], m = q, k, v.
    std::vector<double> proj[3], var[3];
    for (int m = 0; m < 3; ++m) {
      proj[m].resize(static_cast<size_t>(R * C));
      var[m].resize(proj[m].size());
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t j = 0; j < C; ++j) {
          double sum = config.qkv_bias ? b[m][j] : 0.0, sq = 0.0;
          for (int64_t i = 0; i < Din; ++i) {
            const double t = double(x[r * Din + i]) * w[m][j * Din + i];
            sum += t;
            sq += t * t;
          }
          proj[m][r * C + j] = sum;
          var[m][r * C + j] = kV * (2 * sq + sum * sum);
        }
      }
    }
    std::vector<double> ctx(static_cast<size_t>(R * C)), vctx(ctx.size());
    std::vector<double> s(static_cast<size_t>(T)), vs(s.size());
    std::vector<double> p(s.size());
    for (int64_t bt = 0; bt < B; ++bt) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < T; ++i) {
          const int64_t qi = (bt * T + i) * C + h * D;
          double max_s = -INFINITY;
          for (int64_t t = 0; t <= i; ++t) {
            const int64_t kt = (bt * T + t) * C + h * D;
            double dot = 0.0, v = 0.0;
            for (int64_t d = 0; d < D; ++d) {
              const double q = proj[0][qi + d], k = proj[1][kt + d];
              dot += q * k;
              v += var[0][qi + d] * k * k + q * q * var[1][kt + d];
            }
            s[t] = scale * dot;
            vs[t] = scale * scale * v;
            max_s = std::max(max_s, s[t]);
          }
          double z = 0.0, mean_vs = 0.0;
          for (int64_t t = 0; t <= i; ++t) z += std::exp(s[t] - max_s);
          for (int64_t t = 0; t <= i; ++t) {
            p[t] = std::exp(s[t] - max_s) / z;
            mean_vs += p[t] * p[t] * vs[t];
          }
          for (int64_t d = 0; d < D; ++d) {
            double c = 0.0, vc = 0.0;
            for (int64_t t = 0; t <= i; ++t) {
              const int64_t vt = (bt * T + t) * C + h * D + d;
              const double v = proj[2][vt];
              const double vp =
                  2 * p[t] * p[t] * (vs[t] + mean_vs) + kV * p[t] * p[t];
              c += p[t] * v;
              vc += vp * v * v + p[t] * p[t] * var[2][vt];
            }
            ctx[qi + d] = c;
            vctx[qi + d] = vc + kV * c * c;
          }
        }
      }
    }
    y->assign(static_cast<size_t>(R * C), 0.0);
    sigma->assign(y->size(), 0.0);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < C; ++j) {
        double sum = b[3][j], v = 0.0;
        for (int64_t d = 0; d < C; ++d) {
          const double wo = w[3][j * C + d], c = ctx[r * C + d];
          sum += wo * c;
          v += wo * wo * (vctx[r * C + d] + 2 * kV * c * c);
        }
        (*y)[r * C + j] = sum;
        (*sigma)[r * C + j] = std::sqrt(v);
      }
    }
  }
};

TEST(Bf16Test, WithinSixSigmaOfTheExactResult) {
  if (!GetRuntimeInfo().native_bf16) {
    GTEST_SKIP() << "no native bf16 here (oneDNN ISA "
                 << GetRuntimeInfo().onednn_isa << ")";
  }
  const Bf16Case cases[] = {{2, 37, 64, 48, 3, false},
                            {1, 130, 96, 128, 2, true},
                            {3, 9, 33, 20, 5, true}};
  unsigned seed = 0;
  for (const Bf16Case& c : cases) {
    const Block block(c, ++seed);
    std::vector<double> exact, sigma;
    block.Reference(c.batch, c.seq_len, &exact, &sigma);
    const std::vector<float> bf16 = block.Run(DType::kBF16, c.batch, c.seq_len);
    const std::vector<float> f32 = block.Run(DType::kF32, c.batch, c.seq_len);
    ASSERT_EQ(bf16.size(), exact.size());
    double worst_ratio = 0, max_abs = 0, max_sigma = 0, sq_err = 0, sq_ref = 0;
    size_t worst = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      const double e = std::abs(double(bf16[i]) - exact[i]);
      ASSERT_TRUE(std::isfinite(e)) << "element " << i;
      if (e / sigma[i] > worst_ratio) worst_ratio = e / sigma[i], worst = i;
      max_abs = std::max(max_abs, std::abs(double(bf16[i]) - f32[i]));
      max_sigma = std::max(max_sigma, sigma[i]);
      sq_err += (double(bf16[i]) - f32[i]) * (double(bf16[i]) - f32[i]);
      sq_ref += double(f32[i]) * f32[i];
    }
    EXPECT_LE(worst_ratio, 6.0)
        << "element " << worst << ": exact " << exact[worst] << ", bf16 "
        << bf16[worst] << ", sigma " << sigma[worst];
    // A report of bf16's error against fp32's, per shape.
    std::printf(
        "b%ld T%ld d_in %ld d_out %ld h%ld%s: bf16 vs fp32 max |err| %.3g, "
        "relative RMS %.3g; largest sigma %.3g; worst |err|/sigma %.2f\n",
        static_cast<long>(c.batch), static_cast<long>(c.seq_len),
        static_cast<long>(c.d_in), static_cast<long>(c.d_out),
        static_cast<long>(c.heads), c.qkv_bias ? " bias" : "", max_abs,
        std::sqrt(sq_err / sq_ref), max_sigma, worst_ratio);
  }
}

TEST(Bf16Test, RefusedWithAClearMessageWithoutNativeSupport) {
  if (GetRuntimeInfo().native_bf16) {
    GTEST_SKIP() << "this CPU runs bf16 natively";
  }
  const Block block({1, 4, 8, 8, 2, false}, 1);
  MhaWeights wts;
  wts.w_query = block.w[0].data();
  wts.w_key = block.w[1].data();
  wts.w_value = block.w[2].data();
  wts.w_out = block.w[3].data();
  wts.b_out = block.b[3].data();
  MhaOptions options;
  options.dtype = DType::kBF16;
  auto model = MhaModel::Create(block.config, wts, options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("bf16"), std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace attn
