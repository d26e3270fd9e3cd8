// Reading the config.json that Hugging Face keeps beside a model's weights:
// its keys by type, each error one line naming the file, the key, what it
// holds and what was wanted.
#ifndef ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_
#define ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "attn/status.hpp"
#include "engine/models/lm_family.h"
#include "nlohmann/json.hpp"

namespace attn::lm {

struct HfConfig {
  std::string path;  // empty: there is none
  nlohmann::json json;

  bool Has(const char* key) const {
    return json.contains(key) && !json[key].is_null();
  }
  // The key's value when present and not null, else `fallback`; an error
  // when it has another type (counts: positive integers up to 2^24;
  // numbers: positive finite).
  Result<int64_t> Count(const char* key, int64_t fallback) const;
  Result<double> Number(const char* key, double fallback) const;
  Result<bool> Bool(const char* key, bool fallback) const;
  Result<std::string> String(const char* key, const char* fallback) const;
  // The key, when present and not null, is one of `wanted`; `why` ends the
  // message ("GPT-2 as the book computes it").
  Status Expect(const char* key, std::initializer_list<nlohmann::json> wanted,
                const std::string& why) const;
  // An error "'<path>': '<key>' is <value>, <want>".
  Status Refuse(const char* key, const std::string& want) const;
};

// config.json in the folder of `weights_path`; HfConfig::path empty when
// the folder has none.
Result<HfConfig> ReadConfigBeside(const std::string& weights_path);

// What a Llama-like model type's config.json may say, as Hugging Face
// reads it.
struct DecoderVariant {
  const char* model_type;
  const char* architecture;
  int64_t default_context;         // max_position_embeddings when absent
  double default_norm_eps = 1e-6;  // rms_norm_eps when absent
  int64_t default_head_dim = 0;    // when absent; 0: hidden_size / heads
  // hidden_act's only value; null: the family checks its own key.
  const char* activation = "silu";
  bool qkv_bias = false;  // Qwen2: always; the others: attention_bias
  // sliding_window when the key is absent (Mistral's 4096; null: none);
  // -1: the model type has none, and a window is refused.
  int64_t default_window = -1;
  bool tied_by_default = false;  // tie_word_embeddings when absent
};

// The side config of the weights at `weights_path`, from the config.json
// beside them (required): sizes, attention dims (RoPE with llama3 scaling
// or none, the window), norm epsilon, head tying and the biases it implies.
// Refuses, naming the key, what Hugging Face would compute otherwise.
Result<SideConfig> ReadDecoderConfig(const std::string& weights_path,
                                     const DecoderVariant& variant);

}  // namespace attn::lm

#endif  // ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_
