// A chat model's folder for tests: a byte-level tokenizer.json with ChatML's
// special tokens and template, and a small Qwen2-shaped model of seeded
// random weights (attn chat's and attn serve's tests).
#ifndef ATTN_TESTS_CHAT_FOLDER_H_
#define ATTN_TESTS_CHAT_FOLDER_H_

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attn/safetensors.hpp"
#include "attn/status.hpp"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"

namespace attn::test {

using Json = nlohmann::json;

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline constexpr int64_t kChatVocab =
    258;  // 256 bytes, <|im_start|>, <|im_end|>

inline constexpr char kChatMl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
    "+ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

inline nlohmann::json AddedToken(int64_t id, const char* content) {
  return {{"id", id},        {"content", content}, {"single_word", false},
          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
          {"special", true}};
}

// GPT-2's byte-level BPE without merges, ChatML's tokens added.
inline void WriteChatTokenizer(const std::string& dir) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    tokenizer::AppendUtf8(tokenizer::ByteChar(static_cast<unsigned char>(b)),
                          &spelled);
    vocab[spelled] = b;
  }
  const Json tokenizer = {
      {"added_tokens",
       {AddedToken(256, "<|im_start|>"), AddedToken(257, "<|im_end|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}};
  WriteText(dir + "/tokenizer.json", tokenizer.dump());
  WriteText(
      dir + "/tokenizer_config.json",
      Json{{"eos_token", "<|im_end|>"}, {"chat_template", kChatMl}}.dump());
}

// A Qwen2 model of vocabulary kChatVocab, hidden 32, 2 layers, seeded weights.
inline Status WriteChatModel(const std::string& dir, int64_t context = 512) {
  const int64_t e = 32, inter = 64, heads = 4, kv = 2, hd = 8;
  WriteText(dir + "/config.json", Json{{"model_type", "qwen2"},
                                       {"architectures", {"Qwen2ForCausalLM"}},
                                       {"vocab_size", kChatVocab},
                                       {"hidden_size", e},
                                       {"intermediate_size", inter},
                                       {"num_hidden_layers", 2},
                                       {"num_attention_heads", heads},
                                       {"num_key_value_heads", kv},
                                       {"max_position_embeddings", context},
                                       {"tie_word_embeddings", true}}
                                      .dump());
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {kChatVocab, e}},
      {"model.norm.weight", {e}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shapes.insert(shapes.end(),
                  {{p + "input_layernorm.weight", {e}},
                   {p + "post_attention_layernorm.weight", {e}},
                   {p + "self_attn.q_proj.weight", {heads * hd, e}},
                   {p + "self_attn.q_proj.bias", {heads * hd}},
                   {p + "self_attn.k_proj.weight", {kv * hd, e}},
                   {p + "self_attn.k_proj.bias", {kv * hd}},
                   {p + "self_attn.v_proj.weight", {kv * hd, e}},
                   {p + "self_attn.v_proj.bias", {kv * hd}},
                   {p + "self_attn.o_proj.weight", {e, heads * hd}},
                   {p + "mlp.gate_proj.weight", {inter, e}},
                   {p + "mlp.up_proj.weight", {inter, e}},
                   {p + "mlp.down_proj.weight", {e, inter}}});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<std::vector<float>> values;
  std::vector<F32Tensor> tensors;
  for (const auto& [name, shape] : shapes) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    values.emplace_back(n);
    for (float& v : values.back()) v = shape.size() == 1 ? 1.0f : uniform(rng);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    tensors.push_back({shapes[i].first, shapes[i].second, values[i].data()});
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

// Both, into the existing folder `dir`; `context` positions.
inline Status WriteChatFolder(const std::string& dir, int64_t context = 512) {
  WriteChatTokenizer(dir);
  return WriteChatModel(dir, context);
}

}  // namespace attn::test

#endif  // ATTN_TESTS_CHAT_FOLDER_H_
