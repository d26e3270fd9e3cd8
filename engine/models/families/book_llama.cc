// The book's Llama 3.2 (chapter 5 of its bonus material): nn.Linear weights
// as [out, in], RMSNorm, RoPE, a SiLU-gated feed-forward (fc1 up, fc2 gate,
// fc3 down).
#include <utility>
#include <vector>

#include "engine/models/lm_family.h"

namespace attn::lm {

// tools/graphs/llama_model.json with llama_block.json as its block.
Result<graph::GraphDef> LlamaProgram(const LmConfig& c) {
  return GatedProgram(c, graph::Op::kSilu);
}

namespace {

// The feed-forward from x_norm2 to ff_out: down(act(fc1) * fc2), or with
// kSwiGlu Phi-3's down(swiglu(fc1)), fc1 its fused gate_up.
std::vector<graph::Node> FeedForward(graph::Op activation) {
  using graph::Op;
  std::vector<graph::Node> nodes = {
      ProgramNode("ff.fc1", Op::kLinear, {"x_norm2"}, "ff_gate",
                  {{"weight", {"ff.fc1.weight"}}})};
  if (activation == Op::kSwiGlu) {
    nodes.push_back(
        ProgramNode("ff.swiglu", Op::kSwiGlu, {"ff_gate"}, "ff_hidden"));
  } else {
    nodes.push_back(ProgramNode(activation == Op::kSilu ? "ff.silu" : "ff.gelu",
                                activation, {"ff_gate"}, "ff_act"));
    nodes.push_back(ProgramNode("ff.fc2", Op::kLinear, {"x_norm2"}, "ff_up",
                                {{"weight", {"ff.fc2.weight"}}}));
    nodes.push_back(
        ProgramNode("ff.mul", Op::kMul, {"ff_act", "ff_up"}, "ff_hidden"));
  }
  nodes.push_back(ProgramNode("ff.fc3", Op::kLinear, {"ff_hidden"}, "ff_out",
                              {{"weight", {"ff.fc3.weight"}}}));
  return nodes;
}

}  // namespace

Result<graph::GraphDef> GatedProgram(const LmConfig& c, graph::Op activation) {
  using graph::Op;
  const auto eps = static_cast<float>(c.norm_eps);
  std::vector<graph::Node> nodes = {
      ProgramNode("norm1", Op::kRmsNorm, {"x"}, "x_norm1",
                  {{"weight", {"norm1.weight"}}}, eps),
      ProgramNode("att", Op::kMha, {"x_norm1"}, "att_out",
                  {{"W_query.weight", {"att.W_query.weight"}},
                   {"W_key.weight", {"att.W_key.weight"}},
                   {"W_value.weight", {"att.W_value.weight"}},
                   {"out_proj.weight", {"att.out_proj.weight"}}}),
      ProgramNode("residual1", Op::kAdd, {"x", "att_out"}, "x1"),
      ProgramNode("norm2", Op::kRmsNorm, {"x1"}, "x_norm2",
                  {{"weight", {"norm2.weight"}}}, eps)};
  for (graph::Node& node : FeedForward(activation)) {
    nodes.push_back(std::move(node));
  }
  nodes.push_back(ProgramNode("residual2", Op::kAdd, {"x1", "ff_out"}, "y"));
  graph::Node embedding = ProgramNode("tok_emb", Op::kEmbedding, {"input_ids"},
                                      "x0", {{"weight", {"tok_emb.weight"}}});
  if (c.embedding_scale != 0.0f) embedding.scale = c.embedding_scale;
  graph::GraphDef model = ProgramGraph(
      "input_ids", "logits",
      {std::move(embedding),
       ProgramNode("trf_blocks", Op::kRepeat, {"x0"}, "x"),
       ProgramNode("final_norm", Op::kRmsNorm, {"x"}, "x_norm",
                   {{"weight", {"final_norm.weight"}}}, eps),
       ProgramNode("out_head", Op::kLinear, {"x_norm"}, "logits",
                   {{"weight", {"out_head.weight", "tok_emb.weight"}}})});
  return RepeatBlock(std::move(model), ProgramGraph("x", "y", std::move(nodes)),
                     c);
}

const Family& BookLlama() {
  static const Family family = {
      "book-llama",
      "the book's Llama",
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
       "trf_blocks.{i}.att.sin", "cos", "sin"},
      {""},
      nullptr,  // tried after the book's GPTModel, which shares tok_emb
      nullptr,
      "",
      LlamaProgram};
  return family;
}

}  // namespace attn::lm
