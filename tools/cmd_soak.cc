// attn soak: runs the engine for a number of calls or seconds across random
// shapes and thread counts, checks every output is finite and bitwise
// repeatable, and reports throughput drift and memory (resident set and
// heap in use) after warm-up and at the end. Fails when memory grows past
// --max-growth percent. tools/soak.sh wraps it.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "bench/grid.h"
#include "nlohmann/json.hpp"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

struct SoakArgs {
  int64_t iterations = 0;
  double seconds = 0.0;
  uint64_t seed = 1;
  int models = 6;
  int64_t max_batch = 4, max_seq = 64, max_head_dim = 32, max_heads = 4;
  std::vector<int> threads;
  int64_t warmup = 0;
  double max_growth = 1.0;
  int64_t replan_every = 100;
  bool json = false;
};

// Resident set size, bytes (Linux /proc/self/statm).
uint64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Bytes malloc has handed out and not had back (all arenas).
uint64_t HeapInUse() { return mallinfo2().uordblks; }

// A model at one thread count with two input shapes it alternates between
// (so sessions re-plan), each with a fixed input and its first output.
struct Case {
  std::shared_ptr<const MhaModel> model;
  std::unique_ptr<MhaSession> session;
  int64_t d_in = 0, d_out = 0;
  int64_t batch[2] = {0, 0}, seq_len[2] = {0, 0};
  std::vector<float> x[2], first_y[2];
  std::vector<float> y;
};

// --threads, else 1, 2, 4, ... up to the cores, and the cores.
std::vector<int> ThreadCounts(const SoakArgs& a) {
  std::vector<int> thread_counts = a.threads;
  if (thread_counts.empty()) {
    const int cores = GetRuntimeInfo().default_threads;
    for (int t = 1; t <= cores; t *= 2) thread_counts.push_back(t);
    if (thread_counts.back() != cores) thread_counts.push_back(cores);
  }
  return thread_counts;
}

Result<std::vector<Case>> MakeCases(const SoakArgs& a, std::mt19937_64& rng) {
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::vector<int> thread_counts = ThreadCounts(a);
  std::vector<Case> cases;
  for (int m = 0; m < a.models; ++m) {
    MhaConfig config;
    config.num_heads = pick(1, a.max_heads);
    config.d_out = config.num_heads * pick(1, a.max_head_dim);
    config.d_in = pick(1, a.max_heads * a.max_head_dim);
    config.qkv_bias = pick(0, 1) == 1;
    const auto din = static_cast<size_t>(config.d_in);
    const auto dout = static_cast<size_t>(config.d_out);
    const bench::RandomMhaWeights weights =
        bench::MakeRandomMhaWeights(config, static_cast<uint32_t>(rng()));
    for (int threads : thread_counts) {
      MhaOptions options;
      options.num_threads = threads;
      auto model = MhaModel::Create(config, weights.view(), options);
      if (!model.ok()) return model.status();
      Case c;
      c.model = *model;
      c.session = std::make_unique<MhaSession>(c.model);
      c.d_in = config.d_in;
      c.d_out = config.d_out;
      size_t most = 0;
      for (int v = 0; v < 2; ++v) {
        c.batch[v] = pick(1, a.max_batch);
        c.seq_len[v] = pick(1, a.max_seq);
        const auto rows = static_cast<size_t>(c.batch[v] * c.seq_len[v]);
        c.x[v].resize(rows * din);
        for (float& f : c.x[v]) f = value(rng);
        most = std::max(most, rows * dout);
      }
      c.y.resize(most);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// One call of case c at shape v; checks finiteness and repeatability.
Status Call(Case& c, int v) {
  ATTN_RETURN_IF_ERROR(
      c.session->Run(c.x[v].data(), c.batch[v], c.seq_len[v], c.y.data()));
  const size_t n = static_cast<size_t>(c.batch[v] * c.seq_len[v] * c.d_out);
  if (c.first_y[v].empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(c.y[i])) {
        return Internal("soak: output element " + std::to_string(i) +
                        " is not finite");
      }
    }
    c.first_y[v].assign(c.y.begin(), c.y.begin() + static_cast<ptrdiff_t>(n));
  } else if (std::memcmp(c.first_y[v].data(), c.y.data(), n * sizeof(float))) {
    return Internal("soak: output of a repeated call differs from the first");
  }
  return {};
}

// Calls a random case, at its second shape (which makes its session re-plan)
// 1 call in --replan-every, else at its first; counts the tokens.
struct RandomCalls {
  RandomCalls(std::vector<Case>& all, std::mt19937_64& generator,
              int64_t replan_one_in)
      : cases(all),
        rng(generator),
        replan_every(replan_one_in),
        pick_case(0, static_cast<int>(all.size()) - 1) {}

  Status Next() {
    Case& c = cases[static_cast<size_t>(pick_case(rng))];
    const int v =
        static_cast<int>(replan_every > 0 && rng() % replan_every == 0);
    tokens += c.batch[v] * c.seq_len[v];
    return Call(c, v);
  }

  std::vector<Case>& cases;
  std::mt19937_64& rng;
  int64_t replan_every;
  std::uniform_int_distribution<int> pick_case;
  int64_t tokens = 0;  // since the caller last set it to 0
};

// --warmup, else 1% of --iterations, at least 1000.
int64_t WarmupCalls(const SoakArgs& a) {
  return a.warmup > 0 ? a.warmup
                      : std::max<int64_t>(
                            1000, a.iterations > 0 ? a.iterations / 100 : 0);
}

// Every case at both shapes, then `warmup` random calls, so that oneDNN's
// caches, malloc's arenas and the thread pools have settled.
Status WarmUp(std::vector<Case>& cases, RandomCalls& calls, int64_t warmup) {
  for (Case& c : cases) {
    for (int v : {0, 1, 0, 1}) ATTN_RETURN_IF_ERROR(Call(c, v));
  }
  for (int64_t i = 0; i < warmup; ++i) ATTN_RETURN_IF_ERROR(calls.Next());
  return {};
}

struct MemorySample {
  uint64_t rss = 0, heap = 0;
};

// Resident set and heap in use, after malloc gives back what it can.
MemorySample SampleMemory() {
  malloc_trim(0);
  const uint64_t rss = RssBytes(), heap = HeapInUse();
  return {rss, heap};
}

struct Measured {
  int64_t calls = 0;
  double seconds = 0.0;
  std::vector<double> window_rate;  // tokens/s per window
};

// The measured run, --iterations calls or --seconds, in 10 windows for the
// throughput drift.
Result<Measured> MeasureWindows(const SoakArgs& a, RandomCalls& random_calls) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  Measured m;
  auto done = [&] {
    return a.iterations > 0 ? m.calls >= a.iterations : elapsed() >= a.seconds;
  };
  // Window k (0..9) ends at k+1 tenths of the calls or of the seconds.
  auto window_done = [&](size_t k) {
    return a.iterations > 0
               ? m.calls >= a.iterations * static_cast<int64_t>(k + 1) / 10
               : elapsed() >= a.seconds * static_cast<double>(k + 1) / 10;
  };
  while (!done()) {
    const double t0 = elapsed();
    random_calls.tokens = 0;
    while (!done() && !window_done(m.window_rate.size())) {
      ATTN_RETURN_IF_ERROR(random_calls.Next());
      ++m.calls;
    }
    const double dt = elapsed() - t0;
    m.window_rate.push_back(
        dt > 0 ? static_cast<double>(random_calls.tokens) / dt : 0.0);
  }
  m.seconds = elapsed();
  return m;
}

// The soak's summary: one JSON object with --json, else four lines.
void PrintReport(const SoakArgs& a, int64_t warmup, int n_cases,
                 const Measured& m, const MemorySample& before,
                 const MemorySample& after, double rss_growth) {
  const int64_t calls = m.calls;
  const double total_s = m.seconds;
  const double first = m.window_rate.empty() ? 0.0 : m.window_rate.front();
  const double last = m.window_rate.empty() ? 0.0 : m.window_rate.back();
  const double drift = first > 0 ? 100.0 * (last - first) / first : 0.0;
  if (a.json) {
    nlohmann::json j = {{"calls", calls},
                        {"warmup_calls", warmup},
                        {"cases", n_cases},
                        {"seconds", total_s},
                        {"calls_per_s", calls / total_s},
                        {"first_window_tokens_per_s", first},
                        {"last_window_tokens_per_s", last},
                        {"throughput_drift_pct", drift},
                        {"rss_after_warmup", before.rss},
                        {"rss_end", after.rss},
                        {"rss_growth_pct", rss_growth},
                        {"heap_after_warmup", before.heap},
                        {"heap_end", after.heap}};
    std::printf("%s\n", JsonLine(j).c_str());
    return;
  }
  std::printf(
      "soak: %lld calls in %.1f s (%.0f calls/s) over %d cases, "
      "after %lld warm-up calls\n",
      static_cast<long long>(calls), total_s, calls / total_s, n_cases,
      static_cast<long long>(warmup));
  std::printf(
      "throughput: first window %.0f tokens/s, last %.0f tokens/s, "
      "drift %+.1f%%\n",
      first, last, drift);
  std::printf(
      "resident memory: %.2f MiB after warm-up, %.2f MiB at the "
      "end (%+.3f%%)\n",
      before.rss / 1048576.0, after.rss / 1048576.0, rss_growth);
  std::printf(
      "heap in use: %.2f MiB after warm-up, %.2f MiB at the end "
      "(%+lld bytes)\n",
      before.heap / 1048576.0, after.heap / 1048576.0,
      static_cast<long long>(after.heap) - static_cast<long long>(before.heap));
}

int Soak(const SoakArgs& a) {
  if (a.iterations <= 0 && a.seconds <= 0.0) {
    return Fail("give --iterations or --seconds");
  }
  std::mt19937_64 rng(a.seed);
  auto cases = MakeCases(a, rng);
  if (!cases.ok()) return Fail(cases.status().message());
  const int n_cases = static_cast<int>(cases->size());
  RandomCalls random_calls(*cases, rng, a.replan_every);
  const int64_t warmup = WarmupCalls(a);
  const Status warm = WarmUp(*cases, random_calls, warmup);
  if (!warm.ok()) return Fail(warm.message());
  const MemorySample before = SampleMemory();
  const Result<Measured> measured = MeasureWindows(a, random_calls);
  if (!measured.ok()) return Fail(measured.status().message());
  const MemorySample after = SampleMemory();
  const double rss_growth =
      100.0 * (double(after.rss) - double(before.rss)) / double(before.rss);
  PrintReport(a, warmup, n_cases, *measured, before, after, rss_growth);
  if (rss_growth > a.max_growth) {
    return Fail("resident memory grew " + std::to_string(rss_growth) +
                "% during the soak, over --max-growth " +
                std::to_string(a.max_growth) + "%");
  }
  return 0;
}

}  // namespace

Command AddSoakCommand(CLI::App& app) {
  auto args = std::make_shared<SoakArgs>();
  SoakArgs& s = *args;
  CLI::App* cmd = app.add_subcommand(
      "soak",
      "Run the engine for many calls across random shapes and thread counts; "
      "report throughput drift and memory growth");
  cmd->add_option("--iterations", s.iterations, "calls to measure")
      ->check(IntegerIn(1));
  cmd->add_option("--seconds", s.seconds, "or seconds to measure")
      ->check(PositiveNumber());
  cmd->add_option("--seed", s.seed, "seed of the shapes")
      ->check(IntegerIn(0))
      ->capture_default_str();
  cmd->add_option("--models", s.models, "random models (x thread counts)")
      ->check(IntegerIn(1, 64))
      ->capture_default_str();
  cmd->add_option("--max-batch", s.max_batch, "largest batch")
      ->check(IntegerIn(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-seq", s.max_seq, "longest sequence")
      ->check(IntegerIn(1, 65536))
      ->capture_default_str();
  cmd->add_option("--max-head-dim", s.max_head_dim, "largest head_dim")
      ->check(IntegerIn(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-heads", s.max_heads, "most heads")
      ->check(IntegerIn(1, 256))
      ->capture_default_str();
  cmd->add_option("--threads", s.threads,
                  "thread counts to mix, e.g. 1,2 (default: 1, 2, 4, ... up "
                  "to the cores)")
      ->delimiter(',')
      ->check(IntegerIn(1, kMaxThreads));
  cmd->add_option("--warmup", s.warmup,
                  "random calls before the baseline (default: 1% of "
                  "--iterations, at least 1000)")
      ->check(IntegerIn(1));
  cmd->add_option("--max-growth", s.max_growth,
                  "fail when resident memory grows more than this percent")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--replan-every", s.replan_every,
                  "run a case's other shape (its session re-plans) 1 call in "
                  "N; 0 never")
      ->check(IntegerIn(0))
      ->capture_default_str();
  cmd->add_flag("--json", s.json, "one JSON object");
  return {cmd, [args] { return Soak(*args); }};
}

}  // namespace attn::cli
