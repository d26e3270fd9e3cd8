// attn info: versions, the SIMD target, oneDNN ISA and the thread count;
// with --model, what a model's folder holds.
#include <cstdio>
#include <memory>
#include <string>

#include "attn/attn.h"
#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "attn/tokenizer.hpp"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

void PrintModel(const std::string& path, const LmConfig& c) {
  std::printf("model: %s\n", path.c_str());
  std::printf("family: %s\n", c.layout.c_str());
  std::printf(
      "sizes: %lld layers, width %lld, %lld heads of %lld (%lld K/V heads), "
      "feed-forward %lld, vocabulary %lld, context %lld\n",
      (long long)c.num_layers, (long long)c.emb_dim, (long long)c.num_heads,
      (long long)c.head_dim, (long long)c.num_kv_heads, (long long)c.hidden_dim,
      (long long)c.vocab_size, (long long)c.context_length);
  if (c.rope.theta != 0.0) {
    std::printf("rope: theta %g", c.rope.theta);
    if (c.rope.factor != 0.0) {
      std::printf(", llama3 scaling factor %g (low %g, high %g, original %lld)",
                  c.rope.factor, c.rope.low_freq_factor,
                  c.rope.high_freq_factor,
                  (long long)c.rope.original_context_length);
    }
    std::printf("\n");
  }
  if (c.sliding_window) {
    std::printf("sliding window: %lld\n", (long long)c.sliding_window);
  }
  std::printf("head: %s\n", c.tied_head ? "tied to the embedding" : "own");
  const double n = double(c.file_parameters);
  std::printf("weights: %s, %lld parameters (%.2f %s)\n", c.file_dtype.c_str(),
              (long long)c.file_parameters, n >= 1e9 ? n / 1e9 : n / 1e6,
              n >= 1e9 ? "B" : "M");
}

// The tokenizer's kind, special tokens and chat template, or why none.
void PrintTokenizer(const std::string& dir) {
  Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load(dir);
  if (!t.ok()) {
    std::printf("tokenizer: none (%s)\n", t.status().message().c_str());
    return;
  }
  const Tokenizer& tok = **t;
  std::printf("tokenizer: %s, %lld ids\n", tok.kind(),
              (long long)tok.vocab_size());
  std::printf("bos: %s (%lld)%s\n", tok.bos_token().c_str(),
              (long long)tok.bos_id(), tok.add_bos() ? ", added" : "");
  std::string eos;
  for (int64_t id : tok.eos_ids()) {
    eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  }
  std::printf("eos: %s (%s)%s\n", tok.eos_token().c_str(), eos.c_str(),
              tok.add_eos() ? ", added" : "");
  std::printf("chat template: %s\n",
              tok.chat_template().empty() ? "none" : "yes");
}

int Info(int threads, const std::string& model) {
  // Without --threads, the team `attn run` would get: a malformed
  // ATTN_NUM_THREADS or ATTN_CONFIG fails here as it fails there.
  if (threads == 0) {
    threads = attn_default_num_threads();
    if (threads < 0) return Fail(attn_last_error_message());
  }
  if (!model.empty()) {
    const Result<LmConfig> config = LanguageModel::ReadConfig(model);
    if (!config.ok()) return Fail(config.status().message());
    PrintModel(model, *config);
    PrintTokenizer(model);
    return 0;
  }
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  std::printf("attn %s\n", info.version.c_str());
  std::printf("highway target: %s\n", info.simd_target.c_str());
  std::printf("oneDNN %s, isa: %s, native bf16: %s\n",
              info.onednn_version.c_str(), info.onednn_isa.c_str(),
              info.native_bf16 ? "yes" : "no");
  std::printf("threads: %d\n", threads);
  return 0;
}

}  // namespace

Command AddInfoCommand(CLI::App& app) {
  auto threads = std::make_shared<int>(0);
  auto model = std::make_shared<std::string>();
  CLI::App* info_cmd = app.add_subcommand(
      "info",
      "Print versions, the SIMD target, oneDNN ISA and threads; with "
      "--model, what a model's folder holds");
  info_cmd->add_option("--threads", *threads, "threads to report")
      ->check(IntegerIn(1, kMaxThreads));
  info_cmd
      ->add_option("--model", *model,
                   "a model's folder (or weights file): its family, sizes, "
                   "dtype, parameters, tokenizer and chat template")
      ->check(FilePath());
  return {info_cmd, [threads, model] { return Info(*threads, *model); }};
}

}  // namespace attn::cli
