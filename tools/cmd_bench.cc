// attn bench: times the block on named grid shapes or a given shape, with
// seeded random weights, and reports medians, tokens/s, GFLOP/s and memory.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "nlohmann/json.hpp"
#include "tools/bench_common.h"
#include "tools/bench_lm.h"
#include "tools/cli.h"
#include "tools/decode_cli.h"
#include "tools/flags.h"
#include "tools/graph_cli.h"

namespace attn::cli {
namespace {

// The title and column heads (not with --json).
void PrintHeader(const attn::RuntimeInfo& info, DType dtype) {
  std::printf("attn %s | highway %s | oneDNN %s %s | dtype %s\n",
              info.version.c_str(), info.simd_target.c_str(),
              info.onednn_version.c_str(), info.onednn_isa.c_str(),
              DTypeName(dtype));
  std::printf("%-12s %7s %10s %10s %5s %12s %9s %10s\n", "shape", "threads",
              "median_ms", "min_ms", "reps", "tokens/s", "GFLOP/s", "peak_MB");
}

// One measured point: a table row, or a JSON object with --json.
void PrintPoint(const Shape& s, const Timing& t, DType dtype, bool json,
                const attn::RuntimeInfo& info) {
  const double tokens = TokensPerSecond(s, t.median_ms);
  const double gflops = Flops(s) / (t.median_ms / 1e3) / 1e9;
  const double peak_mb = double(t.peak_rss_bytes) / (1 << 20);
  if (json) {
    const nlohmann::json line = {
        {"shape", s.name},
        {"b", s.batch},
        {"T", s.seq_len},
        {"d_in", s.d_in},
        {"d_out", s.d_out},
        {"h", s.heads},
        {"kv_heads", s.kv_heads ? s.kv_heads : s.heads},
        {"rope_theta", s.rope.theta},
        {"sliding_window", s.sliding_window},
        {"threads", t.threads},
        {"dtype", DTypeName(dtype)},
        {"median_ms", t.median_ms},
        {"min_ms", t.min_ms},
        {"reps", t.reps},
        {"tokens_per_s", tokens},
        {"gflops", gflops},
        {"flops", Flops(s)},
        {"peak_rss_mb", peak_mb},
        {"attn", info.version},
        {"simd_target", info.simd_target},
        {"onednn_isa", info.onednn_isa}};
    std::printf("%s\n", JsonLine(line).c_str());
  } else {
    std::printf("%-12s %7d %10.4g %10.4g %5zu %12.0f %9.1f %10.1f\n",
                s.name.c_str(), t.threads, t.median_ms, t.min_ms, t.reps,
                tokens, gflops, peak_mb);
  }
  std::fflush(stdout);
}

// The grid (or --shape) at every thread count with `dtype`.
int Bench(const BenchFlags& args, DType dtype) {
  // The grid without long-32k and llama-2k (a minute, a second per point).
  auto named = ParseShapes(args.shape, Names(PeerGrid(), ","));
  if (!named.ok()) return Fail(named.status().message());
  const AttentionFlags& a = args.attention;
  auto shapes =
      WithAttentionFlags(*named, a.kv_heads, a.rope, a.sliding_window);
  if (!shapes.ok()) return Fail(shapes.status().message());
  if (const int rc = CheckConfigFile(args.config)) return rc;
  std::vector<int> thread_counts = args.threads;
  if (thread_counts.empty()) thread_counts = {0};  // the library's default
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  if (!args.json) PrintHeader(info, dtype);
  const size_t total = shapes->size() * thread_counts.size();
  size_t done = 0;
  for (const Shape& s : *shapes) {
    Result<std::unique_ptr<RandomBlock>> block =
        RandomBlock::Create(s, args.max_memory);
    if (!block.ok()) return Fail(block.status().message());
    for (int threads : thread_counts) {
      ++done;
      attn::MhaOptions options;
      options.num_threads = threads;
      options.max_memory_bytes = args.max_memory;
      options.tuned_config = args.config;
      options.dtype = dtype;
      options.decode = false;  // sessions only
      Result<Timing> t =
          TimeBlock(**block, options, args.min_time, [&](int team) {
            ShowProgress("[%zu/%zu] %s threads=%d ...", done, total,
                         s.name.c_str(), team);
          });
      EndProgress();
      if (!t.ok()) return Fail(s.name + ": " + t.status().message());
      PrintPoint(s, *t, dtype, args.json, info);
    }
  }
  return 0;
}

// A usage error (2) when list `flag` names a value twice: it would be
// measured twice (--dtype with --model: two models loaded alike).
template <typename T, typename Text>
int CheckDistinct(const char* flag, const std::vector<T>& values, Text text) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::count(values.begin(), values.begin() + i, values[i]) > 0) {
      return Usage(std::string(flag) + ": got '" + text(values[i]) +
                   "' twice, want each value once");
    }
  }
  return 0;
}

// Usage errors: more than one benchmark chosen, a list naming a value
// twice, flags the chosen benchmark does not read.
int CheckFlags(const BenchFlags& args, bool decode, bool graph, bool model) {
  if (int(decode) + int(graph) + int(model) > 1) {
    return Usage(
        "--decode, --graph and --model each choose a benchmark: "
        "want one of them");
  }
  if (!args.weights.empty() && !graph && !model) {
    return Usage("--weights: want it with --graph or --model");
  }
  if (!args.batches.empty() && !decode && !model) {
    return Usage("--batch: want it with --decode or --model");
  }
  const auto number = [](auto n) { return std::to_string(n); };
  if (const int rc = CheckDistinct("--dtype", args.dtypes, DTypeName)) {
    return rc;
  }
  if (const int rc = CheckDistinct("--threads", args.threads, number)) {
    return rc;
  }
  return CheckDistinct("--batch", args.batches, number);
}

}  // namespace

Command AddBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchFlags>();
  BenchFlags& bench = *args;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "Time the block on named or given shapes with random weights");
  bench_cmd->add_option("--shape", bench.shape,
                        ShapeFlagHelp(Names(PeerGrid(), ", ")));
  bench_cmd
      ->add_option("--threads", bench.threads,
                   "thread counts to measure, e.g. 1,2")
      ->delimiter(',')
      ->check(IntegerIn(1, kMaxThreads));
  bench_cmd
      ->add_option("--dtype", bench.dtypes,
                   "matmul precisions to measure: f32 (default), bf16, or "
                   "both as f32,bf16 (--model: in turns, also q8_0 and "
                   "q4_0)")
      ->delimiter(',')
      ->transform(DTypeFlag());
  bench_cmd
      ->add_option("--min-time", bench.min_time,
                   "seconds to measure each point")
      ->check(PositiveNumber())
      ->capture_default_str();
  bench_cmd
      ->add_option("--max-memory", bench.max_memory,
                   "most memory a model or a run may ask for, e.g. 4G "
                   "(default: half of the physical memory)")
      ->check(ByteSize())
      ->transform(CLI::AsSizeValue(false));
  bench_cmd
      ->add_option("--config", bench.config,
                   "tuned file from attn tune --save: its thread count is "
                   "the default")
      ->check(FilePath());
  bench_cmd->add_option("--weights", bench.weights,
                        "graph, model: weights file (default: seeded random "
                        "weights; --graph: under the book's TransformerBlock "
                        "names)");
  bench_cmd
      ->add_option("--batch", bench.batches,
                   "decode, model: sequences run together, e.g. 1,8 (default)")
      ->delimiter(',')
      ->check(IntegerIn(1, BatchOptions::kMaxSequences));
  bench_cmd->add_flag("--json", bench.json, "one JSON object per line");
  bench.attention.AddTo(bench_cmd);  // over every shape's own (and --decode's)

  const auto decode = AddDecodeBenchOptions(*bench_cmd);  // --decode
  const auto graph = AddGraphBenchOptions(*bench_cmd);    // --graph
  const auto model = AddModelBenchOptions(*bench_cmd);    // --model
  return {bench_cmd, [args, decode, graph, model] {
            const DecodeBench run_decode = decode();
            const GraphBench run_graph = graph();
            const ModelBench run_model = model();
            if (const int rc = CheckFlags(*args, bool(run_decode),
                                          bool(run_graph), bool(run_model))) {
              return rc;
            }
            if (run_decode || run_graph || run_model) {
              if (const int rc = CheckConfigFile(args->config)) return rc;
            }
            if (run_model) return run_model(*args);
            for (const DType dtype : args->dtypes) {
              const int rc = run_decode  ? run_decode(*args, dtype)
                             : run_graph ? run_graph(*args, dtype)
                                         : Bench(*args, dtype);
              if (rc != 0) return rc;
            }
            return 0;
          }};
}

}  // namespace attn::cli
