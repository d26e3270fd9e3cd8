// Hugging Face's GPT2LMHeadModel: Conv1D weights as [in, out] with q, k and
// v side by side in one c_attn, names under "" or "transformer.", and a
// config.json beside the weights.
#include <filesystem>
#include <string>
#include <utility>

#include "engine/io/json_limits.h"
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

constexpr Form kT = Form::kTransposed;
constexpr Form kP = Form::kThird;

// Refuses the settings under which Hugging Face computes another model
// than GPT-2's attention, GELU and block (attention scaled
// otherwise or by layer, cross-attention), rather than run them as GPT-2.
Status CheckComputesGpt2(const nlohmann::json& j, const std::string& path) {
  const std::pair<const char*, nlohmann::json> wanted[] = {
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"add_cross_attention", false}};
  for (const auto& [key, value] : wanted) {
    if (j.contains(key) && !j[key].is_null() && j[key] != value) {
      return InvalidArgument(Quoted(path) + ": " + Quoted(key) + " is " +
                             j[key].dump() + ", want " + value.dump() +
                             " (GPT-2 as the book computes it)");
    }
  }
  // GPT-2's GELU is the tanh approximation, under either of its names.
  if (j.contains("activation_function")) {
    const nlohmann::json& f = j["activation_function"];
    if (!f.is_string() || (f != "gelu_new" && f != "gelu_pytorch_tanh")) {
      return InvalidArgument(Quoted(path) + ": 'activation_function' is " +
                             f.dump() +
                             ", want \"gelu_new\" or \"gelu_pytorch_tanh\"");
    }
  }
  return {};
}

// The optional booleans and numbers: tie_word_embeddings and
// layer_norm_epsilon.
Status ReadTieAndEps(const nlohmann::json& j, SideConfig& config) {
  const std::string& path = config.path;
  if (j.contains("tie_word_embeddings") &&
      !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean()) {
      return InvalidArgument(Quoted(path) + ": 'tie_word_embeddings' is " +
                             j["tie_word_embeddings"].dump() +
                             ", want true or false");
    }
    config.tie_word_embeddings = j["tie_word_embeddings"].get<bool>() ? 1 : 0;
  }
  if (j.contains("layer_norm_epsilon")) {
    const nlohmann::json& eps = j["layer_norm_epsilon"];
    if (!eps.is_number() || !(eps.get<double>() > 0.0)) {
      return InvalidArgument(Quoted(path) +
                             ": 'layer_norm_epsilon' is not a positive "
                             "number");
    }
    config.norm_eps = eps.get<double>();
  }
  return {};
}

// config.json beside the weights, when there is one.
Result<SideConfig> ReadConfigJson(const std::string& weights_path) {
  const size_t slash = weights_path.rfind('/');
  SideConfig config;
  config.path =
      (slash == std::string::npos ? "" : weights_path.substr(0, slash + 1)) +
      "config.json";
  const std::string& path = config.path;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return SideConfig{};
  ATTN_ASSIGN_OR_RETURN(
      const std::string text,
      ReadRegularFile(path, 1 << 20, "config file " + Quoted(path)));
  ATTN_ASSIGN_OR_RETURN(const nlohmann::json j,
                        ParseCheckedJson(text, 16, Quoted(path)));
  if (!j.is_object()) {
    return InvalidArgument(Quoted(path) + " is a JSON " + j.type_name() +
                           ", want an object of GPT-2's settings");
  }
  const auto count = [&](const char* key) -> Result<int64_t> {
    if (!j.contains(key) || j[key].is_null()) return int64_t{0};
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      return InvalidArgument(Quoted(path) + ": " + Quoted(key) +
                             " is not a positive integer");
    }
    return j[key].get<int64_t>();
  };
  ATTN_ASSIGN_OR_RETURN(config.dims.num_heads, count("n_head"));
  ATTN_ASSIGN_OR_RETURN(config.dims.context_length, count("n_positions"));
  for (auto [size, key] : {std::make_pair(&config.layers, "n_layer"),
                           std::make_pair(&config.emb_dim, "n_embd"),
                           std::make_pair(&config.vocab_size, "vocab_size"),
                           std::make_pair(&config.hidden_dim, "n_inner")}) {
    size->key = key;
    ATTN_ASSIGN_OR_RETURN(size->value, count(key));
  }
  ATTN_RETURN_IF_ERROR(CheckComputesGpt2(j, path));
  ATTN_RETURN_IF_ERROR(ReadTieAndEps(j, config));
  return config;
}

}  // namespace

const Family& HfGpt2() {
  static const Family family = {
      "hf-gpt2",
      "Hugging Face GPT-2",
      LmArchitecture::kGpt2,
      ByRole({
          {Role::kTokEmb, {"wte.weight"}},
          {Role::kPosEmb, {"wpe.weight"}},
          {Role::kNorm1Scale, {"h.{i}.ln_1.weight"}},
          {Role::kNorm1Shift, {"h.{i}.ln_1.bias"}},
          {Role::kQuery, {"h.{i}.attn.c_attn.weight", kP, 0}},
          {Role::kKey, {"h.{i}.attn.c_attn.weight", kP, 1}},
          {Role::kValue, {"h.{i}.attn.c_attn.weight", kP, 2}},
          {Role::kQueryBias, {"h.{i}.attn.c_attn.bias", kP, 0}},
          {Role::kKeyBias, {"h.{i}.attn.c_attn.bias", kP, 1}},
          {Role::kValueBias, {"h.{i}.attn.c_attn.bias", kP, 2}},
          {Role::kOut, {"h.{i}.attn.c_proj.weight", kT}},
          {Role::kOutBias, {"h.{i}.attn.c_proj.bias"}},
          {Role::kNorm2Scale, {"h.{i}.ln_2.weight"}},
          {Role::kNorm2Shift, {"h.{i}.ln_2.bias"}},
          {Role::kUp, {"h.{i}.mlp.c_fc.weight", kT}},
          {Role::kUpBias, {"h.{i}.mlp.c_fc.bias"}},
          {Role::kDown, {"h.{i}.mlp.c_proj.weight", kT}},
          {Role::kDownBias, {"h.{i}.mlp.c_proj.bias"}},
          {Role::kFinalScale, {"ln_f.weight"}},
          {Role::kFinalShift, {"ln_f.bias"}},
          {Role::kHead, {"lm_head.weight"}},
      }),
      {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"},
      {"", "transformer."},
      nullptr,
      ReadConfigJson,
      " or 'n_head' in a config.json beside it",
      GptProgram,
      "gpt2"};
  return family;
}

}  // namespace attn::lm
