// kernels::TinyAttention against the double-precision reference of the
// book's MultiHeadAttention, with and without q/k/v biases, over the shapes
// the engine sends it (the chapter-3 example among them).
#include "kernels/attention_tiny.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

TEST(TinyAttentionTest, MatchesTheReference) {
  std::mt19937 rng(816);
  const kernels::TinyAttentionShape shapes[] = {
      {2, 6, 3, 2, 2},  // the book's chapter-3 example
      {1, 1, 4, 4, 1},
      {3, 5, 8, 6, 3}};
  for (const kernels::TinyAttentionShape& s : shapes) {
    for (const bool qkv_bias : {false, true}) {
      const int64_t R = s.batch * s.seq_len, C = s.d_out;
      const auto x = test::RandomVector(rng, R * s.d_in, -1.f, 1.f);
      const auto w_qkv = test::RandomVector(rng, 3 * C * s.d_in, -.5f, .5f);
      const auto b_qkv = test::RandomVector(rng, 3 * C, -.5f, .5f);
      const auto w_out = test::RandomVector(rng, C * C, -.5f, .5f);
      const auto b_out = test::RandomVector(rng, C, -.5f, .5f);
      reference::MhaWeights ref;
      ref.w_query = w_qkv.data();
      ref.w_key = w_qkv.data() + C * s.d_in;
      ref.w_value = w_qkv.data() + 2 * C * s.d_in;
      if (qkv_bias) {
        ref.b_query = b_qkv.data();
        ref.b_key = b_qkv.data() + C;
        ref.b_value = b_qkv.data() + 2 * C;
      }
      ref.w_out = w_out.data();
      ref.b_out = b_out.data();
      std::vector<float> scratch(kernels::TinyAttentionScratchFloats(s));
      std::vector<float> y(static_cast<size_t>(R * C));
      kernels::TinyAttention(s,
                             {w_qkv.data(), qkv_bias ? b_qkv.data() : nullptr,
                              w_out.data(), b_out.data()},
                             x.data(), y.data(), scratch.data());
      test::ExpectAllClose(reference::MhaForward(x.data(), s.batch, s.seq_len,
                                                 s.d_in, C, s.num_heads, ref),
                           y.data(), 1e-5,
                           "batch " + std::to_string(s.batch) + " x " +
                               std::to_string(s.seq_len) +
                               (qkv_bias ? ", biased" : ""));
    }
  }
}

}  // namespace
}  // namespace attn
