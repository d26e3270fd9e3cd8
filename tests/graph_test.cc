// The graph runner: parsing and validation errors, fusion, the buffer
// planner, the matmul post-ops, and the book's LayerNorm, GELU, FeedForward
// and TransformerBlock (single, qkv_bias, stacked) and the Llama 3.2 block
// (single, stacked) against PyTorch's golden files, through the C++ API and
// through `attn run --graph`.
#include "attn/graph.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn/safetensors.hpp"
#include "engine/models/mha_model.h"
#include "engine/ops/attention_op.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/graph_plan.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "tests/avx2_only.h"
#include "tests/hostile_files.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace attn {
namespace {

// A file in gtest's temporary directory private to this process: ctest runs
// several of this binary's tests (and the AVX2-only rerun) at once.
// A file in this process's own scratch folder, removed with what it holds
// when the process exits.
std::string TempPath(const std::string& name) {
  static const test::TempDir dir;
  return dir.Path(name);
}

const std::string kGolden =
    std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/";
const std::string kBlock =
    std::string(ATTN_SOURCE_DIR) + "/tools/graphs/transformer_block.json";
const std::string kLlama =
    std::string(ATTN_SOURCE_DIR) + "/tools/graphs/llama_block.json";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Golden {
  std::vector<float> input, expected;
  std::vector<int64_t> shape;  // of the input
  double tolerance = 0.0;      // absolute: 1e-5 * max(1, max|expected|)
};

Golden ReadGolden(const std::string& name) {
  Golden g;
  auto file = SafetensorsFile::Open(kGolden + name + ".safetensors");
  EXPECT_TRUE(file.ok()) << file.status().message()
                         << " (regenerate: /usr/bin/python3 "
                            "tools/make_golden.py)";
  if (!file.ok()) return g;
  g.input = file->ReadF32("input").value();
  g.shape = file->Find("input")->shape;
  if (file->Find("expected")) g.expected = file->ReadF32("expected").value();
  g.tolerance = std::stod(file->metadata().at("tolerance")) *
                std::max(1.0, test::MaxAbs(g.expected));
  return g;
}

// Runs `graph` (JSON text) on golden case `name` through the C++ API.
void ExpectGraphMatchesGolden(const std::string& json, const std::string& name,
                              GraphOptions options = {}) {
  const Golden g = ReadGolden(name);
  auto graph =
      GraphModel::FromJson(json, kGolden + name + ".safetensors", options);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> y(g.expected.size());
  const Status st = GraphSession(*graph).Run(g.input.data(), g.shape[0],
                                             g.shape[1], y.data());
  ASSERT_TRUE(st.ok()) << st.message();
  test::ExpectAllClose(g.expected, y.data(), g.tolerance, name);
}

TEST(GraphGoldenTest, TransformerBlock) {
  for (int threads : {1, 2}) {
    GraphOptions options;
    options.num_threads = threads;
    ExpectGraphMatchesGolden(ReadText(kBlock), "block", options);
    ExpectGraphMatchesGolden(ReadText(kBlock), "block_qkv_bias", options);
  }
}

TEST(GraphGoldenTest, Bf16BlockIsCloseOrRefused) {
  const Golden g = ReadGolden("block_qkv_bias");
  GraphOptions options;
  options.dtype = DType::kBF16;
  auto graph =
      GraphModel::Load(kBlock, kGolden + "block_qkv_bias.safetensors", options);
  if (!kernels::HasNativeBF16()) {
    ASSERT_FALSE(graph.ok());
    EXPECT_EQ(graph.status().code(), StatusCode::kUnsupported);
    return;
  }
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> y(g.expected.size());
  ASSERT_TRUE(GraphSession(*graph)
                  .Run(g.input.data(), g.shape[0], g.shape[1], y.data())
                  .ok());
  // bf16 keeps 8 bits of mantissa: each matmul input is off by up to 2^-9
  // relative; through the block's four matmul stages, 1% of max|y| is ample
  // and still catches a wrong layout or a dropped bias.
  test::ExpectAllClose(g.expected, y.data(), 1e-2 * test::MaxAbs(g.expected),
                       "bf16 block");
}

// Expects `graph` refused, in one line holding `needle`.
void ExpectRefused(const Result<std::shared_ptr<const GraphModel>>& graph,
                   const std::string& needle) {
  ASSERT_FALSE(graph.ok());
  const std::string& message = graph.status().message();
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// A block file for repeat nodes: one linear reading weight "w".
std::string WriteLinearBlock(const std::string& name) {
  const std::string path = TempPath(name);
  std::ofstream(path) << R"({"inputs": ["a"], "outputs": ["b"], "nodes": [
      {"op": "linear", "inputs": ["a"], "outputs": ["b"],
       "weights": {"weight": "w"}}]})";
  return path;
}

// With bf16, a linear whose residual add is fused into it writes the sum in
// fp32, also when only linears read it (the matmul adds the residual in its
// output's type). On identity weights and small integers every step is
// exact in bf16: the output must equal fp32's, 2x.
TEST(GraphGoldenTest, Bf16ResidualSumFeedingALinearStaysExact) {
  if (!kernels::HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  const std::string json = R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
      {"name": "p", "op": "linear", "inputs": ["x"], "outputs": ["p"],
       "weights": {"weight": "w1"}},
      {"name": "h", "op": "add", "inputs": ["x", "p"], "outputs": ["h"]},
      {"name": "y", "op": "linear", "inputs": ["h"], "outputs": ["y"],
       "weights": {"weight": "w2"}}]})";
  const int64_t e = 4;
  std::vector<float> identity(e * e, 0.0f);
  for (int64_t i = 0; i < e; ++i) identity[i * e + i] = 1.0f;
  const std::string path = TempPath("graph_bf16_residual.safetensors");
  const std::vector<F32Tensor> weights = {{"w1", {e, e}, identity.data()},
                                          {"w2", {e, e}, identity.data()}};
  ASSERT_TRUE(
      WriteSafetensors(path, weights, std::map<std::string, std::string>{})
          .ok());
  GraphOptions options;
  options.dtype = DType::kBF16;
  auto graph = GraphModel::FromJson(json, path, options);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> x(2 * e), y(2 * e), want;
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  for (const float v : x) want.push_back(2 * v);
  ASSERT_TRUE(GraphSession(*graph).Run(x.data(), 1, 2, y.data()).ok());
  EXPECT_EQ(y, want);
}

// A session checks positions against layer 0's table alone, so a stacked
// layer whose table is shorter is refused at load (it was read past its
// end).
TEST(GraphValidationTest, StackedTablesHaveLayerZerosRows) {
  const std::string json = R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
      {"op": "position_embedding", "inputs": ["x"], "outputs": ["y"],
       "weights": {"weight": "pos.weight"}}]})";
  const std::vector<float> rows(16 * 4, 1.0f);
  const std::vector<F32Tensor> tables = {
      {"trf_blocks.0.pos.weight", {16, 4}, rows.data()},
      {"trf_blocks.1.pos.weight", {2, 4}, rows.data()}};
  const std::string path = TempPath("graph_stacked_tables.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, tables, std::map<std::string, std::string>{})
          .ok());
  GraphOptions options;
  options.layers = 2;
  auto graph = GraphModel::FromJson(json, path, options, "pos.json");
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().message(),
            "pos.json: layer 1 of 2: node 'position_embedding_0' "
            "(position_embedding): its table has 2 rows, layer 0's 16, want "
            "the same in every layer");
}

// Names from the graph or the file that hold a newline are escaped: the
// message stays one line.
TEST(GraphValidationTest, NamesWithNewlinesKeepMessagesOneLine) {
  const std::string json = R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
      {"name": "evil\nname", "op": "linear", "inputs": ["x"],
       "outputs": ["y"], "weights": {"weight": "missing\nw"}}]})";
  auto graph =
      GraphModel::FromJson(json, kGolden + "block.safetensors", {}, "nl.json");
  ExpectRefused(graph,
                "node 'evil\\x0aname' (linear): weight 'missing\\x0aw' is "
                "missing");
}

// Runs the block with weights from `path` on golden block_qkv_bias's input.
std::vector<float> RunBlock(const std::string& path) {
  const Golden g = ReadGolden("block_qkv_bias");
  auto graph = GraphModel::Load(kBlock, path);
  EXPECT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> y(g.expected.size());
  if (graph.ok()) {
    EXPECT_TRUE(GraphSession(*graph)
                    .Run(g.input.data(), g.shape[0], g.shape[1], y.data())
                    .ok());
  }
  return y;
}

// The block's weights rounded to BF16, written once as BF16 and once as the
// F32 values they stand for: the graph loads both to the same floats.
TEST(GraphGoldenTest, Bf16WeightsLoadAsTheFloatsTheyStandFor) {
  auto file = SafetensorsFile::Open(kGolden + "block_qkv_bias.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::string header = "{\"__metadata__\":{\"num_heads\":\"3\"}", data;
  std::vector<std::vector<float>> rounded;
  rounded.reserve(file->tensors().size());  // f32 points into it
  std::vector<F32Tensor> f32;
  for (const TensorInfo& t : file->tensors()) {
    const size_t begin = data.size();
    std::vector<float> values = file->ReadF32(t.name).value();
    for (float& v : values) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      bits &= 0xFFFF0000u;  // the top half is the BF16 value
      std::memcpy(&v, &bits, sizeof bits);
      data += static_cast<char>(bits >> 16 & 0xFF);
      data += static_cast<char>(bits >> 24);
    }
    header += "," + test::Entry(t.name, "BF16", ShapeString(t.shape), begin,
                                data.size());
    rounded.push_back(std::move(values));
    f32.push_back({t.name, t.shape, rounded.back().data()});
  }
  const std::string bf16_path = TempPath("graph_block_bf16.st");
  const std::string f32_path = TempPath("graph_block_f32.st");
  std::ofstream(bf16_path, std::ios::binary)
      << test::SafetensorsBytes(header + "}", data);
  ASSERT_TRUE(WriteSafetensors(f32_path, f32, {{"num_heads", "3"}}).ok());
  ASSERT_EQ(SafetensorsFile::Open(bf16_path)->Find("att.W_query.weight")->dtype,
            "BF16");

  const std::vector<float> from_bf16 = RunBlock(bf16_path);
  EXPECT_EQ(from_bf16, RunBlock(f32_path));
  const Golden g = ReadGolden("block_qkv_bias");
  test::ExpectAllClose(g.expected, from_bf16.data(),
                       1e-2 * test::MaxAbs(g.expected), "bf16 weights");
}

// The model owns its weights: sessions created after the weights file was
// overwritten, or deleted, never read it and match a session made before.
TEST(GraphGoldenTest, SessionsNeverReadTheWeightsFileAgain) {
  const Golden g = ReadGolden("block_qkv_bias");
  const std::string path = TempPath("graph_block_changing.safetensors");
  std::filesystem::copy_file(kGolden + "block_qkv_bias.safetensors", path,
                             std::filesystem::copy_options::overwrite_existing);
  auto model = GraphModel::Load(kBlock, path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<float> before(g.expected.size());
  ASSERT_TRUE(GraphSession(*model)
                  .Run(g.input.data(), g.shape[0], g.shape[1], before.data())
                  .ok());
  // Other weights under the same names, then no file at all.
  std::filesystem::copy_file(kGolden + "block.safetensors", path,
                             std::filesystem::copy_options::overwrite_existing);
  for (const bool deleted : {false, true}) {
    SCOPED_TRACE(deleted ? "deleted" : "changed");
    if (deleted) std::filesystem::remove(path);
    std::vector<float> after(g.expected.size());
    ASSERT_TRUE(GraphSession(*model)
                    .Run(g.input.data(), g.shape[0], g.shape[1], after.data())
                    .ok());
    EXPECT_EQ(before, after);
  }
  test::ExpectAllClose(g.expected, before.data(), g.tolerance, "owned");
}

// A run of at least kMatMulPackedRows rows runs its linears on the weights the
// model packed at load (tests/matmul_test.cc: every such run lays them out
// alike); it agrees with the golden case row by row.
TEST(GraphGoldenTest, LongRunsShareTheModelsPackedWeights) {
  const Golden g = ReadGolden("block");
  auto model = GraphModel::Load(kBlock, kGolden + "block.safetensors");
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t T = g.shape[1];
  const int64_t copies = (4096 + g.shape[0] * T - 1) / (g.shape[0] * T);
  std::vector<float> input, expected;
  for (int64_t c = 0; c < copies; ++c) {
    input.insert(input.end(), g.input.begin(), g.input.end());
    expected.insert(expected.end(), g.expected.begin(), g.expected.end());
  }
  std::vector<float> y(expected.size());
  ASSERT_TRUE(GraphSession(*model)
                  .Run(input.data(), copies * g.shape[0], T, y.data())
                  .ok());
  test::ExpectAllClose(expected, y.data(), g.tolerance, "long run");
}

TEST(GraphGoldenTest, StackOfBlocksWithLayers) {
  GraphOptions options;
  options.layers = 3;
  ExpectGraphMatchesGolden(ReadText(kBlock), "stack3", options);
  ExpectGraphMatchesGolden(ReadText(kBlock), "stack3");  // metadata n_layers
}

TEST(GraphGoldenTest, LayerNormAndFeedForward) {
  ExpectGraphMatchesGolden(R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
      {"op": "layernorm", "inputs": ["x"], "outputs": ["y"],
       "weights": {"scale": "scale", "shift": "shift"}}]})",
                           "layernorm");
  ExpectGraphMatchesGolden(R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
      {"op": "linear", "inputs": ["x"], "outputs": ["h"],
       "weights": {"weight": "layers.0.weight", "bias": "layers.0.bias"}},
      {"op": "gelu", "inputs": ["h"], "outputs": ["g"],
       "attributes": {"approximate": "tanh"}},
      {"op": "linear", "inputs": ["g"], "outputs": ["y"],
       "weights": {"weight": "layers.2.weight", "bias": "layers.2.bias"}}]})",
                           "feedforward");
}

// The feed-forward half of the book's Llama block, under its names:
// x + fc3(silu(fc1(norm2(x))) * fc2(norm2(x))), RMSNorm and bias-free
// linears, at 1 and 2 threads.
TEST(GraphGoldenTest, LlamaFeedForwardHalf) {
  for (const int threads : {1, 2}) {
    GraphOptions options;
    options.num_threads = threads;
    ExpectGraphMatchesGolden(R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
        {"op": "rmsnorm", "inputs": ["x"], "outputs": ["n"],
         "weights": {"weight": "norm2.weight"}, "attributes": {"eps": 1e-5}},
        {"op": "linear", "inputs": ["n"], "outputs": ["a"],
         "weights": {"weight": "ff.fc1.weight"}},
        {"op": "silu", "inputs": ["a"], "outputs": ["s"]},
        {"op": "linear", "inputs": ["n"], "outputs": ["b"],
         "weights": {"weight": "ff.fc2.weight"}},
        {"op": "mul", "inputs": ["s", "b"], "outputs": ["g"]},
        {"op": "linear", "inputs": ["g"], "outputs": ["f"],
         "weights": {"weight": "ff.fc3.weight"}},
        {"op": "add", "inputs": ["x", "f"], "outputs": ["y"]}]})",
                             "llama_ff", options);
  }
}

// The book's Llama 3.2 block (GQA with RoPE, bias-free out_proj, SwiGLU) as
// shipped in tools/graphs, alone and stacked (Llama 3.1 RoPE, window 4).
TEST(GraphGoldenTest, LlamaBlock) {
  for (const int threads : {1, 2}) {
    GraphOptions options;
    options.num_threads = threads;
    ExpectGraphMatchesGolden(ReadText(kLlama), "llama_block", options);
    ExpectGraphMatchesGolden(ReadText(kLlama), "llama_stack2", options);
    options.layers = 2;
    ExpectGraphMatchesGolden(ReadText(kLlama), "llama_stack2", options);
  }
}

// The mha node's attributes override the file's metadata, and options
// override the attributes: a window of 2 in the JSON changes llama_stack2's
// answer (its metadata says 4), the option's 4 restores it.
TEST(GraphGoldenTest, LlamaAttributesOverrideMetadataAndOptionsThem) {
  const Golden g = ReadGolden("llama_stack2");
  std::string json = ReadText(kLlama);
  const std::string weights = "\"out_proj.weight\": \"att.out_proj.weight\"}";
  const size_t at = json.find(weights);
  ASSERT_NE(at, std::string::npos);
  json.insert(at + weights.size(),
              ", \"attributes\": {\"sliding_window\": 2, \"num_kv_heads\": 2, "
              "\"rope_theta\": 500000, \"rope_factor\": 8, "
              "\"rope_low_freq_factor\": 1, \"rope_high_freq_factor\": 4, "
              "\"rope_original_context_length\": 256}");
  for (const int64_t window : {0, 4}) {
    GraphOptions options;
    options.sliding_window = window;
    auto graph = GraphModel::FromJson(
        json, kGolden + "llama_stack2.safetensors", options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    std::vector<float> y(g.expected.size());
    ASSERT_TRUE(GraphSession(*graph)
                    .Run(g.input.data(), g.shape[0], g.shape[1], y.data())
                    .ok());
    const double worst = test::MaxAbsDiff(y, g.expected);
    if (window == 0) {
      EXPECT_GT(worst, 1e-3) << "the node's window of 2 was not used";
    } else {
      EXPECT_LE(worst, g.tolerance) << "the option's window was not used";
    }
  }
}

// Threads split rows, never a sum: the stack's output is the same bits.
TEST(GraphGoldenTest, LlamaStackIsBitwiseIdenticalAtOneAndTwoThreads) {
  const Golden g = ReadGolden("llama_stack2");
  std::vector<std::vector<float>> outputs;
  for (const int threads : {1, 2}) {
    GraphOptions options;
    options.num_threads = threads;
    auto graph =
        GraphModel::Load(kLlama, kGolden + "llama_stack2.safetensors", options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ((*graph)->layers(), 2);
    std::vector<float> y(g.expected.size());
    ASSERT_TRUE(GraphSession(*graph)
                    .Run(g.input.data(), g.shape[0], g.shape[1], y.data())
                    .ok());
    outputs.push_back(std::move(y));
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(GraphGoldenTest, GeluKernel) {
  const Golden g = ReadGolden("gelu");
  std::vector<float> y(g.input.size());
  kernels::Gelu(g.input.data(), y.data(), y.size(), 2);
  test::ExpectAllClose(g.expected, y.data(), g.tolerance, "gelu");
}

TEST(GraphGoldenTest, OverLongSequenceFailsCleanly) {
  const Golden g = ReadGolden("block_too_long");
  auto graph = GraphModel::Load(kBlock, kGolden + "block_too_long.safetensors");
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> y(g.input.size(), -1.0f);
  const Status st = GraphSession(*graph).Run(g.input.data(), g.shape[0],
                                             g.shape[1], y.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sequence length 6 exceeds context_length 4"),
            std::string::npos)
      << st.message();
}

// ---------------------------------------------------------------- CLI

struct CliResult {
  int code = -1;
  std::string err;
};

CliResult RunCli(const std::string& args) {
  const std::string err = TempPath("graph_cli_err.txt");
  const int status =
      std::system((std::string(ATTN_CLI) + " " + args + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadText(err)};
}

TEST(GraphCliTest, RunGraphMatchesGolden) {
  struct Case {
    std::string graph, name, extra;
  };
  const std::vector<Case> cases = {
      {kBlock, "block", ""},
      {kBlock, "block_qkv_bias", " --threads 1"},
      {kBlock, "stack3", " --layers 3"},
      {kLlama, "llama_block", ""},
      {kLlama, "llama_stack2", " --layers 2 --threads 2"}};
  for (const auto& [graph, name, extra] : cases) {
    const std::string file = kGolden + name + ".safetensors";
    const std::string out = TempPath("graph_" + name + ".safetensors");
    const CliResult r = RunCli("run --graph " + graph + " --weights " + file +
                               " --input " + file + " --output " + out + extra);
    ASSERT_EQ(r.code, 0) << name << ": " << r.err;
    auto y = SafetensorsFile::Open(out);
    ASSERT_TRUE(y.ok()) << y.status().message();
    const Golden g = ReadGolden(name);
    EXPECT_EQ(y->Find("output")->shape, g.shape);
    test::ExpectAllClose(g.expected, y->ReadF32("output")->data(), g.tolerance,
                         name);
  }
}

TEST(GraphCliTest, ErrorsAreOneLineAndLeaveNoOutput) {
  const std::string out = TempPath("graph_never.safetensors");
  std::filesystem::remove(out);
  const std::string too_long = kGolden + "block_too_long.safetensors";
  const std::string block = kGolden + "block.safetensors";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--weights " + too_long + " --input " + too_long,
       "sequence length 6 exceeds context_length 4"},
      {"--weights " + block + " --input " + block + " --layers 2",
       "weight 'trf_blocks.0.norm1.scale' is missing"},
      {"--weights " + block + " --input " + kGolden + "layernorm.safetensors",
       "want [batch, seq_len, 16]"},
  };
  for (const auto& [args, want] : cases) {
    const CliResult r =
        RunCli("run --graph " + kBlock + " " + args + " --output " + out);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
}

// ---------------------------------------------------------------- validation

// Loads `nodes` (a JSON array) over block.safetensors; returns the error.
std::string LoadError(const std::string& nodes,
                      const std::string& outputs = R"(["y"])") {
  const std::string json = R"({"inputs": ["x"], "outputs": )" + outputs +
                           R"(, "nodes": )" + nodes + "}";
  auto graph =
      GraphModel::FromJson(json, kGolden + "block.safetensors", {}, "g.json");
  if (graph.ok()) return "(loaded)";
  EXPECT_EQ(graph.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(graph.status().message().rfind("g.json: ", 0), 0u)
      << graph.status().message();
  return graph.status().message();
}

#define EXPECT_ERROR(nodes, text)                                \
  do {                                                           \
    const std::string message = LoadError(nodes);                \
    EXPECT_NE(message.find(text), std::string::npos) << message; \
  } while (0)

const char kNorm[] =
    R"("weights": {"scale": "norm1.scale", "shift": "norm1.shift"})";

TEST(GraphValidationTest, EachMistakeIsNamed) {
  EXPECT_ERROR(R"([{"op": "conv", "inputs": ["x"], "outputs": ["y"]}])",
               "node 0: unknown op 'conv', want one of linear, mha");
  EXPECT_ERROR(
      std::string(
          R"([{"op": "layernorm", "inputs": ["x"], "outputs": ["y"], )") +
          kNorm + R"(, "attributes": {"alpha": 1}}])",
      "node 'layernorm_0' (layernorm): unknown attribute 'alpha', want eps");
  EXPECT_ERROR(R"([{"op": "gelu", "inputs": ["x"], "outputs": ["y"],
                    "attributes": {"approximate": "none"}}])",
               "attribute 'approximate' is \"none\", want \"tanh\"");
  EXPECT_ERROR(R"([{"op": "linear", "inputs": ["x"], "outputs": ["y"],
                    "weights": {"weight": "nope.weight"}}])",
               "weight 'nope.weight' is missing from");
  EXPECT_ERROR(R"([{"op": "linear", "inputs": ["x"], "outputs": ["y"]}])",
               "weight 'weight' is not named");
  EXPECT_ERROR(R"([{"op": "linear", "inputs": ["x"], "outputs": ["y"],
                    "weights": {"weight": "ff.layers.0.weight", "scale": "s"}}])",
               "unknown weight 'scale', want weight, bias");
  // Mis-shaped: [16, 64] cannot follow a [64, 16] linear's 64 outputs...
  EXPECT_ERROR(R"([{"op": "linear", "inputs": ["x"], "outputs": ["h"],
                    "weights": {"weight": "ff.layers.0.weight"}},
                   {"op": "linear", "inputs": ["h"], "outputs": ["y"],
                    "weights": {"weight": "att.out_proj.weight"}}])",
               "weight 'att.out_proj.weight' of shape [16, 16] wants input "
               "'h' of width 16, but tensor 'h' has width 64");
  // ... and a shift must be as wide as the scale.
  EXPECT_ERROR(R"([{"op": "layernorm", "inputs": ["x"], "outputs": ["y"],
                    "weights": {"scale": "norm1.scale", "shift": "ff.layers.0.bias"}}])",
               "weight 'ff.layers.0.bias' has shape [64], want [16]");
  EXPECT_ERROR(R"([{"op": "add", "inputs": ["x", "ghost"], "outputs": ["y"]}])",
               "input 'ghost' is undefined");
  EXPECT_ERROR(R"([{"op": "add", "inputs": ["x", "b"], "outputs": ["a"]},
                   {"op": "add", "inputs": ["x", "a"], "outputs": ["b"]},
                   {"op": "add", "inputs": ["x", "x"], "outputs": ["y"]}])",
               "cycle through nodes 'add_0', 'add_1'");
  EXPECT_ERROR(R"([{"op": "gelu", "inputs": ["x"], "outputs": ["unused"]},
                   {"op": "dropout", "inputs": ["x"], "outputs": ["y"]}])",
               "output 'unused' is never used");
  EXPECT_ERROR(R"([{"op": "dropout", "inputs": ["x"], "outputs": ["y"]},
                   {"op": "dropout", "inputs": ["x"], "outputs": ["y"]}])",
               "tensor 'y' is written by");
  EXPECT_ERROR(R"([{"op": "dropout", "inputs": ["x"], "outputs": ["y"],
                    "attributes": {"p": 1.5}}])",
               "attribute 'p' is 1.5, want a probability in [0, 1)");
  EXPECT_ERROR(R"([{"op": "dropout", "input": ["x"], "outputs": ["y"]}])",
               "unknown field 'input'");
  EXPECT_ERROR(R"([{"op": "gelu", "inputs": ["x"], "outputs": ["y"]}])",
               "cannot infer the width of tensor 'x'");
  EXPECT_NE(LoadError("[", "[]").find("not valid JSON"), std::string::npos);
}

// Copies golden `name` to a temporary file without tensor `skip` and with
// `metadata` in place of its own; returns its path.
std::string CopyWithout(
    const std::string& name, const std::string& skip,
    const std::map<std::string, std::string>& metadata = {}) {
  auto file = SafetensorsFile::Open(kGolden + name + ".safetensors");
  EXPECT_TRUE(file.ok());
  std::vector<std::vector<float>> values;
  std::vector<const TensorInfo*> kept;
  for (const TensorInfo& t : file->tensors()) {
    if (t.name == skip) continue;
    values.push_back(file->ReadF32(t.name).value());
    kept.push_back(&t);
  }
  std::vector<F32Tensor> tensors;
  for (size_t i = 0; i < kept.size(); ++i) {
    tensors.push_back({kept[i]->name, kept[i]->shape, values[i].data()});
  }
  std::string path = TempPath("graph_" + name + "_without_" +
                              (skip.empty() ? "metadata" : skip));
  for (const auto& [key, value] : metadata) path += "_" + key + "_" + value;
  path += ".safetensors";
  EXPECT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  return path;
}

// Peak resident memory of this process so far, in bytes.
size_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;
}

// One block saved with the book's names, as written, and n_layers "1".
TEST(GraphValidationTest, OneLayerKeepsTheNamesAsWritten) {
  const Golden g = ReadGolden("block");
  const std::string path =
      CopyWithout("block", "", {{"num_heads", "4"}, {"n_layers", "1"}});
  auto graph = GraphModel::Load(kBlock, path);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ((*graph)->layers(), 1);
  std::vector<float> y(g.expected.size());
  ASSERT_TRUE(GraphSession(*graph)
                  .Run(g.input.data(), g.shape[0], g.shape[1], y.data())
                  .ok());
  test::ExpectAllClose(g.expected, y.data(), g.tolerance, "n_layers 1");
  // Prefixed names keep working with one layer: the first of stack3's.
  GraphOptions one;
  one.layers = 1;
  auto first = GraphModel::Load(kBlock, kGolden + "stack3.safetensors", one);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ((*first)->layers(), 1);
}

// A layer count the file cannot back fails at the first missing layer,
// having allocated nothing for the layers it does not have.
TEST(GraphValidationTest, HugeLayerCountsAreRefusedWithoutAllocating) {
  for (const char* count : {"50000000", "9223372036854775807"}) {
    SCOPED_TRACE(count);
    const std::string path =
        CopyWithout("stack3", "", {{"num_heads", "2"}, {"n_layers", count}});
    GraphOptions options;
    options.max_memory_bytes = 1 << 20;
    const size_t peak = PeakRssBytes();
    auto graph = GraphModel::Load(kBlock, path, options);
    EXPECT_LT(PeakRssBytes() - peak, size_t{64} << 20);
    ASSERT_FALSE(graph.ok());
    const std::string& message = graph.status().message();
    EXPECT_NE(message.find("layer 3 of " + std::string(count) +
                           ": node 'norm1' (layernorm): weight "
                           "'trf_blocks.3.norm1.scale' is missing"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

// So does a repeat node's count: a file holding its first and last layers
// only is refused at the first missing one, before the block is copied
// 10,000,000 times (which took 1 GB past a 64 MiB cap).
TEST(GraphValidationTest, RepeatCountsNeedEveryLayerBeforeExpanding) {
  const std::string block = WriteLinearBlock("graph_repeat_block.json");
  const std::string json =
      R"({"inputs": ["x"], "outputs": ["y"], "nodes": [{"op": "repeat",
          "inputs": ["x"], "outputs": ["y"], "attributes": {"graph": ")" +
      block + R"(", "prefix": "L{i}.", "count": 10000000}}]})";
  const std::vector<float> w(16, 0.5f);
  const std::vector<F32Tensor> ends = {{"L0.w", {4, 4}, w.data()},
                                       {"L9999999.w", {4, 4}, w.data()}};
  const std::string path = TempPath("graph_repeat_ends.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, ends, std::map<std::string, std::string>{}).ok());
  GraphOptions options;
  options.max_memory_bytes = 64 << 20;
  const size_t peak = PeakRssBytes();
  auto graph = GraphModel::FromJson(json, path, options, "repeat.json");
  EXPECT_LT(PeakRssBytes() - peak, size_t{64} << 20);
  ExpectRefused(graph, "is named under 'L1.', want layer 1 of 10000000");
}

// At most 65,536 nodes, as written or with repeats expanded (planning a
// run's memory is quadratic in them).
TEST(GraphValidationTest, NodesAreCountedWithRepeatsExpanded) {
  std::string chain = R"({"inputs": ["t0"], "outputs": ["t65537"], "nodes": [)";
  for (int i = 0; i < 65537; ++i) {
    chain += std::string(i ? "," : "") + R"({"op": "gelu", "inputs": ["t)" +
             std::to_string(i) + R"("], "outputs": ["t)" +
             std::to_string(i + 1) + R"("]})";
  }
  auto long_graph = GraphModel::FromJson(
      chain + "]}", kGolden + "block.safetensors", {}, "chain.json");
  ExpectRefused(long_graph,
                "field 'nodes' has 65537 nodes, want at most 65536");

  const std::string block = WriteLinearBlock("graph_one_node_block.json");
  const std::string json =
      R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
          {"op": "gelu", "inputs": ["x"], "outputs": ["x1"]},
          {"op": "repeat", "inputs": ["x1"], "outputs": ["y"],
           "attributes": {"graph": ")" +
      block + R"(", "prefix": "L{i}."}}]})";
  const float one = 1.0f;
  std::vector<std::string> names;
  std::vector<F32Tensor> layers;
  for (int l = 0; l < 65536; ++l)
    names.push_back("L" + std::to_string(l) + ".w");
  for (const std::string& name : names) layers.push_back({name, {1, 1}, &one});
  const std::string path = TempPath("graph_65536_layers.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, layers, std::map<std::string, std::string>{})
          .ok());
  auto repeated = GraphModel::FromJson(json, path, {}, "repeat.json");
  ExpectRefused(repeated,
                "(65536 layers of 1 nodes): the graph passes 65536 nodes here");
  // Plain nodes after a repeat count too, before a later repeat.
  const std::string after =
      R"({"inputs": ["x"], "outputs": ["y"], "nodes": [
          {"op": "repeat", "inputs": ["x"], "outputs": ["x1"],
           "attributes": {"graph": ")" +
      block + R"(", "prefix": "L{i}.", "count": 65535}},
          {"op": "gelu", "inputs": ["x1"], "outputs": ["x2"]},
          {"op": "gelu", "inputs": ["x2"], "outputs": ["y"]}]})";
  ExpectRefused(GraphModel::FromJson(after, path, {}, "after.json"),
                "node 'gelu_2' (gelu): the graph passes 65536 nodes here");
}

// Sessions share the loaded model: a session outlives every other handle
// on its model, and sessions of one model give the same output, bit for bit.
TEST(GraphGoldenTest, SessionsRunWithoutTheirModelHandle) {
  const Golden g = ReadGolden("block_qkv_bias");
  auto graph = GraphModel::Load(kBlock, kGolden + "block_qkv_bias.safetensors");
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::shared_ptr<const GraphModel> model = std::move(graph).value();
  std::vector<float> first(g.expected.size()), again(g.expected.size());
  GraphSession session(model);
  ASSERT_TRUE(
      session.Run(g.input.data(), g.shape[0], g.shape[1], first.data()).ok());
  GraphSession other(model);
  model.reset();
  EXPECT_EQ(other.model().layers(), 1);
  EXPECT_EQ(other.model().input_width(), 24);
  ASSERT_TRUE(
      other.Run(g.input.data(), g.shape[0], g.shape[1], again.data()).ok());
  EXPECT_EQ(first, again);
  test::ExpectAllClose(g.expected, again.data(), g.tolerance, "session");
  // A session without a model refuses to run rather than crash.
  GraphSession none(nullptr);
  EXPECT_EQ(
      none.Run(g.input.data(), g.shape[0], g.shape[1], again.data()).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(none.memory().planned_peak, 0u);
}

TEST(GraphValidationTest, PartialQkvBias) {
  GraphOptions options;
  options.num_heads = 3;
  auto graph = GraphModel::Load(
      kBlock, CopyWithout("block_qkv_bias", "att.W_value.bias"), options);
  ExpectRefused(graph,
                "node 'att' (mha): weight 'att.W_value.bias' is missing from");
  EXPECT_NE(graph.status().message().find("want all q/k/v biases or none"),
            std::string::npos);
}

// A graph's FLOPs, counted independently: 2 x rows x the elements of every
// weight matrix the file holds (each is read by one matmul per token), plus
// each attention core at its causal half, 4 x b x pairs x d_out with pairs
// T^2 / 2, or T W - W^2 / 2 under a sliding window W. The book's block in 1
// and 3 layers and the Llama block (grouped K/V heads, a gated feed-forward)
// in 1 and 2 (with a window of 4).
TEST(GraphFlopsTest, EveryWeightMatrixAndEachCausalCore) {
  struct Case {
    std::string graph, golden;
    int64_t window;
  };
  for (const Case& c :
       {Case{kBlock, "block", 0}, Case{kBlock, "stack3", 0},
        Case{kLlama, "llama_block", 0}, Case{kLlama, "llama_stack2", 4}}) {
    const std::string weights = kGolden + c.golden + ".safetensors";
    auto model = GraphModel::Load(c.graph, weights);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto file = SafetensorsFile::Open(weights);
    ASSERT_TRUE(file.ok());
    double elements = 0, d_out = 0, attentions = 0;
    for (const TensorInfo& t : file->tensors()) {
      const std::string suffix = ".weight";
      if (t.shape.size() != 2 || t.name.size() < suffix.size() ||
          t.name.compare(t.name.size() - suffix.size(), suffix.size(),
                         suffix) != 0) {
        continue;
      }
      elements += double(t.shape[0] * t.shape[1]);
      if (t.name.find("out_proj") != std::string::npos) {
        d_out = double(t.shape[0]);
        ++attentions;
      }
    }
    const int64_t b = 3, T = 10;
    const double w = double(c.window);
    const double pairs = c.window > 0 ? T * w - w * w / 2 : T * T / 2.0;
    const double cores = attentions * 4.0 * b * pairs * d_out;
    EXPECT_DOUBLE_EQ((*model)->flops(b, T), 2.0 * b * T * elements + cores)
        << c.golden;
  }
}

// Without num_kv_heads in the metadata the K/V heads follow from W_key's
// rows; 12 rows of a head_dim of 8 are not whole heads, so the K/V heads
// stay the 4 query heads and W_key's shape is named as wrong.
TEST(GraphValidationTest, LlamaKeyRowsNotWholeHeads) {
  auto file = SafetensorsFile::Open(kGolden + "llama_block.safetensors");
  ASSERT_TRUE(file.ok());
  std::map<std::string, std::string> metadata = file->metadata();
  metadata.erase("num_kv_heads");
  std::vector<std::vector<float>> values;
  std::vector<F32Tensor> tensors;
  for (const TensorInfo& t : file->tensors()) {
    values.push_back(file->ReadF32(t.name).value());
  }
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const TensorInfo& t = file->tensors()[i];
    std::vector<int64_t> shape = t.shape;
    if (t.name == "att.W_key.weight") shape[0] = 12;  // 1.5 heads of 8
    tensors.push_back({t.name, shape, values[i].data()});
  }
  const std::string path = TempPath("graph_llama_key_rows.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  auto graph = GraphModel::Load(kLlama, path);
  ASSERT_FALSE(graph.ok());
  const std::string& message = graph.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("node 'att' (mha): weight 'att.W_key.weight' has "
                         "shape [12, 32], want [32, 32]"),
            std::string::npos)
      << message;
}

TEST(GraphValidationTest, HeadsFromOptionsElseMetadataElseError) {
  const std::string path = CopyWithout("block", "");
  auto no_heads = GraphModel::Load(kBlock, path);
  ASSERT_FALSE(no_heads.ok());
  EXPECT_NE(no_heads.status().message().find("num_heads is not given"),
            std::string::npos)
      << no_heads.status().message();
  GraphOptions options;
  options.num_heads = 5;  // not a divisor of 16
  auto bad_heads = GraphModel::Load(kBlock, path, options);
  ExpectRefused(bad_heads,
                "num_heads is 5 (from option num_heads, --heads), want a "
                "positive divisor of "
                "d_out 16 (the node's width)");
}

// ---------------------------------------------------------------- lowering

TEST(GraphLoweringTest, BlockFusesGeluAndTheFeedForwardResidual) {
  auto def = graph::ParseGraph(ReadText(kBlock), "block");
  ASSERT_TRUE(def.ok()) << def.status().message();
  const graph::Program p = graph::Lower(*def);
  using graph::Op;
  ASSERT_EQ(p.steps.size(), 6u);  // dropouts gone, GELU and add2 fused
  const Op want[] = {Op::kLayerNorm, Op::kMha,    Op::kAdd,
                     Op::kLayerNorm, Op::kLinear, Op::kLinear};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(p.steps[i].op, want[i]) << i;
  EXPECT_TRUE(p.steps[4].gelu);
  EXPECT_LT(p.steps[4].src2, 0);
  EXPECT_EQ(p.tensors[p.steps[5].src2], "x1");  // the residual, read in place
  EXPECT_EQ(p.steps[5].dst, p.output);
  EXPECT_EQ(p.tensors[p.steps[2].src2], "att_out");  // dropout aliased away
}

// ---------------------------------------------------------------- planner

// No two requests live at the same step may share a byte.
void ExpectNoLiveOverlap(const std::vector<graph::BufferRequest>& req,
                         const graph::BufferPlan& plan) {
  for (size_t a = 0; a < req.size(); ++a) {
    EXPECT_EQ(plan.offsets[a] % 64, 0u);
    EXPECT_LE(plan.offsets[a] + req[a].bytes, plan.peak_bytes);
    for (size_t b = a + 1; b < req.size(); ++b) {
      const bool live_together =
          req[a].first <= req[b].last && req[b].first <= req[a].last;
      const bool bytes_overlap =
          plan.offsets[a] < plan.offsets[b] + req[b].bytes &&
          plan.offsets[b] < plan.offsets[a] + req[a].bytes;
      EXPECT_FALSE(live_together && bytes_overlap && req[a].bytes &&
                   req[b].bytes)
          << "requests " << a << " and " << b;
    }
  }
}

TEST(GraphPlannerTest, ChainReusesTwoBuffers) {
  // t_i written by step i, read by step i + 1: only neighbours coexist.
  std::vector<graph::BufferRequest> req;
  for (size_t i = 0; i < 6; ++i) req.push_back({1000, i, i + 1});
  const graph::BufferPlan plan = graph::PlanBuffers(req);
  EXPECT_EQ(plan.peak_bytes, 2 * 1024u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);  // memory reused
  ExpectNoLiveOverlap(req, plan);
}

TEST(GraphPlannerTest, RandomLiveRangesNeverOverlap) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<graph::BufferRequest> req(1 + rng() % 20);
    size_t total = 0;
    for (auto& r : req) {
      r.first = rng() % 12;
      r.last = r.first + rng() % 5;
      r.bytes = 1 + rng() % 5000;
      total += (r.bytes + 63) / 64 * 64;
    }
    const graph::BufferPlan plan = graph::PlanBuffers(req);
    EXPECT_LE(plan.peak_bytes, total);
    ExpectNoLiveOverlap(req, plan);
  }
}

// One thread's scratch for a linear of the block at these rows, as the
// session plans it: oneDNN's scratch depends on the ISA it picks (none on
// AVX2's gemm, some on AVX-512's brgemm).
size_t LinearScratch(int64_t rows, int64_t in, int64_t out,
                     const kernels::PostOps& post) {
  using kernels::DataType;
  const kernels::Operand bias{{1, out}, {}, DataType::kF32};
  auto mm = kernels::MatMul::Create(
      {{rows, in}, {}, DataType::kF32}, {{in, out}, {}, DataType::kF32}, &bias,
      {{rows, out}, {}, DataType::kF32}, kernels::Threading::kTeam, post);
  EXPECT_TRUE(mm.ok()) << mm.status().message();
  return mm.ok() ? (mm->scratch_bytes() + 63) / 64 * 64 : 0;
}

TEST(GraphPlannerTest, BlockPeakIsBelowTheSumOfIntermediates) {
  GraphOptions options;
  options.num_threads = 1;
  auto graph = GraphModel::Load(kBlock, kGolden + "block.safetensors", options);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  GraphSession session(*graph);
  ASSERT_TRUE(session.Prepare(2, 7).ok());
  const GraphMemory m = session.memory();
  // x_norm1, att_out, x1, x_norm2, ff_act (4e): 8e; the mha's plain-loop
  // scratch (attention_op.cc): qkv, ctx and one head's scores; and the two
  // FF matmuls' scratch.
  const int64_t R = 2 * 7, E = 16;
  const size_t row = R * E * sizeof(float);
  const size_t mha = (R * 4 * E + 7 * 7) * sizeof(float);  // 3780
  kernels::PostOps ff1_post, ff2_post;
  ff1_post.gelu_tanh = true;
  ff2_post.add_residual = true;
  const size_t ff1 = LinearScratch(R, E, 4 * E, ff1_post);
  const size_t ff2 = LinearScratch(R, 4 * E, E, ff2_post);
  EXPECT_EQ(m.intermediates_total, 8 * row + 3840 + ff1 + ff2);
  EXPECT_LT(m.planned_peak, m.intermediates_total);
  // The largest of: x_norm1 + att_out + the mha's scratch; x1 + x_norm2 +
  // ff_act + the first FF matmul's; x1 + ff_act + the second's.
  EXPECT_EQ(m.planned_peak, std::max({2 * row + (mha + 63) / 64 * 64,
                                      6 * row + ff1, 5 * row + ff2}));
}

// The mha steps' activations and scratch are arena requests live during
// their step alone: the peak covers them, and the layers of a stack share
// them; each layer's operator reads its model's packed weights, holding no
// copy of its own. A stack adds only the two buffers that pass activations
// between its layers.
TEST(GraphPlannerTest, ArenaHoldsTheMhaBuffersOnceForAllLayers) {
  const int64_t B = 64, T = 6, E = 12;  // large enough for oneDNN's path
  GraphMemory memory[2];
  for (const int64_t layers : {1, 3}) {
    GraphOptions options;
    options.layers = layers;
    options.num_threads = 2;
    auto graph =
        GraphModel::Load(kBlock, kGolden + "stack3.safetensors", options);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    GraphSession session(*graph);
    ASSERT_TRUE(session.Prepare(B, T).ok());
    memory[layers / 3] = session.memory();
  }
  const size_t row = B * T * E * sizeof(float);
  EXPECT_EQ(memory[1].planned_peak, memory[0].planned_peak + 2 * row);
  EXPECT_EQ(memory[1].intermediates_total,
            memory[0].intermediates_total + 2 * row);
  EXPECT_EQ(memory[1].workspace, memory[0].workspace);
  // The operator of one layer's mha, as the graph plans it.
  MhaModelData mha;
  mha.config.d_in = mha.config.d_out = E;
  mha.config.num_heads = mha.config.num_kv_heads = 2;
  mha.config.context_length = T;
  mha.config.qkv_bias = true;
  mha.num_threads = 2;
  mha.max_memory_bytes = uint64_t{1} << 40;
  mha.w_qkv.assign(3 * E * E, 0.0f);
  mha.b_qkv.assign(3 * E, 0.0f);
  mha.w_out.assign(E * E, 0.0f);
  mha.b_out.assign(E, 0.0f);
  ASSERT_TRUE(MakeMhaLinears(mha, /*sessions=*/true, /*decode=*/false).ok());
  auto op = PlanMhaRun(mha, B, T, 0, "test");
  ASSERT_TRUE(op.ok()) << op.status().message();
  size_t buffers = 0;
  for (const size_t bytes : (*op)->buffer_bytes()) {
    buffers += (bytes + 63) / 64 * 64;
  }
  EXPECT_GT((*op)->buffer_bytes()[AttentionOp::kCoreScratch], 0u);
  // At the mha step its input, its output and its buffers are live at once.
  EXPECT_GE(memory[0].planned_peak, 2 * row + buffers);
  EXPECT_LE(memory[0].planned_peak, memory[0].intermediates_total);
}

// ---------------------------------------------------------------- post-ops

TEST(GraphMatMulTest, GeluAndResidualPostOpsMatchScalar) {
  std::mt19937 rng(9);
  const int64_t M = 13, K = 21, N = 35;
  const auto x = test::RandomVector(rng, M * K, -2.f, 2.f);
  const auto w = test::RandomVector(rng, N * K, -0.5f, 0.5f);  // [N, K]
  const auto bias = test::RandomVector(rng, N, -1.f, 1.f);
  const auto residual = test::RandomVector(rng, M * N, -3.f, 3.f);
  using kernels::DataType;
  kernels::PostOps post;
  post.gelu_tanh = true;
  post.add_residual = true;
  const kernels::Operand bias_op{{1, N}, {}, DataType::kF32};
  auto mm = kernels::MatMul::Create(
      {{M, K}, {}, DataType::kF32}, {{K, N}, {}, DataType::kF32}, &bias_op,
      {{M, N}, {}, DataType::kF32}, kernels::Threading::kTeam, post);
  ASSERT_TRUE(mm.ok()) << mm.status().message();
  std::vector<char> packed(mm->packed_weights_bytes() + 64);
  std::vector<char> scratch(mm->scratch_bytes() + 64);
  ASSERT_TRUE(
      mm->PackWeights({{K, N}, {1, K}, DataType::kF32}, w.data(), packed.data())
          .ok());
  std::vector<float> y(M * N);
  mm->Run(x.data(), packed.data(), bias.data(), y.data(), scratch.data(), 1,
          residual.data());
  std::vector<double> expected(M * N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = bias[j];
      for (int64_t k = 0; k < K; ++k)
        acc += double(x[i * K + k]) * w[j * K + k];
      const double g = 0.5 * acc *
                       (1 + std::tanh(std::sqrt(2 / M_PI) *
                                      (acc + 0.044715 * acc * acc * acc)));
      expected[i * N + j] = g + residual[i * N + j];
    }
  }
  test::ExpectAllClose(expected, y.data(), 1e-5 * test::MaxAbs(expected),
                       "post-ops");
}

}  // namespace
}  // namespace attn
