// The book's Llama 3.2 (chapter 5 of its bonus material): nn.Linear weights
// as [out, in], RMSNorm, RoPE, a SiLU-gated feed-forward (fc1 up, fc2 gate,
// fc3 down).
#include "engine/models/lm_family.h"

namespace attn::lm {

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
      ""};
  return family;
}

}  // namespace attn::lm
