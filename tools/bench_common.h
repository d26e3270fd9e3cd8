// What `attn bench` and `attn tune` share: the named shape grid (the one
// the peer benchmarks run), the FLOP convention, seeded random blocks and
// the timing loop. Public API only, like any embedder.
#ifndef ATTN_TOOLS_BENCH_COMMON_H_
#define ATTN_TOOLS_BENCH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "bench/grid.h"
#include "tools/flags.h"

namespace attn::cli {

// The flags of `attn bench` that its modes (the grid, --decode, --graph,
// --model) share: each mode takes what applies to it.
struct BenchFlags {
  std::string shape;         // the grid's and --graph's
  std::string weights;       // --graph's and --model's; empty: random weights
  std::vector<int> threads;  // empty: the library's default
  std::vector<int64_t> batches;  // --decode's and --model's; empty: 1, 8
  std::vector<DType> dtypes{DType::kF32};  // each measured in turn
  double min_time = 1.0;
  uint64_t max_memory = 0;  // bytes; 0 = attn::DefaultMaxMemoryBytes()
  std::string config;       // a tuned file (attn tune --save), or empty
  bool json = false;
  AttentionFlags attention;  // --kv-heads, --rope-theta, --sliding-window
};

struct Shape {
  std::string name;
  int64_t batch, seq_len, d_in, d_out, heads;
  int64_t kv_heads = 0;        // MhaConfig::num_kv_heads; 0: heads
  RopeConfig rope{};           // rope.theta 0: no rotary embeddings
  int64_t sliding_window = 0;  // 0: full causal
};

// The peers' grid of bench/grid.h (seed ... long-4k), then long-32k and
// llama-2k.
const std::vector<Shape>& Grid();
// The names of `shapes` joined by `separator`, e.g. for help text.
std::string Names(const std::vector<Shape>& shapes, const char* separator);
// Help text for --shape: every named shape with its b,T,d_in,d_out,h, and
// the default `default_names`.
std::string ShapeFlagHelp(const std::string& default_names);
// The peers' grid alone: the shapes `attn bench` runs by default.
std::vector<Shape> PeerGrid();

// "gpt2-1k,long-4k" or "b,T,d_in,d_out,h"; `fallback` (names) when empty.
Result<std::vector<Shape>> ParseShapes(const std::string& spec,
                                       const std::string& fallback);

// `shapes` with the attention flags that were given (--kv-heads,
// --rope-theta and its scaling, --sliding-window) in place of each shape's
// own; refuses kv heads that do not divide a shape's heads.
Result<std::vector<Shape>> WithAttentionFlags(std::vector<Shape> shapes,
                                              int64_t kv_heads,
                                              const RopeConfig& rope,
                                              int64_t sliding_window);

// AttentionFlops (attn/attn.hpp) of the shape's attention.
double Flops(const Shape& s);
// The middle value of `v` (the mean of the middle two for an even count);
// `v` must not be empty.
double Median(std::vector<double> v);
// b*T tokens per second for one run of `ms` milliseconds.
double TokensPerSecond(const Shape& s, double ms);

// Refuses (kOutOfMemory, naming `what`) `bytes` over `max_memory` (0:
// DefaultMaxMemoryBytes()): checked before a benchmark allocates its own
// weights and inputs. In double: a hostile shape's product overflows 64 bits.
Status CheckBenchMemory(const std::string& what, double bytes,
                        uint64_t max_memory);

// One block of seeded random weights (nn.Linear's init range) and input.
struct RandomBlock {
  // Refuses (kOutOfMemory) a shape whose weights, input and output would pass
  // `max_memory` bytes (0: DefaultMaxMemoryBytes()) before allocating them.
  static Result<std::unique_ptr<RandomBlock>> Create(const Shape& shape,
                                                     uint64_t max_memory);
  Shape shape;
  MhaConfig config;
  bench::RandomMhaWeights random_weights;
  MhaWeights weights;  // random_weights.view()
  std::vector<float> x, y;

 private:
  explicit RandomBlock(const Shape& shape);
};

struct Timing {
  int threads = 0;  // the resolved team size
  double median_ms = 0, min_ms = 0;
  size_t reps = 0;
  size_t peak_rss_bytes = 0;  // the process's peak while this point ran
};

// Creates a model with `options`, warms up, then runs until `min_time`
// seconds have passed and at least 5 runs (3 when a run takes over a
// second) are timed. `on_start` gets the resolved team size before timing.
Result<Timing> TimeBlock(RandomBlock& block, const MhaOptions& options,
                         double min_time,
                         const std::function<void(int threads)>& on_start);

// Peak resident memory since the last reset, in bytes (Linux).
size_t PeakRssBytes();
// Resets the peak to the current resident size.
void ResetPeakRss();

// Progress on stderr while a point is measured. On a terminal, one line
// rewritten in place and erased by EndProgress; elsewhere (a log, a pipe),
// each update is a plain line, since \r and ESC[K only make sense on a screen.
[[gnu::format(printf, 1, 2)]] void ShowProgress(const char* format, ...);
void EndProgress();

}  // namespace attn::cli

#endif  // ATTN_TOOLS_BENCH_COMMON_H_
