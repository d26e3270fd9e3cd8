// Hostile graph files: nesting that would overflow nlohmann's
// recursive parser, duplicate keys, paths that are not regular files, the
// empty graph, and a 20,000-node chain that a quadratic loader would not
// finish within ctest's timeout. White-box: the chain's order and lowering
// are checked too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "engine/runtime/graph_ir.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

const std::string kBlockWeights =
    std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/block.safetensors";

// A graph x -> y over the block's weights whose one node is `node`.
std::string OneNodeGraph(const std::string& node) {
  return R"({"inputs": ["x"], "outputs": ["y"], "nodes": [)" + node + "]}";
}

// A layernorm node that loads over the block's weights, with `extra` fields.
std::string LayerNorm(const std::string& extra = "") {
  return R"({"op": "layernorm", "inputs": ["x"], "outputs": ["y"],)"
         R"( "weights": {"scale": "norm1.scale", "shift": "norm1.shift"})" +
         extra + "}";
}

// `inner` inside `depth` arrays.
std::string Nested(size_t depth, const std::string& inner) {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// The error of loading `json` (named g.json) over the block's weights, or
// "(loaded)"; every error is one line starting with the source.
std::string LoadError(const std::string& json) {
  auto graph = GraphModel::FromJson(json, kBlockWeights, {}, "g.json");
  if (graph.ok()) return "(loaded)";
  const std::string& message = graph.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind("g.json: ", 0), 0u) << message;
  EXPECT_LT(message.size(), 400u) << message;
  return message;
}

TEST(GraphHostileTest, DeepNestingIsRefusedBeforeAnyDomIsBuilt) {
  ASSERT_EQ(LoadError(OneNodeGraph(LayerNorm())), "(loaded)");
  const std::vector<std::string> deep = {
      Nested(200000, ""),
      R"({"inputs": )" + Nested(200000, R"("x")") +
          R"(, "outputs": ["y"], "nodes": []})",
      OneNodeGraph(R"({"op": "gelu", "inputs": )" + Nested(200000, R"("x")") +
                   R"(, "outputs": ["y"]})"),
      OneNodeGraph(LayerNorm(R"(, "attributes": {"eps": )" +
                             Nested(200000, "1e-5") + "}")),
  };
  for (const std::string& json : deep) {
    const std::string message = LoadError(json);
    EXPECT_NE(message.find("nests JSON deeper than 32 levels, the limit"),
              std::string::npos)
        << message;
  }
  // At the limit the JSON is read and the value refused for what it is:
  // graph, nodes, node and attributes are 4 levels, the value's arrays 28.
  const std::string at_limit = LoadError(OneNodeGraph(
      LayerNorm(R"(, "attributes": {"eps": )" + Nested(28, "1e-5") + "}")));
  EXPECT_NE(at_limit.find("attribute 'eps' is [[[["), std::string::npos)
      << at_limit;
  EXPECT_NE(at_limit.find("...,"), std::string::npos)
      << "a long value is abbreviated: " << at_limit;
  EXPECT_NE(LoadError(OneNodeGraph(LayerNorm(R"(, "attributes": {"eps": )" +
                                             Nested(29, "1e-5") + "}")))
                .find("nests JSON deeper than 32 levels"),
            std::string::npos);
}

TEST(GraphHostileTest, DuplicateKeysAreRefused) {
  const struct {
    std::string json, says;
  } cases[] = {
      {R"({"inputs": ["x"], "inputs": ["x"], "outputs": ["y"], "nodes": [)" +
           LayerNorm() + "]}",
       "names key 'inputs' twice in one object"},
      {OneNodeGraph(R"({"op": "gelu", "op": "layernorm", "inputs": ["x"],)"
                    R"( "outputs": ["y"], "weights": {"scale": "norm1.scale",)"
                    R"( "shift": "norm1.shift"}})"),
       "names key 'op' twice"},
      {OneNodeGraph(R"({"op": "layernorm", "inputs": ["x"], "outputs": ["y"],)"
                    R"( "weights": {"scale": "norm1.shift", "scale":)"
                    R"( "norm1.scale", "shift": "norm1.shift"}})"),
       "names key 'scale' twice"},
      {OneNodeGraph(LayerNorm(R"(, "attributes": {"eps": 0.5, "eps": 1e-5})")),
       "names key 'eps' twice"},
      {OneNodeGraph(LayerNorm(R"(, "attributes": {"a\nb": 1, "a\nb": 2})")),
       R"(names key 'a\x0ab' twice)"},
  };
  for (const auto& c : cases) {
    const std::string message = LoadError(c.json);
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

TEST(GraphHostileTest, EmptyGraphIsRefused) {
  for (const char* json :
       {R"({"inputs": ["x"], "outputs": ["x"], "nodes": []})",
        R"({"inputs": ["x"], "outputs": ["y"], "nodes": []})"}) {
    const std::string message = LoadError(json);
    EXPECT_NE(message.find("field 'nodes' is empty, want at least one node"),
              std::string::npos)
        << message;
  }
}

// A FIFO is refused without waiting for a writer, /dev/zero without reading
// it, and a file over the size cap without reading it.
TEST(GraphHostileTest, OnlyRegularFilesOfBoundedSizeAreRead) {
  const test::TempDir dir;
  const std::string fifo = dir.Path("fifo.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir.Write("huge.json", "");
  ASSERT_EQ(truncate(huge.c_str(), (off_t{64} << 20) + 1), 0);  // sparse
  const struct {
    std::string path, says;
  } cases[] = {
      {fifo, "is not a regular file"},
      {"/dev/zero", "is not a regular file"},
      {dir.path(), "is not a regular file"},
      {dir.Path("missing.json"), "cannot be opened: No such file"},
      {huge, "is 67108865 bytes, over the limit of 67108864 bytes"},
  };
  for (const auto& c : cases) {
    auto graph = GraphModel::Load(c.path, kBlockWeights);
    ASSERT_FALSE(graph.ok()) << c.path;
    const std::string& message = graph.status().message();
    EXPECT_EQ(message.rfind("graph file '" + c.path + "' " + c.says, 0), 0u)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// The chain x -> 5000 gelus -> 5000 dropouts -> 5000 x (linear, gelu) -> y,
// written last node first. Widths must flow back from the first linear to
// x, the file must be reordered, and each gelu fuses into its linear.
TEST(GraphHostileTest, TwentyThousandNodeChainLoads) {
  constexpr int kRun = 5000;
  const test::TempDir dir;
  std::vector<std::string> nodes;  // in chain order
  std::string tensor = "x";
  auto add = [&](const std::string& op, const std::string& extra) {
    const std::string out =
        nodes.size() + 1 == 4 * kRun ? "y" : "t" + std::to_string(nodes.size());
    nodes.push_back(R"({"op": ")" + op + R"(", "inputs": [")" + tensor +
                    R"("], "outputs": [")" + out + "\"]" + extra + "}");
    tensor = out;
  };
  for (int i = 0; i < kRun; ++i) add("gelu", "");
  for (int i = 0; i < kRun; ++i) add("dropout", "");
  const std::vector<float> weight(16, 0.25f);
  std::vector<F32Tensor> tensors;
  for (int i = 0; i < kRun; ++i) {
    const std::string name = "w" + std::to_string(i);
    add("linear", R"(, "weights": {"weight": ")" + name + "\"}");
    add("gelu", "");
    tensors.push_back({name, {4, 4}, weight.data()});
  }
  std::string json = R"({"inputs": ["x"], "outputs": ["y"], "nodes": [)";
  for (size_t i = nodes.size(); i-- > 0;) {
    json += nodes[i] + (i ? ",\n" : "]}");
  }
  const std::string graph_path = dir.Write("chain.json", json);
  const std::string weights_path = dir.Path("chain.safetensors");
  ASSERT_TRUE(WriteSafetensors(weights_path, tensors).ok());

  auto graph = GraphModel::Load(graph_path, weights_path);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ((*graph)->input_width(), 4);
  EXPECT_EQ((*graph)->output_width(), 4);

  Result<graph::GraphDef> def = graph::ParseGraph(json, "chain.json");
  ASSERT_TRUE(def.ok()) << def.status().message();
  ASSERT_EQ(def->nodes.size(), size_t{4 * kRun});
  EXPECT_EQ(def->nodes.front().inputs[0], "x");
  for (size_t i = 1; i < def->nodes.size(); ++i) {
    ASSERT_EQ(def->nodes[i].inputs[0], def->nodes[i - 1].outputs[0]) << i;
  }
  const graph::Program program = graph::Lower(*def);
  ASSERT_EQ(program.steps.size(), size_t{2 * kRun});
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const bool linear = i >= kRun;
    ASSERT_EQ(program.steps[i].op,
              linear ? graph::Op::kLinear : graph::Op::kGelu)
        << i;
    ASSERT_EQ(program.steps[i].gelu, linear) << i;
  }
}

}  // namespace
}  // namespace attn
