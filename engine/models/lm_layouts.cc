// Reading a whole-model file of any family (lm_family.h): which family its
// names are, the sizes and roles its tensors give, what the family reads
// beside it, and the weights by role in nn.Linear's [out, in] form.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "attn/safetensors.hpp"
#include "engine/io/json_limits.h"
#include "engine/io/model_config.h"
#include "engine/io/quantized_tensors.h"
#include "engine/io/weight_files.h"
#include "engine/models/families/hf_config.h"
#include "engine/models/lm_family.h"
#include "engine/models/lm_model.h"

namespace attn::lm {
namespace {

// A family and the prefix of its names in one file ("transformer." for
// some Hugging Face GPT-2 files; never before the head).
struct FileLayout {
  const Family* family = nullptr;
  std::string prefix;
  // Which roles the model has, the same in every layer (ReadRoles).
  std::array<bool, kNumRoles> has{};
  // A quantized file's linears' type.
  std::optional<kernels::QuantType> quant;

  // The file's name for `role` in `layer`; empty when the layout has none.
  std::string Name(Role role, int64_t layer) const {
    const TensorName& t = family->tensors[static_cast<size_t>(role)];
    if (!t.name) return "";
    std::string name = t.name;
    if (const size_t at = name.find("{i}"); at != std::string::npos) {
      name.replace(at, 3, std::to_string(layer));
    }
    return role == Role::kHead ? name : prefix + name;
  }
  // Whether the file holds `role` as a quantized matrix.
  bool Quantized(Role role) const { return quant && IsLinearWeight(role); }
  // The file's name for buffer `pattern` of the layout, "{i}" kept.
  std::string BufferName(const char* pattern) const { return prefix + pattern; }
  // What every block's names start with, e.g. "trf_blocks.".
  std::string BlockPrefix() const {
    const std::string first = family->tensors[size_t(Role::kNorm1Scale)].name;
    return prefix + first.substr(0, first.find("{i}"));
  }
};

// `model_type`: config.json's, empty without one.
FileLayout FindLayout(const WeightFiles& file, const std::string& model_type) {
  for (const Family* family : Families()) {
    if (family->model_type && !model_type.empty() &&
        model_type != family->model_type) {
      continue;
    }
    const char* embedding = family->tensors[size_t(Role::kTokEmb)].name;
    for (const char* prefix : family->prefixes) {
      if (!prefix || !file.Find(prefix + std::string(embedding))) continue;
      if (!family->recognises || family->recognises(file, prefix)) {
        return {family, prefix, {}, {}};
      }
    }
  }
  return {};
}

// config.json's model_type beside `path`, one a family has; empty when
// there is no config.json or it names none.
Result<std::string> ModelTypeBeside(const std::string& path) {
  ATTN_ASSIGN_OR_RETURN(const HfConfig hf, ReadConfigBeside(path));
  ATTN_ASSIGN_OR_RETURN(std::string type, hf.String("model_type", ""));
  std::string known;
  for (const Family* family : Families()) {
    if (!family->model_type) continue;
    if (type == family->model_type) return type;
    known += (known.empty() ? "\"" : ", \"") + std::string(family->model_type) +
             "\"";
  }
  if (type.empty()) return type;
  return hf.Refuse("model_type", "want one of " + known);
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
    case Form::kOnePlus:
      break;
  }
  return cols ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
}

// Columns [first, first + rows) of `values` [cols, width] (Conv1D's [in,
// out]) as nn.Linear's [rows, cols]; with cols 0, values [first, first +
// rows) of a vector (a third of c_attn's bias).
StreamedVector<float> Transposed(const StreamedVector<float>& values,
                                 int64_t width, int64_t first, int64_t rows,
                                 int64_t cols) {
  if (cols == 0) {
    const auto begin = values.begin() + first;
    return StreamedVector<float>(begin, begin + rows);
  }
  StreamedVector<float> out(static_cast<size_t>(rows * cols));
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
std::vector<int64_t> RoleShape(const WeightFiles& file,
                               const FileLayout& layout, Role role,
                               int64_t layer) {
  const std::string name = layout.Name(role, layer);
  const TensorInfo* info = file.Find(name);
  if (!info || info->shape.empty()) return {};
  const TensorName& t = layout.family->tensors[static_cast<size_t>(role)];
  std::vector<int64_t> shape = info->shape;
  if (layout.Quantized(role)) {  // [out, in] whatever the family's form
    Result<std::vector<int64_t>> blocks =
        QuantizedShape(file, name, *layout.quant);
    if (!blocks.ok()) return {};
    shape = *blocks;
  } else if ((t.form == Form::kTransposed || t.form == Form::kThird) &&
             shape.size() == 2) {
    std::swap(shape[0], shape[1]);
  }
  if (t.form == Form::kThird) shape[0] /= 3;
  return shape;
}

// The rows of a matrix's shape; 0 for anything else (absent among them).
int64_t MatrixRows(const std::vector<int64_t>& shape) {
  return shape.size() == 2 ? shape[0] : 0;
}

Status Missing(const WeightFiles& file, const FileLayout& layout,
               const std::string& name) {
  return InvalidArgument("tensor " + Quoted(name) + " is missing from " +
                         Quoted(file.path()) + " (layout " +
                         layout.family->name + ")");
}

// Tensor `name`, which holds `t`'s role, as that role's [rows, cols] (or
// [rows]). GPT-2's c_attn, whose thirds are q, k and v, is read once and
// kept in `last` for the next two.
Result<StreamedVector<float>> InRoleForm(
    const WeightFiles& file, const TensorName& t, const std::string& name,
    int64_t rows, int64_t cols,
    std::pair<std::string, StreamedVector<float>>& last) {
  if (t.form == Form::kThird) {
    if (last.first != name) {
      last.first.clear();
      ATTN_ASSIGN_OR_RETURN(last.second, file.ReadF32(name));
      last.first = name;
    }
    return Transposed(last.second, 3 * rows, t.part * rows, rows, cols);
  }
  ATTN_ASSIGN_OR_RETURN(StreamedVector<float> values, file.ReadF32(name));
  if (t.form == Form::kTransposed) {
    return Transposed(values, rows, 0, rows, cols);
  }
  // A position table may hold more rows than the context uses.
  values.resize(static_cast<size_t>(rows * (cols ? cols : 1)));
  if (t.form == Form::kOnePlus) {
    for (float& v : values) v = 1.0f + v;
  }
  return values;
}

// Role `role`'s quantized [rows, cols] in `layer` as blocks: the tensor's
// rows, or its part's (GPT-2's c_attn: q, k, v stacked).
Result<AlignedBuffer> FetchBlocks(const WeightFiles& file,
                                  const FileLayout& layout, Role role,
                                  int64_t layer, int64_t rows, int64_t cols) {
  const TensorName& t = layout.family->tensors[static_cast<size_t>(role)];
  const std::string name = layout.Name(role, layer);
  if (!file.Find(name)) return Missing(file, layout, name);
  const int64_t parts = t.form == Form::kThird ? 3 : 1;
  ATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                        QuantizedShape(file, name, *layout.quant));
  const std::vector<int64_t> want = {parts * rows, cols};
  if (shape != want) {
    return InvalidArgument("tensor " + Quoted(name) + " in " +
                           Quoted(file.FileOf(name)) + " holds a " +
                           kernels::QuantName(*layout.quant) + " matrix " +
                           ShapeString(shape) + ", want " + ShapeString(want));
  }
  const int64_t first = t.form == Form::kThird ? t.part * rows : 0;
  return ReadQuantizedRows(file, name, *layout.quant, first, rows, cols);
}

// Whether `role`'s tensor in `layer` holds values of the shape [rows, cols]
// the role wants; else an error naming it.
Status CheckTensor(const WeightFiles& file, const FileLayout& layout, Role role,
                   int64_t layer, int64_t rows, int64_t cols) {
  const TensorName& t = layout.family->tensors[static_cast<size_t>(role)];
  const std::string name = layout.Name(role, layer);
  const TensorInfo* info = file.Find(name);
  if (!info) return Missing(file, layout, name);
  if (layout.Quantized(role)) {  // the engine reads it with fetch_blocks
    return InvalidArgument("tensor " + Quoted(name) + " holds " +
                           kernels::QuantName(*layout.quant) +
                           " blocks, not values");
  }
  std::vector<int64_t> want = FileShape(t, rows, cols);
  // A position table may be longer than the context used.
  if (role == Role::kPosEmb && info->shape.size() == 2 &&
      info->shape[0] >= rows) {
    want[0] = info->shape[0];
  }
  if (info->shape != want) {
    return InvalidArgument(
        "tensor " + Quoted(name) + " in " + Quoted(file.FileOf(name)) + " is " +
        ShapeString(info->shape) + ", want " + ShapeString(want) +
        (t.form != Form::kTransposed && t.form != Form::kThird
             ? ""
             : " (Conv1D: [in, out] for " + ShapeOf(rows, cols) + ")"));
  }
  return {};
}

WeightSource FileWeights(std::shared_ptr<const WeightFiles> file,
                         FileLayout layout) {
  WeightSource source;
  source.has = [layout](Role role, int64_t) {
    return layout.has[static_cast<size_t>(role)];
  };
  source.shape = [file, layout](Role role, int64_t layer) {
    return RoleShape(*file, layout, role, layer);
  };
  if (layout.quant) {
    source.quant = layout.quant;
    source.fetch_blocks = [file, layout](Role role, int64_t layer, int64_t rows,
                                         int64_t cols) {
      return FetchBlocks(*file, layout, role, layer, rows, cols);
    };
  }
  const auto stores_bf16 = [file, layout](Role role, int64_t layer) {
    const TensorName& t = layout.family->tensors[static_cast<size_t>(role)];
    const TensorInfo* info = file->Find(layout.Name(role, layer));
    return info && t.form == Form::kPlain && !layout.Quantized(role) &&
           info->dtype == "BF16";
  };
  source.stores_bf16 = stores_bf16;
  source.fetch_bf16 =
      [file, layout, stores_bf16](
          Role role, int64_t layer, int64_t rows,
          int64_t cols) -> Result<StreamedVector<hwy::bfloat16_t>> {
    ATTN_RETURN_IF_ERROR(CheckTensor(*file, layout, role, layer, rows, cols));
    if (!stores_bf16(role, layer)) {
      return InvalidArgument("tensor " + Quoted(layout.Name(role, layer)) +
                             " is not stored as the bf16 values it stands for");
    }
    ATTN_ASSIGN_OR_RETURN(StreamedVector<hwy::bfloat16_t> values,
                          file->ReadBF16(layout.Name(role, layer)));
    // A position table may hold more rows than the context uses.
    values.resize(static_cast<size_t>(rows * (cols ? cols : 1)));
    return values;
  };
  // c_attn's q, k and v are read once: the last such tensor is kept.
  auto last = std::make_shared<std::pair<std::string, StreamedVector<float>>>();
  source.fetch = [file, layout, last](
                     Role role, int64_t layer, int64_t rows,
                     int64_t cols) -> Result<StreamedVector<float>> {
    ATTN_RETURN_IF_ERROR(CheckTensor(*file, layout, role, layer, rows, cols));
    const TensorName& t = layout.family->tensors[static_cast<size_t>(role)];
    const std::string name = layout.Name(role, layer);
    try {
      return InRoleForm(*file, t, name, rows, cols, *last);
    } catch (const std::bad_alloc&) {
      return OutOfMemory("cannot allocate the values of tensor " +
                         Quoted(name));
    }
  };
  return source;
}

// Layers: trf_blocks.0., trf_blocks.1., ... while the first norm is there.
// A tensor of a later block means one in between is missing: an error, not
// a shorter model.
Result<int64_t> CountLayers(const WeightFiles& file, const FileLayout& layout) {
  int64_t layers = 0;
  while (file.Find(layout.Name(Role::kNorm1Scale, layers))) ++layers;
  const std::string blocks = layout.BlockPrefix();
  for (const TensorInfo* t : file.tensors()) {
    if (t->name.compare(0, blocks.size(), blocks) != 0) continue;
    const int64_t block = std::atoll(t->name.c_str() + blocks.size());
    if (block >= layers) {
      return InvalidArgument("tensor " + Quoted(t->name) + " of " +
                             Quoted(file.FileOf(t->name)) + " is in block " +
                             std::to_string(block) + ", but block " +
                             std::to_string(layers) + " has no " +
                             Quoted(layout.Name(Role::kNorm1Scale, layers)));
    }
  }
  return layers;
}

std::string SomeNames(const WeightFiles& file) {
  std::string names;
  size_t shown = 0;
  for (const TensorInfo* t : file.tensors()) {
    if (shown++ == 3) return names + ", ...";
    names += (names.empty() ? "" : ", ") + Quoted(t->name);
  }
  return names.empty() ? "no tensors" : names;
}

// Tensors of a role in a model of `layers` blocks: one per block, or one.
int64_t TensorsOf(const TensorName& t, int64_t layers) {
  return std::string(t.name).find("{i}") != std::string::npos ? layers : 1;
}

// A quantized file's linears are each a whole matrix (QuantizedShape).
Status CheckQuantized(const WeightFiles& file, const FileLayout& layout) {
  if (!layout.quant) return {};
  ATTN_ASSIGN_OR_RETURN(const int64_t layers, CountLayers(file, layout));
  for (size_t r = 0; r < kNumRoles; ++r) {
    const auto role = static_cast<Role>(r);
    const TensorName& t = layout.family->tensors[r];
    if (!t.name || !IsLinearWeight(role)) continue;
    for (int64_t i = 0; i < TensorsOf(t, layers); ++i) {
      const std::string name = layout.Name(role, i);
      if (!file.Find(name)) continue;  // ReadRoles tells what is missing
      ATTN_RETURN_IF_ERROR(QuantizedShape(file, name, *layout.quant).status());
    }
  }
  return {};
}

// The sizes the tensors give: vocabulary, widths, layers, biases, head.
Status ReadSizes(const WeightFiles& file, const FileLayout& layout,
                 LmConfig& c) {
  const TensorInfo* emb = file.Find(layout.Name(Role::kTokEmb, 0));
  if (emb->shape.size() != 2 || emb->shape[0] <= 0 || emb->shape[1] <= 0) {
    return InvalidArgument("tensor " + Quoted(emb->name) + " in " +
                           Quoted(file.FileOf(emb->name)) + " is " +
                           ShapeString(emb->shape) +
                           ", want [vocab_size, emb_dim]");
  }
  c.vocab_size = emb->shape[0];
  c.emb_dim = emb->shape[1];
  ATTN_ASSIGN_OR_RETURN(c.num_layers, CountLayers(file, layout));
  if (c.num_layers == 0) {
    return InvalidArgument(
        Quoted(file.path()) + " has no transformer block: " + "tensor " +
        Quoted(layout.Name(Role::kNorm1Scale, 0)) + " is missing");
  }
  // Phi-3's fused gate_up has both halves' rows.
  const bool fused = layout.family->tensors[size_t(Role::kGateUp)].name;
  const Role first = fused ? Role::kGateUp : Role::kUp;
  c.hidden_dim =
      MatrixRows(RoleShape(file, layout, first, 0)) / (fused ? 2 : 1);
  if (c.hidden_dim == 0) {
    return InvalidArgument("tensor " + Quoted(layout.Name(first, 0)) + " of " +
                           Quoted(file.path()) +
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
// Llama's out_proj and feed-forward biases, and the head (then tied to the
// embedding).
bool Optional(LmArchitecture architecture, Role role) {
  switch (role) {
    case Role::kQueryBias:
    case Role::kKeyBias:
    case Role::kValueBias:
    case Role::kHead:
      return true;
    case Role::kOutBias:
    case Role::kUpBias:
    case Role::kGateBias:
    case Role::kDownBias:
      return architecture == LmArchitecture::kLlama;
    default:
      return false;
  }
}

// Which roles the model has, once for all its layers: every required one,
// each of whose tensors the file must hold, and an optional one when any
// layer holds it (q, k and v biases together), so that a layer without it
// is refused rather than run as a different model (a GPT-2 LayerNorm
// without its shift would become an RMSNorm).
Status ReadRoles(const WeightFiles& file, FileLayout& layout, LmConfig& c) {
  for (size_t r = 0; r < kNumRoles; ++r) {
    const auto role = static_cast<Role>(r);
    const TensorName& t = layout.family->tensors[r];
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
    const TensorName& t = layout.family->tensors[r];
    for (int64_t i = 0; layout.has[r] && i < TensorsOf(t, c.num_layers); ++i) {
      const std::string name = layout.Name(static_cast<Role>(r), i);
      if (!file.Find(name)) return Missing(file, layout, name);
    }
  }
  c.qkv_bias = q;
  c.tied_head = !layout.has[size_t(Role::kHead)];
  return {};
}

// Whether `name` is a buffer the layout names (a state dict's, unread).
bool IsBuffer(const FileLayout& layout, const std::string& name) {
  const auto& buffers = layout.family->buffers;
  return std::any_of(buffers.begin(), buffers.end(), [&](const char* b) {
    return b && MatchLayer(layout.BufferName(b), name);
  });
}

// Every tensor of the file is one the model reads or a buffer of its
// layout: a misnamed one (a head under another prefix, a bias the layout
// has no role for, block "01") would otherwise be dropped without a word.
Status CheckNoStrayTensors(const WeightFiles& file, const FileLayout& layout,
                           int64_t layers) {
  std::set<std::string> read;
  for (size_t r = 0; r < kNumRoles; ++r) {
    if (!layout.has[r]) continue;
    const TensorName& t = layout.family->tensors[r];
    for (int64_t i = 0; i < TensorsOf(t, layers); ++i) {
      const std::string name = layout.Name(static_cast<Role>(r), i);
      read.insert(name);
      if (layout.Quantized(static_cast<Role>(r))) read.insert(ScaleName(name));
    }
  }
  for (const TensorInfo* t : file.tensors()) {
    if (!read.count(t->name) && !IsBuffer(layout, t->name)) {
      return InvalidArgument(
          "tensor " + Quoted(t->name) + " in " + Quoted(file.FileOf(t->name)) +
          " is not part of layout " + layout.family->name + " (" +
          std::to_string(layers) + " blocks): want only the layout's names");
    }
  }
  return {};
}

// The side config's sizes and head, where given, are the tensors'. Tied
// word embeddings make Hugging Face's head the embedding whatever the
// head's tensor holds, untied ones a head the file must hold: a file that
// says one and holds the other is refused, not run as either.
Status CheckSideSizes(const SideConfig& side, const FileLayout& layout,
                      const LmConfig& c) {
  const std::string head = Quoted(layout.Name(Role::kHead, 0));
  if (side.tie_word_embeddings != -1 &&
      (side.tie_word_embeddings == 1) != c.tied_head) {
    return InvalidArgument(
        Quoted(side.path) + ": 'tie_word_embeddings' is " +
        (c.tied_head
             ? "false, but the weights beside it have no " + head
             : "true, but the weights beside it have their own " + head));
  }
  const std::pair<SideConfig::Flag, Role> biases[] = {
      {side.qkv_bias, Role::kQueryBias},
      {side.out_bias, Role::kOutBias},
      {side.mlp_bias, Role::kUpBias},
      {side.mlp_bias, Role::kGateBias},
      {side.mlp_bias, Role::kDownBias}};
  for (const auto& [flag, role] : biases) {
    const bool named = layout.family->tensors[static_cast<size_t>(role)].name;
    if (flag.key && named &&
        flag.value != layout.has[static_cast<size_t>(role)]) {
      return InvalidArgument(
          Quoted(side.path) + ": " + Quoted(flag.key) + " says " +
          (flag.value ? "there is " : "there is no ") +
          Quoted(layout.Name(role, 0)) + ", but the weights beside it " +
          (flag.value ? "lack it" : "hold it"));
    }
  }
  const std::pair<SideConfig::Size, int64_t> sizes[] = {
      {side.layers, c.num_layers},
      {side.emb_dim, c.emb_dim},
      {side.vocab_size, c.vocab_size},
      {side.hidden_dim, c.hidden_dim}};
  for (const auto& [given, size] : sizes) {
    if (given.value && given.value != size) {
      return InvalidArgument(Quoted(side.path) + ": " + Quoted(given.key) +
                             " is " + std::to_string(given.value) +
                             ", but the weights beside it have " +
                             std::to_string(size));
    }
  }
  return {};
}

// The attention's dims: options, then metadata, then config.json (Hugging
// Face files), then the position table's rows; K/V heads from W_key.
Status ResolveDims(const WeightFiles& file, const FileLayout& layout,
                   const SideConfig& hf, const LmOptions& options,
                   LmConfig& c) {
  const auto& meta = file.first().metadata();
  // config.json's dims where neither the options nor the metadata give them.
  AttentionDims side = hf.dims;
  if (meta.count("num_heads")) side.num_heads = 0;
  if (meta.count("context_length")) side.context_length = 0;
  if (meta.count("num_kv_heads")) side.num_kv_heads = 0;
  if (meta.count("sliding_window")) side.sliding_window = 0;
  if (meta.count("rope_theta")) side.rope = {};
  const AttentionDims option = DimsOf(options);
  if (!option.num_heads && !side.num_heads && !meta.count("num_heads")) {
    return InvalidArgument(
        "missing hyper-parameter num_heads: pass --heads, or set metadata "
        "'num_heads' in " +
        Quoted(file.path()) + layout.family->heads_hint);
  }
  ATTN_ASSIGN_OR_RETURN(
      ResolvedDims dims,
      ResolveAttentionDims(file.first(), option, side, "", ""));
  const std::string from_side = " of " + Quoted(hf.path);
  if (!option.num_heads && side.num_heads) {
    dims.num_heads_from = Quoted(hf.heads_key) + from_side;
  }
  if (!option.num_kv_heads && side.num_kv_heads) {
    dims.num_kv_heads_from = "'num_key_value_heads'" + from_side;
  }
  c.head_dim = hf.head_dim && !options.num_heads ? hf.head_dim : 0;
  // Without a head_dim the heads split the embedding width.
  const int64_t width = c.head_dim ? dims.num_heads * c.head_dim : c.emb_dim;
  const std::string key = layout.Name(Role::kKey, 0);
  KvHeadsFromRows(MatrixRows(RoleShape(file, layout, Role::kKey, 0)), key,
                  width, dims);
  ATTN_RETURN_IF_ERROR(CheckHeads(
      dims, width, c.head_dim ? "num_heads * head_dim" : "emb_dim",
      c.head_dim ? "'head_dim'" + from_side
                 : "the columns of " + Quoted(layout.Name(Role::kTokEmb, 0))));
  c.num_heads = dims.num_heads;
  c.num_kv_heads = dims.num_kv_heads;
  if (!c.head_dim) c.head_dim = c.emb_dim / c.num_heads;
  c.context_length = dims.context_length;
  c.rope = dims.rope;
  c.sliding_window = dims.sliding_window;
  return {};
}

// The dtype and count of the file's weights (buffers left out). A
// quantized file's: its type, and each matrix's weights (its quants'
// elements, two a byte in q4_0; its scales none).
void CountStored(const WeightFiles& file, const FileLayout& layout,
                 LmConfig& c) {
  std::set<std::string> scales;  // of the quantized matrices
  for (const TensorInfo* t : file.tensors()) {
    if (layout.quant && file.Find(ScaleName(t->name))) {
      scales.insert(ScaleName(t->name));
    }
  }
  if (layout.quant) c.file_dtype = kernels::QuantName(*layout.quant);
  for (const TensorInfo* t : file.tensors()) {
    if (IsBuffer(layout, t->name) || scales.count(t->name)) continue;
    const bool quantized = scales.count(ScaleName(t->name)) > 0;
    if (c.file_dtype.empty()) c.file_dtype = t->dtype;
    if (c.file_dtype != t->dtype && !layout.quant) c.file_dtype = "mixed";
    const int64_t per_element =
        quantized && layout.quant == kernels::QuantType::kQ4_0 ? 2 : 1;
    c.file_parameters += static_cast<int64_t>(t->num_elements) * per_element;
  }
}

// What only one family has: GPT-2's positions bound the context; Llama
// needs a context length and RoPE.
Status CheckFamily(const WeightFiles& file, const FileLayout& layout,
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

const Family& BookLayout(LmArchitecture architecture) {
  return architecture == LmArchitecture::kGpt2 ? BookGpt() : BookLlama();
}

std::optional<std::pair<Role, int64_t>> BookRole(LmArchitecture architecture,
                                                 const std::string& name) {
  const Family& book = BookLayout(architecture);
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
  return FileLayout{&BookLayout(architecture), "", {}, {}}.Name(role, layer);
}

const Family& FamilyOf(const LmConfig& config) {
  for (const Family* family : Families()) {
    if (config.layout == family->name) return *family;
  }
  return BookLayout(config.architecture);  // a seeded model's
}

std::string DetectLayout(const WeightFiles& file) {
  const FileLayout layout = FindLayout(file, "");
  return layout.family ? layout.family->name : "";
}

Result<FileModel> OpenModelFile(const std::string& path,
                                const LmOptions& options) {
  ATTN_ASSIGN_OR_RETURN(WeightFiles opened,
                        WeightFiles::Open(path, options.max_memory_bytes));
  auto file = std::make_shared<const WeightFiles>(std::move(opened));
  // By the names first: config.json says which Hugging Face model it is,
  // and is no concern of the book's files.
  FileLayout layout = FindLayout(*file, "");
  if (layout.family && layout.family->model_type) {
    ATTN_ASSIGN_OR_RETURN(const std::string model_type,
                          ModelTypeBeside(file->path()));
    layout = FindLayout(*file, model_type);
  }
  if (!layout.family) {
    std::string wanted;
    for (const Family* family : Families()) {
      wanted += (wanted.empty() ? "" : ", ") +
                Quoted(family->tensors[size_t(Role::kTokEmb)].name) + " (" +
                family->what + ")";
    }
    return InvalidArgument("unknown model layout in " + Quoted(path) +
                           ": found " + SomeNames(*file) + "; want " + wanted);
  }
  ATTN_ASSIGN_OR_RETURN(layout.quant, ReadQuantization(*file));
  FileModel model;
  LmConfig& c = model.config;
  c.layout = layout.family->name;
  c.architecture = layout.family->architecture;
  ATTN_RETURN_IF_ERROR(CheckQuantized(*file, layout));
  ATTN_RETURN_IF_ERROR(ReadSizes(*file, layout, c));
  ATTN_RETURN_IF_ERROR(ReadRoles(*file, layout, c));
  ATTN_RETURN_IF_ERROR(CheckNoStrayTensors(*file, layout, c.num_layers));
  SideConfig hf;
  if (layout.family->read_side_config) {
    ATTN_ASSIGN_OR_RETURN(hf, layout.family->read_side_config(file->path()));
    ATTN_RETURN_IF_ERROR(CheckSideSizes(hf, layout, c));
  }
  ATTN_RETURN_IF_ERROR(ResolveDims(*file, layout, hf, options, c));
  c.embedding_scale = hf.embedding_scale;
  ATTN_RETURN_IF_ERROR(CheckFamily(*file, layout, c));
  ATTN_ASSIGN_OR_RETURN(const double eps,
                        MetadataNumber(file->first(), "rms_norm_eps"));
  c.norm_eps = options.norm_eps ? options.norm_eps
               : eps            ? eps
               : hf.norm_eps    ? hf.norm_eps
                                : 1e-5;
  CountStored(*file, layout, c);
  model.weights = FileWeights(file, layout);
  model.files = std::move(file);
  model.weights.name = [layout](Role role, int64_t layer) {
    return layout.Name(role, layer);
  };
  return model;
}

}  // namespace attn::lm
