// The attention core (kernels/attention.h) against the double-precision
// reference, on shapes around the query block and with awkward head dims;
// grouped-query K/V heads and sliding windows, in f32 and (where the CPU has
// it natively) bf16; bitwise identity across thread counts.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/buffer.h"
#include "hwy/base.h"
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

// A grouped-query, windowed shape and its q, k and v planes, [H, B*T, D]
// then [Hkv, B*T, D] twice, as Run(qkv) reads them.
struct GqaCase {
  int64_t batch, seq_len, heads, kv_heads, head_dim, query_block, window;

  std::string Name() const {
    return "B" + std::to_string(batch) + " T" + std::to_string(seq_len) + " H" +
           std::to_string(heads) + " Hkv" + std::to_string(kv_heads) + " D" +
           std::to_string(head_dim) + " W" + std::to_string(window);
  }
  size_t Elements() const {
    return static_cast<size_t>((heads + 2 * kv_heads) * batch * seq_len *
                               head_dim);
  }
  AttentionShape Shape(DataType type) const {
    AttentionShape shape;
    shape.batch = batch;
    shape.seq_len = seq_len;
    shape.num_heads = heads;
    shape.num_kv_heads = kv_heads;
    shape.head_dim = head_dim;
    shape.query_block = query_block;
    shape.window = window;
    shape.type = type;
    return shape;
  }
  std::vector<double> Expected(const std::vector<float>& qkv) const {
    const int64_t head = batch * seq_len * head_dim;
    reference::GqaShape shape{batch,    seq_len,  heads,
                              kv_heads, head_dim, window};
    return reference::GroupedAttention(qkv.data(), qkv.data() + heads * head,
                                       qkv.data() + (heads + kv_heads) * head,
                                       shape);
  }
};

// Runs the core on `qkv` (f32 values; bf16 runs take them rounded) and
// returns ctx as floats.
std::vector<float> RunGqa(const GqaCase& c, DataType type,
                          const std::vector<float>& qkv, int threads) {
  Result<CausalAttention> core = CausalAttention::Create(c.Shape(type));
  EXPECT_TRUE(core.ok()) << core.status().message();
  if (!core.ok()) return {};
  Result<AlignedBuffer> scratch = AlignedBuffer::Allocate(
      core->worker_scratch_bytes() * static_cast<size_t>(threads));
  const auto ctx_size =
      static_cast<size_t>(c.batch * c.seq_len * c.heads * c.head_dim);
  if (type == DataType::kF32) {
    std::vector<float> ctx(ctx_size);
    core->Run(qkv.data(), ctx.data(), scratch->data(), threads);
    return ctx;
  }
  std::vector<hwy::bfloat16_t> in(qkv.size()), out(ctx_size);
  for (size_t i = 0; i < qkv.size(); ++i) in[i] = hwy::BF16FromF32(qkv[i]);
  core->Run(in.data(), out.data(), scratch->data(), threads);
  std::vector<float> ctx(ctx_size);
  for (size_t i = 0; i < ctx_size; ++i) ctx[i] = hwy::F32FromBF16(out[i]);
  return ctx;
}

// Group sizes 1, 2 and 4 and MQA; windows of 1, 32, wider than T and none;
// T not a multiple of the query block.
const GqaCase kGqaCases[] = {
    {2, 70, 4, 4, 16, 32, 0},   {2, 70, 4, 2, 16, 32, 0},
    {1, 70, 8, 2, 24, 32, 0},   {2, 45, 6, 1, 8, 16, 0},
    {1, 100, 4, 2, 16, 32, 1},  {2, 100, 4, 1, 16, 32, 32},
    {1, 130, 4, 4, 16, 64, 32}, {1, 50, 2, 1, 16, 16, 500},
    {1, 97, 8, 2, 32, 40, 33},
};

TEST(AttentionGqaTest, MatchesReferenceF32) {
  std::mt19937 rng(21);
  for (const GqaCase& c : kGqaCases) {
    const std::vector<float> qkv =
        test::RandomVector(rng, c.Elements(), -2.f, 2.f);
    const double tol = 2e-6 * std::sqrt(double(c.head_dim * c.seq_len)) + 1e-6;
    test::ExpectAllClose(c.Expected(qkv),
                         RunGqa(c, DataType::kF32, qkv, 2).data(), tol,
                         c.Name());
  }
}

TEST(AttentionGqaTest, MatchesReferenceBF16) {
  if (!HasNativeBF16()) GTEST_SKIP() << "no native bf16 on this CPU";
  std::mt19937 rng(22);
  for (const GqaCase& c : kGqaCases) {
    std::vector<float> qkv = test::RandomVector(rng, c.Elements(), -2.f, 2.f);
    // The reference sees the values the bf16 run reads.
    for (float& x : qkv) x = hwy::F32FromBF16(hwy::BF16FromF32(x));
    // bf16 probabilities and outputs: about 3 significant digits of |v| <= 2.
    test::ExpectAllClose(c.Expected(qkv),
                         RunGqa(c, DataType::kBF16, qkv, 2).data(), 3e-2,
                         c.Name() + " bf16");
  }
}

TEST(AttentionGqaTest, GroupSplitOverItemsMatchesReference) {
  // One query block of 2500 rows: four stacked heads' scores (100 MB) would
  // outgrow an item's bound, so each item takes two of the group.
  const GqaCase c{1, 2500, 4, 1, 8, 2500, 0};
  std::mt19937 rng(24);
  const std::vector<float> qkv =
      test::RandomVector(rng, c.Elements(), -2.f, 2.f);
  const double tol = 2e-6 * std::sqrt(double(c.head_dim * c.seq_len)) + 1e-6;
  test::ExpectAllClose(c.Expected(qkv),
                       RunGqa(c, DataType::kF32, qkv, 2).data(), tol, c.Name());
}

TEST(AttentionGqaTest, BitwiseIdenticalAcrossThreadCounts) {
  std::mt19937 rng(23);
  for (const GqaCase& c :
       {GqaCase{2, 150, 6, 2, 32, 16, 0}, GqaCase{2, 150, 4, 1, 32, 16, 40}}) {
    const std::vector<float> qkv =
        test::RandomVector(rng, c.Elements(), -3.f, 3.f);
    const std::vector<float> one = RunGqa(c, DataType::kF32, qkv, 1);
    EXPECT_EQ(one, RunGqa(c, DataType::kF32, qkv, 2)) << c.Name();
    EXPECT_EQ(one, RunGqa(c, DataType::kF32, qkv, 3)) << c.Name();
  }
}

TEST(AttentionGqaTest, CreateRefusesBadGroupsAndWindows) {
  GqaCase c{1, 8, 6, 4, 8, 4, 0};
  Result<CausalAttention> core =
      CausalAttention::Create(c.Shape(DataType::kF32));
  ASSERT_FALSE(core.ok());
  EXPECT_NE(core.status().message().find("num_kv_heads"), std::string::npos)
      << core.status().message();
  c.kv_heads = -1;
  EXPECT_FALSE(CausalAttention::Create(c.Shape(DataType::kF32)).ok());
  c.kv_heads = 3;
  c.window = -1;
  EXPECT_FALSE(CausalAttention::Create(c.Shape(DataType::kF32)).ok());
  c.window = 0;
  EXPECT_TRUE(CausalAttention::Create(c.Shape(DataType::kF32)).ok());
}

}  // namespace
}  // namespace attn::kernels
