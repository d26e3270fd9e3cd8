// The attention core (kernels/attention.h) against the double-precision
// reference, on shapes around the query block and with awkward head dims.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/buffer.h"
#include "tests/reference.h"
#include "tests/test_util.h"

namespace attn::kernels {
namespace {

struct Case {
  int64_t batch, seq_len, heads, head_dim, query_block;
};

std::vector<float> RunCore(const Case& c, const std::vector<float>& qkv,
                           int threads) {
  AttentionShape shape;
  shape.batch = c.batch;
  shape.seq_len = c.seq_len;
  shape.num_heads = c.heads;
  shape.head_dim = c.head_dim;
  shape.query_block = c.query_block;
  Result<CausalAttention> core = CausalAttention::Create(shape);
  EXPECT_TRUE(core.ok()) << core.status().message();
  Result<AlignedBuffer> scratch = AlignedBuffer::Allocate(
      core->worker_scratch_bytes() * static_cast<size_t>(threads));
  std::vector<float> ctx(
      static_cast<size_t>(c.batch * c.seq_len * c.heads * c.head_dim));
  core->Run(qkv.data(), ctx.data(), scratch->data(), threads);
  return ctx;
}

TEST(AttentionTest, MatchesReferenceOnManyShapes) {
  const Case cases[] = {
      {1, 1, 1, 1, 64},    {2, 7, 3, 5, 64},   {1, 13, 2, 128, 4},
      {3, 64, 2, 16, 64},  {1, 65, 1, 64, 64}, {2, 130, 4, 24, 32},
      {1, 200, 2, 80, 64}, {2, 33, 5, 1, 8},   {1, 9, 1, 3, 1}};
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const auto n =
        static_cast<size_t>(3 * c.heads * c.batch * c.seq_len * c.head_dim);
    const std::vector<float> qkv = test::RandomVector(rng, n, -2.f, 2.f);
    const std::vector<double> expected = reference::CausalAttention(
        qkv.data(), c.batch, c.seq_len, c.heads, c.head_dim);
    // Each output is a convex combination of values in [-2, 2]; the error
    // comes from fp32 dot products of length head_dim and seq_len.
    const double tol = 2e-6 * std::sqrt(double(c.head_dim * c.seq_len)) + 1e-6;
    const std::vector<float> ctx = RunCore(c, qkv, 2);
    test::ExpectAllClose(
        expected, ctx.data(), tol,
        "B" + std::to_string(c.batch) + " T" + std::to_string(c.seq_len) +
            " H" + std::to_string(c.heads) + " D" + std::to_string(c.head_dim));
  }
}

TEST(AttentionTest, BitwiseIdenticalAcrossThreadCounts) {
  const Case c = {2, 150, 3, 32, 16};
  std::mt19937 rng(8);
  const std::vector<float> qkv = test::RandomVector(
      rng, static_cast<size_t>(3 * 2 * 150 * 3 * 32), -3.f, 3.f);
  const std::vector<float> one = RunCore(c, qkv, 1);
  EXPECT_EQ(one, RunCore(c, qkv, 2));
  EXPECT_EQ(one, RunCore(c, qkv, 3));
}

}  // namespace
}  // namespace attn::kernels
