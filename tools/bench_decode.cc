// attn bench --decode: times one decode step (every sequence of a batch gets
// its next token, attending to `context` keys) against recomputing the whole
// prefix with MhaSession (the chapter-3 way), and reports tokens/s and the
// effective bandwidth of the K/V cache read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "nlohmann/json.hpp"
#include "tools/bench_common.h"
#include "tools/decode_cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

struct DecodeArgs {
  bool enabled = false;
  std::vector<int64_t> contexts = {1024, 4096};
  std::vector<int64_t> batches = {1, 8};
  std::string dims = "768,768,12";  // d_in, d_out, heads (gpt2)
  bool recompute = true;
  uint64_t max_memory = 0;  // bench's --max-memory; 0: the default
  std::string config;       // bench's --config: a tuned file, or empty
};

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<float> Random(std::mt19937& rng, size_t n, double bound) {
  std::uniform_real_distribution<float> dist(static_cast<float>(-bound),
                                             static_cast<float>(bound));
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The random weights, then per point its tokens in and out (prompt, step
// and the recomputed prefix), against the cap before any is allocated.
Status CheckPointsFit(const DecodeArgs& args, int64_t d_in, int64_t d_out) {
  const double din = double(d_in), dout = double(d_out);
  const double random_weights = 4.0 * (3 * din * dout + dout * dout + dout);
  for (int64_t context : args.contexts) {
    for (int64_t batch : args.batches) {
      ATTN_RETURN_IF_ERROR(CheckBenchMemory(
          "--dims " + args.dims + " at context " + std::to_string(context) +
              " x batch " + std::to_string(batch) +
              ": the weights, inputs and outputs",
          random_weights + 8.0 * double(context) * double(batch) * (din + dout),
          args.max_memory));
    }
  }
  return {};
}

int Run(const DecodeArgs& args, const std::vector<int>& threads_list,
        double min_time, bool json) {
  int64_t d_in = 0, d_out = 0, heads = 0;
  char tail = 0;
  if (std::sscanf(args.dims.c_str(), "%ld,%ld,%ld%c", &d_in, &d_out, &heads,
                  &tail) != 3 ||
      d_in <= 0 || d_out <= 0 || heads <= 0) {
    return Fail("--dims '" + args.dims +
                "' is not d_in,d_out,heads with positive integers");
  }
  const Status fits = CheckPointsFit(args, d_in, d_out);
  if (!fits.ok()) return Fail(fits.message());
  std::mt19937 rng(0);
  const auto in = static_cast<size_t>(d_in), out = static_cast<size_t>(d_out);
  const double in_bound = 1.0 / std::sqrt(double(d_in));
  const double out_bound = 1.0 / std::sqrt(double(d_out));
  const auto wq = Random(rng, out * in, in_bound),
             wk = Random(rng, out * in, in_bound),
             wv = Random(rng, out * in, in_bound),
             wo = Random(rng, out * out, out_bound),
             bo = Random(rng, out, out_bound);
  MhaConfig config;
  config.d_in = d_in;
  config.d_out = d_out;
  config.num_heads = heads;
  MhaWeights weights;
  weights.w_query = wq.data();
  weights.w_key = wk.data();
  weights.w_value = wv.data();
  weights.w_out = wo.data();
  weights.b_out = bo.data();
  const double weight_bytes = 4.0 * (3.0 * d_in * d_out + 1.0 * d_out * d_out);

  const RuntimeInfo info = GetRuntimeInfo();
  if (!json) {
    std::printf(
        "attn %s | highway %s | oneDNN %s %s | decode d_in %ld d_out %ld "
        "heads %ld\n",
        info.version.c_str(), info.simd_target.c_str(),
        info.onednn_version.c_str(), info.onednn_isa.c_str(), d_in, d_out,
        heads);
    std::printf("%7s %5s %7s %10s %11s %9s %10s %13s %9s\n", "context", "batch",
                "threads", "step_ms", "tokens/s", "kv_GB/s", "all_GB/s",
                "recompute_ms", "speedup");
  }
  std::vector<int> thread_counts = threads_list;
  if (thread_counts.empty()) thread_counts = {0};
  for (int64_t context : args.contexts) {
    for (int64_t batch : args.batches) {
      for (int threads : thread_counts) {
        MhaOptions options;
        options.num_threads = threads;
        options.max_memory_bytes = args.max_memory;
        options.tuned_config = args.config;
        auto model = MhaModel::Create(config, weights, options);
        if (!model.ok()) return Fail(model.status().message());
        const int team = (*model)->num_threads();
        ShowProgress("context %ld batch %ld threads %d: prefill ...", context,
                     batch, team);
        DecoderOptions decoder_options;
        decoder_options.batch = batch;
        decoder_options.max_length = context;
        auto decoder = MhaDecoder::Create(*model, decoder_options);
        if (!decoder.ok()) return Fail(decoder.status().message());
        MhaDecoder& dec = **decoder;
        // The prompt: context - 1 tokens per sequence, so that each timed
        // step's new token attends to `context` keys.
        const int64_t prompt = context - 1;
        const auto rows = static_cast<size_t>(batch);
        const auto x = Random(rng, rows * static_cast<size_t>(context) * in, 1);
        if (prompt > 0) {
          std::vector<float> y(rows * static_cast<size_t>(prompt) * out);
          std::vector<float> xp(rows * static_cast<size_t>(prompt) * in);
          for (size_t b = 0; b < rows; ++b) {
            std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(
                                        b * static_cast<size_t>(context) * in),
                        static_cast<size_t>(prompt) * in,
                        xp.begin() + static_cast<std::ptrdiff_t>(
                                         b * static_cast<size_t>(prompt) * in));
          }
          const Status st = dec.Prefill(xp.data(), prompt, y.data());
          if (!st.ok()) return Fail(st.message());
        }
        std::vector<float> x1(rows * in), y1(rows * out);
        for (size_t b = 0; b < rows; ++b) {
          std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(
                                      (b * static_cast<size_t>(context) +
                                       static_cast<size_t>(prompt)) *
                                      in),
                      in, x1.begin() + static_cast<std::ptrdiff_t>(b * in));
        }
        auto step = [&]() -> Status {
          // Rewind to the prompt, then the step under test.
          for (int64_t b = 0; b < batch; ++b) {
            ATTN_RETURN_IF_ERROR(dec.Truncate(b, prompt));
          }
          if (prompt == 0) return dec.Prefill(x1.data(), 1, y1.data());
          return dec.Decode(x1.data(), batch, y1.data());
        };
        ShowProgress("context %ld batch %ld threads %d: decode ...", context,
                     batch, team);
        for (int warmup = 0; warmup < 3; ++warmup) {
          const Status st = step();
          if (!st.ok()) return Fail(st.message());
        }
        const size_t kv_bytes = [&] {
          for (int64_t b = 0; b < batch; ++b) (void)dec.Truncate(b, prompt);
          return dec.decode_kv_bytes();
        }();
        std::vector<double> ms;
        const auto start = Clock::now();
        while (ms.size() < 10 ||
               std::chrono::duration<double>(Clock::now() - start).count() <
                   min_time) {
          const auto t0 = Clock::now();
          const Status st = step();
          const auto t1 = Clock::now();
          if (!st.ok()) return Fail(st.message());
          ms.push_back(
              std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        const double step_ms = ms.empty() ? 0.0 : Median(ms);
        const double tokens = double(batch) / (step_ms / 1e3);
        const double kv_gbs = double(kv_bytes) / (step_ms / 1e3) / 1e9;
        const double all_gbs =
            (double(kv_bytes) + weight_bytes) / (step_ms / 1e3) / 1e9;

        // The chapter-3 way: the whole prefix (context tokens) recomputed for
        // the one new token of each sequence. Two runs, the faster counts.
        double recompute_ms = 0.0;
        if (args.recompute) {
          ShowProgress("context %ld batch %ld threads %d: recompute ...",
                       context, batch, team);
          MhaSession session(*model);
          std::vector<float> y(rows * static_cast<size_t>(context) * out);
          for (int rep = 0; rep < 2; ++rep) {
            const auto t0 = Clock::now();
            const Status st = session.Run(x.data(), batch, context, y.data());
            const auto t1 = Clock::now();
            if (!st.ok()) return Fail(st.message());
            const double t =
                std::chrono::duration<double, std::milli>(t1 - t0).count();
            recompute_ms = rep == 0 ? t : std::min(recompute_ms, t);
          }
        }
        EndProgress();
        const double speedup = recompute_ms > 0 ? recompute_ms / step_ms : 0.0;
        if (json) {
          const nlohmann::json line = {{"kind", "decode"},
                                       {"context", context},
                                       {"batch", batch},
                                       {"d_in", d_in},
                                       {"d_out", d_out},
                                       {"heads", heads},
                                       {"threads", team},
                                       {"step_ms", step_ms},
                                       {"reps", ms.size()},
                                       {"tokens_per_s", tokens},
                                       {"kv_bytes", kv_bytes},
                                       {"kv_gb_per_s", kv_gbs},
                                       {"all_gb_per_s", all_gbs},
                                       {"recompute_ms", recompute_ms},
                                       {"speedup", speedup},
                                       {"simd_target", info.simd_target},
                                       {"onednn_isa", info.onednn_isa}};
          std::printf("%s\n", line.dump().c_str());
        } else {
          std::printf(
              "%7ld %5ld %7d %10.3f %11.1f %9.2f %10.2f %13.2f %8.0fx\n",
              context, batch, team, step_ms, tokens, kv_gbs, all_gbs,
              recompute_ms, speedup);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

std::function<DecodeBench()> AddDecodeBenchOptions(CLI::App& bench) {
  auto args = std::make_shared<DecodeArgs>();
  bench.add_flag("--decode", args->enabled,
                 "time one KV-cache decode step per (--context, --batch) "
                 "instead of the forward pass, against recomputing the "
                 "prefix");
  bench
      .add_option("--context", args->contexts,
                  "decode: keys each new token attends to, e.g. 1024,4096")
      ->delimiter(',')
      ->check(IntegerIn(1))
      ->capture_default_str();
  bench
      .add_option("--batch", args->batches,
                  "decode: sequences decoded together, e.g. 1,8")
      ->delimiter(',')
      ->check(IntegerIn(1))
      ->capture_default_str();
  bench.add_option("--dims", args->dims, "decode: d_in,d_out,heads")
      ->capture_default_str();
  bench.add_flag("!--no-recompute", args->recompute,
                 "decode: skip the recompute-the-prefix baseline");
  return [args]() -> DecodeBench {
    if (!args->enabled) return nullptr;
    return [args](const std::vector<int>& threads, double min_time,
                  uint64_t max_memory, const std::string& config, bool json) {
      DecodeArgs with_cap = *args;
      with_cap.max_memory = max_memory;
      with_cap.config = config;
      return Run(with_cap, threads, min_time, json);
    };
  };
}

}  // namespace attn::cli
