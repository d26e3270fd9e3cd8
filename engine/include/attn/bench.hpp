/* attn/bench.hpp: the standard benchmark shapes and FLOP convention, and
 * seeded random weights, for throughput measurements. Header-only, over the
 * public API of attn/attn.hpp; `attn bench`, `attn tune` and the programs in
 * bench/ all measure with it, so their numbers compare. */
#ifndef ATTN_BENCH_HPP_
#define ATTN_BENCH_HPP_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "attn/attn.hpp"

namespace attn::bench {

// A named MHA benchmark shape: input [batch, seq_len, d_in], `heads` heads.
struct GridShape {
  const char* name;
  int64_t batch, seq_len, d_in, d_out, heads;
};

// The grid the peer benchmarks (PyTorch, ONNX Runtime) run, in their order.
// "seed" is the book's chapter-3 toy example.
inline const std::vector<GridShape>& PeerGrid() {
  static const std::vector<GridShape> grid = {
      {"seed", 2, 6, 3, 2, 2},
      {"gpt2-128", 8, 128, 768, 768, 12},
      {"gpt2-1k", 1, 1024, 768, 768, 12},
      {"gpt2-1k-b4", 4, 1024, 768, 768, 12},
      {"long-4k", 1, 4096, 512, 512, 8},
  };
  return grid;
}

// Only attn runs it: the peers' T x T scores would take 32 GB.
inline constexpr GridShape kLong32k = {"long-32k", 1, 32768, 512, 512, 8};

// The attention core at its causal half, as the peers count it:
// 2*b*T^2*d_out.
inline double CoreFlops(const GridShape& s) {
  return 2.0 * double(s.batch) * double(s.seq_len) * double(s.seq_len) *
         double(s.d_out);
}

// The whole block: 2*b*T*(3*d_in*d_out + d_out^2) + the core.
inline double BlockFlops(const GridShape& s) {
  return 2.0 * double(s.batch) * double(s.seq_len) *
             (3.0 * double(s.d_in) * double(s.d_out) +
              double(s.d_out) * double(s.d_out)) +
         CoreFlops(s);
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
  std::vector<float> w_query, w_key, w_value;  // [d_out, d_in]
  std::vector<float> w_out;                    // [d_out, d_out]
  std::vector<float> b_out;                    // [d_out]
  std::vector<float> b_query, b_key, b_value;  // [d_out]; empty without
                                               // config.qkv_bias
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

// Weights for `config` (d_in, d_out, qkv_bias), the same for the same seed.
inline RandomMhaWeights MakeRandomMhaWeights(const MhaConfig& config,
                                             uint32_t seed) {
  const auto din = static_cast<size_t>(config.d_in);
  const auto dout = static_cast<size_t>(config.d_out);
  // Rounded once, from double.
  const auto in_bound =
      static_cast<float>(1.0 / std::sqrt(double(config.d_in)));
  const auto out_bound =
      static_cast<float>(1.0 / std::sqrt(double(config.d_out)));
  std::mt19937 rng(seed);
  RandomMhaWeights w;
  w.w_query = detail::Uniform(rng, dout * din, in_bound);
  w.w_key = detail::Uniform(rng, dout * din, in_bound);
  w.w_value = detail::Uniform(rng, dout * din, in_bound);
  w.w_out = detail::Uniform(rng, dout * dout, out_bound);
  w.b_out = detail::Uniform(rng, dout, out_bound);
  if (config.qkv_bias) {
    w.b_query = detail::Uniform(rng, dout, in_bound);
    w.b_key = detail::Uniform(rng, dout, in_bound);
    w.b_value = detail::Uniform(rng, dout, in_bound);
  }
  return w;
}

}  // namespace attn::bench

#endif  // ATTN_BENCH_HPP_
