// `attn run` on a whole language model: every prompt token's logits, from
// one Batch holding all the rows, in one Step.
#include <algorithm>
#include <string>
#include <vector>

#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "tools/atomic_output.h"
#include "tools/lm_cli.h"

namespace attn::cli {
namespace {

// Runs every row's prompt in one Step; logits [batch, width, vocab], zeros
// past each row's length. The prompts, the requests and the logits count
// against the model's cap with the batch.
Result<std::vector<float>> AllLogits(
    const std::shared_ptr<const LanguageModel>& model, const Prompts& prompts) {
  const int64_t vocab = model->config().vocab_size;
  const auto rows = static_cast<uint64_t>(prompts.batch);
  BatchOptions batch_options;
  batch_options.max_sequences = prompts.batch;
  batch_options.max_length = prompts.longest();
  batch_options.caller_bytes =
      prompts.bytes() + rows * sizeof(Batch::Request) +
      rows * static_cast<uint64_t>(prompts.width * vocab) * sizeof(float);
  ATTN_ASSIGN_OR_RETURN(auto batch,
                        Batch::Create(Model::Of(model), batch_options));
  std::vector<Batch::Request> requests;
  requests.reserve(rows);
  for (int64_t b = 0; b < prompts.batch; ++b) {
    ATTN_ASSIGN_OR_RETURN(const int64_t sequence, batch->Add());
    requests.push_back({sequence, prompts.row(b), prompts.lengths[b], true});
  }
  ATTN_RETURN_IF_ERROR(batch->Step(requests.data(), requests.size()));
  std::vector<float> logits(
      static_cast<size_t>(prompts.batch * prompts.width * vocab), 0.0f);
  for (int64_t b = 0; b < prompts.batch; ++b) {
    const float* row = batch->logits(static_cast<size_t>(b));
    std::copy(row, row + prompts.lengths[b] * vocab,
              logits.begin() + b * prompts.width * vocab);
  }
  return logits;
}

}  // namespace

int RunLanguageModel(const std::string& weights, const std::string& input,
                     const std::string& output, const LmModelFlags& flags) {
  auto model = LoadLanguageModel(weights, flags);
  if (!model.ok()) return Fail(model.status().message());
  auto prompts = ReadPrompts(input, **model, 0, flags.max_memory);
  if (!prompts.ok()) return Fail(prompts.status().message());
  const int64_t vocab = (*model)->config().vocab_size;
  const Status fits = CheckOutputFits(
      "logits", {prompts->batch, prompts->width, vocab}, 4, flags.max_memory);
  if (!fits.ok()) return Fail(fits.message());
  auto logits = AllLogits(*model, *prompts);
  if (!logits.ok()) return Fail(logits.status().message());
  const Status written = WriteOutputAtomically(
      output,
      {{"logits", {prompts->batch, prompts->width, vocab}, logits->data()}});
  if (!written.ok()) return Fail(written.message());
  return 0;
}

}  // namespace attn::cli
