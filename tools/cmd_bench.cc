// attn bench: times the block on named grid shapes or a given shape, with
// seeded random weights, and reports medians, tokens/s, GFLOP/s and memory.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "nlohmann/json.hpp"
#include "tools/cli.h"
#include "tools/decode_cli.h"
#include "tools/graph_cli.h"

namespace attn::cli {
namespace {

struct Shape {
  std::string name;
  int64_t batch, seq_len, d_in, d_out, heads;
};

const std::vector<Shape>& Grid() {
  static const std::vector<Shape> grid = {
      {"seed", 2, 6, 3, 2, 2},
      {"gpt2-128", 8, 128, 768, 768, 12},
      {"gpt2-1k", 1, 1024, 768, 768, 12},
      {"gpt2-1k-b4", 4, 1024, 768, 768, 12},
      {"long-4k", 1, 4096, 512, 512, 8},
      {"long-32k", 1, 32768, 512, 512, 8},
  };
  return grid;
}

// "gpt2-1k,long-4k" or "b,T,d_in,d_out,h"; the default grid when empty.
Result<std::vector<Shape>> ParseShapes(const std::string& spec) {
  std::vector<Shape> shapes;
  if (spec.empty()) {
    for (const Shape& s : Grid()) {
      if (s.name != "long-32k") shapes.push_back(s);
    }
    return shapes;
  }
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
  std::stringstream names(spec);
  for (std::string name; std::getline(names, name, ',');) {
    const auto it =
        std::find_if(Grid().begin(), Grid().end(),
                     [&](const Shape& s) { return s.name == name; });
    if (it == Grid().end()) {
      std::string known;
      for (const Shape& s : Grid())
        known += (known.empty() ? "" : ", ") + s.name;
      return InvalidArgument("--shape '" + name + "' is unknown, want " +
                             known + " or b,T,d_in,d_out,h");
    }
    shapes.push_back(*it);
  }
  return shapes;
}

double Flops(const Shape& s) {
  const double rows = static_cast<double>(s.batch * s.seq_len);
  return 2.0 * rows * (3.0 * s.d_in * s.d_out + 1.0 * s.d_out * s.d_out) +
         2.0 * rows * static_cast<double>(s.seq_len) * s.d_out;
}

// Peak resident memory since the last reset, in bytes (Linux).
size_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct BenchArgs {
  std::string shape, dtype = "f32";
  std::vector<int> threads;
  double min_time = 1.0;
  bool json = false;
};

int Bench(const BenchArgs& args) {
  auto shapes = ParseShapes(args.shape);
  if (!shapes.ok()) return Fail(shapes.status().message());
  std::vector<int> thread_counts = args.threads;
  if (thread_counts.empty()) thread_counts = {0};
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  if (!args.json) {
    std::printf("attn %s | highway %s | oneDNN %s %s | dtype %s\n",
                info.version.c_str(), info.simd_target.c_str(),
                info.onednn_version.c_str(), info.onednn_isa.c_str(),
                args.dtype.c_str());
    std::printf("%-12s %7s %10s %10s %12s %9s %10s\n", "shape", "threads",
                "median_ms", "min_ms", "tokens/s", "GFLOP/s", "peak_MB");
  }
  const size_t total = shapes->size() * thread_counts.size();
  size_t done = 0;
  for (const Shape& s : *shapes) {
    // Seeded random weights with nn.Linear's init range.
    std::mt19937 rng(0);
    auto random = [&rng](size_t n, double bound) {
      std::uniform_real_distribution<float> dist(static_cast<float>(-bound),
                                                 static_cast<float>(bound));
      std::vector<float> v(n);
      for (float& x : v) x = dist(rng);
      return v;
    };
    const auto din = static_cast<size_t>(s.d_in);
    const auto dout = static_cast<size_t>(s.d_out);
    const double in_bound = 1.0 / std::sqrt(double(s.d_in));
    const double out_bound = 1.0 / std::sqrt(double(s.d_out));
    const auto wq = random(dout * din, in_bound),
               wk = random(dout * din, in_bound),
               wv = random(dout * din, in_bound),
               wo = random(dout * dout, out_bound),
               bo = random(dout, out_bound);
    const auto x = random(static_cast<size_t>(s.batch * s.seq_len) * din, 1.0);
    std::vector<float> y(static_cast<size_t>(s.batch * s.seq_len) * dout);
    attn::MhaConfig config;
    config.d_in = s.d_in;
    config.d_out = s.d_out;
    config.num_heads = s.heads;
    attn::MhaWeights weights;
    weights.w_query = wq.data();
    weights.w_key = wk.data();
    weights.w_value = wv.data();
    weights.w_out = wo.data();
    weights.b_out = bo.data();
    for (int threads : thread_counts) {
      ++done;
      ResetPeakRss();
      attn::MhaOptions options;
      options.num_threads = threads;
      options.dtype =
          args.dtype == "bf16" ? attn::DType::kBF16 : attn::DType::kF32;
      auto model = attn::MhaModel::Create(config, weights, options);
      if (!model.ok()) return Fail(model.status().message());
      const int team = (*model)->num_threads();
      std::fprintf(stderr, "\r[%zu/%zu] %s threads=%d ...", done, total,
                   s.name.c_str(), team);
      std::fflush(stderr);
      attn::MhaSession session(*model);
      std::vector<double> ms;
      for (int warmup = 0; warmup < 2; ++warmup) {
        const attn::Status st =
            session.Run(x.data(), s.batch, s.seq_len, y.data());
        if (!st.ok()) return Fail(st.message());
      }
      const auto start = std::chrono::steady_clock::now();
      while (ms.size() < 5 || std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                      .count() < args.min_time) {
        const auto t0 = std::chrono::steady_clock::now();
        const attn::Status st =
            session.Run(x.data(), s.batch, s.seq_len, y.data());
        const auto t1 = std::chrono::steady_clock::now();
        if (!st.ok()) return Fail(st.message());
        ms.push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double median =
          ms.size() % 2 ? ms[ms.size() / 2]
                        : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
      const double tokens = double(s.batch * s.seq_len) / (median / 1e3);
      const double gflops = Flops(s) / (median / 1e3) / 1e9;
      const double peak_mb = double(PeakRssBytes()) / (1 << 20);
      std::fprintf(stderr, "\r\033[K");
      if (args.json) {
        nlohmann::json line = {{"shape", s.name},
                               {"b", s.batch},
                               {"T", s.seq_len},
                               {"d_in", s.d_in},
                               {"d_out", s.d_out},
                               {"h", s.heads},
                               {"threads", team},
                               {"dtype", args.dtype},
                               {"median_ms", median},
                               {"min_ms", ms.front()},
                               {"reps", ms.size()},
                               {"tokens_per_s", tokens},
                               {"gflops", gflops},
                               {"peak_rss_mb", peak_mb},
                               {"simd_target", info.simd_target},
                               {"onednn_isa", info.onednn_isa}};
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::printf("%-12s %7d %10.3f %10.3f %12.0f %9.1f %10.1f\n",
                    s.name.c_str(), team, median, ms.front(), tokens, gflops,
                    peak_mb);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

Command AddBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  BenchArgs& bench = *args;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "Time the block on named or given shapes with random weights");
  bench_cmd->add_option("--shape", bench.shape,
                        "comma-separated names (seed, gpt2-128, gpt2-1k, "
                        "gpt2-1k-b4, long-4k, long-32k) or b,T,d_in,d_out,h; "
                        "default: the grid without long-32k");
  bench_cmd
      ->add_option("--threads", bench.threads,
                   "thread counts to measure, e.g. 1,2")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--dtype", bench.dtype, "matmul precision")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  bench_cmd
      ->add_option("--min-time", bench.min_time,
                   "seconds to measure each point")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_cmd->add_flag("--json", bench.json, "one JSON object per line");

  const auto decode = AddDecodeBenchOptions(*bench_cmd);  // --decode
  const auto graph = AddGraphBenchOptions(*bench_cmd);     // --graph
  return {bench_cmd, [args, decode, graph] {
            if (const DecodeBench run_decode = decode()) {
              return run_decode(args->threads, args->min_time, args->json);
            }
            if (const GraphBench run_graph = graph()) {
              return run_graph(args->shape, args->threads, args->min_time,
                               args->json);
            }
            return Bench(*args);
          }};
}

}  // namespace attn::cli
