// The book's GPTModel (chapter 4): nn.Linear weights as [out, in], learned
// positions, LayerNorm with scale and shift, GELU feed-forward.
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// The book's Llama shares tok_emb.weight; its norms have no shift and it
// has no position table.
bool IsBookGpt(const WeightFiles& file, const std::string& prefix) {
  return file.Find(prefix + "pos_emb.weight") ||
         file.Find(prefix + "trf_blocks.0.norm1.scale");
}

}  // namespace

// tools/graphs/gpt_model.json with transformer_block.json as its block.
Result<graph::GraphDef> GptProgram(const LmConfig& c) {
  using graph::Op;
  const auto eps = static_cast<float>(c.norm_eps);
  graph::GraphDef block = ProgramGraph(
      "x", "y",
      {ProgramNode("norm1", Op::kLayerNorm, {"x"}, "x_norm1",
                   {{"scale", {"norm1.scale"}}, {"shift", {"norm1.shift"}}},
                   eps),
       ProgramNode("att", Op::kMha, {"x_norm1"}, "att_out",
                   {{"W_query.weight", {"att.W_query.weight"}},
                    {"W_query.bias", {"att.W_query.bias"}},
                    {"W_key.weight", {"att.W_key.weight"}},
                    {"W_key.bias", {"att.W_key.bias"}},
                    {"W_value.weight", {"att.W_value.weight"}},
                    {"W_value.bias", {"att.W_value.bias"}},
                    {"out_proj.weight", {"att.out_proj.weight"}},
                    {"out_proj.bias", {"att.out_proj.bias"}},
                    {"mask", {"att.mask"}}}),
       ProgramNode("drop_shortcut1", Op::kDropout, {"att_out"}, "att_drop"),
       ProgramNode("residual1", Op::kAdd, {"x", "att_drop"}, "x1"),
       ProgramNode("norm2", Op::kLayerNorm, {"x1"}, "x_norm2",
                   {{"scale", {"norm2.scale"}}, {"shift", {"norm2.shift"}}},
                   eps),
       ProgramNode("ff.layers.0", Op::kLinear, {"x_norm2"}, "ff_hidden",
                   {{"weight", {"ff.layers.0.weight"}},
                    {"bias", {"ff.layers.0.bias"}}}),
       ProgramNode("ff.layers.1", Op::kGelu, {"ff_hidden"}, "ff_act"),
       ProgramNode("ff.layers.2", Op::kLinear, {"ff_act"}, "ff_out",
                   {{"weight", {"ff.layers.2.weight"}},
                    {"bias", {"ff.layers.2.bias"}}}),
       ProgramNode("drop_shortcut2", Op::kDropout, {"ff_out"}, "ff_drop"),
       ProgramNode("residual2", Op::kAdd, {"x1", "ff_drop"}, "y")});
  graph::GraphDef model = ProgramGraph(
      "input_ids", "logits",
      {ProgramNode("tok_emb", Op::kEmbedding, {"input_ids"}, "tok_embeds",
                   {{"weight", {"tok_emb.weight"}}}),
       ProgramNode("pos_emb", Op::kPositionEmbedding, {"tok_embeds"}, "x0",
                   {{"weight", {"pos_emb.weight"}}}),
       ProgramNode("drop_emb", Op::kDropout, {"x0"}, "x_drop"),
       ProgramNode("trf_blocks", Op::kRepeat, {"x_drop"}, "x"),
       ProgramNode(
           "final_norm", Op::kLayerNorm, {"x"}, "x_norm",
           {{"scale", {"final_norm.scale"}}, {"shift", {"final_norm.shift"}}},
           eps),
       ProgramNode("out_head", Op::kLinear, {"x_norm"}, "logits",
                   {{"weight", {"out_head.weight", "tok_emb.weight"}}})});
  return RepeatBlock(std::move(model), std::move(block), c);
}

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
      "",
      GptProgram};
  return family;
}

}  // namespace attn::lm
