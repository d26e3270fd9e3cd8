// attn bench --decode: times one decode step (every sequence of a batch gets
// its next token, attending to `context` keys) against recomputing the whole
// prefix with MhaSession (the chapter-3 way), and reports tokens/s and the
// effective bandwidth of the K/V cache read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "bench/grid.h"
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
  uint64_t max_memory = 0;    // bench's --max-memory; 0: the default
  std::string config;         // bench's --config: a tuned file, or empty
  AttentionFlags attention;   // bench's --kv-heads, --rope-theta, ...
  DType dtype = DType::kF32;  // one of bench's --dtype
};

using Clock = std::chrono::steady_clock;

double MillisecondsBetween(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

struct Dims {
  int64_t d_in = 0, d_out = 0, heads = 0;
  int64_t kv_heads = 0;  // --kv-heads; 0: heads

  // Rows of W_key and W_value: kv_heads * d_out / heads, or d_out.
  double kv_dim() const {
    return kv_heads > 0 ? double(kv_heads) * double(d_out / heads)
                        : double(d_out);
  }
};

// --dims "d_in,d_out,heads", each positive.
Result<Dims> ParseDims(const std::string& spec) {
  Dims dims;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%ld,%ld,%ld%c", &dims.d_in, &dims.d_out,
                  &dims.heads, &tail) != 3 ||
      dims.d_in <= 0 || dims.d_out <= 0 || dims.heads <= 0) {
    return InvalidArgument("--dims '" + spec +
                           "' is not d_in,d_out,heads with positive integers");
  }
  return dims;
}

// The random weights, then per point its tokens in and out (prompt, step
// and the recomputed prefix), against the cap before any is allocated.
Status CheckPointsFit(const DecodeArgs& args, const Dims& dims) {
  const double din = double(dims.d_in), dout = double(dims.d_out);
  const double random_weights =
      4.0 * ((dout + 2 * dims.kv_dim()) * din + dout * dout + dout);
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

// The table's title and column heads (not with --json).
void PrintHeader(const RuntimeInfo& info, const Dims& dims,
                 const DecodeArgs& args) {
  std::printf(
      "attn %s | highway %s | oneDNN %s %s | dtype %s | decode d_in %ld "
      "d_out %ld heads %ld kv heads %ld rope theta %g window %ld\n",
      info.version.c_str(), info.simd_target.c_str(),
      info.onednn_version.c_str(), info.onednn_isa.c_str(),
      DTypeName(args.dtype), dims.d_in, dims.d_out, dims.heads,
      dims.kv_heads ? dims.kv_heads : dims.heads, args.attention.rope.theta,
      args.attention.sliding_window);
  std::printf("%7s %5s %7s %10s %11s %9s %10s %13s %9s\n", "context", "batch",
              "threads", "step_ms", "tokens/s", "kv_GB/s", "all_GB/s",
              "recompute_ms", "speedup");
}

// One (context, batch) point's random tokens: `context` per sequence, the
// first context - 1 of them the prompt and the last the timed step's.
struct PointTokens {
  int64_t batch = 0, context = 0, prompt = 0, d_in = 0;
  std::vector<float> all;     // [batch, context, d_in]
  std::vector<float> step_x;  // [batch, 1, d_in]: the last of each sequence
};

PointTokens MakePointTokens(int64_t batch, int64_t context, int64_t d_in) {
  PointTokens t;
  t.batch = batch;
  t.context = context;
  t.prompt = context - 1;
  t.d_in = d_in;
  const auto rows = static_cast<size_t>(batch);
  const auto in = static_cast<size_t>(d_in);
  const auto ctx = static_cast<size_t>(context);
  const auto prompt = static_cast<size_t>(t.prompt);
  t.all = bench::RandomFloats(rows * ctx * in, 1.0f, 1);
  t.step_x.resize(rows * in);
  for (size_t b = 0; b < rows; ++b) {
    std::copy_n(
        t.all.begin() + static_cast<std::ptrdiff_t>((b * ctx + prompt) * in),
        in, t.step_x.begin() + static_cast<std::ptrdiff_t>(b * in));
  }
  return t;
}

// Fills the cache with the prompt: context - 1 tokens per sequence, so that
// each timed step's new token attends to `context` keys.
Status PrefillPrompt(MhaDecoder& dec, const PointTokens& tokens,
                     int64_t d_out) {
  if (tokens.prompt == 0) return {};
  const auto rows = static_cast<size_t>(tokens.batch);
  const auto in = static_cast<size_t>(tokens.d_in);
  const auto ctx = static_cast<size_t>(tokens.context);
  const auto prompt = static_cast<size_t>(tokens.prompt);
  std::vector<float> y(rows * prompt * static_cast<size_t>(d_out));
  std::vector<float> xp(rows * prompt * in);
  for (size_t b = 0; b < rows; ++b) {
    std::copy_n(tokens.all.begin() + static_cast<std::ptrdiff_t>(b * ctx * in),
                prompt * in,
                xp.begin() + static_cast<std::ptrdiff_t>(b * prompt * in));
  }
  return dec.Prefill(xp.data(), tokens.prompt, y.data());
}

// The decode step of one point, timed; its K/V read per step.
struct StepTiming {
  double step_ms = 0.0;
  size_t reps = 0;
  size_t kv_bytes = 0;
};

// Times the step on a cache holding the prompt (rewind to the prompt, append
// one token per sequence): 3 warm-up runs, then at least 10 and `min_time`
// seconds; the median counts. `team` (the model's) is for the progress line.
Result<StepTiming> TimeDecodeStep(MhaDecoder& dec, const PointTokens& tokens,
                                  int64_t d_out, int team, double min_time) {
  const int64_t prompt = tokens.prompt;
  std::vector<float> y1(static_cast<size_t>(tokens.batch) *
                        static_cast<size_t>(d_out));
  auto step = [&]() -> Status {
    // Rewind to the prompt, then the step under test.
    for (int64_t b = 0; b < tokens.batch; ++b) {
      ATTN_RETURN_IF_ERROR(dec.Truncate(b, prompt));
    }
    if (prompt == 0) return dec.Prefill(tokens.step_x.data(), 1, y1.data());
    return dec.Decode(tokens.step_x.data(), tokens.batch, y1.data());
  };
  ShowProgress("context %ld batch %ld threads %d: decode ...", tokens.context,
               tokens.batch, team);
  for (int warmup = 0; warmup < 3; ++warmup) ATTN_RETURN_IF_ERROR(step());
  StepTiming timing;
  for (int64_t b = 0; b < tokens.batch; ++b) (void)dec.Truncate(b, prompt);
  timing.kv_bytes = dec.decode_kv_bytes();
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < 10 ||
         std::chrono::duration<double>(Clock::now() - start).count() <
             min_time) {
    const auto t0 = Clock::now();
    const Status st = step();
    const auto t1 = Clock::now();
    ATTN_RETURN_IF_ERROR(st);
    ms.push_back(MillisecondsBetween(t0, t1));
  }
  timing.step_ms = ms.empty() ? 0.0 : Median(ms);
  timing.reps = ms.size();
  return timing;
}

// The chapter-3 way: the whole prefix (context tokens) recomputed for the one
// new token of each sequence. Two runs, the faster counts.
Result<double> TimeRecompute(std::shared_ptr<const MhaModel> model,
                             const PointTokens& tokens, int64_t d_out) {
  MhaSession session(std::move(model));
  std::vector<float> y(static_cast<size_t>(tokens.batch) *
                       static_cast<size_t>(tokens.context) *
                       static_cast<size_t>(d_out));
  double recompute_ms = 0.0;
  for (int rep = 0; rep < 2; ++rep) {
    const auto t0 = Clock::now();
    const Status st =
        session.Run(tokens.all.data(), tokens.batch, tokens.context, y.data());
    const auto t1 = Clock::now();
    ATTN_RETURN_IF_ERROR(st);
    const double t = MillisecondsBetween(t0, t1);
    recompute_ms = rep == 0 ? t : std::min(recompute_ms, t);
  }
  return recompute_ms;
}

// What one point measured.
struct DecodePoint {
  int64_t context = 0, batch = 0;
  int team = 0;
  StepTiming step;
  double recompute_ms = 0.0;  // 0 with --no-recompute
};

// Times one (context, batch, threads) point on the random `weights`.
Result<DecodePoint> MeasurePoint(const DecodeArgs& args, const Dims& dims,
                                 const MhaWeights& weights, int64_t context,
                                 int64_t batch, int threads, double min_time) {
  MhaConfig config;
  config.d_in = dims.d_in;
  config.d_out = dims.d_out;
  config.num_heads = dims.heads;
  config.num_kv_heads = dims.kv_heads;
  config.rope = args.attention.rope;
  config.sliding_window = args.attention.sliding_window;
  MhaOptions options;
  options.num_threads = threads;
  options.max_memory_bytes = args.max_memory;
  options.tuned_config = args.config;
  options.dtype = options.step_weights = args.dtype;  // as attn::LmOptions
  ATTN_ASSIGN_OR_RETURN(std::shared_ptr<const MhaModel> model,
                        MhaModel::Create(config, weights, options));
  DecodePoint point;
  point.context = context;
  point.batch = batch;
  point.team = model->num_threads();
  ShowProgress("context %ld batch %ld threads %d: prefill ...", context, batch,
               point.team);
  DecoderOptions decoder_options;
  decoder_options.batch = batch;
  decoder_options.max_length = context;
  ATTN_ASSIGN_OR_RETURN(auto decoder,
                        MhaDecoder::Create(model, decoder_options));
  const PointTokens tokens = MakePointTokens(batch, context, dims.d_in);
  ATTN_RETURN_IF_ERROR(PrefillPrompt(*decoder, tokens, dims.d_out));
  ATTN_ASSIGN_OR_RETURN(point.step, TimeDecodeStep(*decoder, tokens, dims.d_out,
                                                   point.team, min_time));
  if (args.recompute) {
    ShowProgress("context %ld batch %ld threads %d: recompute ...", context,
                 batch, point.team);
    ATTN_ASSIGN_OR_RETURN(point.recompute_ms,
                          TimeRecompute(model, tokens, dims.d_out));
  }
  EndProgress();
  return point;
}

// One line for `point`: a table row, or a JSON object with --json.
void PrintPoint(const DecodePoint& point, const Dims& dims, DType dtype,
                const RuntimeInfo& info, bool json) {
  const double step_ms = point.step.step_ms;
  const double kv_bytes = double(point.step.kv_bytes);
  const double weight_bytes =
      (dtype == DType::kBF16 ? 2.0 : 4.0) *
      ((double(dims.d_out) + 2.0 * dims.kv_dim()) * double(dims.d_in) +
       double(dims.d_out) * double(dims.d_out));
  const double tokens = double(point.batch) / (step_ms / 1e3);
  const double kv_gbs = kv_bytes / (step_ms / 1e3) / 1e9;
  const double all_gbs = (kv_bytes + weight_bytes) / (step_ms / 1e3) / 1e9;
  const double speedup =
      point.recompute_ms > 0 ? point.recompute_ms / step_ms : 0.0;
  if (json) {
    const nlohmann::json line = {
        {"kind", "decode"},
        {"context", point.context},
        {"batch", point.batch},
        {"d_in", dims.d_in},
        {"d_out", dims.d_out},
        {"heads", dims.heads},
        {"kv_heads", dims.kv_heads ? dims.kv_heads : dims.heads},
        {"threads", point.team},
        {"dtype", DTypeName(dtype)},
        {"step_ms", step_ms},
        {"reps", point.step.reps},
        {"tokens_per_s", tokens},
        {"kv_bytes", point.step.kv_bytes},
        {"kv_gb_per_s", kv_gbs},
        {"all_gb_per_s", all_gbs},
        {"recompute_ms", point.recompute_ms},
        {"speedup", speedup},
        {"simd_target", info.simd_target},
        {"onednn_isa", info.onednn_isa}};
    std::printf("%s\n", JsonLine(line).c_str());
  } else {
    std::printf("%7ld %5ld %7d %10.3f %11.1f %9.2f %10.2f %13.2f %8.0fx\n",
                point.context, point.batch, point.team, step_ms, tokens, kv_gbs,
                all_gbs, point.recompute_ms, speedup);
  }
  std::fflush(stdout);
}

int Run(const DecodeArgs& args, const std::vector<int>& threads_list,
        double min_time, bool json) {
  Result<Dims> dims = ParseDims(args.dims);
  if (!dims.ok()) return Fail(dims.status().message());
  dims->kv_heads = args.attention.kv_heads;
  const Status fits = CheckPointsFit(args, *dims);
  if (!fits.ok()) return Fail(fits.message());
  MhaConfig config;
  config.d_in = dims->d_in;
  config.d_out = dims->d_out;
  config.num_heads = dims->heads;
  config.num_kv_heads = dims->kv_heads;
  const bench::RandomMhaWeights weights =
      bench::MakeRandomMhaWeights(config, 0);
  const RuntimeInfo info = GetRuntimeInfo();
  if (!json) PrintHeader(info, *dims, args);
  std::vector<int> thread_counts = threads_list;
  if (thread_counts.empty()) thread_counts = {0};
  for (int64_t context : args.contexts) {
    for (int64_t batch : args.batches) {
      for (int threads : thread_counts) {
        const Result<DecodePoint> point = MeasurePoint(
            args, *dims, weights.view(), context, batch, threads, min_time);
        if (!point.ok()) return Fail(point.status().message());
        PrintPoint(*point, *dims, args.dtype, info, json);
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
  bench.add_option("--dims", args->dims, "decode: d_in,d_out,heads")
      ->capture_default_str();
  bench.add_flag("!--no-recompute", args->recompute,
                 "decode: skip the recompute-the-prefix baseline");
  return [args]() -> DecodeBench {
    if (!args->enabled) return nullptr;
    return [args](const BenchFlags& flags, DType dtype) {
      DecodeArgs with_cap = *args;
      if (!flags.batches.empty()) with_cap.batches = flags.batches;
      with_cap.max_memory = flags.max_memory;
      with_cap.config = flags.config;
      with_cap.attention = flags.attention;
      with_cap.dtype = dtype;
      return Run(with_cap, flags.threads, flags.min_time, flags.json);
    };
  };
}

}  // namespace attn::cli
