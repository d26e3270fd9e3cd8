// kernels::MatMul against a plain double-precision reference, on shapes
// that cut into several row and column tiles with short last tiles: rank 2
// with bias, GELU and residual; a decode step's few rows; rank 3 with a
// broadcast src and per-batch packed weights; a worker's strided weights.
// Every team result is also compared bitwise at 1, 2 and 3 threads.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/rows_linear.h"
#include "tests/test_util.h"

namespace attn::kernels {
namespace {

struct Problem {
  int64_t batch, M, K, N;  // batch > 1: src broadcast, weights per batch
  bool bias, gelu, residual;
};

// x [M, K] (shared by all batches), w [batch][N, K] (PyTorch's layout),
// b [batch][N], r [batch][M, N].
struct Data {
  std::vector<float> x, w, b, r;
  explicit Data(const Problem& p) {
    std::mt19937 rng(static_cast<uint32_t>(p.M * 131 + p.N));
    x = test::RandomVector(rng, size_t(p.M * p.K), -1.f, 1.f);
    w = test::RandomVector(rng, size_t(p.batch * p.N * p.K), -0.5f, 0.5f);
    b = test::RandomVector(rng, size_t(p.batch * p.N), -1.f, 1.f);
    r = test::RandomVector(rng, size_t(p.batch * p.M * p.N), -2.f, 2.f);
  }
};

std::vector<double> Reference(const Problem& p, const Data& d) {
  std::vector<double> y(size_t(p.batch * p.M * p.N));
  for (int64_t g = 0; g < p.batch; ++g) {
    for (int64_t i = 0; i < p.M; ++i) {
      for (int64_t j = 0; j < p.N; ++j) {
        double acc = p.bias ? d.b[size_t(g * p.N + j)] : 0.0;
        for (int64_t k = 0; k < p.K; ++k) {
          acc += double(d.x[size_t(i * p.K + k)]) *
                 d.w[size_t((g * p.N + j) * p.K + k)];
        }
        if (p.gelu) {
          acc = 0.5 * acc *
                (1 + std::tanh(std::sqrt(2 / M_PI) *
                               (acc + 0.044715 * acc * acc * acc)));
        }
        const size_t at = size_t((g * p.M + i) * p.N + j);
        y[at] = acc + (p.residual ? d.r[at] : 0.0);
      }
    }
  }
  return y;
}

// Runs the problem as a team matmul on `threads` threads.
std::vector<float> RunTeam(const Problem& p, const Data& d, int threads) {
  const bool batched = p.batch > 1;
  const auto dims = [&](int64_t g, int64_t rows, int64_t cols) {
    return batched ? std::vector<int64_t>{g, rows, cols}
                   : std::vector<int64_t>{rows, cols};
  };
  PostOps post;
  post.gelu_tanh = p.gelu;
  post.add_residual = p.residual;
  const Operand bias{dims(p.batch, 1, p.N), {}, DataType::kF32};
  auto mm = MatMul::Create(
      {dims(1, p.M, p.K), {}, DataType::kF32},
      {dims(p.batch, p.K, p.N), {}, DataType::kF32}, p.bias ? &bias : nullptr,
      {dims(p.batch, p.M, p.N), {}, DataType::kF32}, Threading::kTeam, post);
  EXPECT_TRUE(mm.ok()) << mm.status().message();
  if (!mm.ok()) return {};
  // w [batch][N, K] viewed as [batch][K, N].
  const Operand plain{dims(p.batch, p.K, p.N),
                      batched ? std::vector<int64_t>{p.N * p.K, 1, p.K}
                              : std::vector<int64_t>{1, p.K},
                      DataType::kF32};
  std::vector<char> packed(mm->packed_weights_bytes() + 64);
  EXPECT_TRUE(mm->PackWeights(plain, d.w.data(), packed.data()).ok());
  std::vector<char> scratch(mm->scratch_bytes() * size_t(threads) + 64);
  std::vector<float> y(size_t(p.batch * p.M * p.N));
  mm->Run(d.x.data(), packed.data(), d.b.data(), y.data(), scratch.data(),
          threads, d.r.data());
  return y;
}

class MatMulTeamTest : public ::testing::TestWithParam<Problem> {};

TEST_P(MatMulTeamTest, MatchesReferenceAndIsTheSameAtEveryTeamSize) {
  const Problem& p = GetParam();
  const Data d(p);
  const std::vector<float> one = RunTeam(p, d, 1);
  ASSERT_EQ(one.size(), size_t(p.batch * p.M * p.N));
  test::ExpectAllClose(Reference(p, d), one.data(), 1e-4, "1 thread");
  for (int threads : {2, 3}) {
    const std::vector<float> many = RunTeam(p, d, threads);
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(0,
              std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
        << threads << " threads differ from 1";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTeamTest,
    ::testing::Values(
        // Full-width tiles: three row tiles, the last one short.
        Problem{1, 301, 70, 257, true, true, true},
        // Full-width from 128 rows on: two row tiles of 100.
        Problem{1, 200, 70, 257, true, true, true},
        // Below 128 rows, five column tiles, the last one of one column.
        Problem{1, 100, 70, 257, true, true, true},
        // A decode step: 5 rows, narrow column tiles, a short last one.
        Problem{1, 5, 70, 257, true, false, false},
        // Rank 3 as the fused q/k/v projection: broadcast src, per-batch
        // packed weights and bias, three row tiles.
        Problem{5, 3000, 40, 24, true, false, false},
        Problem{3, 7, 33, 100, false, false, false}));

// A short product's 64-column tiles read a long product's full-width
// packed weights in place (the same bytes as their own packing, so the
// same bits), a last partial block included; a product of another K or
// of unpacked weights cannot. A long product described, not created, packs
// the same bytes and answers alike.
TEST(MatMulPackingTest, ShortProductsReadALongOnesPackedWeights) {
  if (MatMulWideRows() != kMatMulRowTile) {
    GTEST_SKIP() << "oneDNN packs no column blocks on this CPU ("
                 << MatMulIsaName() << ")";
  }
  for (const int64_t N : {64, 200, 768}) {
    SCOPED_TRACE(N);
    const int64_t K = 70;
    const Problem p{1, 9, K, N, true, false, false};
    const Data d(p);
    const Operand bias{{1, N}, {}, DataType::kF32};
    const auto make = [&](int64_t M, int64_t k, bool compile = true) {
      Result<MatMul> mm = (compile ? &MatMul::Create : &MatMul::Describe)(
          {{M, k}, {}, DataType::kF32}, {{k, N}, {}, DataType::kF32}, &bias,
          {{M, N}, {}, DataType::kF32}, Threading::kTeam, PostOps{});
      EXPECT_TRUE(mm.ok()) << mm.status().message();
      return std::move(mm).value();
    };
    const Operand plain{{K, N}, {1, K}, DataType::kF32};
    const auto pack = [&](const MatMul& mm) {
      std::vector<char> packed(mm.packed_weights_bytes());
      EXPECT_TRUE(mm.PackWeights(plain, d.w.data(), packed.data()).ok());
      return packed;
    };
    const auto run = [&](const MatMul& mm, const std::vector<char>& packed) {
      std::vector<char> scratch(mm.scratch_bytes() * 2 + 64);
      std::vector<float> y(size_t(p.M * N));
      mm.Run(d.x.data(), packed.data(), d.b.data(), y.data(), scratch.data(),
             2);
      return y;
    };
    const MatMul long_mm = make(kMatMulPackedRows, K);
    const std::vector<char> long_packed = pack(long_mm);
    const MatMul own = make(p.M, K);
    const std::vector<float> expected = run(own, pack(own));
    test::ExpectAllClose(Reference(p, d), expected.data(), 1e-4, "own");
    MatMul reader = make(p.M, K);
    ASSERT_TRUE(reader.ReadPackedWeightsOf(long_mm));
    EXPECT_EQ(reader.packed_weights_bytes(), long_mm.packed_weights_bytes());
    EXPECT_EQ(run(reader, long_packed), expected);
    MatMul other_k = make(p.M, K + 16);
    EXPECT_FALSE(other_k.ReadPackedWeightsOf(long_mm));
    const MatMul described = make(kMatMulPackedRows, K, /*compile=*/false);
    EXPECT_EQ(pack(described), long_packed);
    MatMul described_reader = make(p.M, K, /*compile=*/false);
    EXPECT_TRUE(described_reader.ReadPackedWeightsOf(described));
    MatMul reader_of_described = make(p.M, K);
    ASSERT_TRUE(reader_of_described.ReadPackedWeightsOf(described));
    EXPECT_EQ(run(reader_of_described, long_packed), expected);
  }
}

// A worker's matmul as the attention core makes it: weights given with
// strides (k^T of a [N, D] key block), run whole on the calling thread.
TEST(MatMulWorkerTest, StridedWeightsMatchReference) {
  const Problem p{1, 70, 16, 300, false, false, false};
  const Data d(p);
  auto mm = MatMul::Create(
      {{p.M, p.K}, {}, DataType::kF32}, {{p.K, p.N}, {1, p.K}, DataType::kF32},
      nullptr, {{p.M, p.N}, {}, DataType::kF32}, Threading::kWorker);
  ASSERT_TRUE(mm.ok()) << mm.status().message();
  EXPECT_EQ(mm->packed_weights_bytes(), 0u);
  std::vector<char> scratch(mm->scratch_bytes() + 64);
  std::vector<float> y(size_t(p.M * p.N));
  mm->Run(d.x.data(), d.w.data(), nullptr, y.data(), scratch.data(), 1);
  test::ExpectAllClose(Reference(p, d), y.data(), 1e-4, "worker");
}

// From MatMulWideRows() rows on, a tile spans every column and has the rows
// kMatMulTileWork / N asks (or all of them), so every such product packs its
// weights alike (what a model packing once relies on, down to a 128-token
// prompt where oneDNN packs in column blocks); other shapes do not.
TEST(MatMulPackingTest, LongProductsShareOnePacking) {
  auto make = [](int64_t M, int64_t K, int64_t N, DataType type) {
    Result<MatMul> mm =
        MatMul::Create({{M, K}, {}, type}, {{K, N}, {}, type}, nullptr,
                       {{M, N}, {}, DataType::kF32}, Threading::kTeam);
    EXPECT_TRUE(mm.ok()) << mm.status().message();
    return std::move(mm).value();
  };
  for (const int64_t N : {16, 96, 768}) {
    SCOPED_TRACE(N);
    const int64_t M = kMatMulPackedRows;
    const MatMul base = make(M, 64, N, DataType::kF32);
    EXPECT_TRUE(
        base.SharesPackedWeights(make(M * 3 + 13, 64, N, DataType::kF32)));
    EXPECT_TRUE(base.SharesPackedWeights(
        make(MatMulWideRows(), 64, N, DataType::kF32)));
    EXPECT_TRUE(base.SharesPackedWeights(
        make(MatMulWideRows() + 37, 64, N, DataType::kF32)));
    EXPECT_FALSE(base.SharesPackedWeights(make(M, 64, N + 16, DataType::kF32)));
    EXPECT_FALSE(base.SharesPackedWeights(make(M, 80, N, DataType::kF32)));
  }
  // Below MatMulWideRows() rows a product of 768 columns is cut into column
  // tiles, each its own chunk.
  EXPECT_FALSE(make(kMatMulPackedRows, 64, 768, DataType::kF32)
                   .SharesPackedWeights(
                       make(MatMulWideRows() - 1, 64, 768, DataType::kF32)));
  // Weights given with strides are not packed: nothing to share.
  Result<MatMul> strided = MatMul::Create(
      {{64, 8}, {}, DataType::kF32}, {{8, 16}, {16, 1}, DataType::kF32},
      nullptr, {{64, 16}, {}, DataType::kF32}, Threading::kTeam);
  ASSERT_TRUE(strided.ok());
  EXPECT_FALSE(strided->SharesPackedWeights(*strided));
}

// Past MatMulLayoutRows(n) rows no product of n columns lays out its
// weights anew: the first row tile of every full-width product (the
// tiling's rule, recomputed here) has a size some product of at most that
// many rows had.
TEST(MatMulPackingTest, LayoutRowsReachEveryFirstRowTile) {
  const int64_t wide = MatMulWideRows();
  for (const int64_t n : {8, 96, 512, 768, 2048, 50257}) {
    SCOPED_TRACE(n);
    const int64_t tile = std::max(kMatMulMinRows, kMatMulTileWork / n);
    const auto first = [tile](int64_t m) {
      const int64_t tiles = (m + tile - 1) / tile;
      return (m + tiles - 1) / tiles;
    };
    const int64_t last = MatMulLayoutRows(n);
    ASSERT_GE(last, wide);
    std::vector<bool> seen(size_t(tile) + 1, false);
    for (int64_t m = wide; m <= last; ++m) seen[size_t(first(m))] = true;
    for (int64_t m = last + 1; m <= 20 * last; ++m) {
      ASSERT_TRUE(seen[size_t(first(m))]) << m << " rows";
    }
  }
}

TEST(MatMulCreateTest, EmptyOrMismatchedOperandsAreRefused) {
  const Operand ok{{4, 4}, {}, DataType::kF32};
  const Operand empty{{0, 4}, {}, DataType::kF32};
  const Operand rank1{{4}, {}, DataType::kF32};
  EXPECT_FALSE(MatMul::Create(empty, ok, nullptr, ok, Threading::kTeam).ok());
  EXPECT_FALSE(MatMul::Create(ok, ok, nullptr, empty, Threading::kTeam).ok());
  EXPECT_FALSE(
      MatMul::Create(rank1, rank1, nullptr, rank1, Threading::kWorker).ok());
  EXPECT_TRUE(MatMul::Create(ok, ok, nullptr, ok, Threading::kTeam).ok());
}

// Where oneDNN packs bf16 weights W^T [K, N] as RowsLinear's bf16 items of
// W [N, K] (PacksAsRowsLinear), its packed copy holds PackRowsLinear's bytes,
// padding included, so steps of a few rows read the copy prompts read: K
// odd, within a block or past one, N within an item or past several.
TEST(MatMulPackingTest, Bf16PackedWeightsAreRowsLinearsItems) {
  if (!HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  std::mt19937 rng(21);
  for (const auto& [K, N] : std::vector<std::pair<int64_t, int64_t>>{
           {45, 33}, {72, 100}, {2048, 64}, {301, 1001}}) {
    SCOPED_TRACE(std::to_string(K) + " x " + std::to_string(N));
    Result<MatMul> mm = MatMul::Create(
        {{kMatMulPackedRows, K}, {}, DataType::kBF16},
        {{K, N}, {}, DataType::kBF16}, nullptr,
        {{kMatMulPackedRows, N}, {}, DataType::kF32}, Threading::kTeam);
    ASSERT_TRUE(mm.ok()) << mm.status().message();
    if (!mm->PacksAsRowsLinear()) {
      GTEST_SKIP() << "oneDNN lays bf16 weights out otherwise on this CPU ("
                   << MatMulIsaName() << ")";
    }
    std::vector<hwy::bfloat16_t> w(size_t(N * K));
    for (hwy::bfloat16_t& v : w) {
      v = hwy::BF16FromF32(std::uniform_real_distribution<float>(-1, 1)(rng));
    }
    std::vector<hwy::bfloat16_t> packed(mm->packed_weights_bytes() / 2);
    ASSERT_TRUE(mm->PackWeights({{K, N}, {1, K}, DataType::kBF16}, w.data(),
                                packed.data())
                    .ok());
    std::vector<hwy::bfloat16_t> items(
        RowsLinearPackedSize<hwy::bfloat16_t>(size_t(N), size_t(K)));
    PackRowsLinear(w.data(), size_t(N), size_t(K), items.data(), 1);
    ASSERT_EQ(packed.size(), items.size());
    EXPECT_EQ(0, std::memcmp(packed.data(), items.data(), 2 * items.size()));
  }
  // Not fp32 weights, nor a product of few rows (its tiles' own chunks).
  EXPECT_FALSE(MatMul::Create({{kMatMulPackedRows, 64}, {}, DataType::kF32},
                              {{64, 64}, {}, DataType::kF32}, nullptr,
                              {{kMatMulPackedRows, 64}, {}, DataType::kF32},
                              Threading::kTeam)
                   ->PacksAsRowsLinear());
  EXPECT_FALSE(MatMul::Create({{9, 64}, {}, DataType::kBF16},
                              {{64, 300}, {}, DataType::kBF16}, nullptr,
                              {{9, 300}, {}, DataType::kF32}, Threading::kTeam)
                   ->PacksAsRowsLinear());
}

}  // namespace
}  // namespace attn::kernels
