// What `attn run` on a whole model and `attn generate` share: loading the
// model from the flags, and reading and checking the prompts.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attn/safetensors.hpp"
#include "tools/lm_cli.h"

namespace attn::cli {

void LmModelFlags::AddLoadFlags(CLI::App* command) {
  command
      ->add_option("--heads", heads,
                   "attention heads (default: metadata num_heads, then "
                   "config.json's n_head)")
      ->check(IntegerIn(1));
  command
      ->add_option("--context-length", context_length,
                   "longest sequence (default: metadata context_length, "
                   "then config.json's n_positions)")
      ->check(IntegerIn(1));
  attention.AddTo(command);
  command
      ->add_option("--threads", threads,
                   "threads (default: ATTN_NUM_THREADS, then all cores this "
                   "process may use)")
      ->check(IntegerIn(1, kMaxThreads));
  command
      ->add_option("--max-memory", max_memory,
                   "most memory the model, its caches or the output may ask "
                   "for, e.g. 512M, 4G (default: half of the physical memory)")
      ->check(ByteSize())
      ->transform(CLI::AsSizeValue(false));
}

void LmModelFlags::AddTo(CLI::App* command) {
  AddLoadFlags(command);
  command
      ->add_option("--dtype", dtype,
                   "the matrices' precision: f32 (default), bf16 (CPUs "
                   "with native bf16; half the bytes per decode step), or "
                   "q8_0 or q4_0 (quantized at load in llama.cpp's blocks: "
                   "8.5 or 4.5 bits a weight)")
      ->transform(DTypeFlag());
}

LmOptions LmModelFlags::Options() const {
  LmOptions options;
  options.num_heads = heads;
  options.context_length = context_length;
  options.num_threads = threads;
  options.max_memory_bytes = max_memory;
  options.dtype = dtype;
  options.tuned_config = tuned_config;
  attention.ApplyTo(options);
  return options;
}

Result<std::shared_ptr<const LanguageModel>> LoadLanguageModel(
    const std::string& weights, const LmModelFlags& flags) {
  return LanguageModel::Load(weights, flags.Options());
}

Result<std::shared_ptr<const Tokenizer>> LoadTokenizerFor(
    const LanguageModel& model, const std::string& dir, const std::string& flag,
    uint64_t max_memory) {
  TokenizerOptions options;
  options.max_memory_bytes = max_memory;
  options.held_bytes = model.memory_bytes();
  ATTN_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                        Tokenizer::Load(dir, options));
  const int64_t vocab = model.config().vocab_size;
  if (tokenizer->vocab_size() > vocab) {
    return InvalidArgument(
        flag + " '" + dir + "': its tokenizer has token ids up to " +
        std::to_string(tokenizer->vocab_size() - 1) +
        ", past the model's vocabulary of " + std::to_string(vocab) +
        ": want the model's own tokenizer");
  }
  return tokenizer;
}

Result<int64_t> ContextSize(int64_t requested, const LanguageModel& model) {
  constexpr int64_t kDefaultContext = 4096;
  const int64_t context_length = model.config().context_length;
  if (requested == 0) return std::min(context_length, kDefaultContext);
  if (requested > context_length) {
    return InvalidArgument("--ctx-size " + std::to_string(requested) +
                           " exceeds the model's context length " +
                           std::to_string(context_length));
  }
  return requested;
}

void AddSamplingFlags(CLI::App* command, SamplingOptions& sampling) {
  command
      ->add_option("--temperature", sampling.temperature,
                   "sample at this temperature (default 0: greedy, the "
                   "largest logit, the lowest id on ties)")
      ->check(NonNegativeNumber());
  command
      ->add_option("--top-k", sampling.top_k,
                   "sample among the k largest logits (with ties to the "
                   "k-th); 0: all")
      ->check(IntegerIn(0));
  command
      ->add_option("--top-p", sampling.top_p,
                   "then among the most probable tokens whose probabilities "
                   "sum to at least P (nucleus); 1: all")
      ->check(Probability());
  command
      ->add_option("--seed", sampling.seed,
                   "seed of the samplers' generators, one stream per row "
                   "(default 0)")
      ->check(Unsigned64());
}

Status PrintText(const std::string& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() ||
      std::fflush(stdout) != 0) {
    return IoError(std::string("cannot write the text to stdout: ") +
                   std::strerror(errno));
  }
  return {};
}

int64_t Prompts::longest() const {
  return lengths.empty() ? 0
                         : *std::max_element(lengths.begin(), lengths.end());
}

uint64_t Prompts::bytes() const {
  return (ids.capacity() + lengths.capacity()) * sizeof(int64_t);
}

namespace {

// input_ids must be [batch, width] with both sizes at least 1, and a
// batch one Batch holds.
Status CheckIdsShape(const TensorInfo& ids, const std::string& where) {
  const int64_t most = BatchOptions::kMaxSequences;
  if (ids.shape.size() == 2 && ids.shape[0] > 0 && ids.shape[0] <= most &&
      ids.shape[1] > 0) {
    return {};
  }
  return InvalidArgument("tensor 'input_ids' in " + where + " has shape " +
                         ShapeString(ids.shape) +
                         ", want [batch, tokens] with both at least 1 and "
                         "batch at most " +
                         std::to_string(most));
}

// Each row's length: `lengths` [batch] from 1 to width, else every row full.
Status ReadLengths(const SafetensorsFile& file, const std::string& where,
                   Prompts& prompts) {
  const TensorInfo* lengths = file.Find("lengths");
  if (!lengths) {
    prompts.lengths.assign(static_cast<size_t>(prompts.batch), prompts.width);
    return {};
  }
  if (lengths->shape != std::vector<int64_t>{prompts.batch}) {
    return InvalidArgument("tensor 'lengths' in " + where + " has shape " +
                           ShapeString(lengths->shape) + ", want [" +
                           std::to_string(prompts.batch) +
                           "] (one per row of input_ids)");
  }
  ATTN_ASSIGN_OR_RETURN(prompts.lengths, file.ReadI64("lengths"));
  for (int64_t b = 0; b < prompts.batch; ++b) {
    const int64_t length = prompts.lengths[b];
    if (length < 1 || length > prompts.width) {
      return InvalidArgument(
          "tensor 'lengths' in " + where + " holds " + std::to_string(length) +
          " for row " + std::to_string(b) + ", want from 1 to " +
          std::to_string(prompts.width) + " (input_ids' tokens per row)");
    }
  }
  return {};
}

}  // namespace

Status CheckPrompts(const Prompts& prompts, const std::string& where,
                    const LanguageModel& model, int64_t new_tokens) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t context = model.config().context_length;
  const int64_t fed_back = std::max<int64_t>(new_tokens - 1, 0);
  for (int64_t b = 0; b < prompts.batch; ++b) {
    const int64_t length = prompts.lengths[b];
    if (context > 0 && (length > context || fed_back > context - length)) {
      return InvalidArgument(
          "row " + std::to_string(b) + " of " + where + " has " +
          std::to_string(length) + " prompt tokens" +
          (new_tokens ? " + " + std::to_string(new_tokens) +
                            " new (all but the last fed back)"
                      : "") +
          ", over the model's context_length " + std::to_string(context));
    }
    const int64_t* row = prompts.row(b);
    const auto bad = std::find_if(row, row + length, [vocab](int64_t id) {
      return id < 0 || id >= vocab;
    });
    if (bad != row + length) {
      return InvalidArgument(
          "input_ids[" + std::to_string(b) + ", " + std::to_string(bad - row) +
          "] in " + where + " is " + std::to_string(*bad) +
          ", want a token id from 0 to " + std::to_string(vocab - 1));
    }
  }
  return {};
}

Status CheckOutputFits(const std::string& name,
                       const std::vector<int64_t>& shape, size_t element_bytes,
                       uint64_t max_memory, uint64_t held_bytes) {
  if (max_memory == 0) max_memory = DefaultMaxMemoryBytes();
  double bytes = static_cast<double>(element_bytes);
  for (int64_t d : shape) bytes *= static_cast<double>(d);
  const auto held = static_cast<double>(held_bytes);
  if (bytes + held <= static_cast<double>(max_memory)) return {};
  return OutOfMemory(
      name + " " + ShapeString(shape) + " need " +
      std::to_string(static_cast<uint64_t>(bytes)) + " bytes" +
      (held_bytes ? " beside " + std::to_string(held_bytes) + " held"
                  : std::string()) +
      ", over the memory limit of " + std::to_string(max_memory) +
      " bytes (raise it with --max-memory)");
}

Result<Prompts> ReadPromptIds(const std::string& path, uint64_t max_memory,
                              uint64_t held_bytes) {
  ATTN_ASSIGN_OR_RETURN(SafetensorsFile file,
                        SafetensorsFile::Open(path, max_memory, held_bytes));
  const std::string where = "'" + path + "'";
  const TensorInfo* ids = file.Find("input_ids");
  if (!ids) {
    return InvalidArgument("tensor 'input_ids' is missing from " + where +
                           ", want the prompts' token ids [batch, tokens]");
  }
  ATTN_RETURN_IF_ERROR(CheckIdsShape(*ids, where));
  // The ids and the lengths (a column more), int64 each.
  ATTN_RETURN_IF_ERROR(CheckOutputFits(
      "the prompts of " + where, {ids->shape[0], ids->shape[1] + 1},
      sizeof(int64_t), max_memory, held_bytes));
  Prompts prompts;
  prompts.batch = ids->shape[0];
  prompts.width = ids->shape[1];
  ATTN_ASSIGN_OR_RETURN(prompts.ids, file.ReadI64("input_ids"));
  ATTN_RETURN_IF_ERROR(ReadLengths(file, where, prompts));
  return prompts;
}

Result<Prompts> ReadPrompts(const std::string& path, const LanguageModel& model,
                            int64_t new_tokens, uint64_t max_memory) {
  ATTN_ASSIGN_OR_RETURN(Prompts prompts,
                        ReadPromptIds(path, max_memory, model.memory_bytes()));
  ATTN_RETURN_IF_ERROR(
      CheckPrompts(prompts, "'" + path + "'", model, new_tokens));
  return prompts;
}

}  // namespace attn::cli
