// Hugging Face checkpoint folders as the Hub lays them out: the ways to
// name one (folder, model.safetensors, the shards' index) give the same
// model, and what Hugging Face would compute otherwise, a broken index or a
// tensor against config.json is refused in one line naming the key, shard
// or tensor. The logits and tokens themselves are lm_test's golden cases.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/safetensors.hpp"
#include "nlohmann/json.hpp"
#include "tests/temp_dir.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kLmDir = std::string(ATTN_SOURCE_DIR) + "/tests/golden/lm/";

// A copy of golden folder `name` in a fresh folder `copy` of this
// process's own temporary folder (ctest runs the tests side by side).
std::string CopyCase(const std::string& name, const std::string& copy) {
  static const test::TempDir scratch;
  const std::string dir = scratch.Path(copy);
  fs::remove_all(dir);
  fs::copy(kLmDir + name, dir);
  return dir;
}

json ReadJson(const std::string& path) {
  json j;
  std::ifstream(path) >> j;
  return j;
}

void WriteJson(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(2);
}

// The load's error message, or "loaded".
std::string LoadError(const std::string& path) {
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(path);
  if (model.ok()) return "loaded";
  const std::string& message = model.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

// The message of loading golden `name` with config.json's `key` set to
// `value` (null removes it).
std::string WithConfig(const std::string& name, const std::string& key,
                       const json& value) {
  const std::string dir = CopyCase(name, "cfg");
  json config = ReadJson(dir + "/config.json");
  if (value.is_null()) {
    config.erase(key);
  } else {
    config[key] = value;
  }
  WriteJson(dir + "/config.json", config);
  return LoadError(dir);
}

#define EXPECT_HAS(message, needle)                    \
  EXPECT_NE((message).find(needle), std::string::npos) \
      << "message: " << (message) << "\nwant: " << (needle)

TEST(HfCheckpoint, FolderFileAndIndexGiveTheSameModel) {
  for (const std::string name : {"hf_llama_scaled_shards", "hf_qwen2"}) {
    const bool sharded =
        fs::exists(kLmDir + name + "/" + "model.safetensors.index.json");
    const std::string file =
        kLmDir + name + "/" +
        (sharded ? "model.safetensors.index.json" : "model.safetensors");
    auto by_folder = LanguageModel::Load(kLmDir + name);
    auto by_file = LanguageModel::Load(file);
    ASSERT_TRUE(by_folder.ok()) << by_folder.status().message();
    ASSERT_TRUE(by_file.ok()) << by_file.status().message();
    const LmConfig& a = (*by_folder)->config();
    const LmConfig& b = (*by_file)->config();
    EXPECT_EQ(a.layout, b.layout);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ((*by_folder)->memory_bytes(), (*by_file)->memory_bytes());
  }
}

TEST(HfCheckpoint, ConfigGivesTheAttention) {
  auto llama = LanguageModel::Load(kLmDir + "hf_llama_scaled_shards");
  ASSERT_TRUE(llama.ok()) << llama.status().message();
  const LmConfig& c = (*llama)->config();
  EXPECT_EQ(c.layout, "hf-llama");
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);  // not hidden_size 48 / 4
  EXPECT_EQ(c.context_length, 32);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_context_length, 64);
  EXPECT_FALSE(c.tied_head);
  auto mistral = LanguageModel::Load(kLmDir + "hf_mistral_window");
  ASSERT_TRUE(mistral.ok()) << mistral.status().message();
  EXPECT_EQ((*mistral)->config().layout, "hf-mistral");
  EXPECT_EQ((*mistral)->config().sliding_window, 4);
  auto qwen = LanguageModel::Load(kLmDir + "hf_qwen2");
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ((*qwen)->config().layout, "hf-qwen2");
  EXPECT_TRUE((*qwen)->config().qkv_bias);
  EXPECT_TRUE((*qwen)->config().tied_head);
}

TEST(HfCheckpoint, WhatHuggingFaceComputesOtherwiseIsRefused) {
  const std::string llama = "hf_llama_plain";
  EXPECT_HAS(WithConfig(llama, "model_type", "gemma2"),
             "'model_type' is \"gemma2\", want one of \"gpt2\", \"llama\"");
  EXPECT_HAS(
      WithConfig(llama, "architectures", {"LlamaForTokenClassification"}),
      "'architectures' is [\"LlamaForTokenClassification\"], want "
      "[\"LlamaForCausalLM\"]");
  EXPECT_HAS(WithConfig(llama, "hidden_act", "gelu"),
             "'hidden_act' is \"gelu\", want \"silu\"");
  EXPECT_HAS(WithConfig(llama, "partial_rotary_factor", 0.5),
             "'partial_rotary_factor' is 0.5");
  for (const char* type : {"linear", "dynamic", "yarn", "longrope", "su"}) {
    EXPECT_HAS(WithConfig(llama, "rope_scaling",
                          {{"rope_type", type}, {"factor", 2.0}}),
               "'rope_scaling' is {\"factor\":2.0,\"rope_type\":\"" +
                   std::string(type) + "\"}, want 'rope_type' \"llama3\"");
  }
  EXPECT_HAS(WithConfig(llama, "rope_scaling", {{"rope_type", "llama3"}}),
             "want 'factor', 'low_freq_factor'");
  EXPECT_HAS(WithConfig(llama, "sliding_window", 8),
             "'sliding_window' is 8, want null");
  EXPECT_HAS(WithConfig("hf_qwen2", "use_sliding_window", true),
             "'use_sliding_window' is true, want false");
  EXPECT_HAS(WithConfig(llama, "num_attention_heads", nullptr),
             "has no 'num_attention_heads'");
  EXPECT_HAS(WithConfig(llama, "rms_norm_eps", "small"),
             "'rms_norm_eps' is \"small\", want a positive number");
}

// Keys left out take transformers' defaults for the model type.
TEST(HfCheckpoint, AbsentKeysTakeHuggingFacesDefaults) {
  const auto config_of = [](const std::string& name, const char* key,
                            const json& value) {
    const std::string dir = CopyCase(name, "defaults");
    json config = ReadJson(dir + "/config.json");
    if (value.is_string() && value == "absent") {
      config.erase(key);
    } else {
      config[key] = value;
    }
    WriteJson(dir + "/config.json", config);
    auto c = LanguageModel::ReadConfig(dir);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : LmConfig{};
  };
  // MistralConfig's window is 4096 unless config.json says null.
  EXPECT_EQ(
      config_of("hf_mistral_window", "sliding_window", "absent").sliding_window,
      4096);
  EXPECT_EQ(
      config_of("hf_mistral_window", "sliding_window", nullptr).sliding_window,
      0);
  // Phi3Config's rms_norm_eps is 1e-5, the others' 1e-6.
  EXPECT_EQ(config_of("hf_phi3_fused", "rms_norm_eps", "absent").norm_eps,
            1e-5);
  EXPECT_EQ(config_of("hf_qwen2", "rms_norm_eps", "absent").norm_eps, 1e-6);
  EXPECT_EQ(
      config_of("hf_phi3_fused", "sliding_window", "absent").sliding_window, 0);
}

TEST(HfCheckpoint, ABookFileIgnoresAConfigJsonBesideIt) {
  const std::string dir = CopyCase("llama_gqa", "book");
  std::ofstream(dir + "/config.json") << "not json at all";
  EXPECT_EQ(LoadError(dir + "/model.safetensors"), "loaded");
}

TEST(HfCheckpoint, ConfigThatContradictsTheTensorsIsRefused) {
  const std::string llama = "hf_llama_plain";
  EXPECT_HAS(WithConfig(llama, "hidden_size", 64),
             "'hidden_size' is 64, but the weights beside it have 32");
  EXPECT_HAS(WithConfig(llama, "num_hidden_layers", 3),
             "'num_hidden_layers' is 3, but the weights beside it have 1");
  EXPECT_HAS(WithConfig(llama, "intermediate_size", 50),
             "'intermediate_size' is 50");
  EXPECT_HAS(WithConfig(llama, "tie_word_embeddings", true),
             "'tie_word_embeddings' is true, but the weights beside it have "
             "their own 'lm_head.weight'");
  EXPECT_HAS(WithConfig(llama, "attention_bias", true),
             "'attention_bias' says there is "
             "'model.layers.0.self_attn.q_proj.bias', but the weights beside "
             "it lack it");
  EXPECT_HAS(WithConfig("hf_llama_tied_biases", "mlp_bias", false),
             "'mlp_bias' says there is no 'model.layers.0.mlp.gate_proj.bias'");
  // Heads of another width than the tensors': q_proj is then misshapen.
  EXPECT_HAS(WithConfig("hf_llama_scaled_shards", "head_dim", 8),
             "tensor 'model.layers.0.self_attn.q_proj.weight' in");
  EXPECT_HAS(WithConfig("hf_llama_scaled_shards", "head_dim", 8),
             "is [64, 48], want [32, 48]");
  EXPECT_HAS(WithConfig(llama, "num_attention_heads", int64_t{1} << 32),
             "'num_attention_heads' is 4294967296, want a positive integer "
             "up to 16777216");
  EXPECT_HAS(WithConfig(llama, "num_key_value_heads", 3),
             "num_kv_heads is 3 (from 'num_key_value_heads' of");
}

TEST(HfCheckpoint, BrokenShardsAreRefused) {
  const std::string name = "hf_mistral_window";
  const std::string index = "/model.safetensors.index.json";
  {  // a shard the index names is gone
    const std::string dir = CopyCase(name, "missing");
    fs::remove(dir + "/model-00002-of-00003.safetensors");
    EXPECT_HAS(LoadError(dir),
               "names shard 'model-00002-of-00003."
               "safetensors', which is missing");
  }
  {  // the index places a tensor in a shard that does not hold it
    const std::string dir = CopyCase(name, "misplaced");
    json j = ReadJson(dir + index);
    j["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
    WriteJson(dir + index, j);
    EXPECT_HAS(LoadError(dir), "places it in 'model-00001-of-00003");
  }
  {  // a tensor in two shards
    const std::string dir = CopyCase(name, "twice");
    const std::string first = dir + "/model-00001-of-00003.safetensors";
    fs::copy_file(first, dir + "/model-00004-of-00003.safetensors");
    json j = ReadJson(dir + index);
    j["weight_map"]["extra"] = "model-00004-of-00003.safetensors";
    WriteJson(dir + index, j);
    EXPECT_HAS(LoadError(dir), "' is in both '");
  }
  {  // a shard name with a backslash
    const std::string dir = CopyCase(name, "backslash");
    json j = ReadJson(dir + index);
    j["weight_map"]["model.norm.weight"] = "..\\model.safetensors";
    WriteJson(dir + index, j);
    EXPECT_HAS(LoadError(dir), "want a file name in the index's folder");
  }
  {  // a shard name that leaves the folder
    const std::string dir = CopyCase(name, "escape");
    json j = ReadJson(dir + index);
    j["weight_map"]["model.norm.weight"] = "../model.safetensors";
    WriteJson(dir + index, j);
    EXPECT_HAS(LoadError(dir), "want a file name in the index's folder");
  }
  {  // no weights at all
    const std::string dir = CopyCase(name, "empty");
    fs::remove(dir + index);
    EXPECT_HAS(LoadError(dir),
               "holds neither model.safetensors.index.json "
               "nor model.safetensors");
  }
}

// hf_llama_plain rewritten in F32 with `extra` more tensors of 4 floats.
std::string WithTensors(const std::string& copy,
                        const std::vector<std::string>& extra) {
  const std::string dir = CopyCase("hf_llama_plain", copy);
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message();
  std::vector<std::vector<float>> values;
  std::vector<F32Tensor> tensors;
  for (const TensorInfo& t : file->tensors())
    values.push_back(*file->ReadF32(t.name));
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const TensorInfo& t = file->tensors()[i];
    tensors.push_back({t.name, t.shape, values[i].data()});
  }
  const float four[4] = {1, 2, 3, 4};
  for (const std::string& name : extra) tensors.push_back({name, {4}, four});
  EXPECT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

TEST(HfCheckpoint, TensorsNothingReadsAreRefused) {
  // Older checkpoints keep RoPE's inv_freq buffer: read by nothing, allowed.
  EXPECT_EQ(LoadError(WithTensors(
                "buffer", {"model.layers.0.self_attn.rotary_emb.inv_freq"})),
            "loaded");
  EXPECT_HAS(LoadError(WithTensors("stray", {"model.layers.0.extra.weight"})),
             "tensor 'model.layers.0.extra.weight' in");
  EXPECT_HAS(
      LoadError(WithTensors("block", {"model.layers.1.mlp.up_proj.bias"})),
      "is in block 1, but block 1 has no "
      "'model.layers.1.input_layernorm.weight'");
}

}  // namespace
}  // namespace attn
