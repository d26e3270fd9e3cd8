// attn generate: new tokens after each prompt, greedy or sampled as the
// book's chapter-5 generate, every row of the batch in one Batch.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "attn/tokenizer.hpp"
#include "tools/atomic_output.h"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/lm_cli.h"

namespace attn::cli {
namespace {

constexpr int64_t kNoStopToken = -1;

struct GenerateArgs {
  std::string weights, input, output;
  std::string tokenizer, prompt;  // text mode, instead of input and output
  int64_t max_new_tokens = 0;
  int64_t stop_token = kNoStopToken;
  // Text mode: the tokenizer's end-of-sequence ids also stop a row.
  std::vector<int64_t> eos_ids;
  SamplingOptions sampling;
  LmModelFlags model;
};

// Called with each new token as it is chosen, rows in order at each step;
// an error ends the generation.
using OnToken = std::function<Status(int64_t row, int64_t token)>;

// Tokens [batch, max_new_tokens] after `prompts`: one Step of every prompt,
// then one Step a token of every live row; row r's tokens sampled by its
// own Sampler (stream r of the seed), so they do not depend on the other
// rows. A row that emits the stop token leaves the batch; the rest of its
// row is the stop token. What it holds, with the prompts and
// `other_bytes` (a tokenizer's), counts against the model's cap with the
// batch.
class Generation {
 public:
  Generation(std::shared_ptr<const LanguageModel> model, const Prompts& prompts,
             const GenerateArgs& args, uint64_t other_bytes = 0)
      : model_(std::move(model)),
        prompts_(prompts),
        args_(args),
        other_bytes_(other_bytes) {}

  Result<std::vector<int64_t>> Run(const OnToken& on_token) {
    ATTN_RETURN_IF_ERROR(StartPrompts());
    // After the batch's memory check, which counted it (CallerBytes).
    tokens_.assign(static_cast<size_t>(prompts_.batch * args_.max_new_tokens),
                   0);
    for (int64_t step = 0; !requests_.empty(); ++step) {
      ATTN_RETURN_IF_ERROR(batch_->Step(requests_.data(), requests_.size()));
      ATTN_RETURN_IF_ERROR(ChooseTokens(step, on_token));
    }
    return std::move(tokens_);
  }

 private:
  // The bytes the run holds besides the model and the batch: the prompts,
  // the tokens, and per row a sampler, its request and prompt row in this
  // step's lists and the next's; a sample's scratch (Sampler::Sample's
  // logits, weights and order over the vocabulary); and other_bytes_.
  uint64_t CallerBytes() const {
    const auto rows = static_cast<uint64_t>(prompts_.batch);
    const auto vocab = static_cast<uint64_t>(model_->config().vocab_size);
    const uint64_t per_row =
        sizeof(Sampler) + 2 * (sizeof(Batch::Request) + sizeof(int64_t)) +
        static_cast<uint64_t>(args_.max_new_tokens) * sizeof(int64_t);
    const uint64_t scratch =
        vocab * (sizeof(float) + sizeof(double) + sizeof(int64_t));
    return prompts_.bytes() + rows * per_row + scratch + other_bytes_;
  }

  // Creates the batch and asks for every prompt's last logits.
  Status StartPrompts() {
    BatchOptions options;
    options.max_sequences = prompts_.batch;
    // The last new token is never fed back (CheckPrompts checked the sum).
    options.max_length = prompts_.longest() + args_.max_new_tokens - 1;
    options.caller_bytes = CallerBytes();
    ATTN_ASSIGN_OR_RETURN(batch_, Batch::Create(Model::Of(model_), options));
    const auto rows = static_cast<size_t>(prompts_.batch);
    requests_.reserve(rows);
    rows_.reserve(rows);
    samplers_.reserve(rows);
    SamplingOptions sampling = args_.sampling;
    for (int64_t b = 0; b < prompts_.batch; ++b) {
      ATTN_ASSIGN_OR_RETURN(const int64_t sequence, batch_->Add());
      requests_.push_back(
          {sequence, prompts_.row(b), prompts_.lengths[b], false});
      rows_.push_back(b);
      sampling.stream = static_cast<uint64_t>(b);
      ATTN_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(sampling));
      samplers_.push_back(std::move(sampler));
    }
    return {};
  }

  // Samples request i's token for output column `step`; the next step
  // feeds it back unless the row stopped (the stop token is not shown) or
  // is full.
  Status ChooseTokens(int64_t step, const OnToken& on_token) {
    const int64_t vocab = model_->config().vocab_size;
    const int64_t n = args_.max_new_tokens;
    std::vector<Batch::Request> next;
    std::vector<int64_t> next_rows;
    next.reserve(requests_.size());
    next_rows.reserve(requests_.size());
    for (size_t i = 0; i < requests_.size(); ++i) {
      const int64_t row = rows_[i];
      int64_t* out = tokens_.data() + row * n;
      out[step] = samplers_[row].Sample(batch_->logits(i), vocab);
      if (out[step] == args_.stop_token ||
          std::count(args_.eos_ids.begin(), args_.eos_ids.end(), out[step])) {
        std::fill(out + step, out + n, args_.stop_token);
        ATTN_RETURN_IF_ERROR(batch_->Remove(requests_[i].sequence));
        continue;
      }
      ATTN_RETURN_IF_ERROR(on_token(row, out[step]));
      if (step + 1 < n) {
        next.push_back({requests_[i].sequence, out + step, 1, false});
        next_rows.push_back(row);
      }
    }
    requests_ = std::move(next);
    rows_ = std::move(next_rows);
    return {};
  }

  std::shared_ptr<const LanguageModel> model_;
  const Prompts& prompts_;
  const GenerateArgs& args_;
  const uint64_t other_bytes_;
  std::vector<Sampler> samplers_;  // per prompt row
  std::unique_ptr<Batch> batch_;
  std::vector<Batch::Request> requests_;  // the next Step's
  std::vector<int64_t> rows_;             // the prompt row of each request
  std::vector<int64_t> tokens_;           // [batch, max_new_tokens]
};

// The model, with the options that need its vocabulary checked. The
// sampling options are checked first, before a large model loads.
Result<std::shared_ptr<const LanguageModel>> PrepareModel(
    const GenerateArgs& args) {
  ATTN_RETURN_IF_ERROR(Sampler::Create(args.sampling).status());
  ATTN_ASSIGN_OR_RETURN(auto model,
                        LoadLanguageModel(args.weights, args.model));
  const int64_t vocab = model->config().vocab_size;
  if (args.stop_token >= vocab) {
    return InvalidArgument("--stop-token " + std::to_string(args.stop_token) +
                           " is not a token id of the model, want from 0 to " +
                           std::to_string(vocab - 1));
  }
  return model;
}

// --input FILE --output FILE: `tokens` [batch, max_new_tokens] (I64).
int GenerateFromFile(const GenerateArgs& args) {
  // Where the output goes is checked before any work, written after it.
  const Status writable = CheckOutputPath(args.output);
  if (!writable.ok()) return Fail(writable.message());
  auto model = PrepareModel(args);
  if (!model.ok()) return Fail(model.status().message());
  auto prompts = ReadPrompts(args.input, **model, args.max_new_tokens,
                             args.model.max_memory);
  if (!prompts.ok()) return Fail(prompts.status().message());
  const Status fits =
      CheckOutputFits("tokens", {prompts->batch, args.max_new_tokens}, 8,
                      args.model.max_memory);
  if (!fits.ok()) return Fail(fits.message());
  Generation generation(*model, *prompts, args);
  auto tokens = generation.Run([](int64_t, int64_t) { return Status(); });
  if (!tokens.ok()) return Fail(tokens.status().message());
  const Status written = WriteOutputAtomically(
      args.output, {},
      {{"tokens", {prompts->batch, args.max_new_tokens}, tokens->data()}});
  if (!written.ok()) return Fail(written.message());
  return 0;
}

// The prompt's tokens as a batch of one row.
Result<Prompts> EncodePrompt(const Tokenizer& tokenizer,
                             const std::string& text) {
  // As Hugging Face's tokenizer(text): with the BOS a model wants.
  Result<std::vector<int64_t>> ids = tokenizer.Encode(text, true);
  if (!ids.ok()) return InvalidArgument("--prompt: " + ids.status().message());
  Prompts prompts;
  prompts.batch = 1;
  prompts.width = static_cast<int64_t>(ids->size());
  prompts.ids = std::move(*ids);
  prompts.lengths = {prompts.width};
  return prompts;
}

// The text token `id` adds on stdout (none while it ends inside a UTF-8
// character). A model may have more ids than the tokenizer (a vocabulary
// padded to a round size): one it lacks is named.
Status PrintToken(DecodeStream& stream, const std::string& dir, int64_t id) {
  const Result<std::string> text = stream.Next(id);
  if (!text.ok()) {
    return InvalidArgument("the model chose token " + std::to_string(id) +
                           ", which --tokenizer '" + dir +
                           "' cannot show: " + text.status().message());
  }
  return PrintText(*text);
}

// --tokenizer DIR --prompt TEXT: each new token's text on stdout as it is
// chosen, then a newline. The tokenizer loads beside the model, in the
// one memory budget with it and the generation.
int GenerateText(GenerateArgs args) {
  auto model = PrepareModel(args);
  if (!model.ok()) return Fail(model.status().message());
  auto tokenizer = LoadTokenizerFor(**model, args.tokenizer, "--tokenizer",
                                    args.model.max_memory);
  if (!tokenizer.ok()) return Fail(tokenizer.status().message());
  auto prompts = EncodePrompt(**tokenizer, args.prompt);
  if (!prompts.ok()) return Fail(prompts.status().message());
  const Status fits =
      CheckPrompts(*prompts, "--prompt", **model, args.max_new_tokens);
  if (!fits.ok()) return Fail(fits.message());
  args.eos_ids = (*tokenizer)->eos_ids();
  Generation generation(*model, *prompts, args, (*tokenizer)->memory_bytes());
  DecodeStream stream(*tokenizer);
  auto tokens = generation.Run([&](int64_t, int64_t id) {
    return PrintToken(stream, args.tokenizer, id);
  });
  const Status ended = PrintText(stream.Finish() + "\n");
  if (!tokens.ok()) return Fail(tokens.status().message());
  if (!ended.ok()) return Fail(ended.message());
  return 0;
}

int Generate(GenerateArgs args) {
  if (const int rc = WeightsGiven(args.weights)) return rc;
  // A folder's own tokenizer, where --prompt asks for one.
  std::error_code error;
  if (args.tokenizer.empty() && !args.prompt.empty() &&
      std::filesystem::is_directory(args.weights, error)) {
    args.tokenizer = args.weights;
  }
  if (args.input.empty() && args.tokenizer.empty()) {
    // A usage error, as a missing required flag is.
    return Usage(
        "no prompts: want --input FILE --output FILE, or --prompt TEXT with "
        "--model DIR or --tokenizer DIR");
  }
  if (!args.tokenizer.empty() && args.prompt.empty()) {
    return Fail("--prompt is empty, want some text");  // before any load
  }
  InstallInterruptHandlers();
  return args.input.empty() ? GenerateText(args) : GenerateFromFile(args);
}

// --input and --output, or (text mode) --tokenizer and --prompt.
void AddPromptFlags(CLI::App* command, GenerateArgs& args) {
  CLI::Option* input = command->add_option(
      "--input", args.input,
      "safetensors file with input_ids [b, T] (I64 or I32) and optional "
      "lengths [b] of right-padded rows");
  CLI::Option* output = command->add_option(
      "--output", args.output,
      "safetensors file to write 'tokens' [b, N] (I64) to (with --input)");
  CLI::Option* prompt = command->add_option(
      "--prompt", args.prompt,
      "text mode: this text's tokens are the prompt, and each new token's "
      "text goes to stdout as it comes (with --tokenizer)");
  CLI::Option* tokenizer = command->add_option(
      "--tokenizer", args.tokenizer,
      "directory with GPT-2's vocab.json and merges.txt (or encoder.json "
      "and vocab.bpe), for --prompt");
  input->needs(output)->excludes(prompt);
  output->needs(input);
  tokenizer->needs(prompt);
}

void AddStopFlag(CLI::App* command, GenerateArgs& args) {
  command
      ->add_option("--stop-token", args.stop_token,
                   "a row that emits this token stops; the rest of its "
                   "output row is this token")
      ->check(IntegerIn(0));
}

}  // namespace

Command AddGenerateCommand(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* command = app.add_subcommand(
      "generate",
      "Generate tokens after prompts with a whole language model (greedy, or "
      "sampled with top-k, temperature and top-p)");
  AddWeightsOrModel(command, args->weights,
                    "whole model: book GPT or Llama, or Hugging Face's "
                    "safetensors (or index) with config.json beside it");
  AddPromptFlags(command, *args);
  command
      ->add_option("--max-new-tokens", args->max_new_tokens,
                   "N: tokens to generate after each prompt")
      ->required()
      ->check(IntegerIn(1));
  AddSamplingFlags(command, args->sampling);
  AddStopFlag(command, *args);
  args->model.AddTo(command);
  return {command, [args] { return Generate(*args); }};
}

}  // namespace attn::cli
