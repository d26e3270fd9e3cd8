// The named shapes and the FLOP convention that the benchmark programs here
// and `attn bench` / `attn tune` (tools/) share: the peers' grid of
// ../shared/anchors, plus long-32k. Data and arithmetic only.
#ifndef ATTN_BENCH_GRID_H_
#define ATTN_BENCH_GRID_H_

#include <cstdint>
#include <vector>

namespace attn::bench {

struct GridShape {
  const char* name;
  int64_t batch, seq_len, d_in, d_out, heads;
};

// The grid the peer benchmarks run, in their order.
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

// Only the engine runs it: the peers' T x T scores would take 32 GB.
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

}  // namespace attn::bench

#endif  // ATTN_BENCH_GRID_H_
