// The file layouts of whole models, in one place: which tensor of a file
// plays each role (lm::Role), how it is laid out, and where the
// hyper-parameters come from. The book's GPTModel and Llama 3.2 store
// nn.Linear weights as [out, in]; Hugging Face's GPT-2 stores Conv1D weights
// as [in, out], with q, k and v side by side in one c_attn.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "attn/safetensors.hpp"
#include "engine/io/json_limits.h"
#include "engine/io/model_config.h"
#include "engine/models/lm_model.h"

namespace attn::lm {
namespace {

constexpr size_t kNumRoles = static_cast<size_t>(Role::kHead) + 1;

// How a file's tensor maps onto a role's [out, in] (or [n]).
enum class Form {
  kPlain,       // as the role wants it
  kTransposed,  // Conv1D: [in, out]
  kThird,       // one of q, k, v: columns (or elements) part*n..(part+1)*n
                // of a Conv1D [in, 3n] (or [3n]) tensor
};

struct TensorName {
  const char* name = nullptr;  // "{i}" stands for the layer; null: none
  Form form = Form::kPlain;
  int part = 0;  // kThird: 0 q, 1 k, 2 v
};

// A role's tensor, as a layout table names it.
struct RoleName {
  Role role;
  TensorName tensor;
};

// The table indexed by role (roles left out have no tensor).
std::array<TensorName, kNumRoles> ByRole(
    std::initializer_list<RoleName> names) {
  std::array<TensorName, kNumRoles> by_role{};
  for (const RoleName& n : names) {
    by_role[static_cast<size_t>(n.role)] = n.tensor;
  }
  return by_role;
}

struct Layout {
  const char* name;
  LmArchitecture architecture;
  std::array<TensorName, kNumRoles> tensors;  // by Role
  // Buffers a PyTorch state dict may hold beside the weights, unread.
  std::array<const char*, 5> buffers;
};

constexpr Form kT = Form::kTransposed;
constexpr Form kP = Form::kThird;

const Layout kBookGpt = {
    "book-gpt",
    LmArchitecture::kGpt2,
    ByRole({
        {Role::kTokEmb, {"tok_emb.weight"}},
        {Role::kPosEmb, {"pos_emb.weight"}},
        {Role::kNorm1Scale, {"trf_blocks.{i}.norm1.scale"}},
        {Role::kNorm1Shift, {"trf_blocks.{i}.norm1.shift"}},
        {Role::kQuery, {"trf_blocks.{i}.att.W_query.weight"}},
        {Role::kKey, {"trf_blocks.{i}.att.W_key.weight"}},
        {Role::kValue, {"trf_blocks.{i}.att.W_value.weight"}},
        {Role::kQueryBias, {"trf_blocks.{i}.att.W_query.bias"}},
        {Role::kKeyBias, {"trf_blocks.{i}.att.W_key.bias"}},
        {Role::kValueBias, {"trf_blocks.{i}.att.W_value.bias"}},
        {Role::kOut, {"trf_blocks.{i}.att.out_proj.weight"}},
        {Role::kOutBias, {"trf_blocks.{i}.att.out_proj.bias"}},
        {Role::kNorm2Scale, {"trf_blocks.{i}.norm2.scale"}},
        {Role::kNorm2Shift, {"trf_blocks.{i}.norm2.shift"}},
        {Role::kUp, {"trf_blocks.{i}.ff.layers.0.weight"}},
        {Role::kUpBias, {"trf_blocks.{i}.ff.layers.0.bias"}},
        {Role::kDown, {"trf_blocks.{i}.ff.layers.2.weight"}},
        {Role::kDownBias, {"trf_blocks.{i}.ff.layers.2.bias"}},
        {Role::kFinalScale, {"final_norm.scale"}},
        {Role::kFinalShift, {"final_norm.shift"}},
        {Role::kHead, {"out_head.weight"}},
    }),
    {"trf_blocks.{i}.att.mask"}};

const Layout kHfGpt2 = {
    "hf-gpt2",
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
    {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"}};

const Layout kBookLlama = {
    "book-llama",
    LmArchitecture::kLlama,
    ByRole({
        {Role::kTokEmb, {"tok_emb.weight"}},
        {Role::kNorm1Scale, {"trf_blocks.{i}.norm1.weight"}},
        {Role::kQuery, {"trf_blocks.{i}.att.W_query.weight"}},
        {Role::kKey, {"trf_blocks.{i}.att.W_key.weight"}},
        {Role::kValue, {"trf_blocks.{i}.att.W_value.weight"}},
        {Role::kQueryBias, {"trf_blocks.{i}.att.W_query.bias"}},
        {Role::kKeyBias, {"trf_blocks.{i}.att.W_key.bias"}},
        {Role::kValueBias, {"trf_blocks.{i}.att.W_value.bias"}},
        {Role::kOut, {"trf_blocks.{i}.att.out_proj.weight"}},
        {Role::kOutBias, {"trf_blocks.{i}.att.out_proj.bias"}},
        {Role::kNorm2Scale, {"trf_blocks.{i}.norm2.weight"}},
        {Role::kUp, {"trf_blocks.{i}.ff.fc1.weight"}},
        {Role::kGate, {"trf_blocks.{i}.ff.fc2.weight"}},
        {Role::kDown, {"trf_blocks.{i}.ff.fc3.weight"}},
        {Role::kFinalScale, {"final_norm.weight"}},
        {Role::kHead, {"out_head.weight"}},
    }),
    {"trf_blocks.{i}.att.mask", "trf_blocks.{i}.att.cos",
     "trf_blocks.{i}.att.sin", "cos", "sin"}};

// A layout and the prefix of its names in one file ("transformer." for
// some Hugging Face GPT-2 files; never before lm_head.weight).
struct FileLayout {
  const Layout* layout = nullptr;
  std::string prefix;
  // Which roles the model has, the same in every layer (ReadRoles).
  std::array<bool, kNumRoles> has{};

  // The file's name for `role` in `layer`; empty when the layout has none.
  std::string Name(Role role, int64_t layer) const {
    const TensorName& t = layout->tensors[static_cast<size_t>(role)];
    if (!t.name) return "";
    std::string name = t.name;
    if (const size_t at = name.find("{i}"); at != std::string::npos) {
      name.replace(at, 3, std::to_string(layer));
    }
    return role == Role::kHead ? name : prefix + name;
  }
  // The file's name for buffer `pattern` of the layout, "{i}" kept.
  std::string BufferName(const char* pattern) const { return prefix + pattern; }
  // What every block's names start with, e.g. "trf_blocks.".
  std::string BlockPrefix() const {
    const std::string first = layout->tensors[size_t(Role::kNorm1Scale)].name;
    return prefix + first.substr(0, first.find("{i}"));
  }
};

FileLayout FindLayout(const SafetensorsFile& file) {
  if (file.Find("tok_emb.weight")) {
    const bool gpt =
        file.Find("pos_emb.weight") || file.Find("trf_blocks.0.norm1.scale");
    return {gpt ? &kBookGpt : &kBookLlama, ""};
  }
  for (const char* prefix : {"", "transformer."}) {
    if (file.Find(std::string(prefix) + "wte.weight")) {
      return {&kHfGpt2, prefix};
    }
  }
  return {};
}

std::string ShapeOf(int64_t rows, int64_t cols) {
  return cols ? ShapeString({rows, cols}) : ShapeString({rows});
}

// The shape a role's [rows, cols] (or [rows]) has in the file.
std::vector<int64_t> FileShape(const TensorName& t, int64_t rows,
                               int64_t cols) {
  switch (t.form) {
    case Form::kTransposed:
      return {cols, rows};
    case Form::kThird:
      return cols ? std::vector<int64_t>{cols, 3 * rows}
                  : std::vector<int64_t>{3 * rows};
    case Form::kPlain:
      break;
  }
  return cols ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
}

// `values` in the file's form, as the role's [rows, cols] (or [rows]).
std::vector<float> ToRoleForm(const TensorName& t, std::vector<float> values,
                              int64_t rows, int64_t cols) {
  if (t.form == Form::kPlain) return values;
  if (cols == 0) {  // a third of a [3 rows] bias
    const auto first = values.begin() + t.part * rows;
    return std::vector<float>(first, first + rows);
  }
  // [cols, width] with column offset `first`, transposed to [rows, cols].
  const int64_t width = t.form == Form::kThird ? 3 * rows : rows;
  const int64_t first = t.form == Form::kThird ? t.part * rows : 0;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = values[c * width + first + r];
    }
  }
  return out;
}

// The layer of `name` when it fits `pattern` ("{i}" standing for a layer
// in decimal; 0 for a name of the whole model), else nothing.
std::optional<int64_t> MatchLayer(const std::string& pattern,
                                  const std::string& name) {
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) {
    return pattern == name ? std::optional<int64_t>(0) : std::nullopt;
  }
  const std::string suffix = pattern.substr(at + 3);
  if (name.size() <= at + suffix.size() ||
      name.compare(0, at, pattern, 0, at) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(at, name.size() - at - suffix.size());
  // Decimal as std::to_string writes it: no sign, no leading zero.
  const bool decimal = digits.size() <= 9 &&
                       (digits == "0" || digits[0] != '0') &&
                       std::all_of(digits.begin(), digits.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
  return decimal ? std::optional<int64_t>(std::stoll(digits)) : std::nullopt;
}

// The shape of the file's tensor for `role` in `layer` as the role sees it
// (nn.Linear's [out, in], or [n]); empty when absent.
std::vector<int64_t> RoleShape(const SafetensorsFile& file,
                               const FileLayout& layout, Role role,
                               int64_t layer) {
  const TensorInfo* info = file.Find(layout.Name(role, layer));
  if (!info || info->shape.empty()) return {};
  const TensorName& t = layout.layout->tensors[static_cast<size_t>(role)];
  std::vector<int64_t> shape = info->shape;
  if (t.form != Form::kPlain && shape.size() == 2) {
    std::swap(shape[0], shape[1]);
  }
  if (t.form == Form::kThird) shape[0] /= 3;
  return shape;
}

// The rows of a matrix's shape; 0 for anything else (absent among them).
int64_t MatrixRows(const std::vector<int64_t>& shape) {
  return shape.size() == 2 ? shape[0] : 0;
}

Status Missing(const SafetensorsFile& file, const FileLayout& layout,
               const std::string& name) {
  return InvalidArgument("tensor " + Quoted(name) + " is missing from " +
                         Quoted(file.path()) + " (layout " +
                         layout.layout->name + ")");
}

WeightSource FileWeights(std::shared_ptr<const SafetensorsFile> file,
                         FileLayout layout) {
  WeightSource source;
  source.has = [layout](Role role, int64_t) {
    return layout.has[static_cast<size_t>(role)];
  };
  source.shape = [file, layout](Role role, int64_t layer) {
    return RoleShape(*file, layout, role, layer);
  };
  // c_attn's q, k and v are read once: the last such tensor is kept.
  auto last = std::make_shared<std::pair<std::string, std::vector<float>>>();
  source.fetch = [file, layout, last](
                     Role role, int64_t layer, int64_t rows,
                     int64_t cols) -> Result<std::vector<float>> {
    const TensorName& t = layout.layout->tensors[static_cast<size_t>(role)];
    const std::string name = layout.Name(role, layer);
    const TensorInfo* info = file->Find(name);
    if (!info) return Missing(*file, layout, name);
    std::vector<int64_t> want = FileShape(t, rows, cols);
    // A position table may be longer than the context used.
    if (role == Role::kPosEmb && info->shape.size() == 2 &&
        info->shape[0] >= rows) {
      want[0] = info->shape[0];
    }
    if (info->shape != want) {
      return InvalidArgument(
          "tensor " + Quoted(name) + " in " + Quoted(file->path()) + " is " +
          ShapeString(info->shape) + ", want " + ShapeString(want) +
          (t.form == Form::kPlain
               ? ""
               : " (Conv1D: [in, out] for " + ShapeOf(rows, cols) + ")"));
    }
    std::vector<float> values;
    if (t.form != Form::kThird) {
      ATTN_ASSIGN_OR_RETURN(values, file->ReadF32(name));
    } else {
      if (last->first != name) {
        ATTN_ASSIGN_OR_RETURN(last->second, file->ReadF32(name));
        last->first = name;
      }
      values = last->second;
    }
    values.resize(static_cast<size_t>(rows * (cols ? cols : 1)) *
                  (t.form == Form::kThird ? 3 : 1));
    return ToRoleForm(t, std::move(values), rows, cols);
  };
  return source;
}

// Hugging Face's config.json beside the weights: the attention dims it
// gives (n_head, n_positions), layer_norm_epsilon, and the sizes and head
// the tensors must agree with (each 0, or tie -1, when absent or null).
struct HfConfig {
  std::string path;
  AttentionDims dims;
  double norm_eps = 0.0;
  int64_t layers = 0, emb_dim = 0, vocab_size = 0, hidden_dim = 0;
  int tie_word_embeddings = -1;  // 0 or 1 when given
};

// Refuses the settings under which Hugging Face computes another model
// than GPT-2's attention, GELU and block (a model type, attention scaled
// otherwise or by layer, cross-attention), rather than run them as GPT-2.
Status CheckHfComputesGpt2(const nlohmann::json& j, const std::string& path) {
  const std::pair<const char*, nlohmann::json> wanted[] = {
      {"model_type", "gpt2"},
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

Result<HfConfig> ReadHfConfig(const std::string& weights_path) {
  const size_t slash = weights_path.rfind('/');
  const std::string path =
      (slash == std::string::npos ? "" : weights_path.substr(0, slash + 1)) +
      "config.json";
  HfConfig config;
  config.path = path;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return config;
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
  ATTN_ASSIGN_OR_RETURN(config.layers, count("n_layer"));
  ATTN_ASSIGN_OR_RETURN(config.emb_dim, count("n_embd"));
  ATTN_ASSIGN_OR_RETURN(config.vocab_size, count("vocab_size"));
  ATTN_ASSIGN_OR_RETURN(config.hidden_dim, count("n_inner"));
  ATTN_RETURN_IF_ERROR(CheckHfComputesGpt2(j, path));
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
  return config;
}

// Layers: trf_blocks.0., trf_blocks.1., ... while the first norm is there.
// A tensor of a later block means one in between is missing: an error, not
// a shorter model.
Result<int64_t> CountLayers(const SafetensorsFile& file,
                            const FileLayout& layout) {
  int64_t layers = 0;
  while (file.Find(layout.Name(Role::kNorm1Scale, layers))) ++layers;
  const std::string blocks = layout.BlockPrefix();
  for (const TensorInfo& t : file.tensors()) {
    if (t.name.compare(0, blocks.size(), blocks) != 0) continue;
    const int64_t block = std::atoll(t.name.c_str() + blocks.size());
    if (block >= layers) {
      return InvalidArgument("tensor " + Quoted(t.name) + " of " +
                             Quoted(file.path()) + " is in block " +
                             std::to_string(block) + ", but block " +
                             std::to_string(layers) + " has no " +
                             Quoted(layout.Name(Role::kNorm1Scale, layers)));
    }
  }
  return layers;
}

std::string SomeNames(const SafetensorsFile& file) {
  std::string names;
  size_t shown = 0;
  for (const TensorInfo& t : file.tensors()) {
    if (shown++ == 3) return names + ", ...";
    names += (names.empty() ? "" : ", ") + Quoted(t.name);
  }
  return names.empty() ? "no tensors" : names;
}

// The sizes the tensors give: vocabulary, widths, layers, biases, head.
Status ReadSizes(const SafetensorsFile& file, const FileLayout& layout,
                 LmConfig& c) {
  const TensorInfo* emb = file.Find(layout.Name(Role::kTokEmb, 0));
  if (emb->shape.size() != 2 || emb->shape[0] <= 0 || emb->shape[1] <= 0) {
    return InvalidArgument(
        "tensor " + Quoted(emb->name) + " in " + Quoted(file.path()) + " is " +
        ShapeString(emb->shape) + ", want [vocab_size, emb_dim]");
  }
  c.vocab_size = emb->shape[0];
  c.emb_dim = emb->shape[1];
  ATTN_ASSIGN_OR_RETURN(c.num_layers, CountLayers(file, layout));
  if (c.num_layers == 0) {
    return InvalidArgument(
        Quoted(file.path()) + " has no transformer block: " + "tensor " +
        Quoted(layout.Name(Role::kNorm1Scale, 0)) + " is missing");
  }
  c.hidden_dim = MatrixRows(RoleShape(file, layout, Role::kUp, 0));
  if (c.hidden_dim == 0) {
    return InvalidArgument("tensor " + Quoted(layout.Name(Role::kUp, 0)) +
                           " of " + Quoted(file.path()) +
                           " is missing or not a matrix: the feed-forward "
                           "block's first weight");
  }
  // The head is read as the logits' width: one of another vocabulary would
  // give logits of another width through a graph, which reads it as it is.
  const std::vector<int64_t> head = RoleShape(file, layout, Role::kHead, 0);
  const std::vector<int64_t> want = {c.vocab_size, c.emb_dim};
  if (!head.empty() && head != want) {
    return InvalidArgument("tensor " + Quoted(layout.Name(Role::kHead, 0)) +
                           " in " + Quoted(file.path()) + " is " +
                           ShapeString(head) + ", want " + ShapeString(want) +
                           " (the token embedding's vocabulary and width)");
  }
  return {};
}

// Roles a model may go without, in every layer alike: the q/k/v biases,
// Llama's out_proj bias, and the head (then tied to the embedding).
bool Optional(LmArchitecture architecture, Role role) {
  switch (role) {
    case Role::kQueryBias:
    case Role::kKeyBias:
    case Role::kValueBias:
    case Role::kHead:
      return true;
    case Role::kOutBias:
      return architecture == LmArchitecture::kLlama;
    default:
      return false;
  }
}

// Tensors of a role in a model of `layers` blocks: one per block, or one.
int64_t TensorsOf(const TensorName& t, int64_t layers) {
  return std::string(t.name).find("{i}") != std::string::npos ? layers : 1;
}

// Which roles the model has, once for all its layers: every required one,
// each of whose tensors the file must hold, and an optional one when any
// layer holds it (q, k and v biases together), so that a layer without it
// is refused rather than run as a different model (a GPT-2 LayerNorm
// without its shift would become an RMSNorm).
Status ReadRoles(const SafetensorsFile& file, FileLayout& layout, LmConfig& c) {
  for (size_t r = 0; r < kNumRoles; ++r) {
    const auto role = static_cast<Role>(r);
    const TensorName& t = layout.layout->tensors[r];
    if (!t.name) continue;
    const bool optional = Optional(c.architecture, role);
    for (int64_t i = 0; i < TensorsOf(t, c.num_layers); ++i) {
      layout.has[r] = layout.has[r] || file.Find(layout.Name(role, i));
    }
    layout.has[r] = layout.has[r] || !optional;
  }
  bool& q = layout.has[size_t(Role::kQueryBias)];
  bool& k = layout.has[size_t(Role::kKeyBias)];
  bool& v = layout.has[size_t(Role::kValueBias)];
  q = k = v = q || k || v;
  for (size_t r = 0; r < kNumRoles; ++r) {
    const TensorName& t = layout.layout->tensors[r];
    for (int64_t i = 0; layout.has[r] && i < TensorsOf(t, c.num_layers); ++i) {
      const std::string name = layout.Name(static_cast<Role>(r), i);
      if (!file.Find(name)) return Missing(file, layout, name);
    }
  }
  c.qkv_bias = q;
  c.tied_head = !layout.has[size_t(Role::kHead)];
  return {};
}

// Every tensor of the file is one the model reads or a buffer of its
// layout: a misnamed one (a head under another prefix, a bias the layout
// has no role for, block "01") would otherwise be dropped without a word.
Status CheckNoStrayTensors(const SafetensorsFile& file,
                           const FileLayout& layout, int64_t layers) {
  std::set<std::string> read;
  for (size_t r = 0; r < kNumRoles; ++r) {
    if (!layout.has[r]) continue;
    const TensorName& t = layout.layout->tensors[r];
    for (int64_t i = 0; i < TensorsOf(t, layers); ++i) {
      read.insert(layout.Name(static_cast<Role>(r), i));
    }
  }
  const auto& buffers = layout.layout->buffers;
  for (const TensorInfo& t : file.tensors()) {
    const bool buffer =
        std::any_of(buffers.begin(), buffers.end(), [&](const char* b) {
          return b && MatchLayer(layout.BufferName(b), t.name);
        });
    if (!read.count(t.name) && !buffer) {
      return InvalidArgument(
          "tensor " + Quoted(t.name) + " in " + Quoted(file.path()) +
          " is not part of layout " + layout.layout->name + " (" +
          std::to_string(layers) + " blocks): want only the layout's names");
    }
  }
  return {};
}

// config.json's sizes and head, where given, are the tensors'. Tied word
// embeddings make Hugging Face's head wte whatever lm_head.weight holds,
// untied ones a head the file must hold: a file that says one and holds the
// other is refused, not run as either.
Status CheckHfSizes(const HfConfig& hf, const LmConfig& c) {
  if (hf.tie_word_embeddings != -1 &&
      (hf.tie_word_embeddings == 1) != c.tied_head) {
    return InvalidArgument(
        Quoted(hf.path) + ": 'tie_word_embeddings' is " +
        (c.tied_head ? "false, but the weights beside it have no "
                       "'lm_head.weight'"
                     : "true, but the weights beside it have their own "
                       "'lm_head.weight'"));
  }
  const std::pair<const char*, std::pair<int64_t, int64_t>> sizes[] = {
      {"n_layer", {hf.layers, c.num_layers}},
      {"n_embd", {hf.emb_dim, c.emb_dim}},
      {"vocab_size", {hf.vocab_size, c.vocab_size}},
      {"n_inner", {hf.hidden_dim, c.hidden_dim}}};
  for (const auto& [key, size] : sizes) {
    if (size.first && size.first != size.second) {
      return InvalidArgument(Quoted(hf.path) + ": " + Quoted(key) + " is " +
                             std::to_string(size.first) +
                             ", but the weights beside it have " +
                             std::to_string(size.second));
    }
  }
  return {};
}

// The attention's dims: options, then metadata, then config.json (Hugging
// Face files), then the position table's rows; K/V heads from W_key.
Status ResolveDims(const SafetensorsFile& file, const FileLayout& layout,
                   const HfConfig& hf, const LmOptions& options, LmConfig& c) {
  AttentionDims option = DimsOf(options);
  const auto& meta = file.metadata();
  const bool heads_from_hf =
      !option.num_heads && !meta.count("num_heads") && hf.dims.num_heads;
  if (heads_from_hf) option.num_heads = hf.dims.num_heads;
  if (!option.context_length && !meta.count("context_length")) {
    option.context_length = hf.dims.context_length;
  }
  if (!option.num_heads && !meta.count("num_heads")) {
    return InvalidArgument(
        "missing hyper-parameter num_heads: pass --heads, or set metadata "
        "'num_heads' in " +
        Quoted(file.path()) +
        (layout.layout == &kHfGpt2 ? " or 'n_head' in a config.json beside it"
                                   : ""));
  }
  ATTN_ASSIGN_OR_RETURN(ResolvedDims dims,
                        ResolveAttentionDims(file, option, {}, "", ""));
  if (heads_from_hf) dims.num_heads_from = "'n_head' of " + Quoted(hf.path);
  const std::string key = layout.Name(Role::kKey, 0);
  KvHeadsFromRows(MatrixRows(RoleShape(file, layout, Role::kKey, 0)), key,
                  c.emb_dim, dims);
  ATTN_RETURN_IF_ERROR(
      CheckHeads(dims, c.emb_dim, "emb_dim",
                 "the columns of " + Quoted(layout.Name(Role::kTokEmb, 0))));
  c.num_heads = dims.num_heads;
  c.num_kv_heads = dims.num_kv_heads;
  c.context_length = dims.context_length;
  c.rope = dims.rope;
  c.sliding_window = dims.sliding_window;
  return {};
}

// What only one family has: GPT-2's positions bound the context; Llama
// needs a context length and RoPE.
Status CheckFamily(const SafetensorsFile& file, const FileLayout& layout,
                   LmConfig& c) {
  if (c.architecture == LmArchitecture::kGpt2) {
    const TensorInfo* pos = file.Find(layout.Name(Role::kPosEmb, 0));
    const int64_t positions = pos && pos->shape.size() == 2 ? pos->shape[0] : 0;
    if (c.context_length == 0) c.context_length = positions;
    if (c.context_length > positions) {
      return InvalidArgument(
          "context_length " + std::to_string(c.context_length) + " exceeds " +
          std::to_string(positions) + " rows of " +
          Quoted(layout.Name(Role::kPosEmb, 0)) + " in " + Quoted(file.path()));
    }
    if (c.rope.theta != 0.0) {
      return InvalidArgument("rope_theta is set for " + Quoted(file.path()) +
                             ", a GPT-2 model with learned positions");
    }
    return {};
  }
  const std::string where = "' for the Llama model " + Quoted(file.path());
  if (c.context_length == 0) {
    return InvalidArgument(
        "missing hyper-parameter context_length: pass --context-length or "
        "set metadata 'context_length" +
        where);
  }
  if (c.rope.theta == 0.0) {
    return InvalidArgument(
        "missing hyper-parameter rope_theta: pass --rope-theta or set "
        "metadata 'rope_theta" +
        where);
  }
  return {};
}

}  // namespace

const Layout& BookLayout(LmArchitecture architecture) {
  return architecture == LmArchitecture::kGpt2 ? kBookGpt : kBookLlama;
}

std::optional<std::pair<Role, int64_t>> BookRole(LmArchitecture architecture,
                                                 const std::string& name) {
  const Layout& book = BookLayout(architecture);
  for (size_t role = 0; role < kNumRoles; ++role) {
    const char* pattern = book.tensors[role].name;
    if (!pattern) continue;
    if (const std::optional<int64_t> layer = MatchLayer(pattern, name)) {
      return std::make_pair(static_cast<Role>(role), *layer);
    }
  }
  return std::nullopt;
}

std::string BookName(LmArchitecture architecture, Role role, int64_t layer) {
  return FileLayout{&BookLayout(architecture), ""}.Name(role, layer);
}

std::string DetectLayout(const SafetensorsFile& file) {
  const FileLayout layout = FindLayout(file);
  return layout.layout ? layout.layout->name : "";
}

Result<FileModel> OpenModelFile(const std::string& path,
                                const LmOptions& options) {
  ATTN_ASSIGN_OR_RETURN(SafetensorsFile opened,
                        SafetensorsFile::Open(path, options.max_memory_bytes));
  auto file = std::make_shared<const SafetensorsFile>(std::move(opened));
  FileLayout layout = FindLayout(*file);
  if (!layout.layout) {
    return InvalidArgument(
        "unknown model layout in " + Quoted(path) + ": found " +
        SomeNames(*file) +
        "; want 'tok_emb.weight' (the book's GPTModel or Llama) or "
        "'wte.weight' (Hugging Face GPT-2)");
  }
  FileModel model;
  LmConfig& c = model.config;
  c.layout = layout.layout->name;
  c.architecture = layout.layout->architecture;
  ATTN_RETURN_IF_ERROR(ReadSizes(*file, layout, c));
  ATTN_RETURN_IF_ERROR(ReadRoles(*file, layout, c));
  ATTN_RETURN_IF_ERROR(CheckNoStrayTensors(*file, layout, c.num_layers));
  HfConfig hf;
  if (layout.layout == &kHfGpt2) {
    ATTN_ASSIGN_OR_RETURN(hf, ReadHfConfig(path));
    ATTN_RETURN_IF_ERROR(CheckHfSizes(hf, c));
  }
  ATTN_RETURN_IF_ERROR(ResolveDims(*file, layout, hf, options, c));
  ATTN_RETURN_IF_ERROR(CheckFamily(*file, layout, c));
  ATTN_ASSIGN_OR_RETURN(const double eps,
                        MetadataNumber(*file, "rms_norm_eps"));
  c.norm_eps = options.norm_eps ? options.norm_eps
               : eps            ? eps
               : hf.norm_eps    ? hf.norm_eps
                                : 1e-5;
  model.weights = FileWeights(std::move(file), layout);
  return model;
}

}  // namespace attn::lm
