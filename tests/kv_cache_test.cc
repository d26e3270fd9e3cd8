// KvCache: slots are added lowest first, removed, forked and truncated once
// for every layer; the storage is zeroed, laid out as KvView says, and
// checked against the cap before it is allocated.
#include "engine/runtime/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attn {
namespace {

KvCache::Shape SmallShape(bool head_major) {
  KvCache::Shape shape;
  shape.layers = 3;
  shape.sequences = 4;
  shape.capacity = 5;
  shape.kv_heads = 2;
  shape.padded_dim = 16;
  shape.head_major = head_major;
  return shape;
}

KvCache MakeCache(const KvCache::Shape& shape, bool all_live) {
  Result<KvCache> cache =
      KvCache::Create(shape, all_live, 0, uint64_t{1} << 30, "a test cache");
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  return std::move(*cache);
}

// The float of key `t`, head `g`, lane `i` of sequence `b` in `layer`'s K
// (or V), addressed as KvView documents.
float& At(const KvCache& cache, int64_t layer, bool v, int64_t b, int64_t t,
          int64_t g, int64_t i) {
  const KvView view = cache.layer(layer);
  float* base = v ? view.v : view.k;
  return base[b * view.batch_stride + g * view.head_stride +
              t * view.row_stride + i];
}

// A value no two (layer, K/V, sequence, token, head, lane) share.
float Mark(int64_t layer, bool v, int64_t b, int64_t t, int64_t g, int64_t i) {
  return static_cast<float>(((((layer * 2 + v) * 8 + b) * 8 + t) * 4 + g) * 32 +
                            i);
}

TEST(KvCacheTest, LayersAndSequencesAreDisjointAndStartZero) {
  for (const bool head_major : {false, true}) {
    const KvCache::Shape shape = SmallShape(head_major);
    KvCache cache = MakeCache(shape, true);
    EXPECT_EQ(cache.storage_bytes(),
              uint64_t{2 * 3 * 4 * 5 * 2 * 16} * sizeof(float));
    EXPECT_EQ(cache.bytes(), KvCache::BytesFor(shape));
    std::vector<const float*> seen;
    for (int64_t l = 0; l < 3; ++l) {
      for (const bool v : {false, true}) {
        for (int64_t b = 0; b < 4; ++b) {
          for (int64_t t = 0; t < 5; ++t) {
            for (int64_t g = 0; g < 2; ++g) {
              for (int64_t i = 0; i < 16; ++i) {
                float& x = At(cache, l, v, b, t, g, i);
                EXPECT_EQ(x, 0.0f);
                x = Mark(l, v, b, t, g, i);
              }
            }
          }
        }
      }
    }
    // Every float written once: no two addresses coincide.
    for (int64_t l = 0; l < 3; ++l) {
      for (int64_t b = 0; b < 4; ++b) {
        EXPECT_EQ(At(cache, l, true, b, 4, 1, 15), Mark(l, true, b, 4, 1, 15));
        EXPECT_EQ(At(cache, l, false, b, 0, 0, 0), Mark(l, false, b, 0, 0, 0));
      }
    }
  }
}

TEST(KvCacheTest, AddTakesTheLowestFreeSlot) {
  KvCache cache = MakeCache(SmallShape(false), false);
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_EQ(cache.length(b), -1);
    EXPECT_EQ(*cache.Add(), b);
    EXPECT_EQ(cache.length(b), 0);
  }
  const Result<int64_t> full = cache.Add();
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("all 4 sequence slots are live"),
            std::string::npos)
      << full.status().message();
  ASSERT_TRUE(cache.Remove(2).ok());
  ASSERT_TRUE(cache.Remove(0).ok());
  EXPECT_EQ(cache.length(2), -1);
  EXPECT_EQ(*cache.Add(), 0);
  EXPECT_EQ(*cache.Add(), 2);
  const Status twice = cache.Remove(7);
  EXPECT_NE(twice.message().find("cannot remove sequence 7: it is not a live "
                                 "sequence (out of range [0, 4))"),
            std::string::npos)
      << twice.message();
}

TEST(KvCacheTest, ForkCopiesEveryLayersHeldTokensOnly) {
  for (const bool head_major : {false, true}) {
    KvCache cache = MakeCache(SmallShape(head_major), false);
    const int64_t a = *cache.Add();
    for (int64_t l = 0; l < 3; ++l) {
      for (const bool v : {false, true}) {
        for (int64_t t = 0; t < 5; ++t) {
          for (int64_t g = 0; g < 2; ++g) {
            for (int64_t i = 0; i < 16; ++i) {
              At(cache, l, v, a, t, g, i) = Mark(l, v, a, t, g, i);
            }
          }
        }
      }
    }
    cache.Extend(a, 3);
    const Result<int64_t> fork = cache.Fork(a);
    ASSERT_TRUE(fork.ok()) << fork.status().message();
    EXPECT_EQ(cache.length(*fork), 3);
    for (int64_t l = 0; l < 3; ++l) {
      for (const bool v : {false, true}) {
        for (int64_t g = 0; g < 2; ++g) {
          for (int64_t t = 0; t < 5; ++t) {
            // The held tokens are copied; the slot's others stay zero.
            const float want = t < 3 ? Mark(l, v, a, t, g, 7) : 0.0f;
            EXPECT_EQ(At(cache, l, v, *fork, t, g, 7), want)
                << head_major << " layer " << l << " token " << t;
          }
        }
      }
    }
  }
}

TEST(KvCacheTest, TruncateAndClearKeepSlotsLive) {
  KvCache cache = MakeCache(SmallShape(false), true);
  cache.Extend(1, 4);
  const Status longer = cache.Truncate(1, 5);
  EXPECT_NE(longer.message().find("cannot truncate sequence 1 of 4 tokens "
                                  "to 5, want 0 <= length <= 4"),
            std::string::npos)
      << longer.message();
  ASSERT_TRUE(cache.Truncate(1, 2).ok());
  EXPECT_EQ(cache.length(1), 2);
  cache.Clear();
  for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(cache.length(b), 0);
}

TEST(KvCacheTest, RefusedOverTheCapNamingWhat) {
  const KvCache::Shape shape = SmallShape(true);
  const uint64_t bytes = KvCache::BytesFor(shape);
  const uint64_t held = 1000;
  EXPECT_TRUE(KvCache::Create(shape, false, held, held + bytes, "x").ok());
  const Result<KvCache> over =
      KvCache::Create(shape, false, held, held + bytes - 1, "the caches");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(over.status().message().find("the caches"), std::string::npos)
      << over.status().message();
}

}  // namespace
}  // namespace attn
