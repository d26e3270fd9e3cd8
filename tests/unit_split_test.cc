// SplitUnits (kernels/unit_split.h): every unit runs exactly once, in runs
// of at most `most`, whatever the team; an owner takes a quarter of what is
// left of its share, never fewer than `least` units while it has them.
#include "kernels/unit_split.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace attn::kernels {
namespace {

// The runs an owner takes from the front of a share of `units`.
std::vector<uint32_t> FrontRuns(uint32_t units, uint32_t least, uint32_t most) {
  UnitRange range;
  range.Reset(0, units);
  std::vector<uint32_t> runs;
  uint32_t first, count, next = 0;
  while (range.TakeFront(least, most, &first, &count)) {
    EXPECT_EQ(next, first);
    next = first + count;
    runs.push_back(count);
  }
  EXPECT_EQ(units, next);
  return runs;
}

TEST(SplitUnitsTest, OwnerTakesAQuarterButNeverFewerThanLeast) {
  EXPECT_EQ(FrontRuns(37, 1, 32),
            (std::vector<uint32_t>{9, 7, 5, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(FrontRuns(37, 8, 32), (std::vector<uint32_t>{9, 8, 8, 8, 4}));
  EXPECT_EQ(FrontRuns(200, 8, 16),
            (std::vector<uint32_t>{16, 16, 16, 16, 16, 16, 16, 16, 16, 14, 10,
                                   8, 8, 8, 8}));
  EXPECT_EQ(FrontRuns(3, 8, 32), (std::vector<uint32_t>{3}));
}

TEST(SplitUnitsTest, EveryUnitOnceWhateverTheTeam) {
  for (uint32_t least : {1u, 2u, 4u, 8u}) {
    for (uint32_t most : {8u, 32u}) {
      for (size_t units : {0, 1, 7, 37, 100, 563}) {
        for (int threads : {1, 2, 3, 7}) {
          std::mutex mutex;
          std::vector<int> seen(units, 0);
          SplitUnits(units, least, most, threads,
                     [&](size_t first, size_t count) {
                       std::lock_guard<std::mutex> lock(mutex);
                       EXPECT_GE(count, 1u);
                       EXPECT_LE(count, most);
                       for (size_t u = first; u < first + count; ++u) {
                         ++seen[u];
                       }
                     });
          for (size_t u = 0; u < units; ++u) {
            ASSERT_EQ(1, seen[u])
                << "unit " << u << " of " << units << ", least " << least
                << ", most " << most << ", " << threads << " threads";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace attn::kernels
