// attn::QuantizeModel, black-box: the folder it writes loads with the very
// blocks quantizing at load makes (the same logits, bit for bit, and the
// same memory), holds llama.cpp's quants and fp16 scales in the documented
// tensors, carries the files beside the weights, and appears whole or not
// at all. Files it did not write (another type, a lost scale) are refused
// in one line naming what is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "nlohmann/json.hpp"
#include "tests/lm_golden.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using nlohmann::json;

// Golden cases of every layout whose linears take whole blocks: Hugging
// Face Llama, Qwen2, Mistral and GPT-2 (Conv1D, c_attn fused), the book's
// GPT and Llama.
const char* const kCases[] = {"hf_qwen2",          "hf_llama_tied_biases",
                              "hf_mistral_window", "hf_gpt2",
                              "gpt_book_1l",       "llama_gqa"};
const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0};

std::vector<std::string> Sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::shared_ptr<const LanguageModel> MustLoad(const std::string& path,
                                              DType dtype, int threads) {
  LmOptions options;
  options.dtype = dtype;
  options.num_threads = threads;
  Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(path, options);
  EXPECT_TRUE(model.ok()) << path << ": " << model.status().message();
  return model.ok() ? *model : nullptr;
}

class QuantizeTest : public ::testing::Test {
 protected:
  // `name`'s golden folder quantized to `dtype` into the scratch folder.
  std::string Quantize(const std::string& name, DType dtype) {
    const std::string out =
        dir_.Path(name + "-" + std::string(DTypeName(dtype)));
    const Status s = QuantizeModel(kLmDir + name, out, dtype);
    EXPECT_TRUE(s.ok()) << name << ": " << s.message();
    return out;
  }
  // `from`'s model.safetensors with its header changed by `edit`, as a new
  // folder beside it (config.json copied): the data section stays.
  std::string Retouch(const std::string& from,
                      const std::function<void(json&)>& edit) {
    const std::string bytes = ReadBytes(from + "/model.safetensors");
    uint64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    json header = json::parse(bytes.substr(8, length));
    edit(header);
    std::string text = header.dump();
    text.append(length > text.size() ? length - text.size() : 0, ' ');
    std::string out(8, '\0');
    const uint64_t size = text.size();
    std::memcpy(&out[0], &size, 8);
    const std::string folder = dir_.Path("retouched" + std::to_string(++made_));
    EXPECT_EQ(mkdir(folder.c_str(), 0777), 0);
    std::ofstream(folder + "/model.safetensors", std::ios::binary)
        << out << text << bytes.substr(8 + length);
    std::ofstream(folder + "/config.json", std::ios::binary)
        << ReadBytes(from + "/config.json");
    return folder;
  }
  // `from`'s folder with the first value of tensor `name` (BF16) set to
  // `bits`, as a new folder beside it (config.json copied).
  std::string WithValue(const std::string& from, const std::string& name,
                        uint16_t bits) {
    std::string bytes = ReadBytes(from + "/model.safetensors");
    uint64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    const json tensor = json::parse(bytes.substr(8, length))[name];
    EXPECT_EQ(tensor["dtype"], "BF16");
    const auto at = 8 + length + tensor["data_offsets"][0].get<uint64_t>();
    std::memcpy(&bytes[at], &bits, 2);
    const std::string folder = dir_.Path("valued" + std::to_string(++made_));
    EXPECT_EQ(mkdir(folder.c_str(), 0777), 0);
    std::ofstream(folder + "/model.safetensors", std::ios::binary) << bytes;
    std::ofstream(folder + "/config.json", std::ios::binary)
        << ReadBytes(from + "/config.json");
    return folder;
  }
  std::string LoadError(const std::string& path, DType dtype = DType::kF32) {
    LmOptions options;
    options.dtype = dtype;
    Result<std::shared_ptr<const LanguageModel>> model =
        LanguageModel::Load(path, options);
    return model.ok() ? "loaded" : model.status().message();
  }

  test::TempDir dir_;
  int made_ = 0;
};

// Loading the written folder gives what quantizing at load gives: the same
// logits to the bit (at 1 thread and at 2), the same bytes held.
TEST_F(QuantizeTest, WrittenFoldersLoadTheBlocksQuantizingAtLoadMakes) {
  for (const char* name : kCases) {
    const Case c = ReadCase(name);
    for (const DType dtype : kTypes) {
      SCOPED_TRACE(std::string(name) + " " + DTypeName(dtype));
      const std::string out = Quantize(name, dtype);
      const auto at_load = MustLoad(kLmDir + name, dtype, 1);
      const auto from_file = MustLoad(out, DType::kF32, 2);
      ASSERT_TRUE(at_load && from_file);
      EXPECT_EQ(from_file->dtype(), dtype);
      EXPECT_EQ(from_file->config().file_dtype, DTypeName(dtype));
      EXPECT_EQ(from_file->config().file_parameters,
                at_load->config().file_parameters);
      EXPECT_EQ(from_file->memory_bytes(), at_load->memory_bytes());
      const std::vector<float> want = PromptLogits(*NewBatch(at_load, c.b), c);
      const std::vector<float> got = PromptLogits(*NewBatch(from_file, c.b), c);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(
          0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
    }
  }
}

// A Phi-3 folder in two shards (fused qkv_proj and gate_up_proj, an untied
// head) with seeded weights and sizes in whole blocks.
std::string WritePhi3Shards(const test::TempDir& dir) {
  const int64_t e = 32, h = 64, v = 64, qkv = (4 + 2 * 2) * 8;
  using Tensors = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  const Tensors shards[] = {
      {{"model.embed_tokens.weight", {v, e}},
       {"model.layers.0.input_layernorm.weight", {e}},
       {"model.layers.0.self_attn.qkv_proj.weight", {qkv, e}},
       {"model.layers.0.self_attn.o_proj.weight", {e, e}}},
      {{"model.layers.0.post_attention_layernorm.weight", {e}},
       {"model.layers.0.mlp.gate_up_proj.weight", {2 * h, e}},
       {"model.layers.0.mlp.down_proj.weight", {e, h}},
       {"model.norm.weight", {e}},
       {"lm_head.weight", {v, e}}}};
  std::mt19937 rng(7);
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (int s = 0; s < 2; ++s) {
    const std::string file =
        "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    std::vector<std::vector<float>> values;
    std::vector<F32Tensor> tensors;
    for (const auto& [name, shape] : shards[s]) {
      const bool matrix = shape.size() == 2;
      const auto n = static_cast<size_t>(shape[0] * (matrix ? shape[1] : 1));
      values.push_back(matrix ? test::RandomVector(rng, n, -0.2f, 0.2f)
                              : std::vector<float>(n, 1.0f));
      index["weight_map"][name] = file;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      tensors.push_back(
          {shards[s][i].first, shards[s][i].second, values[i].data()});
    }
    EXPECT_TRUE(WriteSafetensors(dir.Path(file), tensors).ok());
  }
  dir.Write("model.safetensors.index.json", index.dump());
  json config = json::parse(ReadBytes(kLmDir + "hf_phi3_fused/config.json"));
  config["vocab_size"] = v;
  config["intermediate_size"] = h;
  config["num_hidden_layers"] = 1;
  dir.Write("config.json", config.dump());
  return dir.path();
}

// The fused projections of a sharded Phi-3 folder are written and read as
// one matrix each, to the same logits as quantizing at load.
TEST_F(QuantizeTest, ShardedFusedFoldersRoundTrip) {
  test::TempDir phi3;
  const std::string source = WritePhi3Shards(phi3);
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  for (const DType dtype : kTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::string out = dir_.Path(std::string("phi3-") + DTypeName(dtype));
    ASSERT_TRUE(QuantizeModel(source, out, dtype).ok());
    Result<SafetensorsFile> file =
        SafetensorsFile::Open(out + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    const TensorInfo* scales =
        file->Find("model.layers.0.self_attn.qkv_proj.weight_scale");
    ASSERT_NE(scales, nullptr);
    EXPECT_EQ(scales->shape, (std::vector<int64_t>{64, 1}));
    std::vector<float> logits[2];
    int i = 0;
    for (const auto& model :
         {MustLoad(source, dtype, 1), MustLoad(out, DType::kF32, 2)}) {
      ASSERT_TRUE(model);
      auto batch = NewBatch(model, 1);
      ASSERT_TRUE(batch && batch->Add().ok());
      const Batch::Request r{0, prompt.data(), int64_t(prompt.size()), false};
      ASSERT_TRUE(batch->Step(&r, 1).ok());
      logits[i++].assign(batch->logits(0), batch->logits(0) + 64);
    }
    EXPECT_EQ(logits[0], logits[1]);
  }
}

// fp16 bits to float, for reading the scales.
float HalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -24);
  return sign * std::ldexp(float(mantissa | 1024), exponent - 25);
}

// A matrix's tensors: quants [out, in] (I8) or [out, in / 2] (U8, llama.cpp's
// nibbles), fp16 scales [out, in / 32]; every weight within half a step of
// what it stands for (q8_0) or within one step (q4_0, whose largest
// positive value clamps at 7), plus the scale's rounding to fp16 (2^-11 of
// it) times 127 or 8. GPT-2's Conv1D c_fc [in, out] is written as [out,
// in].
TEST_F(QuantizeTest, MatricesAreQuantsAndScalesAlongTheirInputs) {
  for (const DType dtype : kTypes) {
    const bool q8 = dtype == DType::kQ8_0;
    const std::string out = Quantize("hf_gpt2", dtype);
    Result<SafetensorsFile> file =
        SafetensorsFile::Open(out + "/model.safetensors");
    Result<SafetensorsFile> source =
        SafetensorsFile::Open(kLmDir + "hf_gpt2/model.safetensors");
    ASSERT_TRUE(file.ok() && source.ok());
    EXPECT_EQ(file->metadata().at("quantization"), DTypeName(dtype));
    EXPECT_EQ(file->metadata().at("quantization_block_size"), "32");
    const std::string name = "h.0.mlp.c_fc.weight";  // [32, 128] in the source
    const TensorInfo* quants = file->Find(name);
    const TensorInfo* scales = file->Find(name + "_scale");
    ASSERT_TRUE(quants && scales);
    EXPECT_EQ(quants->dtype, q8 ? "I8" : "U8");
    EXPECT_EQ(quants->shape, (std::vector<int64_t>{128, q8 ? 32 : 16}));
    EXPECT_EQ(scales->dtype, "F16");
    EXPECT_EQ(scales->shape, (std::vector<int64_t>{128, 1}));
    EXPECT_EQ(file->Find("h.0.attn.c_attn.weight")->shape,
              (std::vector<int64_t>{96, q8 ? 32 : 16}));
    EXPECT_EQ(file->Find("wte.weight")->dtype, "F16");  // as stored
    std::vector<uint8_t> q(quants->size_bytes);
    std::vector<uint16_t> d(scales->num_elements);
    ASSERT_TRUE(file->ReadBytes(name, 0, q.size(), q.data()).ok());
    ASSERT_TRUE(
        file->ReadBytes(name + "_scale", 0, d.size() * 2, d.data()).ok());
    const std::vector<float> w = *source->ReadF32(name);  // [in 32, out 128]
    for (int64_t o = 0; o < 128; ++o) {
      const float step = std::fabs(HalfToFloat(d[o]));
      ASSERT_GT(step, 0.0f);
      for (int64_t i = 0; i < 32; ++i) {
        const float value =
            q8 ? static_cast<int8_t>(q[o * 32 + i]) * HalfToFloat(d[o])
               : (((q[o * 16 + i % 16] >> (i < 16 ? 0 : 4)) & 15) - 8) *
                     HalfToFloat(d[o]);
        EXPECT_LE(std::fabs(value - w[i * 128 + o]),
                  step * (q8 ? 0.57f : 1.01f))
            << "row " << o << " input " << i;
      }
    }
  }
}

// The configuration, tokenizer and license files are copied as they are;
// other files (another copy of the weights, notes) are not.
TEST_F(QuantizeTest, TheFilesBesideTheWeightsComeAlong) {
  test::TempDir model;
  model.Write("model.safetensors",
              ReadBytes(kLmDir + "hf_qwen2/model.safetensors"));
  model.Write("config.json", ReadBytes(kLmDir + "hf_qwen2/config.json"));
  const std::vector<std::string> copied = {
      "tokenizer.json", "tokenizer_config.json", "generation_config.json",
      "special_tokens_map.json", "LICENSE"};
  for (const std::string& name : copied) model.Write(name, name + " {}\n");
  model.Write("pytorch_model.bin", "weights");
  model.Write("notes.txt", "notes");
  const std::string out = dir_.Path("out");
  ASSERT_TRUE(QuantizeModel(model.path(), out, DType::kQ8_0).ok());
  std::set<std::string> written, want(copied.begin(), copied.end());
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    written.insert(entry.path().filename().string());
  }
  want.insert({"config.json", "model.safetensors"});
  EXPECT_EQ(written, want);
  for (const std::string& name : copied) {
    EXPECT_EQ(ReadBytes(out + "/" + name), name + " {}\n");
  }
}

// Refused in one line, with nothing left behind: no quantized type, an
// output that exists, a model already quantized or whose linears are not
// whole blocks.
TEST_F(QuantizeTest, BadRequestsAreRefusedAndLeaveNothing) {
  const std::string out = dir_.Path("out");
  EXPECT_EQ(QuantizeModel(kLmDir + "hf_qwen2", out, DType::kBF16).message(),
            "dtype bf16 is not a quantized type: want q8_0 or q4_0");
  EXPECT_EQ(QuantizeModel(kLmDir + "hf_gemma_mqa", out, DType::kQ4_0).message(),
            "model emb_dim is 48, want a multiple of 32 to quantize (blocks "
            "of 32 along each linear's input)");
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{});  // no partial folder
  const std::string q4 = Quantize("hf_qwen2", DType::kQ4_0);
  EXPECT_EQ(QuantizeModel(q4, out, DType::kQ8_0).message(),
            "'" + q4 + "' holds q4_0 weights already: want an F32, F16 or " +
                "BF16 checkpoint");
  EXPECT_EQ(QuantizeModel(kLmDir + "hf_qwen2", q4, DType::kQ8_0).message(),
            "output '" + q4 + "' exists; want a new folder's name");
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"hf_qwen2-q4_0"});
}

// NaN or an infinity in a weight has no block to stand for it: quantizing
// it, at load or into a folder, is refused naming the tensor, and nothing
// is written. Unquantized, the model loads (and NaN runs through).
TEST_F(QuantizeTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  // An attention projection and a feed-forward weight: two paths at load.
  for (const std::string name : {"model.layers.1.self_attn.q_proj.weight",
                                 "model.layers.0.mlp.down_proj.weight"}) {
    const std::string want = "'" + name +
                             "' holds a value that is not finite (NaN or "
                             "infinity): quantizing needs finite weights";
    for (const uint16_t bits : {uint16_t{0x7FC0}, uint16_t{0xFF80}}) {
      SCOPED_TRACE(name + " " + std::to_string(bits));
      const std::string folder = WithValue(kLmDir + "hf_qwen2", name, bits);
      for (const DType dtype : kTypes) {
        const std::string out = dir_.Path("out");
        EXPECT_EQ(QuantizeModel(folder, out, dtype).message(), want);
        EXPECT_EQ(LoadError(folder, dtype), want);
      }
      EXPECT_EQ(LoadError(folder), "loaded");
    }
  }
  EXPECT_EQ(
      Sorted(dir_.Files()),
      (std::vector<std::string>{"valued1", "valued2", "valued3", "valued4"}));
}

// A caller's stop ends the write between tensors: kCancelled, and the
// partial folder is gone.
TEST_F(QuantizeTest, StopEndsTheWriteAndLeavesNothing) {
  for (const int at : {1, 3}) {
    int asked = 0;
    const Status s =
        QuantizeModel(kLmDir + "hf_qwen2", dir_.Path("out"), DType::kQ8_0, {},
                      [&] { return ++asked == at; });
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.message();
    EXPECT_EQ(asked, at);  // asked no more once it said stop
    EXPECT_EQ(dir_.Files(), std::vector<std::string>{});
  }
}

// The output is named as mkdir takes a name: a trailing slash is the
// folder's, and a name of 250 bytes (the longest is 255) is written.
TEST_F(QuantizeTest, OutputNamesAsMkdirTakesThem) {
  EXPECT_TRUE(
      QuantizeModel(kLmDir + "hf_qwen2", dir_.Path("new/"), DType::kQ4_0).ok());
  const std::string long_name(250, 'o');
  const Status s =
      QuantizeModel(kLmDir + "hf_qwen2", dir_.Path(long_name), DType::kQ4_0);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Sorted(dir_.Files()), (std::vector<std::string>{"new", long_name}));
  EXPECT_EQ(LoadError(dir_.Path("new")), "loaded");
}

// A quantized folder runs in its own type: the default dtype stands for it,
// any other is refused.
TEST_F(QuantizeTest, AQuantizedFolderRunsInItsOwnType) {
  const std::string q4 = Quantize("hf_qwen2", DType::kQ4_0);
  EXPECT_EQ(LoadError(q4, DType::kQ4_0), "loaded");
  EXPECT_EQ(LoadError(q4, DType::kBF16),
            "'" + q4 + "' holds q4_0 weights, which run as they are: dtype " +
                "is bf16, want q4_0 or the default");
  EXPECT_EQ(LoadError(q4, DType::kQ8_0),
            "'" + q4 + "' holds q4_0 weights, which run as they are: dtype " +
                "is q8_0, want q4_0 or the default");
}

// A file whose metadata or tensors do not make the quantized model it
// claims is refused in one line naming the key or tensor.
TEST_F(QuantizeTest, TamperedFilesAreRefusedNamingWhatIsWrong) {
  const std::string q8 = Quantize("hf_qwen2", DType::kQ8_0);
  const std::string up = "model.layers.0.mlp.up_proj.weight";
  const auto error = [&](const std::function<void(json&)>& edit) {
    const std::string folder = Retouch(q8, edit);
    return LoadError(folder) + "|" + folder;
  };
  const auto starts = [](const std::string& got, const std::string& want) {
    EXPECT_EQ(got.substr(0, want.size()), want) << got;
  };
  starts(error([](json& h) { h["__metadata__"]["quantization"] = "q5_k"; }),
         "metadata 'quantization' of '");
  EXPECT_NE(error([](json& h) {
              h["__metadata__"]["quantization"] = "q5_k";
            }).find(" is 'q5_k', want 'q8_0' or 'q4_0'"),
            std::string::npos);
  EXPECT_NE(error([](json& h) {
              h["__metadata__"]["quantization_block_size"] = "64";
            }).find("metadata 'quantization_block_size' of '"),
            std::string::npos);
  // Its scales renamed: the matrix lacks them.
  starts(error([&](json& h) {
           h[up + "_scales"] = h[up + "_scale"];
           h.erase(up + "_scale");
         }),
         "tensor '" + up + "_scale' is missing in '");
  // Quants of the other type's dtype; scales transposed.
  starts(error([&](json& h) { h[up]["dtype"] = "U8"; }),
         "tensors '" + up + "' (U8 [96, 32]) and '" + up +
             "_scale' (F16 [96, 1]) in '");
  starts(error([&](json& h) {
           h[up + "_scale"]["shape"] = {1, 96};
         }),
         "tensors '" + up + "' (I8 [96, 32]) and '" + up +
             "_scale' (F16 [1, 96]) in '");
  // A whole matrix of another shape than the model's.
  const std::string o = "model.layers.1.self_attn.o_proj.weight";
  const std::string reshaped = error([&](json& h) {
    h[o]["shape"] = {16, 64};
    h[o + "_scale"]["shape"] = {16, 2};
  });
  starts(reshaped, "tensor '" + o + "' in '");
  EXPECT_NE(reshaped.find("' holds a q8_0 matrix [16, 64], want [32, 32]"),
            std::string::npos)
      << reshaped;
  starts(error([](json& h) { h["__metadata__"].erase("quantization"); }),
         "metadata 'quantization_block_size' of '");
}

// A graph reads fp32 tensors: a quantized folder under --graph is refused.
TEST_F(QuantizeTest, GraphsRefuseQuantizedFolders) {
  const std::string q8 = Quantize("hf_qwen2", DType::kQ8_0);
  const std::string weights = q8 + "/model.safetensors";
  Result<std::shared_ptr<const Model>> model =
      Model::Load({weights, std::string(ATTN_SOURCE_DIR) +
                                "/tools/graphs/llama_model.json"});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "'" + weights +
                "' holds q8_0 weights, which no graph runs: load it "
                "without --graph");
}

// A source whose later matrix is not the model's shape is refused before
// anything is written.
TEST_F(QuantizeTest, MisshapenSourcesAreRefusedBeforeWriting) {
  const std::string o = "model.layers.1.self_attn.o_proj.weight";
  const std::string source =
      Retouch(kLmDir + "hf_qwen2", [&](json& h) { h[o]["shape"] = {1024}; });
  const std::string out = dir_.Path("out");
  const Status s = QuantizeModel(source, out, DType::kQ4_0);
  EXPECT_EQ(s.message().substr(0, 10 + o.size()), "tensor '" + o + "' ")
      << s.message();
  EXPECT_NE(s.message().find(" is [1024], want [32, 32]"), std::string::npos)
      << s.message();
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"retouched1"});
}

}  // namespace
}  // namespace attn
