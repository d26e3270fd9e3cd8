// attn bench --graph: times a JSON graph (attn/graph.hpp) on named or given
// shapes. Without --weights it runs on seeded random weights under the book's
// TransformerBlock names (emb e, hidden 4e), as transformer_block.json reads.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "bench/grid.h"
#include "nlohmann/json.hpp"
#include "tools/bench_common.h"
#include "tools/graph_cli.h"

namespace attn::cli {
namespace {

struct GraphArgs {
  std::string graph, weights;
  uint64_t max_memory = 0;  // bench's --max-memory; 0: the default
  std::string config;       // bench's --config: a tuned file, or empty
};

struct BlockShape {
  std::string name;
  int64_t batch, seq_len, emb, heads;
};

// "gpt2-128,gpt2-1k" or "b,T,e,h"; those two named shapes when empty.
Result<std::vector<BlockShape>> ParseShapes(const std::string& spec) {
  // The GPT-2 shapes of the grid, where d_in = d_out = e.
  static const std::vector<BlockShape> kNamed = [] {
    std::vector<BlockShape> named;
    for (const bench::GridShape& g : bench::PeerGrid()) {
      if (std::string(g.name).rfind("gpt2-", 0) == 0) {
        named.push_back({g.name, g.batch, g.seq_len, g.d_out, g.heads});
      }
    }
    return named;
  }();
  if (spec.empty()) return ParseShapes("gpt2-128,gpt2-1k");
  BlockShape s{spec, 0, 0, 0, 0};
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%ld,%ld,%ld,%ld%c", &s.batch, &s.seq_len,
                  &s.emb, &s.heads, &tail) == 4) {
    if (s.batch <= 0 || s.seq_len <= 0 || s.emb <= 0 || s.heads <= 0) {
      return InvalidArgument("--shape '" + spec +
                             "' has a size <= 0, want positive b,T,e,h");
    }
    return std::vector<BlockShape>{s};
  }
  std::vector<BlockShape> shapes;
  std::stringstream names(spec);
  for (std::string name; std::getline(names, name, ',');) {
    const auto it =
        std::find_if(kNamed.begin(), kNamed.end(),
                     [&](const BlockShape& n) { return n.name == name; });
    if (it == kNamed.end()) {
      return InvalidArgument("--shape '" + name +
                             "' is unknown with --graph, want gpt2-128, "
                             "gpt2-1k, gpt2-1k-b4 or b,T,e,h");
    }
    shapes.push_back(*it);
  }
  return shapes;
}

// Writes seeded random TransformerBlock weights for emb `e` to `path`, with
// nn.Linear's init range and LayerNorm weights near (1, 0).
Status WriteRandomBlock(const std::string& path, int64_t e) {
  std::vector<std::vector<float>> values;
  std::vector<F32Tensor> tensors;
  values.reserve(16);
  auto add = [&](const std::string& name, std::vector<int64_t> shape,
                 float center, float bound) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    values.push_back(
        bench::RandomFloats(n, bound, static_cast<uint32_t>(values.size())));
    for (float& v : values.back()) v += center;
    tensors.push_back({name, std::move(shape), values.back().data()});
  };
  const auto in = static_cast<float>(1.0 / std::sqrt(double(e)));
  const float hidden = 0.5f * in;
  for (const char* norm : {"norm1", "norm2"}) {
    add(std::string(norm) + ".scale", {e}, 1.0f, 0.1f);
    add(std::string(norm) + ".shift", {e}, 0.0f, 0.1f);
  }
  for (const char* proj : {"W_query", "W_key", "W_value", "out_proj"}) {
    add(std::string("att.") + proj + ".weight", {e, e}, 0.0f, in);
  }
  add("att.out_proj.bias", {e}, 0.0f, in);
  add("ff.layers.0.weight", {4 * e, e}, 0.0f, in);
  add("ff.layers.0.bias", {4 * e}, 0.0f, in);
  add("ff.layers.2.weight", {e, 4 * e}, 0.0f, hidden);
  add("ff.layers.2.bias", {e}, 0.0f, hidden);
  return WriteSafetensors(path, tensors);
}

// The input [b, T, e]: seeded standard normal values.
std::vector<float> RandomInput(const BlockShape& s) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(s.batch * s.seq_len * s.emb));
  for (float& f : v) f = dist(rng);
  return v;
}

// The random block (12 e^2 + 10 e floats, unless --weights gives one), the
// input and an output of the same width, against the cap before any is
// allocated.
Status CheckShapeFits(const GraphArgs& args, const BlockShape& s) {
  const double e = double(s.emb), rows = double(s.batch) * double(s.seq_len);
  return CheckBenchMemory(
      "shape " + s.name + ": its weights, input and output",
      4.0 * ((args.weights.empty() ? 12 * e * e + 10 * e : 0) + 2 * rows * e),
      args.max_memory);
}

// The random weights' file, in the temporary directory and named for this
// process, removed when the run ends (a signal still leaves it).
class TempWeights {
 public:
  static Result<TempWeights> Create() {
    std::error_code error;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path(error);
    if (error) {
      return IoError(
          "no temporary directory for the random weights (TMPDIR): " +
          error.message());
    }
    return TempWeights((dir / ("attn_bench_graph_" + std::to_string(getpid()) +
                               ".safetensors"))
                           .string());
  }
  TempWeights(TempWeights&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  TempWeights& operator=(TempWeights&&) = delete;
  ~TempWeights() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempWeights(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The table's title and column heads (not with --json).
void PrintHeader(const RuntimeInfo& info, const GraphArgs& args, DType dtype) {
  std::printf("attn %s | graph %s | highway %s | oneDNN %s %s | dtype %s\n",
              info.version.c_str(), args.graph.c_str(),
              info.simd_target.c_str(), info.onednn_version.c_str(),
              info.onednn_isa.c_str(), DTypeName(dtype));
  std::printf("%-18s %7s %10s %10s %12s %9s %11s\n", "shape", "threads",
              "median_ms", "min_ms", "tokens/s", "GFLOP/s", "arena_MB");
}

// Milliseconds per Run of `graph` on `x`: 2 warm-up runs, then at least 5
// and `min_time` seconds.
Result<std::vector<double>> TimeRuns(GraphSession& session,
                                     const std::vector<float>& x,
                                     const BlockShape& s, double min_time) {
  std::vector<float> y(static_cast<size_t>(s.batch * s.seq_len *
                                           session.model().output_width()));
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms;
  for (int warmup = 0; warmup < 2; ++warmup) {
    ATTN_RETURN_IF_ERROR(session.Run(x.data(), s.batch, s.seq_len, y.data()));
  }
  const auto start = Clock::now();
  while (ms.size() < 5 ||
         std::chrono::duration<double>(Clock::now() - start).count() <
             min_time) {
    const auto t0 = Clock::now();
    const Status st = session.Run(x.data(), s.batch, s.seq_len, y.data());
    const auto t1 = Clock::now();
    ATTN_RETURN_IF_ERROR(st);
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return ms;
}

// One line for `session` at shape `s` timed as `ms`: a table row, or a JSON
// object with --json.
void PrintPoint(const GraphArgs& args, const BlockShape& s, DType dtype,
                const GraphSession& session, const std::vector<double>& ms,
                bool json) {
  const GraphModel& graph = session.model();
  const double rows = double(s.batch * s.seq_len);
  const double flops = graph.flops(s.batch, s.seq_len);
  const double median = Median(ms);
  const double tokens = rows / (median / 1e3);
  const double gflops = flops / (median / 1e3) / 1e9;
  const GraphMemory mem = session.memory();
  const double arena_mb = double(mem.planned_peak) / (1 << 20);
  if (json) {
    const nlohmann::json line = {
        {"kind", "graph"},
        {"graph", args.graph},
        {"shape", s.name},
        {"b", s.batch},
        {"T", s.seq_len},
        {"e", s.emb},
        {"h", s.heads},
        {"threads", graph.num_threads()},
        {"dtype", DTypeName(dtype)},
        {"median_ms", median},
        {"min_ms", *std::min_element(ms.begin(), ms.end())},
        {"reps", ms.size()},
        {"tokens_per_s", tokens},
        {"flops", flops},
        {"gflops", gflops},
        {"arena_bytes", mem.planned_peak},
        {"intermediates_bytes", mem.intermediates_total},
        {"workspace_bytes", mem.workspace}};
    std::printf("%s\n", JsonLine(line).c_str());
  } else {
    std::printf("%-18s %7d %10.3f %10.3f %12.0f %9.1f %11.2f\n",
                (s.name + " " + std::to_string(s.batch) + "x" +
                 std::to_string(s.seq_len))
                    .c_str(),
                graph.num_threads(), median,
                *std::min_element(ms.begin(), ms.end()), tokens, gflops,
                arena_mb);
  }
  std::fflush(stdout);
}

// The graph on `weights_path`: the given --weights, else the random block's
// file, which a message names as what it is rather than by its temporary
// path (a graph of other names, such as the Llama block's, needs --weights).
Result<std::shared_ptr<const GraphModel>> LoadGraph(
    const GraphArgs& args, const std::string& weights_path,
    const GraphOptions& options) {
  auto model = GraphModel::Load(args.graph, weights_path, options);
  if (model.ok() || !args.weights.empty()) return model;
  std::string message = model.status().message();
  const std::string quoted = "'" + weights_path + "'";
  const size_t at = message.find(quoted);
  if (at != std::string::npos) {
    message.replace(at, quoted.size(),
                    "the random weights, which hold the book's "
                    "TransformerBlock (give the graph's own with --weights)");
  }
  return Status(model.status().code(), message);
}

// Loads the graph with the weights of `weights_path` and times it at shape
// `s`, once per thread count.
Status TimeShape(const GraphArgs& args, const BlockShape& s,
                 const std::string& weights_path,
                 const std::vector<int>& thread_counts, DType dtype,
                 double min_time, bool json) {
  const std::vector<float> x = RandomInput(s);
  for (int threads : thread_counts) {
    GraphOptions options;
    options.num_heads = s.heads;
    options.num_threads = threads;
    options.dtype = dtype;
    options.max_memory_bytes = args.max_memory;
    options.tuned_config = args.config;
    ATTN_ASSIGN_OR_RETURN(auto model, LoadGraph(args, weights_path, options));
    if (model->token_input()) {
      return InvalidArgument("graph '" + args.graph +
                             "' takes token ids, want a block on [b, T, e] "
                             "(time whole models with attn bench --model)");
    }
    if (model->input_width() != s.emb) {
      return InvalidArgument("--shape '" + s.name + "' has e " +
                             std::to_string(s.emb) +
                             ", but the graph's input width is " +
                             std::to_string(model->input_width()));
    }
    GraphSession session(model);
    ATTN_ASSIGN_OR_RETURN(const std::vector<double> ms,
                          TimeRuns(session, x, s, min_time));
    PrintPoint(args, s, dtype, session, ms, json);
  }
  return {};
}

int Run(const GraphArgs& args, const std::string& spec,
        const std::vector<int>& threads_list, DType dtype, double min_time,
        bool json) {
  auto shapes = ParseShapes(spec);
  if (!shapes.ok()) return Fail(shapes.status().message());
  const std::vector<int> thread_counts =
      threads_list.empty() ? std::vector<int>{0} : threads_list;
  std::optional<TempWeights> temp;  // random weights, without --weights
  if (args.weights.empty()) {
    auto created = TempWeights::Create();
    if (!created.ok()) return Fail(created.status().message());
    temp.emplace(std::move(created).value());
  }
  const RuntimeInfo info = GetRuntimeInfo();
  if (!json) PrintHeader(info, args, dtype);
  for (const BlockShape& s : *shapes) {
    const Status fits = CheckShapeFits(args, s);
    if (!fits.ok()) return Fail(fits.message());
    if (temp) {
      const Status written = WriteRandomBlock(temp->path(), s.emb);
      if (!written.ok()) return Fail(written.message());
    }
    const Status timed = TimeShape(args, s, temp ? temp->path() : args.weights,
                                   thread_counts, dtype, min_time, json);
    if (!timed.ok()) return Fail(timed.message());
  }
  return 0;
}

}  // namespace

std::function<GraphBench()> AddGraphBenchOptions(CLI::App& bench) {
  auto args = std::make_shared<GraphArgs>();
  bench.add_option("--graph", args->graph,
                   "time this JSON graph (e.g. tools/graphs/"
                   "transformer_block.json); --shape then takes gpt2-128, "
                   "gpt2-1k, gpt2-1k-b4 or b,T,e,h");
  return [args]() -> GraphBench {
    if (args->graph.empty()) return nullptr;
    return [args](const BenchFlags& flags, DType dtype) {
      GraphArgs with_cap = *args;
      with_cap.weights = flags.weights;
      with_cap.max_memory = flags.max_memory;
      with_cap.config = flags.config;
      return Run(with_cap, flags.shape, flags.threads, dtype, flags.min_time,
                 flags.json);
    };
  };
}

}  // namespace attn::cli
