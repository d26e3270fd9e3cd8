// The shape grid, random blocks and the timing loop (see bench_common.h).
#include "tools/bench_common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/grid.h"

namespace attn::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

bool StderrIsTerminal() {
  static const bool terminal = isatty(STDERR_FILENO) == 1;
  return terminal;
}

}  // namespace

// Peak resident memory since the last reset, in bytes (Linux).
size_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

// Resets the peak to the current resident size.
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

const std::vector<Shape>& Grid() {
  static const std::vector<Shape> grid = [] {
    std::vector<bench::GridShape> named = bench::PeerGrid();
    named.push_back(bench::kLong32k);
    named.push_back(bench::kLlama2k);
    std::vector<Shape> shapes;
    for (const bench::GridShape& s : named) {
      Shape shape{s.name, s.batch, s.seq_len, s.d_in, s.d_out, s.heads};
      shape.kv_heads = s.kv_heads;
      shape.rope.theta = s.rope_theta;
      shapes.push_back(shape);
    }
    return shapes;
  }();
  return grid;
}

std::string Names(const std::vector<Shape>& shapes, const char* separator) {
  std::string names;
  for (const Shape& s : shapes) {
    names += (names.empty() ? "" : separator) + s.name;
  }
  return names;
}

std::string ShapeFlagHelp(const std::string& default_names) {
  std::string text = "comma-separated names or b,T,d_in,d_out,h. Names:";
  for (const Shape& s : Grid()) {
    text += (&s == &Grid().front() ? " " : ", ") + s.name + " (" +
            std::to_string(s.batch) + "," + std::to_string(s.seq_len) + "," +
            std::to_string(s.d_in) + "," + std::to_string(s.d_out) + "," +
            std::to_string(s.heads);
    if (s.kv_heads > 0) text += ", kv heads " + std::to_string(s.kv_heads);
    if (s.rope.theta > 0) {
      text += ", rope theta " + std::to_string(int64_t(s.rope.theta));
    }
    text += ")";
  }
  return text + "; seed is the book's chapter-3 toy example. Default: " +
         default_names;
}

std::vector<Shape> PeerGrid() {
  return {Grid().begin(), Grid().begin() + bench::PeerGrid().size()};
}

Result<std::vector<Shape>> ParseShapes(const std::string& spec,
                                       const std::string& fallback) {
  if (spec.empty()) return ParseShapes(fallback, "");
  if (std::isdigit(static_cast<unsigned char>(spec[0]))) {
    Shape s{spec, 0, 0, 0, 0, 0};
    char tail = 0;
    if (std::sscanf(spec.c_str(), "%ld,%ld,%ld,%ld,%ld%c", &s.batch, &s.seq_len,
                    &s.d_in, &s.d_out, &s.heads, &tail) != 5 ||
        s.batch <= 0 || s.seq_len <= 0 || s.d_in <= 0 || s.d_out <= 0 ||
        s.heads <= 0) {
      return InvalidArgument("--shape '" + spec +
                             "' is not b,T,d_in,d_out,h with positive "
                             "integers");
    }
    return std::vector<Shape>{s};
  }
  std::vector<Shape> shapes;
  std::stringstream names(spec);
  for (std::string name; std::getline(names, name, ',');) {
    const auto it =
        std::find_if(Grid().begin(), Grid().end(),
                     [&](const Shape& s) { return s.name == name; });
    if (it == Grid().end()) {
      return InvalidArgument("--shape '" + name + "' is unknown, want " +
                             Names(Grid(), ", ") + " or b,T,d_in,d_out,h");
    }
    shapes.push_back(*it);
  }
  return shapes;
}

Result<std::vector<Shape>> WithAttentionFlags(std::vector<Shape> shapes,
                                              int64_t kv_heads,
                                              const RopeConfig& rope,
                                              int64_t sliding_window) {
  for (Shape& s : shapes) {
    if (kv_heads > 0) s.kv_heads = kv_heads;
    if (rope.theta > 0) s.rope = rope;
    if (sliding_window > 0) s.sliding_window = sliding_window;
    if (s.kv_heads > 0 && s.heads % s.kv_heads != 0) {
      return InvalidArgument(
          "shape " + s.name + ": --kv-heads " + std::to_string(s.kv_heads) +
          " does not divide its " + std::to_string(s.heads) + " heads");
    }
  }
  return shapes;
}

double Flops(const Shape& s) {
  return bench::BlockFlops({s.name.c_str(), s.batch, s.seq_len, s.d_in, s.d_out,
                            s.heads, s.kv_heads, s.rope.theta},
                           s.sliding_window);
}

Status CheckBenchMemory(const std::string& what, double bytes,
                        uint64_t max_memory) {
  const uint64_t cap = max_memory ? max_memory : DefaultMaxMemoryBytes();
  if (bytes <= double(cap)) return {};
  char need[64];
  std::snprintf(need, sizeof(need), "%.4g MiB", bytes / (1 << 20));
  return OutOfMemory(what + " need " + need + ", over the memory limit of " +
                     std::to_string(cap) +
                     " bytes (raise it with --max-memory)");
}

Result<std::unique_ptr<RandomBlock>> RandomBlock::Create(const Shape& s,
                                                         uint64_t max_memory) {
  const double din = double(s.d_in), dout = double(s.d_out);
  const double kv_dim = s.kv_heads > 0 && s.heads > 0
                            ? double(s.kv_heads) * double(s.d_out / s.heads)
                            : dout;
  const double rows = double(s.batch) * double(s.seq_len);
  ATTN_RETURN_IF_ERROR(
      CheckBenchMemory("shape " + s.name + ": its weights, input and output",
                       4.0 * ((dout + 2 * kv_dim) * din + dout * dout + dout +
                              rows * (din + dout)),
                       max_memory));
  return std::unique_ptr<RandomBlock>(new RandomBlock(s));
}

RandomBlock::RandomBlock(const Shape& s) : shape(s) {
  config.d_in = s.d_in;
  config.d_out = s.d_out;
  config.num_heads = s.heads;
  config.num_kv_heads = s.kv_heads;
  config.rope = s.rope;
  config.sliding_window = s.sliding_window;
  random_weights = bench::MakeRandomMhaWeights(config, 0);
  weights = random_weights.view();
  const auto rows = static_cast<size_t>(s.batch * s.seq_len);
  x = bench::RandomFloats(rows * static_cast<size_t>(s.d_in), 1.0f, 1);
  y.resize(rows * static_cast<size_t>(s.d_out));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double TokensPerSecond(const Shape& s, double ms) {
  return static_cast<double>(s.batch * s.seq_len) / (ms / 1e3);
}

Result<Timing> TimeBlock(RandomBlock& block, const MhaOptions& options,
                         double min_time,
                         const std::function<void(int threads)>& on_start) {
  ResetPeakRss();
  auto model = MhaModel::Create(block.config, block.weights, options);
  if (!model.ok()) return model.status();
  Timing timing;
  timing.threads = (*model)->num_threads();
  if (on_start) on_start(timing.threads);
  MhaSession session(*model);
  const Shape& s = block.shape;
  auto run = [&]() -> Result<double> {
    const auto t0 = Clock::now();
    const Status st =
        session.Run(block.x.data(), s.batch, s.seq_len, block.y.data());
    if (!st.ok()) return st;
    return Seconds(t0) * 1e3;
  };
  // Warm-up: the first run prepares the session and faults pages in; then
  // a tenth of the budget, so caches and clocks settle.
  const auto warm_start = Clock::now();
  do {
    Result<double> ms = run();
    if (!ms.ok()) return ms.status();
  } while (Seconds(warm_start) < 0.1 * min_time);

  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < 3 || Seconds(start) < min_time ||
         (ms.size() < 5 && ms.back() < 1e3)) {
    Result<double> one = run();
    if (!one.ok()) return one.status();
    ms.push_back(*one);
  }
  timing.median_ms = Median(ms);
  timing.min_ms = *std::min_element(ms.begin(), ms.end());
  timing.reps = ms.size();
  timing.peak_rss_bytes = PeakRssBytes();
  return timing;
}

void ShowProgress(const char* format, ...) {
  const bool terminal = StderrIsTerminal();
  if (terminal) std::fputc('\r', stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  // On a terminal, erase what a longer previous update left.
  std::fputs(terminal ? "\033[K" : "\n", stderr);
  std::fflush(stderr);
}

void EndProgress() {
  if (StderrIsTerminal()) std::fputs("\r\033[K", stderr);
}

}  // namespace attn::cli
