// The standard benchmark shapes and seeded random weights, for throughput
// measurements. Header-only, over the public API (attn/attn.hpp, whose
// AttentionFlops is the FLOP convention); `attn bench`, `attn tune` and the
// programs in bench/ all measure with it, so their numbers compare. Not
// installed.
#ifndef ATTN_BENCH_GRID_H_
#define ATTN_BENCH_GRID_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "attn/attn.hpp"

namespace attn::bench {

// A named MHA benchmark shape: input [batch, seq_len, d_in], `heads` heads;
// `kv_heads` K/V heads (0: heads, plain MHA) and rotary embeddings of base
// `rope_theta` (0: none), as MhaConfig::num_kv_heads and rope.theta.
struct GridShape {
  const char* name;
  int64_t batch, seq_len, d_in, d_out, heads;
  int64_t kv_heads;
  double rope_theta;
};

// The grid the peer benchmarks (PyTorch, ONNX Runtime) run, in their order.
// "seed" is the book's chapter-3 toy example.
inline const std::vector<GridShape>& PeerGrid() {
  static const std::vector<GridShape> grid = {
      {"seed", 2, 6, 3, 2, 2, 0, 0.0},
      {"gpt2-128", 8, 128, 768, 768, 12, 0, 0.0},
      {"gpt2-1k", 1, 1024, 768, 768, 12, 0, 0.0},
      {"gpt2-1k-b4", 4, 1024, 768, 768, 12, 0, 0.0},
      {"long-4k", 1, 4096, 512, 512, 8, 0, 0.0},
  };
  return grid;
}

// Only attn runs it: the peers' T x T scores would take 32 GB.
inline constexpr GridShape kLong32k = {"long-32k", 1, 32768, 512,
                                       512,        8, 0,     0.0};

// Llama 3.2 1B's attention: 32 query heads of 64 sharing 8 K/V
// heads, RoPE with Llama 3's base, as bench/ort_gqa's GroupQueryAttention
// peer runs it. Named-only, like long-32k: not in the default grid.
inline constexpr GridShape kLlama2k = {"llama-2k", 1,  2048, 2048,
                                       2048,       32, 8,    500000.0};

// The attention of `s` with a sliding window of `sliding_window` (0: none).
inline MhaConfig ConfigOf(const GridShape& s, int64_t sliding_window = 0) {
  MhaConfig c;
  c.d_in = s.d_in;
  c.d_out = s.d_out;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.sliding_window = sliding_window;
  return c;
}

// The attention core alone (AttentionCoreFlops).
inline double CoreFlops(const GridShape& s, int64_t sliding_window = 0) {
  return AttentionCoreFlops(ConfigOf(s, sliding_window), s.batch, s.seq_len);
}

// The whole block: projections and core (AttentionFlops).
inline double BlockFlops(const GridShape& s, int64_t sliding_window = 0) {
  return AttentionFlops(ConfigOf(s, sliding_window), s.batch, s.seq_len);
}

namespace detail {

// `n` floats uniform in [-bound, bound), the next ones `rng` gives.
inline std::vector<float> Uniform(std::mt19937& rng, size_t n, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace detail

// `n` floats uniform in [-bound, bound), the same for the same seed.
inline std::vector<float> RandomFloats(size_t n, float bound, uint32_t seed) {
  std::mt19937 rng(seed);
  return detail::Uniform(rng, n, bound);
}

// Seeded random MHA weights in nn.Linear's init range: uniform in
// +-1/sqrt(fan_in), that is 1/sqrt(d_in) for the q, k and v projections and
// 1/sqrt(d_out) for out_proj.
struct RandomMhaWeights {
  std::vector<float> w_query;         // [d_out, d_in]
  std::vector<float> w_key, w_value;  // [kv_dim, d_in] (see MhaWeights)
  std::vector<float> w_out;           // [d_out, d_out]
  std::vector<float> b_out;           // [d_out]
  std::vector<float> b_query;         // [d_out]; the three are empty
  std::vector<float> b_key, b_value;  // [kv_dim]; without config.qkv_bias
  // Pointers into the vectors above, for MhaModel::Create: valid while they
  // live.
  MhaWeights view() const {
    auto data = [](const std::vector<float>& v) {
      return v.empty() ? nullptr : v.data();
    };
    MhaWeights w;
    w.w_query = data(w_query);
    w.w_key = data(w_key);
    w.w_value = data(w_value);
    w.b_query = data(b_query);
    w.b_key = data(b_key);
    w.b_value = data(b_value);
    w.w_out = data(w_out);
    w.b_out = data(b_out);
    return w;
  }
};

// Weights for `config` (d_in, d_out, qkv_bias; with num_kv_heads, K and V
// of kv_dim = num_kv_heads * d_out / num_heads rows), the same for the same
// seed. Without num_kv_heads the stream is the one it always was.
inline RandomMhaWeights MakeRandomMhaWeights(const MhaConfig& config,
                                             uint32_t seed) {
  const auto din = static_cast<size_t>(config.d_in);
  const auto dout = static_cast<size_t>(config.d_out);
  const size_t kv_dim =
      config.num_kv_heads > 0 && config.num_heads > 0
          ? static_cast<size_t>(config.num_kv_heads *
                                (config.d_out / config.num_heads))
          : dout;
  // Rounded once, from double.
  const auto in_bound =
      static_cast<float>(1.0 / std::sqrt(double(config.d_in)));
  const auto out_bound =
      static_cast<float>(1.0 / std::sqrt(double(config.d_out)));
  std::mt19937 rng(seed);
  RandomMhaWeights w;
  w.w_query = detail::Uniform(rng, dout * din, in_bound);
  w.w_key = detail::Uniform(rng, kv_dim * din, in_bound);
  w.w_value = detail::Uniform(rng, kv_dim * din, in_bound);
  w.w_out = detail::Uniform(rng, dout * dout, out_bound);
  w.b_out = detail::Uniform(rng, dout, out_bound);
  if (config.qkv_bias) {
    w.b_query = detail::Uniform(rng, dout, in_bound);
    w.b_key = detail::Uniform(rng, kv_dim, in_bound);
    w.b_value = detail::Uniform(rng, kv_dim, in_bound);
  }
  return w;
}

}  // namespace attn::bench

#endif  // ATTN_BENCH_GRID_H_
