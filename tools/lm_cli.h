// Whole language models in the CLI: `attn run` on a model file
// (run_lm.cc) and `attn generate` (cmd_generate.cc) share the model's
// flags and the prompts' reading (lm_common.cc).
#ifndef ATTN_TOOLS_LM_CLI_H_
#define ATTN_TOOLS_LM_CLI_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/tokenizer.hpp"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {

// The flags that load a model, each overriding the file's metadata as
// LanguageModel::Load describes.
struct LmModelFlags {
  int64_t heads = 0, context_length = 0;
  int threads = 0;
  uint64_t max_memory = 0;  // bytes; 0 = attn::DefaultMaxMemoryBytes()
  AttentionFlags attention;
  DType dtype = DType::kF32;  // attn run's --dtype
  std::string tuned_config;   // attn run's --config
  // Adds --heads, --context-length, the attention flags, --threads and
  // --max-memory (attn quantize), and AddTo --dtype too (attn generate;
  // attn run has its own).
  void AddLoadFlags(CLI::App* command);
  void AddTo(CLI::App* command);
  // The options LanguageModel::Load takes from them.
  LmOptions Options() const;
};

// Writes `bytes` to stdout at once, for a reader watching; a full disk or a
// closed pipe is an error (with SIGPIPE ignored, the run would go on
// unread).
Status PrintText(const std::string& bytes);

// --temperature, --top-k, --top-p and --seed into `sampling`.
void AddSamplingFlags(CLI::App* command, SamplingOptions& sampling);

Result<std::shared_ptr<const LanguageModel>> LoadLanguageModel(
    const std::string& weights, const LmModelFlags& flags);

// The tokenizer in folder `dir` (named by `flag` in errors), loaded in one
// memory budget with `model` (max_memory, 0: the default): its ids must be
// the model's, so it may not have more than the model's vocabulary.
Result<std::shared_ptr<const Tokenizer>> LoadTokenizerFor(
    const LanguageModel& model, const std::string& dir, const std::string& flag,
    uint64_t max_memory);

// --ctx-size of attn chat and attn serve: `requested`, or 0 for the model's
// context length at most 4096 (its whole context would reserve every
// cache's gigabytes up front); past the model's, refused.
Result<int64_t> ContextSize(int64_t requested, const LanguageModel& model);

// The prompts of an input file: `input_ids` [batch, width] (I64 or I32),
// right-padded rows when `lengths` [batch] (I64 or I32) says so.
struct Prompts {
  int64_t batch = 0, width = 0;
  std::vector<int64_t> ids;      // [batch, width]
  std::vector<int64_t> lengths;  // each row's tokens, from 1 to width
  const int64_t* row(int64_t b) const { return ids.data() + b * width; }
  int64_t longest() const;
  uint64_t bytes() const;  // what the lists hold
};

// Reads `path`'s prompts, their shapes checked (not their ids). Parsing
// its header and the prompts' lists, beside `held_bytes` the caller holds,
// must fit `max_memory` (0: the default), checked before each is made.
Result<Prompts> ReadPromptIds(const std::string& path, uint64_t max_memory,
                              uint64_t held_bytes);

// Reads `path`'s prompts beside `model` (its bytes held, under
// `max_memory`) and checks them against it: token ids in the vocabulary,
// each row with room in the context for `new_tokens` generated after it
// (0: none), all but the last of which are fed back.
Result<Prompts> ReadPrompts(const std::string& path, const LanguageModel& model,
                            int64_t new_tokens, uint64_t max_memory);

// Checks each prompt against `model` as ReadPrompts does.
Status CheckPrompts(const Prompts& prompts, const std::string& where,
                    const LanguageModel& model, int64_t new_tokens);

// An output tensor `name` of `shape`, `element_bytes` each, beside
// `held_bytes` the caller holds, must fit `max_memory` (0: the default),
// checked before it is allocated.
Status CheckOutputFits(const std::string& name,
                       const std::vector<int64_t>& shape, size_t element_bytes,
                       uint64_t max_memory, uint64_t held_bytes = 0);

// `attn run` on a whole model: `output` gets `logits` [batch, width, vocab]
// of every prompt token, zeros past a row's length. Returns the exit code.
int RunLanguageModel(const std::string& weights, const std::string& input,
                     const std::string& output, const LmModelFlags& flags);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_LM_CLI_H_
