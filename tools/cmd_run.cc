// attn run: one forward pass from a safetensors input to a safetensors output.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "tools/atomic_output.h"
#include "tools/cli.h"
#include "tools/decode_cli.h"
#include "tools/flags.h"
#include "tools/lm_cli.h"

namespace attn::cli {
namespace {

struct RunArgs {
  std::string weights, input, output, input_name = "input";
  std::string config;  // tuned file (attn tune --save)
  int64_t heads = 0, context_length = 0;
  int threads = 0;
  bool allow_nonfinite = false;
  bool incremental = false;  // through the KV cache (tools/run_incremental.cc)
  std::string graph;         // a JSON graph (attn/graph.hpp) instead
  int64_t layers = 0;        // --graph: runs, weights under trf_blocks.{i}.
  uint64_t max_memory = 0;   // bytes; 0 = attn::DefaultMaxMemoryBytes()
  DType dtype = DType::kF32;
  AttentionFlags attention;
};

// One forward pass: input [batch, seq_len, in_width] -> output.
using Forward = std::function<Status(const float* input, int64_t batch,
                                     int64_t seq_len, float* output)>;

// The part of `attn run` every model shares: read and check the input, run
// `forward`, check the output and write it atomically. Returns the exit code.
int RunForward(const RunArgs& args, int64_t in_width, int64_t out_width,
               const Forward& forward) {
  auto file = SafetensorsFile::Open(args.input, args.max_memory);
  if (!file.ok()) return Fail(file.status().message());
  const TensorInfo* x = file->Find(args.input_name);
  if (!x) {
    return Fail("input tensor '" + args.input_name + "' is missing from '" +
                args.input + "' (name another with --input-name)");
  }
  if (x->shape.size() != 3 || x->shape[2] != in_width || x->shape[0] <= 0 ||
      x->shape[1] <= 0) {
    return Fail("input tensor '" + args.input_name + "' has shape " +
                ShapeString(x->shape) + ", want [batch, seq_len, " +
                std::to_string(in_width) + "]");
  }
  const int64_t batch = x->shape[0], seq_len = x->shape[1];
  // The input's copy and the output, checked before either is allocated.
  const uint64_t max_memory =
      args.max_memory ? args.max_memory : DefaultMaxMemoryBytes();
  const double io_bytes = 4.0 * batch * seq_len * (in_width + out_width);
  if (io_bytes > static_cast<double>(max_memory)) {
    return Fail("input and output of shape " + ShapeString(x->shape) +
                " need " + std::to_string(static_cast<uint64_t>(io_bytes)) +
                " bytes, over the memory limit of " +
                std::to_string(max_memory) +
                " bytes (raise it with --max-memory)");
  }
  auto values = file->ReadF32(args.input_name);
  if (!values.ok()) return Fail(values.status().message());
  const auto not_finite = [](float v) { return !std::isfinite(v); };
  if (!args.allow_nonfinite) {
    const auto bad = std::find_if(values->begin(), values->end(), not_finite);
    if (bad != values->end()) {
      return Fail("input tensor '" + args.input_name + "' holds " +
                  std::to_string(*bad) + " at element " +
                  std::to_string(bad - values->begin()) +
                  ", want finite values (--allow-nonfinite passes them "
                  "through as PyTorch would)");
    }
  }
  std::vector<float> y(static_cast<size_t>(batch * seq_len * out_width));
  const Status status = forward(values->data(), batch, seq_len, y.data());
  if (!status.ok()) return Fail(status.message());
  if (!args.allow_nonfinite) {
    // Finite input, non-finite output: an intermediate (projection or score)
    // overflowed fp32. Refuse rather than write NaN where the math is finite.
    const auto bad = std::find_if(y.begin(), y.end(), not_finite);
    if (bad != y.end()) {
      float largest = 0.0f;
      for (float v : *values) largest = std::max(largest, std::fabs(v));
      char largest_text[32];
      std::snprintf(largest_text, sizeof(largest_text), "%g", largest);
      return Fail("output element " + std::to_string(bad - y.begin()) + " is " +
                  std::to_string(*bad) +
                  ": the input is finite but an intermediate overflowed fp32 "
                  "(largest |input| is " +
                  largest_text + "); scale the input down");
    }
  }
  const Status written = WriteOutputAtomically(
      args.output, {{"output", {batch, seq_len, out_width}, y.data()}});
  if (!written.ok()) return Fail(written.message());
  return 0;
}

// What the flags ask of the loader, for the attention or a graph.
LoadOptions LoadOptionsOf(const RunArgs& args) {
  LoadOptions options;
  options.num_heads = args.heads;
  options.context_length = args.context_length;
  options.layers = args.layers;
  options.num_threads = args.threads;
  options.dtype = args.dtype;
  options.max_memory_bytes = args.max_memory;
  options.tuned_config = args.config;
  // --incremental runs decoders alone: no layouts for sessions, and bf16
  // with rotary embeddings, which only decoders run.
  options.decode = args.incremental;
  options.sessions = !args.incremental;
  args.attention.ApplyTo(options);
  return options;
}

// A graph whose input is token ids (a whole model, e.g. tools/graphs/
// gpt_model.json): input_ids in, logits [b, T, vocab] out, zeros past each
// row's length as for a model file (rows are causal: padding after a row's
// tokens does not change their logits).
int RunOnTokens(const RunArgs& args,
                const std::shared_ptr<const Model>& model) {
  auto prompts = ReadPromptIds(args.input, args.max_memory, 0);
  if (!prompts.ok()) return Fail(prompts.status().message());
  const int64_t vocab = model->output_width();
  const Status fits = CheckOutputFits(
      "logits", {prompts->batch, prompts->width, vocab}, 4, args.max_memory);
  if (!fits.ok()) return Fail(fits.message());
  const int64_t row_floats = prompts->width * vocab;
  std::vector<float> logits(static_cast<size_t>(prompts->batch * row_floats));
  Session session(model);
  const Status run = session.Run(prompts->ids.data(), prompts->batch,
                                 prompts->width, logits.data());
  if (!run.ok()) return Fail(run.message());
  for (int64_t b = 0; b < prompts->batch; ++b) {
    std::fill(logits.begin() + b * row_floats + prompts->lengths[b] * vocab,
              logits.begin() + (b + 1) * row_floats, 0.0f);
  }
  const Status written = WriteOutputAtomically(
      args.output,
      {{"logits", {prompts->batch, prompts->width, vocab}, logits.data()}});
  if (!written.ok()) return Fail(written.message());
  return 0;
}

// The chapter-3 attention, or a graph (--graph) over the weights.
int RunModel(const RunArgs& args) {
  if (args.incremental && !args.graph.empty()) {
    return Fail(
        "--incremental is not supported with --graph, want a whole "
        "sequence per run");
  }
  auto model = Model::Load({args.weights, args.graph}, LoadOptionsOf(args));
  if (!model.ok()) return Fail(model.status().message());
  if ((*model)->token_input()) return RunOnTokens(args, *model);
  Session session(*model);
  return RunForward(
      args, (*model)->input_width(), (*model)->output_width(),
      [&](const float* x, int64_t batch, int64_t seq_len, float* y) {
        return args.incremental
                   ? RunIncremental((*model)->attention(), x, batch, seq_len, y)
                   : session.Run(x, batch, seq_len, y);
      });
}

// A whole model (tools/run_lm.cc): its tokens in, logits out.
int RunWholeModel(const RunArgs& args) {
  if (args.incremental) {
    return Fail(
        "--incremental is for an MHA file: a whole model always runs "
        "through its KV caches");
  }
  LmModelFlags flags;
  flags.heads = args.heads;
  flags.context_length = args.context_length;
  flags.threads = args.threads;
  flags.max_memory = args.max_memory;
  flags.attention = args.attention;
  flags.dtype = args.dtype;
  flags.tuned_config = args.config;
  return RunLanguageModel(args.weights, args.input, args.output, flags);
}

// A whole model's file, or token ids as the input: then a weights file of
// no known layout is named as such, not as an MHA missing its weights.
bool WantsWholeModel(const RunArgs& args) {
  if (LanguageModel::IsLanguageModelFile(args.weights, args.max_memory)) {
    return true;
  }
  auto input = SafetensorsFile::Open(args.input, args.max_memory);
  return input.ok() && input->Find("input_ids") != nullptr;
}

int Run(const RunArgs& args) {
  if (const int rc = WeightsGiven(args.weights)) return rc;
  if (const int rc = CheckConfigFile(args.config)) return rc;
  InstallInterruptHandlers();
  // Where the output goes is checked before any work, written after it.
  const Status writable = CheckOutputPath(args.output);
  if (!writable.ok()) return Fail(writable.message());
  if (args.graph.empty() && WantsWholeModel(args)) return RunWholeModel(args);
  return RunModel(args);
}

}  // namespace

Command AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  RunArgs& run = *args;
  CLI::App* run_cmd = app.add_subcommand(
      "run",
      "Run the chapter-3 MultiHeadAttention, a graph or a whole language "
      "model on a safetensors input");
  AddWeightsOrModel(run_cmd, run.weights,
                    "safetensors file with PyTorch's state_dict names: an "
                    "MHA, a graph's weights or a whole model (book GPT or "
                    "Llama, Hugging Face's with config.json beside it), or "
                    "a model's model.safetensors.index.json");
  run_cmd
      ->add_option("--input", run.input,
                   "safetensors file holding the input [b, T, d_in] "
                   "(F32, F16 or BF16); for a whole model input_ids [b, T] "
                   "(I64 or I32) and optional lengths [b]")
      ->required();
  run_cmd
      ->add_option("--output", run.output,
                   "safetensors file to write 'output' [b, T, d_out] to; "
                   "for a whole model 'logits' [b, T, vocab]")
      ->required();
  run_cmd
      ->add_option("--heads", run.heads,
                   "number of heads (default: metadata num_heads)")
      ->check(IntegerIn(1));
  run_cmd
      ->add_option("--context-length", run.context_length,
                   "longest sequence accepted (default: metadata "
                   "context_length, then the book's mask buffer)")
      ->check(IntegerIn(1));
  run.attention.AddTo(run_cmd);
  run_cmd
      ->add_option("--threads", run.threads,
                   "threads (default: ATTN_NUM_THREADS, then the tuned "
                   "file, then all cores this process may use)")
      ->check(IntegerIn(1, kMaxThreads));
  run_cmd
      ->add_option("--config", run.config,
                   "tuned file from attn tune --save: its thread count is "
                   "the default")
      ->check(FilePath());
  run_cmd
      ->add_option("--input-name", run.input_name, "name of the input tensor")
      ->capture_default_str();
  run_cmd
      ->add_option("--dtype", run.dtype,
                   "matmul precision: f32 (default) or bf16; language "
                   "models also q8_0 or q4_0 (quantized at load)")
      ->transform(DTypeFlag());
  run_cmd
      ->add_option("--max-memory", run.max_memory,
                   "most memory the model or the run may ask for, e.g. 512M, "
                   "4G (default: half of the physical memory)")
      ->check(ByteSize())
      ->transform(CLI::AsSizeValue(false));
  run_cmd->add_flag("--incremental", run.incremental,
                    "run through the KV cache one token at a time (Prefill "
                    "the first token, Decode the rest); same output");
  run_cmd->add_flag("--allow-nonfinite", run.allow_nonfinite,
                    "accept NaN/Inf in the input (they propagate as in "
                    "PyTorch) instead of refusing it");

  run_cmd->add_option("--graph", run.graph,
                      "run this JSON graph (e.g. tools/graphs/"
                      "transformer_block.json, or gpt_model.json on "
                      "input_ids) instead of the MHA alone");
  run_cmd
      ->add_option("--layers", run.layers,
                   "with --graph: run it N times, the i-th with weights "
                   "trf_blocks.{i}.* (default: metadata n_layers, else once "
                   "with the names as written); for a graph with a repeat "
                   "node, its count (default: the layers in the weights)")
      ->check(IntegerIn(1));

  return {run_cmd, [args] { return Run(*args); }};
}

}  // namespace attn::cli
