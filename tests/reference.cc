// Scalar reference implementations (see reference.h).
#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::reference {

std::vector<double> CausalSoftmaxRow(const std::vector<float>& x, size_t valid,
                                     double scale) {
  std::vector<double> out(x.size(), 0.0);
  double max = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < valid; ++j) max = std::max(max, double{x[j]});
  if (valid == 0 || max == -std::numeric_limits<double>::infinity()) {
    return out;
  }
  double sum = 0.0;
  for (size_t j = 0; j < valid; ++j) {
    out[j] = std::exp(scale * (x[j] - max));
    sum += out[j];
  }
  for (size_t j = 0; j < valid; ++j) out[j] /= sum;
  return out;
}

namespace {

// y[r, o] = sum_i x[r, i] w[o, i] + b[o], for `rows` rows.
std::vector<double> Linear(const std::vector<double>& x, int64_t rows,
                           int64_t in, int64_t out, const float* w,
                           const float* b) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

// ctx[b, t, h*D + j] for q, k, v addressed by accessor (b, t, h, j); k and
// v are asked for query heads (the accessor maps them to K/V heads). Query
// i sees keys (i - window, i]; window 0 means all of [0, i].
template <class Get>
std::vector<double> Attend(const Get& q, const Get& k, const Get& v, int64_t B,
                           int64_t T, int64_t H, int64_t D,
                           int64_t window = 0) {
  std::vector<double> ctx(static_cast<size_t>(B * T * H * D), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const int64_t first =
            window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j <= i; ++j) {  // causal: keys first..i
          double s = 0.0;
          for (int64_t c = 0; c < D; ++c) s += q(b, i, h, c) * k(b, j, h, c);
          p[j] = s * scale;
          max = std::max(max, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          sum += p[j] = std::exp(p[j] - max);
        }
        for (int64_t j = first; j <= i; ++j) {
          for (int64_t c = 0; c < D; ++c) {
            ctx[((b * T + i) * H + h) * D + c] += p[j] / sum * v(b, j, h, c);
          }
        }
      }
    }
  }
  return ctx;
}

}  // namespace

std::vector<double> MhaForward(const float* x, int64_t batch, int64_t seq_len,
                               int64_t d_in, int64_t d_out, int64_t num_heads,
                               const MhaWeights& w) {
  const int64_t rows = batch * seq_len, D = d_out / num_heads;
  const std::vector<double> xd(x, x + rows * d_in);
  const auto q = Linear(xd, rows, d_in, d_out, w.w_query, w.b_query);
  const auto k = Linear(xd, rows, d_in, d_out, w.w_key, w.b_key);
  const auto v = Linear(xd, rows, d_in, d_out, w.w_value, w.b_value);
  auto at = [&](const std::vector<double>& m) {
    return [&m, seq_len, d_out, D](int64_t b, int64_t t, int64_t h, int64_t c) {
      return m[(b * seq_len + t) * d_out + h * D + c];
    };
  };
  const auto ctx = Attend(at(q), at(k), at(v), batch, seq_len, num_heads, D);
  return Linear(ctx, rows, d_out, d_out, w.w_out, w.b_out);
}

std::vector<double> CausalAttention(const float* qkv, int64_t batch,
                                    int64_t seq_len, int64_t num_heads,
                                    int64_t head_dim) {
  const int64_t B = batch, T = seq_len, H = num_heads, D = head_dim;
  auto plane = [=](int64_t which) {
    return [=](int64_t b, int64_t t, int64_t h, int64_t c) {
      return double{qkv[(((which * H + h) * B + b) * T + t) * D + c]};
    };
  };
  return Attend(plane(0), plane(1), plane(2), B, T, H, D);
}

std::vector<double> GroupedAttention(const float* q, const float* k,
                                     const float* v, const GqaShape& s) {
  const int64_t B = s.batch, T = s.seq_len, D = s.head_dim;
  const int64_t group = s.num_heads / s.num_kv_heads;
  // Head h of a plane; K/V planes map query head h to h / group.
  auto plane = [=](const float* x, int64_t heads_per_plane_head) {
    return [=](int64_t b, int64_t t, int64_t h, int64_t c) {
      const int64_t head = h / heads_per_plane_head;
      return double{x[((head * B + b) * T + t) * D + c]};
    };
  };
  return Attend(plane(q, 1), plane(k, group), plane(v, group), B, T,
                s.num_heads, D, s.window);
}

}  // namespace attn::reference
