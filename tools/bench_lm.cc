// attn bench --model: a whole language model's prefill (every sequence's
// prompt in one step) and decode (one token per sequence per step), with
// seeded random weights at a named model's sizes or a given file. Reports
// tokens/s and the rate at which a decode step reads the weights, the bound
// of batch-1 decoding. With --rounds R every batch size of every --dtype is
// measured R times, all taking turns, and each figure is the median of its
// R: the host's memory bandwidth drifts over seconds, and this way the
// points compared with each other saw the same moments.
#include "tools/bench_lm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "nlohmann/json.hpp"
#include "tools/bench_common.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

struct ModelArgs {
  std::string model;  // a named size; empty: --model not given
  int64_t prompt = 128;
  int64_t steps = 64;
  int rounds = 1;
};

// --model's name for seeded random weights at GPT-2 124M's sizes.
constexpr char kGpt2Small[] = "gpt2-124m";

// GPT-2 124M: the size of the book's chapter-5 model and of the peers.
LmConfig Gpt2Small() {
  LmConfig c;
  c.architecture = LmArchitecture::kGpt2;
  c.vocab_size = 50257;
  c.context_length = 1024;
  c.emb_dim = 768;
  c.hidden_dim = 3072;
  c.num_layers = 12;
  c.num_heads = 12;
  c.qkv_bias = true;
  c.tied_head = true;
  return c;
}

// Bytes of the weights a decode step of a few rows reads, each once: every
// block's matrices and the head (not the embeddings, of which it reads a row).
double DecodeWeightBytes(const LmConfig& c, DType dtype) {
  const double e = double(c.emb_dim), h = double(c.hidden_dim);
  const double d = c.head_dim ? double(c.head_dim) : e / double(c.num_heads);
  const double q = double(c.num_heads) * d, kv = double(c.num_kv_heads) * d;
  const double ff = (c.architecture == LmArchitecture::kLlama ? 3 : 2) * e * h;
  const double block = e * (q + 2 * kv) + q * e + ff;
  // Bytes a weight: llama.cpp's blocks of 32 hold a 2-byte scale each.
  const double per_weight = dtype == DType::kQ8_0   ? 34.0 / 32
                            : dtype == DType::kQ4_0 ? 18.0 / 32
                            : dtype == DType::kBF16 ? 2
                                                    : 4;
  return (double(c.num_layers) * block + double(c.vocab_size) * e) * per_weight;
}

// Bytes of the KV cache a decode step of `batch` sequences reads, averaged
// over `steps` steps after a prompt of `prompt` tokens: each step attends to
// every cached position (the window's, with a sliding window), K and V of
// every layer, in fp32 whatever the weights' dtype.
double DecodeKvBytes(const LmConfig& c, int64_t batch, int64_t prompt,
                     int64_t steps) {
  const double d =
      c.head_dim ? double(c.head_dim) : double(c.emb_dim) / double(c.num_heads);
  const double kv_heads = double(c.num_kv_heads ? c.num_kv_heads : c.num_heads);
  double positions = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t cached = prompt + i + 1;
    positions += double(
        c.sliding_window > 0 ? std::min(cached, c.sliding_window) : cached);
  }
  const double mean = steps > 0 ? positions / double(steps) : 0.0;
  return double(batch) * double(c.num_layers) * 2 * kv_heads * d * mean *
         sizeof(float);
}

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Point {
  int threads = 0;
  DType dtype = DType::kF32;
  int64_t batch = 0;
  double prefill_ms = 0, decode_ms_per_step = 0;
};

// One model per --dtype, at one thread count.
struct DTypeModel {
  DType dtype;
  std::shared_ptr<const LanguageModel> model;
};

// Best of `reps` prefills of `batch` random prompts, then the mean step of
// `steps` decode steps after the last one.
Result<Point> Measure(const DTypeModel& m, const ModelArgs& args,
                      int64_t batch) {
  const LmConfig& c = m.model->config();
  ATTN_ASSIGN_OR_RETURN(
      std::unique_ptr<Batch> lm,
      Batch::Create(Model::Of(m.model), {batch, args.prompt + args.steps}));
  std::mt19937_64 rng(42);
  std::vector<int64_t> ids(size_t(batch * args.prompt));
  for (int64_t& id : ids) id = int64_t(rng() % uint64_t(c.vocab_size));
  Point point;
  point.threads = m.model->num_threads();
  point.dtype = m.dtype;
  point.batch = batch;
  point.prefill_ms = 1e300;
  std::vector<Batch::Request> requests(static_cast<size_t>(batch));
  std::vector<int64_t> seqs(static_cast<size_t>(batch));
  constexpr int kReps = 3;
  for (int rep = 0; rep < kReps; ++rep) {
    for (int64_t b = 0; b < batch; ++b) {
      if (rep > 0) ATTN_RETURN_IF_ERROR(lm->Remove(seqs[b]));
      ATTN_ASSIGN_OR_RETURN(seqs[b], lm->Add());
      requests[b] = {seqs[b], ids.data() + b * args.prompt, args.prompt, false};
    }
    const Clock::time_point t0 = Clock::now();
    ATTN_RETURN_IF_ERROR(lm->Step(requests.data(), requests.size()));
    point.prefill_ms = std::min(point.prefill_ms, MsSince(t0));
  }
  std::vector<int64_t> next(size_t(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    requests[b] = {seqs[b], &next[b], 1, false};
  }
  const Clock::time_point t0 = Clock::now();
  for (int64_t step = 0; step < args.steps; ++step) {
    ATTN_RETURN_IF_ERROR(lm->Step(requests.data(), requests.size()));
    for (int64_t b = 0; b < batch; ++b)
      next[b] = (next[b] + 7919) % c.vocab_size;
  }
  point.decode_ms_per_step = MsSince(t0) / double(args.steps);
  return point;
}

// `source`: kGpt2Small, a weights file or a folder.
Result<std::shared_ptr<const LanguageModel>> MakeModel(
    const std::string& source, const LmOptions& options) {
  if (source != kGpt2Small) return LanguageModel::Load(source, options);
  return LanguageModel::Random(Gpt2Small(), 1234, options);
}

// What the report calls the model: the file when one was given.
const std::string& ModelName(const ModelArgs& args, const BenchFlags& flags) {
  return flags.weights.empty() ? args.model : flags.weights;
}

// The median of each figure over `rounds` (of an even count, the mean of
// the two middle ones).
Point Median(const std::vector<Point>& rounds) {
  Point p = rounds.front();
  for (double Point::*figure :
       {&Point::prefill_ms, &Point::decode_ms_per_step}) {
    std::vector<double> values;
    for (const Point& round : rounds) values.push_back(round.*figure);
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    p.*figure = (values[(n - 1) / 2] + values[n / 2]) / 2;
  }
  return p;
}

// Every (model, batch size) point args.rounds times, all taking turns: the
// median point of each, model by model.
Result<std::vector<Point>> MeasureInTurns(const std::vector<DTypeModel>& models,
                                          const ModelArgs& args,
                                          const std::vector<int64_t>& batches) {
  std::vector<std::vector<Point>> rounds(models.size() * batches.size());
  for (int round = 1; round <= args.rounds; ++round) {
    for (size_t i = 0; i < rounds.size(); ++i) {
      const DTypeModel& m = models[i / batches.size()];
      const int64_t batch = batches[i % batches.size()];
      ShowProgress("threads=%d dtype=%s batch=%ld round %d of %d ...",
                   m.model->num_threads(), DTypeName(m.dtype), long(batch),
                   round, args.rounds);
      Result<Point> point = Measure(m, args, batch);
      EndProgress();
      if (!point.ok()) return point.status();
      rounds[i].push_back(*point);
    }
  }
  std::vector<Point> medians;
  for (std::vector<Point>& points : rounds) {
    medians.push_back(Median(std::move(points)));
  }
  return medians;
}

// The table's first column: as wide as the model's name (a folder's path
// may be long), at least 10.
int NameWidth(const std::string& name) {
  return static_cast<int>(std::max<size_t>(10, name.size()));
}

void PrintPoint(const ModelArgs& args, const BenchFlags& flags,
                const LmConfig& config, const Point& p) {
  const bool json = flags.json;
  const double prefill_tok_s =
      double(p.batch * args.prompt) / p.prefill_ms * 1e3;
  const double decode_tok_s = double(p.batch) / p.decode_ms_per_step * 1e3;
  const double weights_gb_s =
      DecodeWeightBytes(config, p.dtype) / p.decode_ms_per_step / 1e6;
  const double kv_gb_s =
      DecodeKvBytes(config, p.batch, args.prompt, args.steps) /
      p.decode_ms_per_step / 1e6;
  const double peak_mb = double(PeakRssBytes()) / (1 << 20);
  const std::string& name = ModelName(args, flags);
  if (json) {
    const nlohmann::json line = {{"model", name},
                                 {"dtype", DTypeName(p.dtype)},
                                 {"threads", p.threads},
                                 {"batch", p.batch},
                                 {"prompt", args.prompt},
                                 {"steps", args.steps},
                                 {"rounds", args.rounds},
                                 {"prefill_ms", p.prefill_ms},
                                 {"prefill_tok_s", prefill_tok_s},
                                 {"decode_ms_per_step", p.decode_ms_per_step},
                                 {"decode_tok_s", decode_tok_s},
                                 {"decode_weights_gb_s", weights_gb_s},
                                 {"decode_kv_gb_s", kv_gb_s},
                                 {"peak_rss_mb", peak_mb}};
    std::printf("%s\n", JsonLine(line).c_str());
  } else {
    std::printf(
        "%-*s %5s %7d %5ld %10.1f %11.0f %11.2f %10.1f %11.1f %8.1f %8.0f\n",
        NameWidth(name), name.c_str(), DTypeName(p.dtype), p.threads,
        long(p.batch), p.prefill_ms, prefill_tok_s, p.decode_ms_per_step,
        decode_tok_s, weights_gb_s, kv_gb_s, peak_mb);
  }
  std::fflush(stdout);
}

// --prompt and --steps must fit one sequence of `context` tokens.
Status CheckSequenceFits(const ModelArgs& args, int64_t context) {
  if (context == 0 ||
      (args.prompt <= context && args.steps <= context - args.prompt)) {
    return {};
  }
  return InvalidArgument("--prompt " + std::to_string(args.prompt) +
                         " + --steps " + std::to_string(args.steps) +
                         " tokens a sequence, over the model's "
                         "context_length " +
                         std::to_string(context));
}

int Run(const ModelArgs& args, const BenchFlags& flags) {
  if (ModelName(args, flags) == kGpt2Small) {  // before the random model loads
    const Status fits = CheckSequenceFits(args, Gpt2Small().context_length);
    if (!fits.ok()) return Fail(fits.message());
  }
  std::vector<int> thread_counts = flags.threads;
  if (thread_counts.empty()) thread_counts = {0};
  std::vector<int64_t> batches = flags.batches;
  if (batches.empty()) batches = {1, 8};
  // The table's header comes with its first row: a refused model prints
  // nothing on stdout.
  bool header = flags.json;
  for (const int threads : thread_counts) {
    ResetPeakRss();
    std::vector<DTypeModel> models;
    for (const DType dtype : flags.dtypes) {
      LmOptions options;
      options.num_threads = threads;
      options.max_memory_bytes = flags.max_memory;
      options.tuned_config = flags.config;
      options.dtype = dtype;
      ShowProgress("loading %s (%s) ...", ModelName(args, flags).c_str(),
                   DTypeName(dtype));
      Result<std::shared_ptr<const LanguageModel>> model =
          MakeModel(ModelName(args, flags), options);
      EndProgress();
      if (!model.ok()) return Fail(model.status().message());
      // A quantized folder runs in its own type whatever --dtype said.
      models.push_back({(*model)->dtype(), *std::move(model)});
    }
    const Status fits =
        CheckSequenceFits(args, models.front().model->config().context_length);
    if (!fits.ok()) return Fail(fits.message());
    Result<std::vector<Point>> points = MeasureInTurns(models, args, batches);
    if (!points.ok()) return Fail(points.status().message());
    if (!header) {
      std::printf("%-*s %5s %7s %5s %10s %11s %11s %10s %11s %8s %8s\n",
                  NameWidth(ModelName(args, flags)), "model", "dtype",
                  "threads", "batch", "prefill_ms", "prefill_t/s", "decode_ms",
                  "decode_t/s", "weight_GB/s", "kv_GB/s", "peak_MB");
      header = true;
    }
    for (const Point& point : *points) {
      PrintPoint(args, flags, models.front().model->config(), point);
    }
  }
  return 0;
}

}  // namespace

std::function<ModelBench()> AddModelBenchOptions(CLI::App& bench) {
  auto args = std::make_shared<ModelArgs>();
  bench
      .add_option("--model", args->model,
                  "time a whole model's prefill and decode: gpt2-124m "
                  "(seeded random weights at GPT-2 124M's sizes) or a "
                  "model's folder as Hugging Face publishes it")
      ->check(FilePath());
  bench.add_option("--prompt", args->prompt, "model: prompt tokens")
      ->check(IntegerIn(1))
      ->capture_default_str();
  bench.add_option("--steps", args->steps, "model: decode steps timed")
      ->check(IntegerIn(1))
      ->capture_default_str();
  bench
      .add_option("--rounds", args->rounds,
                  "model: measure every batch size this many times, taking "
                  "turns, and report the medians")
      ->check(IntegerIn(1, 1000))
      ->capture_default_str();
  return [args]() -> ModelBench {
    if (args->model.empty()) return nullptr;
    return [args](const BenchFlags& flags) { return Run(*args, flags); };
  };
}

}  // namespace attn::cli
