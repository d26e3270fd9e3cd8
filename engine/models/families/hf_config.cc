// HfConfig: config.json's keys by type.
#include "engine/models/families/hf_config.h"

#include <cmath>
#include <filesystem>

#include "engine/io/json_limits.h"

namespace attn::lm {

constexpr uint64_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxConfigDepth = 16;

Result<HfConfig> ReadConfigBeside(const std::string& weights_path) {
  const size_t slash = weights_path.rfind('/');
  HfConfig config;
  const std::string path =
      (slash == std::string::npos ? "" : weights_path.substr(0, slash + 1)) +
      "config.json";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return config;
  config.path = path;
  ATTN_ASSIGN_OR_RETURN(
      const std::string text,
      ReadRegularFile(path, kMaxConfigBytes, "config file " + Quoted(path)));
  ATTN_ASSIGN_OR_RETURN(config.json,
                        ParseCheckedJson(text, kMaxConfigDepth, Quoted(path)));
  if (!config.json.is_object()) {
    return InvalidArgument(Quoted(path) + " is a JSON " +
                           config.json.type_name() +
                           ", want an object of the model's settings");
  }
  return config;
}

Status HfConfig::Refuse(const char* key, const std::string& want) const {
  return InvalidArgument(Quoted(path) + ": " + Quoted(key) + " is " +
                         json[key].dump() + ", " + want);
}

Result<int64_t> HfConfig::Count(const char* key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0) {
    return Refuse(key, "want a positive integer");
  }
  return json[key].get<int64_t>();
}

Result<double> HfConfig::Number(const char* key, double fallback) const {
  if (!Has(key)) return fallback;
  if (!json[key].is_number() || !(json[key].get<double>() > 0.0) ||
      !std::isfinite(json[key].get<double>())) {
    return Refuse(key, "want a positive number");
  }
  return json[key].get<double>();
}

Result<bool> HfConfig::Bool(const char* key, bool fallback) const {
  if (!Has(key)) return fallback;
  if (!json[key].is_boolean()) return Refuse(key, "want true or false");
  return json[key].get<bool>();
}

Result<std::string> HfConfig::String(const char* key,
                                     const char* fallback) const {
  if (!Has(key)) return std::string(fallback);
  if (!json[key].is_string()) return Refuse(key, "want a string");
  return json[key].get<std::string>();
}

Status HfConfig::Expect(const char* key,
                        std::initializer_list<nlohmann::json> wanted,
                        const std::string& why) const {
  if (!Has(key)) return {};
  std::string list;
  for (const nlohmann::json& w : wanted) {
    if (json[key] == w) return {};
    list += (list.empty() ? "" : " or ") + w.dump();
  }
  return Refuse(key, "want " + list + " (" + why + ")");
}

}  // namespace attn::lm
