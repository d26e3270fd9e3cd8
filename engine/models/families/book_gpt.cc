// The book's GPTModel (chapter 4): nn.Linear weights as [out, in], learned
// positions, LayerNorm with scale and shift, GELU feed-forward.
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// The book's Llama shares tok_emb.weight; its norms have no shift and it
// has no position table.
bool IsBookGpt(const SafetensorsFile& file, const std::string& prefix) {
  return file.Find(prefix + "pos_emb.weight") ||
         file.Find(prefix + "trf_blocks.0.norm1.scale");
}

}  // namespace

const Family& BookGpt() {
  static const Family family = {
      "book-gpt",
      "the book's GPTModel",
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
      {"trf_blocks.{i}.att.mask"},
      {""},
      IsBookGpt,
      nullptr,
      ""};
  return family;
}

}  // namespace attn::lm
