// attn tune: times the block at each thread count on the chosen shapes,
// prints throughput and scaling efficiency, recommends a team size and can
// save it for `attn run`, `attn bench` and the library (ATTN_CONFIG).
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "nlohmann/json.hpp"
#include "tools/atomic_output.h"
#include "tools/bench_common.h"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

// Within this fraction of the fastest, fewer threads win: they leave cores
// to the rest of the machine and the difference is within run-to-run noise.
constexpr double kTieFraction = 0.03;

struct TuneArgs {
  std::string shape, threads, save;
  DType dtype = DType::kF32;
  double min_time = 1.0;
};

int AffinityCount() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}

// The 1-minute load average, or -1 where /proc/loadavg is missing.
double LoadAverage() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

// "1..N", "A..B" or "1,2,4"; empty: 1 up to the cores this process may use.
Result<std::vector<int>> ParseThreads(const std::string& spec) {
  std::vector<int> counts;
  const std::string usage = "got '" + spec +
                            "', want a range A..B or a list like 1,2,4 of 1 "
                            "to " +
                            std::to_string(kMaxThreads);
  if (spec.empty()) {
    for (int n = 1; n <= AffinityCount(); ++n) counts.push_back(n);
    return counts;
  }
  if (const size_t dots = spec.find(".."); dots != std::string::npos) {
    int lo = 0, hi = 0;
    char tail = 0;
    if (std::sscanf(spec.c_str(), "%d..%d%c", &lo, &hi, &tail) != 2 ||
        lo <= 0 || hi < lo || hi > kMaxThreads) {
      return InvalidArgument(usage);
    }
    for (int n = lo; n <= hi; ++n) counts.push_back(n);
    return counts;
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    int n = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d%c", &n, &tail) != 1 || n <= 0 ||
        n > kMaxThreads) {
      return InvalidArgument(usage);
    }
    counts.push_back(n);
    pos = comma + 1;
  }
  // Speedups are over the smallest count, and the pick is the smallest
  // within reach of the best: in ascending order, each once.
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// What the sweep measured: per thread count, log(tokens/s) summed over the
// shapes (the geometric mean ranks the counts without letting the biggest
// shape dominate), and every point, for the saved file.
struct Sweep {
  std::vector<double> log_rate;
  nlohmann::json points = nlohmann::json::array();
};

// Times every shape at every thread count, printing a table row per point.
Result<Sweep> RunSweep(const TuneArgs& args, const std::vector<Shape>& shapes,
                       const std::vector<int>& counts) {
  Sweep sweep;
  sweep.log_rate.assign(counts.size(), 0.0);
  const size_t total = shapes.size() * counts.size();
  size_t done = 0;
  for (const Shape& s : shapes) {
    ATTN_ASSIGN_OR_RETURN(std::unique_ptr<RandomBlock> block,
                          RandomBlock::Create(s, 0));
    double base_ms = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      ++done;
      attn::MhaOptions options;
      options.num_threads = counts[i];
      options.dtype = args.dtype;
      options.decode = false;  // sessions only
      Result<Timing> t = TimeBlock(*block, options, args.min_time, [&](int) {
        ShowProgress("[%zu/%zu] %s threads=%d ...", done, total, s.name.c_str(),
                     counts[i]);
      });
      EndProgress();
      if (!t.ok()) {
        return Status(t.status().code(), s.name + ": " + t.status().message());
      }
      // Relative to the first (smallest) count, normally 1 thread.
      if (i == 0) base_ms = t->median_ms;
      const double speedup = base_ms / t->median_ms;
      const double efficiency = speedup * counts[0] / counts[i];
      const double tokens = TokensPerSecond(s, t->median_ms);
      sweep.log_rate[i] += std::log(tokens);
      std::printf("%-12s %7d %10.4g %12.0f %7.2fx %9.0f%%\n", s.name.c_str(),
                  counts[i], t->median_ms, tokens, speedup, 100.0 * efficiency);
      std::fflush(stdout);
      sweep.points.push_back({{"shape", s.name},
                              {"threads", counts[i]},
                              {"median_ms", t->median_ms},
                              {"tokens_per_s", tokens},
                              {"efficiency", efficiency}});
    }
  }
  return sweep;
}

// The index of the fastest count by the geometric mean over `n_shapes`
// shapes, or of the fewest threads within kTieFraction of it.
size_t Recommend(const std::vector<double>& log_rate, size_t n_shapes) {
  size_t best = 0;
  for (size_t i = 1; i < log_rate.size(); ++i) {
    if (log_rate[i] > log_rate[best]) best = i;
  }
  const double n = static_cast<double>(n_shapes);
  for (size_t i = 0; i < best; ++i) {  // fewest threads within the tie band
    if (std::exp((log_rate[i] - log_rate[best]) / n) >= 1.0 - kTieFraction) {
      return i;
    }
  }
  return best;
}

// Writes the recommendation and the sweep to --save as JSON.
int SaveTuned(const TuneArgs& args, const RuntimeInfo& info, int recommended,
              const Sweep& sweep) {
  nlohmann::json saved = {
      {"num_threads", recommended},     {"attn", info.version},
      {"dtype", DTypeName(args.dtype)}, {"simd_target", info.simd_target},
      {"onednn_isa", info.onednn_isa},  {"sweep", sweep.points}};
  const Status written = WriteTextAtomically(args.save, saved.dump(2) + "\n");
  if (!written.ok()) return Fail(written.message());
  std::printf("saved to %s (use it with --config %s or ATTN_CONFIG=%s)\n",
              args.save.c_str(), args.save.c_str(), args.save.c_str());
  return 0;
}

int Tune(const TuneArgs& args) {
  if (!args.save.empty()) {  // checked before the sweep, written after it
    InstallInterruptHandlers();
    const Status writable = CheckOutputPath(args.save);
    if (!writable.ok()) return Fail(writable.message());
  }
  auto shapes = ParseShapes(args.shape, "gpt2-1k");
  if (!shapes.ok()) return Fail(shapes.status().message());
  auto counts = ParseThreads(args.threads);
  if (!counts.ok()) return Fail("--threads: " + counts.status().message());
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  std::printf("attn %s | highway %s | oneDNN %s | dtype %s | %d cores\n",
              info.version.c_str(), info.simd_target.c_str(),
              info.onednn_isa.c_str(), DTypeName(args.dtype), AffinityCount());
  std::printf("%-12s %7s %10s %12s %8s %10s\n", "shape", "threads", "median_ms",
              "tokens/s", "speedup", "efficiency");
  const Result<Sweep> sweep = RunSweep(args, *shapes, *counts);
  if (!sweep.ok()) return Fail(sweep.status().message());
  const int recommended = (*counts)[Recommend(sweep->log_rate, shapes->size())];
  std::printf("recommended: %d thread%s\n", recommended,
              recommended == 1 ? "" : "s");
  // A sweep on a busy machine measures the competition too: say so.
  if (const double load = LoadAverage(); load > 0.5 * AffinityCount()) {
    std::printf(
        "note: load average %.1f on %d cores: other work competed with "
        "the sweep; rerun on a quieter machine for the best setting\n",
        load, AffinityCount());
  }
  if (args.save.empty()) return 0;
  return SaveTuned(args, info, recommended, *sweep);
}

}  // namespace

Command AddTuneCommand(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  TuneArgs& tune = *args;
  CLI::App* cmd = app.add_subcommand(
      "tune", "Sweep thread counts, report scaling and recommend the best");
  cmd->add_option("--shape", tune.shape, ShapeFlagHelp("gpt2-1k"));
  cmd->add_option("--threads", tune.threads,
                  "thread counts: a range A..B or a list 1,2,4 (default: 1 "
                  "up to the cores this process may use)")
      ->check(CLI::Validator(
          [](std::string& text) {
            const Result<std::vector<int>> counts = ParseThreads(text);
            return counts.ok() ? "" : counts.status().message();
          },
          "A..B or LIST"));
  cmd->add_option("--dtype", tune.dtype,
                  "matmul precision: f32 (default) or bf16")
      ->transform(DTypeFlag());
  cmd->add_option("--min-time", tune.min_time, "seconds to measure each point")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--save", tune.save,
                  "write the recommendation as JSON, for --config FILE or "
                  "ATTN_CONFIG=FILE")
      ->check(FilePath());
  return {cmd, [args] { return Tune(*args); }};
}

}  // namespace attn::cli
