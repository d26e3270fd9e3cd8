// Tests the decode attention kernel on every compiled Highway target against
// a scalar double reference and against reference::CausalAttention: key
// counts around the chunk size, head dims around the padding, ragged rows,
// huge logits, NaN and Inf, and bitwise identity across thread counts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/decode_test.cc"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/decode-inl.h"
#include "kernels/threads.h"
#include "tests/reference.h"
#include "tests/test_util.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A cache of `seqs` sequences of `capacity` keys x Hkv K/V heads, zero
// padded, token major ([seqs, capacity, Hkv, Dp]) unless UseHeadMajor, and
// one query row of H heads per entry of `keys` (row r belongs to sequence
// r % seqs). Query head h reads K/V head h / (H / Hkv); a row sees its last
// `window` keys (0: all).
struct Case {
  size_t H, Hkv, D, Dp, capacity, seqs;
  std::vector<size_t> keys;
  std::vector<float> q, k, v, ctx, partials;
  std::vector<DecodeRow> rows;
  DecodeParams params;

  Case(std::mt19937& rng, size_t heads, size_t head_dim, size_t num_seqs,
       std::vector<size_t> row_keys, float lo, float hi, size_t kv_heads = 0,
       size_t window = 0)
      : H(heads),
        Hkv(kv_heads == 0 ? heads : kv_heads),
        D(head_dim),
        Dp(DecodePaddedDim(head_dim)),
        capacity(*std::max_element(row_keys.begin(), row_keys.end())),
        seqs(num_seqs),
        keys(std::move(row_keys)) {
    auto fill = [&](std::vector<float>& x, size_t rows_total) {
      x.assign(rows_total * Dp, 0.0f);
      std::uniform_real_distribution<float> dist(lo, hi);
      for (size_t r = 0; r < rows_total; ++r) {
        for (size_t i = 0; i < D; ++i) x[r * Dp + i] = dist(rng);
      }
    };
    fill(q, keys.size() * H);
    fill(k, seqs * Hkv * capacity);
    fill(v, seqs * Hkv * capacity);
    params.num_heads = H;
    params.num_kv_heads = kv_heads;
    params.head_dim = D;
    params.padded_dim = Dp;
    params.key_stride = Hkv * Dp;
    params.head_stride = Dp;
    params.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
    params.window = window;
    ctx.assign(keys.size() * H * D, -1.0f);
    size_t first = 0;
    for (size_t r = 0; r < keys.size(); ++r) {
      DecodeRow row;
      const size_t s = r % seqs;
      row.q = q.data() + r * H * Dp;
      row.k = k.data() + s * Hkv * capacity * Dp;
      row.v = v.data() + s * Hkv * capacity * Dp;
      row.num_keys = keys[r];
      row.ctx = ctx.data() + r * H * D;
      row.first_partial = first;
      first += DecodeRowPartials(params, keys[r]);
      rows.push_back(row);
    }
    // 64-byte aligned partials: over-allocate and offset.
    partials.assign(first * DecodePartialFloats(Dp) + kDecodeAlign, 0.0f);
  }

  // The same data read as [seqs, Hkv, capacity, Dp].
  void UseHeadMajor() {
    params.key_stride = Dp;
    params.head_stride = capacity * Dp;
  }

  // Index of key j of K/V head g of sequence s in k and v.
  size_t KvAt(size_t s, size_t g, size_t j) const {
    return s * Hkv * capacity * Dp + g * params.head_stride +
           j * params.key_stride;
  }

  float* AlignedPartials() {
    const auto addr = reinterpret_cast<uintptr_t>(partials.data());
    return partials.data() + ((64 - addr % 64) % 64) / sizeof(float);
  }

  // Partials and ctx start NaN: a slot the kernel reads before writing, or
  // an output it leaves unwritten, shows.
  void Run(int threads, DecodePrefetch prefetch = DecodePrefetchOfThisCpu()) {
    std::fill(partials.begin(), partials.end(), NAN);
    std::fill(ctx.begin(), ctx.end(), NAN);
    DecodeAttentionT(params, rows.data(), rows.size(), AlignedPartials(),
                     threads, prefetch);
  }

  // Scalar double reference: softmax(scale * q.k_j) . v over the row's
  // visible keys j of the head's K/V head.
  std::vector<double> Expected() const {
    std::vector<double> out(keys.size() * H * D, 0.0);
    for (size_t r = 0; r < keys.size(); ++r) {
      const size_t s = r % seqs;
      const size_t first =
          params.window == 0 ? 0 : keys[r] - std::min(keys[r], params.window);
      for (size_t h = 0; h < H; ++h) {
        const size_t g = h / (H / Hkv);
        const float* qr = q.data() + (r * H + h) * Dp;
        std::vector<double> p(keys[r]);
        double max = -INFINITY;
        for (size_t j = first; j < keys[r]; ++j) {
          const float* kj = k.data() + KvAt(s, g, j);
          double dot = 0.0;
          for (size_t i = 0; i < D; ++i) dot += double(qr[i]) * kj[i];
          p[j] = dot * params.scale;
          max = std::max(max, p[j]);
        }
        double sum = 0.0;
        for (size_t j = first; j < keys[r]; ++j) {
          sum += p[j] = std::exp(p[j] - max);
        }
        for (size_t j = first; j < keys[r]; ++j) {
          const float* vj = v.data() + KvAt(s, g, j);
          for (size_t i = 0; i < D; ++i) {
            out[(r * H + h) * D + i] += p[j] / sum * vj[i];
          }
        }
      }
    }
    return out;
  }

  void ExpectMatchesReference(const std::string& what) const {
    const auto expected = Expected();
    test::ExpectAllClose(expected, ctx.data(),
                         1e-5 * std::max(1.0, test::MaxAbs(expected)), what);
  }
};

void TestMatchesReferenceAroundChunkAndPadding() {
  std::mt19937 rng(7);
  const size_t C = kDecodeChunk;
  for (size_t D : {size_t{1}, size_t{5}, size_t{16}, size_t{24}, size_t{64},
                   size_t{80}, size_t{130}}) {
    for (size_t keys : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, C - 1, C,
                        C + 1, 2 * C + 3}) {
      for (bool head_major : {false, true}) {
        Case c(rng, /*heads=*/2, D, /*num_seqs=*/1, {keys}, -1.0f, 1.0f);
        if (head_major) c.UseHeadMajor();
        c.Run(2);
        c.ExpectMatchesReference("D " + std::to_string(D) + " keys " +
                                 std::to_string(keys) +
                                 (head_major ? " head major" : ""));
      }
    }
  }
}

void TestRaggedRowsMatchReference() {
  std::mt19937 rng(11);
  // Rows of three sequences with different lengths, in one call.
  Case c(rng, /*heads=*/3, /*head_dim=*/24, /*num_seqs=*/3,
         {1, 700, 257, 300, 9, 1}, -2.0f, 2.0f);
  c.Run(3);
  const auto expected = c.Expected();
  test::ExpectAllClose(expected, c.ctx.data(),
                       1e-5 * std::max(1.0, test::MaxAbs(expected)), "ragged");
}

void TestHugeLogitsStayFinite() {
  std::mt19937 rng(3);
  // Scores around 1e4: exp overflows unless each chunk subtracts its max,
  // and the merge rescales by exp(m_c - m).
  Case c(rng, /*heads=*/1, /*head_dim=*/16, /*num_seqs=*/1, {600}, 20.0f,
         30.0f);
  c.Run(2);
  const auto expected = c.Expected();
  test::ExpectAllClose(expected, c.ctx.data(),
                       1e-5 * std::max(1.0, test::MaxAbs(expected)), "huge");
}

// The ctx of c.Run(1) is bitwise that of more threads.
void ExpectBitwiseAcrossThreadCounts(Case& c, const std::string& what) {
  c.Run(1);
  const std::vector<float> one = c.ctx;
  for (int threads : {2, 3, 7}) {
    std::fill(c.ctx.begin(), c.ctx.end(), 0.0f);
    c.Run(threads);
    EXPECT_EQ(0,
              std::memcmp(one.data(), c.ctx.data(), one.size() * sizeof(float)))
        << what << ", threads " << threads;
  }
}

void TestBitwiseIdenticalAcrossThreadCounts() {
  std::mt19937 rng(5);
  Case c(rng, /*heads=*/2, /*head_dim=*/64, /*num_seqs=*/2, {1000, 3, 513, 256},
         -1.0f, 1.0f);
  ExpectBitwiseAcrossThreadCounts(c, "2 heads");
  // One row of one chunk: at 1 thread one item holds all 12 heads, at more
  // the heads split into blocks (DecodeSplitOf).
  Case wide(rng, /*heads=*/12, /*head_dim=*/64, /*num_seqs=*/1, {160}, -1.0f,
            1.0f);
  ExpectBitwiseAcrossThreadCounts(wide, "12 heads");
  wide.ExpectMatchesReference("12 heads");
  // Groups where the split changes which K/V heads share a pass: 40 heads
  // in groups of 5 (six K/V heads per pass at 1 thread), and one group of
  // 40 (two passes).
  for (size_t kv_heads : {size_t{8}, size_t{1}}) {
    const size_t heads = 40;
    Case grouped(rng, heads, /*head_dim=*/24, /*num_seqs=*/2, {300, 40}, -1.0f,
                 1.0f, kv_heads);
    ExpectBitwiseAcrossThreadCounts(grouped, std::to_string(heads) + " heads");
    grouped.ExpectMatchesReference(std::to_string(heads) + " heads");
  }
}

void TestNonFinitePropagates() {
  std::mt19937 rng(9);
  Case c(rng, /*heads=*/2, /*head_dim=*/8, /*num_seqs=*/1, {300, 300, 4}, -1.0f,
         1.0f);
  // Head 0: a NaN key in the second chunk. Head 1: +inf in a value.
  c.k[c.KvAt(0, 0, 280) + 3] = NAN;
  c.v[c.KvAt(0, 1, 2) + 1] = kInf;
  c.Run(2);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t i = 0; i < c.D; ++i) {
      const float h0 = c.ctx[(r * c.H + 0) * c.D + i];
      const float h1 = c.ctx[(r * c.H + 1) * c.D + i];
      // Row 2 sees only keys 0..3: the NaN key is not visible to it.
      EXPECT_EQ(r < 2, std::isnan(h0)) << "row " << r << " i " << i;
      EXPECT_TRUE(std::isnan(h1) || std::isinf(h1) || i != 1)
          << "row " << r << " i " << i;
    }
  }
}

void TestMatchesFullCausalAttention() {
  // qkv planes [3, H, B*T, D] as the full-sequence core takes them; every
  // position t of every sequence is decoded as a row with t + 1 keys.
  std::mt19937 rng(13);
  const size_t B = 2, T = 300, H = 2, D = 8, Dp = DecodePaddedDim(D);
  const std::vector<float> qkv =
      test::RandomVector(rng, 3 * H * B * T * D, -1.0f, 1.0f);
  auto at = [&](size_t which, size_t h, size_t b, size_t t) {
    return qkv.data() + (((which * H + h) * B + b) * T + t) * D;
  };
  std::vector<float> q(B * T * H * Dp, 0.f), k(B * H * T * Dp, 0.f),
      v(B * H * T * Dp, 0.f), ctx(B * T * H * D, 0.f);
  for (size_t b = 0; b < B; ++b) {
    for (size_t h = 0; h < H; ++h) {
      for (size_t t = 0; t < T; ++t) {
        std::memcpy(&q[((b * T + t) * H + h) * Dp], at(0, h, b, t),
                    D * sizeof(float));
        std::memcpy(&k[((b * H + h) * T + t) * Dp], at(1, h, b, t),
                    D * sizeof(float));
        std::memcpy(&v[((b * H + h) * T + t) * Dp], at(2, h, b, t),
                    D * sizeof(float));
      }
    }
  }
  DecodeParams params;  // head major: [B, H, T, Dp]
  params.num_heads = H;
  params.head_dim = D;
  params.padded_dim = Dp;
  params.key_stride = Dp;
  params.head_stride = T * Dp;
  params.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  std::vector<DecodeRow> rows;
  size_t first = 0;
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      DecodeRow row;
      row.q = &q[(b * T + t) * H * Dp];
      row.k = &k[b * H * T * Dp];
      row.v = &v[b * H * T * Dp];
      row.num_keys = t + 1;
      row.ctx = &ctx[(b * T + t) * H * D];
      row.first_partial = first;
      first += H * DecodeChunks(t + 1);
      rows.push_back(row);
    }
  }
  hwy::AlignedFreeUniquePtr<float[]> partials =
      hwy::AllocateAligned<float>(first * DecodePartialFloats(Dp));
  DecodeAttentionT(params, rows.data(), rows.size(), partials.get(), 2,
                   DecodePrefetchOfThisCpu());
  const std::vector<double> expected =
      reference::CausalAttention(qkv.data(), B, T, H, D);
  test::ExpectAllClose(expected, ctx.data(),
                       1e-5 * std::max(1.0, test::MaxAbs(expected)),
                       "full causal");
}

void TestGroupedQueryMatchesReference() {
  std::mt19937 rng(17);
  // Groups of 1, 2 and 4, MQA, a group of 40 (two passes of at most
  // kDecodeMaxHeads heads), and 40 heads in groups of 5 (eight K/V heads
  // don't fit one pass); ragged rows over chunk boundaries.
  const size_t shapes[][2] = {{4, 4}, {4, 2}, {8, 2}, {6, 1}, {40, 1}, {40, 8}};
  for (const auto& shape : shapes) {
    for (bool head_major : {false, true}) {
      Case c(rng, shape[0], /*head_dim=*/24, /*num_seqs=*/2, {1, 600, 257, 33},
             -2.0f, 2.0f, shape[1]);
      if (head_major) c.UseHeadMajor();
      for (int threads : {1, 2}) {
        c.Run(threads);
        c.ExpectMatchesReference("H " + std::to_string(shape[0]) + " Hkv " +
                                 std::to_string(shape[1]) + " threads " +
                                 std::to_string(threads) +
                                 (head_major ? " head major" : ""));
      }
    }
  }
}

void TestSlidingWindowMatchesReference() {
  std::mt19937 rng(19);
  const size_t C = kDecodeChunk;
  // Windows of 1 key, 32, one chunk plus one, and wider than every row.
  for (size_t window : {size_t{1}, size_t{32}, C + 1, size_t{5000}}) {
    for (size_t kv_heads : {size_t{4}, size_t{1}}) {
      Case c(rng, /*heads=*/4, /*head_dim=*/16, /*num_seqs=*/2,
             {1, 31, 32, 33, C + 2, 3 * C + 5}, -2.0f, 2.0f, kv_heads, window);
      c.Run(3);
      c.ExpectMatchesReference("window " + std::to_string(window) + " Hkv " +
                               std::to_string(kv_heads));
    }
  }
}

void TestGroupedWindowedBitwiseAcrossThreadCounts() {
  std::mt19937 rng(23);
  Case c(rng, /*heads=*/8, /*head_dim=*/64, /*num_seqs=*/2, {1000, 3, 513, 256},
         -1.0f, 1.0f, /*kv_heads=*/2, /*window=*/300);
  ExpectBitwiseAcrossThreadCounts(c, "grouped, windowed");
}

// Head h of c, run alone (one head of one sequence) with its own query and
// K/V rows, gives the bits of c's head h.
void ExpectHeadsAloneGiveTheSameBits(std::mt19937& rng, Case& c,
                                     const std::string& what) {
  c.Run(2);
  const size_t keys = c.keys[0];
  Case single(rng, /*heads=*/1, c.D, /*num_seqs=*/1, {keys}, -1.0f, 1.0f);
  for (size_t h = 0; h < c.H; ++h) {
    const size_t g = h / (c.H / c.Hkv);
    std::copy_n(c.q.data() + h * c.Dp, c.Dp, single.q.data());
    for (size_t j = 0; j < keys; ++j) {
      std::copy_n(c.k.data() + c.KvAt(0, g, j), c.Dp,
                  single.k.data() + single.KvAt(0, 0, j));
      std::copy_n(c.v.data() + c.KvAt(0, g, j), c.Dp,
                  single.v.data() + single.KvAt(0, 0, j));
    }
    single.Run(1);
    EXPECT_EQ(0, std::memcmp(single.ctx.data(), c.ctx.data() + h * c.D,
                             c.D * sizeof(float)))
        << what << " head " << h;
  }
}

void TestGroupingChangesNoBit() {
  // A head gives the same bits alone, among others in a block of registers
  // (ungrouped heads of 1-8 vectors), or in a group sharing its K/V head
  // (tile by tile up to 8 vectors, else key by key): each sum runs in key
  // order in every pass. 17 heads fill
  // blocks of 16, 8, 4 or 2 heads and leave a single one (AVX-512: D 16,
  // 32, 64, 128; AVX2: blocks of 4, 2, 1); 7 leave blocks of halving sizes
  // (4, 2 and 1 for AVX-512's D 64); D 96 is 6 vectors on AVX-512 (key by
  // key on AVX2), D 200 key by key everywhere.
  std::mt19937 rng(29);
  for (size_t H : {size_t{17}, size_t{7}}) {
    for (size_t D : {size_t{16}, size_t{32}, size_t{40}, size_t{64}, size_t{96},
                     size_t{128}, size_t{200}}) {
      for (size_t kv_heads : {H, size_t{1}}) {
        Case c(rng, H, D, /*num_seqs=*/1, {700}, -1.0f, 1.0f, kv_heads);
        ExpectHeadsAloneGiveTheSameBits(rng, c,
                                        "H " + std::to_string(H) + " D " +
                                            std::to_string(D) + " Hkv " +
                                            std::to_string(kv_heads));
      }
    }
  }
}

void TestChunkWithoutWeightAddsNothing() {
  // Every key of the first chunk scores -inf (a -inf in a key against a
  // positive query): that chunk's max is -inf and its sums must be zero,
  // not -inf times the values, for the merge to weigh it by exp(-inf) = 0.
  // Ungrouped and grouped (tile by tile for D 8 and 64).
  std::mt19937 rng(37);
  for (size_t D : {size_t{8}, size_t{64}}) {
    for (size_t kv_heads : {size_t{5}, size_t{1}}) {
      Case c(rng, /*heads=*/5, D, /*num_seqs=*/1, {kDecodeChunk + 40}, 0.5f,
             1.0f, kv_heads);
      for (size_t j = 0; j < kDecodeChunk; ++j) {
        for (size_t h = 0; h < c.Hkv; ++h) c.k[c.KvAt(0, h, j)] = -kInf;
      }
      c.Run(2);
      c.ExpectMatchesReference("D " + std::to_string(D) + " Hkv " +
                               std::to_string(kv_heads));
    }
  }
}

void TestPrefetchChangesNoBit() {
  // Rows shorter than the prefetch distance, over chunk boundaries, grouped
  // and not, in either cache layout: heads {H, Hkv, D}. Grouped heads of D
  // 24 go tile by tile (prefetching the next tile either way) except on
  // the scalar target; of D 200, key by key everywhere. (A prefetch of a
  // wrong address would not show: prefetches never fault, and sanitizers
  // ignore them.)
  std::mt19937 rng(31);
  const size_t shapes[][3] = {
      {12, 12, 24}, {8, 2, 24}, {40, 8, 24}, {8, 2, 200}};
  for (const auto& shape : shapes) {
    for (bool head_major : {false, true}) {
      Case c(rng, shape[0], shape[2], /*num_seqs=*/2,
             {1, kDecodePrefetchKeys, 600, 257}, -2.0f, 2.0f, shape[1]);
      if (head_major) c.UseHeadMajor();
      const std::string what =
          "H " + std::to_string(shape[0]) + " Hkv " + std::to_string(shape[1]) +
          " D " + std::to_string(shape[2]) + (head_major ? " head major" : "");
      c.Run(2, DecodePrefetch::kNone);
      const std::vector<float> plain = c.ctx;
      c.Run(2, DecodePrefetch::kKeysAhead);
      EXPECT_EQ(0, std::memcmp(plain.data(), c.ctx.data(),
                               plain.size() * sizeof(float)))
          << what;
      c.ExpectMatchesReference(what);
    }
  }
}

}  // namespace
}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {
namespace {
HWY_BEFORE_TEST(DecodeTest);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestMatchesReferenceAroundChunkAndPadding);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestRaggedRowsMatchReference);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestHugeLogitsStayFinite);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestBitwiseIdenticalAcrossThreadCounts);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestNonFinitePropagates);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestMatchesFullCausalAttention);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestGroupedQueryMatchesReference);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestSlidingWindowMatchesReference);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestGroupedWindowedBitwiseAcrossThreadCounts);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestGroupingChangesNoBit);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestChunkWithoutWeightAddsNothing);
HWY_EXPORT_AND_TEST_P(DecodeTest, TestPrefetchChangesNoBit);

// DecodeAppend against plain element loops: 40 rows of 2 sequences into a
// cache with head_dim 5 (padded to 16), token major [2, cap, Hkv, Dp] or
// head major [2, Hkv, cap, Dp], from rows of q [H, D], k [Hkv, D], v [Hkv,
// D]; enough heads that the rows make more than one chunk of work to thread.
void ExpectAppendMatchesElementLoops(size_t H, size_t Hkv, bool head_major) {
  const size_t D = 5, Dp = DecodePaddedDim(D), cap = 32, rows = 40;
  const size_t row_floats = (H + 2 * Hkv) * D;
  ASSERT_GT(rows * row_floats, kParallelGrainFloats);
  std::mt19937 rng(3);
  const std::vector<float> qkv =
      test::RandomVector(rng, rows * row_floats, -1.0f, 1.0f);
  // Caches and q rows start full of junk: the kernel must zero the padding.
  std::vector<float> k(2 * Hkv * cap * Dp, 7.0f), v(k), q(rows * H * Dp, 7.0f);
  std::vector<float> want_k(k), want_v(v), want_q(q);
  DecodeParams params;
  params.num_heads = H;
  params.num_kv_heads = Hkv;
  params.head_dim = D;
  params.padded_dim = Dp;
  params.key_stride = head_major ? Dp : Hkv * Dp;
  params.head_stride = head_major ? cap * Dp : Dp;
  std::vector<DecodeRow> row(rows);
  for (size_t r = 0; r < rows; ++r) {
    const size_t seq = r % 2, pos = r / 2;
    row[r].q = q.data() + r * H * Dp;
    row[r].k = k.data() + seq * Hkv * cap * Dp;
    row[r].v = v.data() + seq * Hkv * cap * Dp;
    row[r].num_keys = pos + 1;
    for (size_t d = 0; d < Dp; ++d) {
      const bool lane = d < D;
      for (size_t h = 0; h < H; ++h) {
        want_q[r * H * Dp + h * Dp + d] =
            lane ? qkv[r * row_floats + h * D + d] : 0.0f;
      }
      for (size_t g = 0; g < Hkv; ++g) {
        const size_t at = seq * Hkv * cap * Dp + g * params.head_stride +
                          pos * params.key_stride + d;
        const size_t src = r * row_floats + H * D + g * D + d;
        want_k[at] = lane ? qkv[src] : 0.0f;
        want_v[at] = lane ? qkv[src + Hkv * D] : 0.0f;
      }
    }
  }
  for (int threads : {1, 3}) {
    std::fill(k.begin(), k.end(), 7.0f);
    std::fill(v.begin(), v.end(), 7.0f);
    std::fill(q.begin(), q.end(), 7.0f);
    DecodeAppend(params, qkv.data(), row.data(), rows, threads);
    EXPECT_EQ(q, want_q) << threads;
    EXPECT_EQ(k, want_k) << threads;
    EXPECT_EQ(v, want_v) << threads;
  }
}

TEST(DecodeAppendTest, MatchesElementLoops) {
  for (bool head_major : {false, true}) {
    ExpectAppendMatchesElementLoops(/*H=*/96, /*Hkv=*/96, head_major);
  }
}

TEST(DecodeAppendTest, GroupedWritesOnlyKvHeads) {
  for (bool head_major : {false, true}) {
    ExpectAppendMatchesElementLoops(/*H=*/128, /*Hkv=*/64, head_major);
    ExpectAppendMatchesElementLoops(/*H=*/128, /*Hkv=*/1, head_major);
  }
}

// The engine's decoders lay their caches out by DecodeBlocksHeads: GPT-2's
// 12 ungrouped heads of 64 dimensions head major on AVX2 and AVX-512 (8
// and 4 vectors), grouped heads and heads wider than 8 vectors token major.
TEST(DecodeBlocksHeadsTest, UngroupedHeadsOfUpToEightVectors) {
#if HWY_ARCH_X86
  if ((hwy::SupportedTargets() & (HWY_AVX2 | HWY_AVX3)) == 0) {
    GTEST_SKIP() << "needs AVX2 or AVX-512";
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
  DecodeParams params;
  params.num_heads = 12;
  params.padded_dim = DecodePaddedDim(64);
  EXPECT_TRUE(DecodeBlocksHeads(params));
  params.num_kv_heads = 12;
  EXPECT_TRUE(DecodeBlocksHeads(params));
  params.num_kv_heads = 3;
  EXPECT_FALSE(DecodeBlocksHeads(params));
  params.num_kv_heads = 12;
  params.padded_dim = DecodePaddedDim(300);  // 19 vectors or more
  EXPECT_FALSE(DecodeBlocksHeads(params));
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
