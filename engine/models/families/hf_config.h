// Reading the config.json that Hugging Face keeps beside a model's weights:
// its keys by type, each error one line naming the file, the key, what it
// holds and what was wanted.
#ifndef ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_
#define ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "attn/status.hpp"
#include "nlohmann/json.hpp"

namespace attn::lm {

struct HfConfig {
  std::string path;  // empty: there is none
  nlohmann::json json;

  bool Has(const char* key) const {
    return json.contains(key) && !json[key].is_null();
  }
  // The key's value when present and not null, else `fallback`; an error
  // when it has another type (counts: positive integers; numbers: positive
  // finite).
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

}  // namespace attn::lm

#endif  // ATTN_ENGINE_MODELS_FAMILIES_HF_CONFIG_H_
