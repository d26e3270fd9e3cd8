// Whole models as graphs: tools/graphs/gpt_model.json and llama_model.json
// (embedding, position_embedding, repeat, a tied head) against PyTorch's
// logits in tests/golden/lm/ (Hugging Face GPT-2 files among them), through
// the C++ API and `attn run --graph`, at 1 and 2 threads and bitwise equal
// between them; the bad cases and the new ops' parse and load errors, each
// one clear line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "tests/temp_dir.h"

namespace attn {
namespace {

const std::string kSource = ATTN_SOURCE_DIR;
const std::string kLm = kSource + "/tests/golden/lm/";
const std::string kGptGraph = kSource + "/tools/graphs/gpt_model.json";
const std::string kLlamaGraph = kSource + "/tools/graphs/llama_model.json";

// A golden case of tests/golden/lm: its model, prompts and logits.
struct Case {
  std::string name, model, io, graph;
  std::vector<int64_t> ids, lengths;  // [batch, width], [batch]
  std::vector<float> logits;          // [batch, width, vocab]
  int64_t batch = 0, width = 0;
  double bound = 0.0;  // tolerance x max |logit|
};

Case ReadCase(const std::string& name) {
  Case c;
  c.name = name;
  c.model = kLm + name + "/model.safetensors";
  c.io = kLm + name + "/io.safetensors";
  c.graph = name.rfind("llama", 0) == 0 ? kLlamaGraph : kGptGraph;
  Result<SafetensorsFile> io = SafetensorsFile::Open(c.io);
  EXPECT_TRUE(io.ok()) << io.status().message();
  if (!io.ok()) return c;
  c.ids = io->ReadI64("input_ids").value();
  c.batch = io->Find("input_ids")->shape[0];
  c.width = io->Find("input_ids")->shape[1];
  c.lengths = io->Find("lengths") ? io->ReadI64("lengths").value()
                                  : std::vector<int64_t>(c.batch, c.width);
  c.logits = io->ReadF32("logits").value();
  double largest = 0.0;
  for (float v : c.logits) largest = std::max(largest, std::fabs(double{v}));
  c.bound = std::stod(io->metadata().at("tolerance")) * largest;
  return c;
}

// The hf_ cases are Hugging Face GPT-2 files (Conv1D, c_attn, a tied head,
// a "transformer." prefix; heads in config.json) through gpt_model.json.
const char* const kCases[] = {
    "gpt_book_1l", "gpt_book_2l_bias", "gpt_book_3l",
    "hf_gpt2",     "hf_gpt2_prefixed", "hf_gpt2_tied",
    "llama_gqa",   "llama_mqa",        "llama_scaled_tied"};

// The largest |got - want| over each row's own tokens (a padded row's
// positions past its length see padding the PyTorch run did not).
double WorstError(const Case& c, const std::vector<float>& got) {
  const size_t vocab = c.logits.size() / static_cast<size_t>(c.batch * c.width);
  double worst = 0.0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const size_t first = static_cast<size_t>(b * c.width) * vocab;
    const size_t end = first + static_cast<size_t>(c.lengths[b]) * vocab;
    for (size_t i = first; i < end; ++i) {
      worst = std::max(worst, std::fabs(double{got[i]} - c.logits[i]));
    }
  }
  return worst;
}

Result<std::vector<float>> RunGraph(const Case& c, int threads) {
  GraphOptions options;
  options.num_threads = threads;
  ATTN_ASSIGN_OR_RETURN(auto model,
                        GraphModel::Load(c.graph, c.model, options));
  EXPECT_TRUE(model->token_input());
  std::vector<float> logits(c.logits.size());
  GraphSession session(model);
  ATTN_RETURN_IF_ERROR(
      session.Run(c.ids.data(), c.batch, c.width, logits.data()));
  return logits;
}

TEST(GraphModelTest, GoldenLogitsThroughTheApiAtOneAndTwoThreads) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Case c = ReadCase(name);
    Result<std::vector<float>> one = RunGraph(c, 1);
    Result<std::vector<float>> two = RunGraph(c, 2);
    ASSERT_TRUE(one.ok()) << one.status().message();
    ASSERT_TRUE(two.ok()) << two.status().message();
    EXPECT_LE(WorstError(c, *one), c.bound);
    EXPECT_EQ(
        0, std::memcmp(one->data(), two->data(), one->size() * sizeof(float)));
  }
}

TEST(GraphModelTest, BitwiseEqualAtEveryThreadCountAndLength) {
  // gpt_book_3l (context 20) and llama_gqa (context 24), one session per
  // thread count reused across lengths.
  for (const char* name : {"gpt_book_3l", "llama_gqa"}) {
    SCOPED_TRACE(name);
    const Case c = ReadCase(name);
    std::vector<GraphSession> sessions;
    for (const int threads : {1, 2, 3, 7}) {
      GraphOptions options;
      options.num_threads = threads;
      sessions.emplace_back(
          GraphModel::Load(c.graph, c.model, options).value());
    }
    const int64_t vocab = sessions[0].model().output_width();
    for (const int64_t length : {1, 7, 13, 20}) {
      std::vector<int64_t> ids(static_cast<size_t>(2 * length));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 37 + 5) % 80;
      std::vector<float> want(ids.size() * static_cast<size_t>(vocab));
      ASSERT_TRUE(sessions[0].Run(ids.data(), 2, length, want.data()).ok());
      for (size_t t = 1; t < sessions.size(); ++t) {
        std::vector<float> got(want.size());
        ASSERT_TRUE(sessions[t].Run(ids.data(), 2, length, got.data()).ok());
        EXPECT_EQ(
            0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "session " << t << ", length " << length;
      }
    }
  }
}

// Runs `attn args`; its exit code and stderr.
struct Outcome {
  int exit_code;
  std::string stderr_text;
};
Outcome Attn(const test::TempDir& dir, const std::string& args) {
  const std::string err = dir.Path("stderr.txt");
  const int status = std::system(
      (std::string(ATTN_CLI) + " " + args + " >/dev/null 2>" + err).c_str());
  std::ifstream in(err);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          std::string(std::istreambuf_iterator<char>(in), {})};
}

std::string RunArgs(const std::string& graph, const std::string& model,
                    const std::string& input, const std::string& output) {
  return "run --graph " + graph + " --weights " + model + " --input " + input +
         " --output " + output;
}

TEST(GraphModelTest, GoldenLogitsThroughTheCliAtOneAndTwoThreads) {
  test::TempDir dir;
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Case c = ReadCase(name);
    std::vector<std::vector<float>> logits;
    for (const int threads : {1, 2}) {
      const std::string out = dir.Path(std::to_string(threads) + ".st");
      const Outcome outcome =
          Attn(dir, RunArgs(c.graph, c.model, c.io, out) + " --threads " +
                        std::to_string(threads));
      ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
      logits.push_back(SafetensorsFile::Open(out)->ReadF32("logits").value());
      ASSERT_EQ(logits.back().size(), c.logits.size());
      // Zeros past each row's length, as PyTorch's file has them.
      double worst = 0.0;
      for (size_t i = 0; i < c.logits.size(); ++i) {
        worst =
            std::max(worst, std::fabs(double{logits.back()[i]} - c.logits[i]));
      }
      EXPECT_LE(worst, c.bound);
    }
    EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(),
                             logits[0].size() * sizeof(float)));
  }
}

TEST(GraphModelTest, BadCasesFailWithOneLineAndNoOutput) {
  test::TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"token_out_of_range",
       "input_ids[0, 2] is 50, want a token id from 0 to 49"},
      {"too_long", "a prompt of 9 tokens is longer than the context 8"}};
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    const std::string bad = kLm + "bad/" + name;
    const std::string out = dir.Path("out.st");
    const Outcome outcome =
        Attn(dir, RunArgs(kGptGraph, bad + "/model.safetensors",
                          bad + "/io.safetensors", out));
    EXPECT_EQ(outcome.exit_code, 1);
    EXPECT_EQ(std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(),
                         '\n'),
              1)
        << outcome.stderr_text;
    EXPECT_NE(outcome.stderr_text.find(message), std::string::npos)
        << outcome.stderr_text;
    EXPECT_FALSE(std::ifstream(out).good());
  }
}

TEST(GraphModelTest, ALlamaFileForTheGptGraphFailsWithOneLine) {
  test::TempDir dir;
  const std::string llama = kLm + "llama_gqa/";
  const std::string out = dir.Path("out.st");
  const Outcome outcome =
      Attn(dir, RunArgs(kGptGraph, llama + "model.safetensors",
                        llama + "io.safetensors", out));
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(
      std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(), '\n'),
      1)
      << outcome.stderr_text;
  EXPECT_NE(
      outcome.stderr_text.find("weight 'pos_emb.weight' is missing from '" +
                               llama + "model.safetensors'"),
      std::string::npos)
      << outcome.stderr_text;
  EXPECT_FALSE(std::ifstream(out).good());
}

TEST(GraphModelTest, BenchRefusesAGraphOnTokenIds) {
  test::TempDir dir;
  const Outcome outcome =
      Attn(dir, "bench --graph " + kGptGraph + " --weights " + kLm +
                    "gpt_book_1l/model.safetensors --shape 1,16,32,2 "
                    "--threads 1 --min-time 0.01");
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_NE(outcome.stderr_text.find("takes token ids"), std::string::npos)
      << outcome.stderr_text;
}

// Loading `json` against gpt_book_1l's weights fails with one line holding
// `message`.
void ExpectLoadError(const std::string& json, const std::string& message) {
  const std::string weights = kLm + "gpt_book_1l/model.safetensors";
  Result<std::shared_ptr<const GraphModel>> model =
      GraphModel::FromJson(json, weights, {}, "model.json");
  ASSERT_FALSE(model.ok()) << json;
  const std::string& got = model.status().message();
  EXPECT_NE(got.find(message), std::string::npos) << got;
  EXPECT_EQ(got.find('\n'), std::string::npos) << got;
}

// A graph of an embedding, `middle` (nodes from x0 to x) and a head.
std::string ModelJson(
    const std::string& middle,
    const std::string& embedding_weight = "\"tok_emb.weight\"",
    const std::string& head_weight = "\"out_head.weight\"") {
  return R"({"inputs": ["ids"], "outputs": ["logits"], "nodes": [
    {"name": "tok_emb", "op": "embedding", "inputs": ["ids"],
     "outputs": ["x0"], "weights": {"weight": )" +
         embedding_weight + "}}, " + middle + R"(,
    {"name": "head", "op": "linear", "inputs": ["x"], "outputs": ["logits"],
     "weights": {"weight": )" +
         head_weight + "}}]}";
}

std::string Repeat(const std::string& attributes) {
  return R"({"name": "blocks", "op": "repeat", "inputs": ["x0"],
             "outputs": ["x"], "attributes": {)" +
         attributes + "}}";
}

const std::string kBlockFile =
    "\"graph\": \"" + kSource + "/tools/graphs/transformer_block.json\"";

TEST(GraphModelTest, NewOpsRefuseBadGraphsWithOneLine) {
  const std::string prefix = "\"prefix\": \"trf_blocks.{i}.\"";
  const std::string blocks = Repeat(kBlockFile + ", " + prefix);
  // The graph itself.
  ExpectLoadError(ModelJson(blocks, "\"final_norm.scale\""),
                  "weight 'final_norm.scale' has shape [32], want rank 2");
  ExpectLoadError(ModelJson(blocks, "[]"),
                  "want a tensor name or a non-empty array");
  ExpectLoadError(ModelJson(blocks, "\"tok_emb.weight\"", R"(["a", "b"])"),
                  "weight 'a' or 'b' is missing");
  ExpectLoadError(ModelJson(Repeat(prefix)), "attribute 'graph' is missing");
  ExpectLoadError(ModelJson(Repeat(kBlockFile)),
                  "attribute 'prefix' is missing");
  ExpectLoadError(
      ModelJson(Repeat(kBlockFile + R"(, "prefix": "trf_blocks.")")),
      "want it to hold {i}");
  ExpectLoadError(
      ModelJson(Repeat(kBlockFile + ", " + prefix + R"(, "count": 0)")),
      "attribute 'count' is 0, want a positive integer");
  ExpectLoadError(ModelJson(Repeat(kBlockFile + R"(, "prefix": "h.{i}.")")),
                  "no tensor in '" + kLm +
                      "gpt_book_1l/model.safetensors' is named under 'h.0.'");
  ExpectLoadError(
      ModelJson(Repeat(R"("graph": "no_such_block.json", )" + prefix)),
      "no_such_block.json");
  ExpectLoadError(
      ModelJson(Repeat("\"graph\": \"" + kGptGraph + "\", " + prefix)),
      "has a repeat node, want a block without one");
  // An eps float cannot hold.
  ExpectLoadError(ModelJson(R"({"op": "layernorm", "inputs": ["x0"],
      "outputs": ["x"], "weights": {"scale": "final_norm.scale",
      "shift": "final_norm.shift"}, "attributes": {"eps": 1e300}})"),
                  "want a positive number within float's range");
  // Token ids are read by embeddings alone, and only from the graph input.
  ExpectLoadError(ModelJson(R"({"op": "add", "inputs": ["x0", "ids"],
                                "outputs": ["x"]})"),
                  "reads the graph input 'ids', which holds token ids");
  ExpectLoadError(ModelJson(R"({"name": "again", "op": "embedding",
      "inputs": ["x0"], "outputs": ["x"], "weights": {"weight": "tok_emb.weight"}})"),
                  "input 'x0' is not the graph input 'ids'");
  ExpectLoadError(ModelJson(R"({"op": "position_embedding", "inputs": ["x0"],
                    "outputs": ["x"], "weights": {"weight": "final_norm.scale"}})"),
                  "weight 'final_norm.scale' has shape [32], want rank 2");
}

// A file whose repeat names the file itself is refused before the block is
// read again (it recursed until the stack ran out).
TEST(GraphModelTest, AGraphRepeatingItselfIsRefused) {
  test::TempDir dir;
  const std::string path =
      dir.Write("self.json",
                R"({"inputs": ["ids"], "outputs": ["y"], "nodes": [{"name": "r",
          "op": "repeat", "inputs": ["ids"], "outputs": ["y"], "attributes":
          {"graph": "self.json", "prefix": "trf_blocks.{i}."}}]})");
  const auto model =
      GraphModel::Load(path, kLm + "gpt_book_1l/model.safetensors");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(
                "has a repeat node, want a block without one"),
            std::string::npos)
      << model.status().message();
}

TEST(GraphModelTest, RunTakesTheInputKindTheGraphHas) {
  const Case c = ReadCase("gpt_book_1l");
  auto model = GraphModel::Load(kGptGraph, c.model).value();
  EXPECT_EQ(model->input_width(), 1);
  EXPECT_EQ(model->output_width(), 64);
  GraphSession session(model);
  std::vector<float> x(static_cast<size_t>(2 * 9 * 64)), y(x.size());
  const Status floats = session.Run(x.data(), 2, 9, y.data());
  EXPECT_NE(floats.message().find("graph input 'input_ids' is token ids"),
            std::string::npos)
      << floats.message();
  std::vector<int64_t> ids = c.ids;
  ids[5] = -1;
  EXPECT_EQ(session.Run(ids.data(), 2, 9, y.data()).message(),
            "input_ids[0, 5] is -1, want a token id from 0 to 63");
  // A block graph's input is floats: gpt_book_1l's block alone.
  GraphOptions one_block;
  one_block.layers = 1;
  auto block =
      GraphModel::Load(kSource + "/tools/graphs/transformer_block.json",
                       c.model, one_block)
          .value();
  EXPECT_FALSE(block->token_input());
  GraphSession block_session(block);
  EXPECT_NE(block_session.Run(ids.data(), 2, 9, y.data())
                .message()
                .find("want Run with float input"),
            std::string::npos);
}

// `case_name`'s model copied into `dir` as F32, plus `extra` tensors of
// ones (in place of any of the same name) and with `metadata` set (an empty
// value erases the key); the copy's path.
std::string CopyModel(
    const test::TempDir& dir, const std::string& case_name,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& extra,
    const std::map<std::string, std::string>& metadata) {
  const SafetensorsFile file =
      SafetensorsFile::Open(ReadCase(case_name).model).value();
  std::vector<std::vector<float>> values;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const TensorInfo& t : file.tensors()) {
    const bool replaced = std::any_of(
        extra.begin(), extra.end(), [&](auto& e) { return e.first == t.name; });
    if (replaced) continue;
    values.push_back(file.ReadF32(t.name).value());
    shapes.emplace_back(t.name, t.shape);
  }
  for (const auto& [name, shape] : extra) {
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                      std::multiplies<int64_t>());
    values.emplace_back(static_cast<size_t>(n), 1.0f);
    shapes.emplace_back(name, shape);
  }
  std::vector<F32Tensor> tensors;
  for (size_t i = 0; i < values.size(); ++i) {
    tensors.push_back({shapes[i].first, shapes[i].second, values[i].data()});
  }
  std::map<std::string, std::string> meta = file.metadata();
  for (const auto& [key, value] : metadata) {
    if (value.empty()) {
      meta.erase(key);
    } else {
      meta[key] = value;
    }
  }
  const std::string path = dir.Path(case_name + ".safetensors");
  EXPECT_TRUE(WriteSafetensors(path, tensors, meta).ok());
  return path;
}

// A whole model's file is checked as the library loads it, must be read by
// the graph whole, at the model's eps, and a repeat count it cannot back is
// refused before the block is copied per layer.
TEST(GraphModelTest, WholeModelFilesRunAsTheLibraryRunsThem) {
  test::TempDir dir;
  const auto refused = [](const std::string& graph, const std::string& model,
                          const std::string& needle,
                          const GraphOptions& options = {}) {
    const auto loaded = GraphModel::Load(graph, model, options);
    ASSERT_FALSE(loaded.ok()) << needle;
    EXPECT_NE(loaded.status().message().find(needle), std::string::npos)
        << loaded.status().message();
  };
  refused(kGptGraph,
          CopyModel(dir, "gpt_book_1l",
                    {{"trf_blocks.0.att.extra.weight", {2, 2}}}, {}),
          "tensor 'trf_blocks.0.att.extra.weight'");
  const int64_t emb = SafetensorsFile::Open(ReadCase("llama_gqa").model)
                          ->Find("tok_emb.weight")
                          ->shape[1];
  const std::string biased =
      CopyModel(dir, "llama_gqa",
                {{"trf_blocks.0.att.out_proj.bias", {emb}},
                 {"trf_blocks.1.att.out_proj.bias", {emb}}},
                {});
  refused(kLlamaGraph, biased,
          "holds 'trf_blocks.0.att.out_proj.bias', which the graph does not "
          "read");
  refused(kLlamaGraph,
          CopyModel(dir, "llama_gqa", {}, {{"rms_norm_eps", "0.5"}}),
          "eps differs between the graph's 1e-05 and the model's 0.5");
  // A head of another vocabulary: logits of another width.
  const std::string model = ReadCase("gpt_book_1l").model;
  const std::vector<int64_t> head =
      SafetensorsFile::Open(model)->Find("out_head.weight")->shape;
  const std::string narrow = CopyModel(
      dir, "gpt_book_1l", {{"out_head.weight", {head[0] - 1, head[1]}}}, {});
  refused(kGptGraph, narrow, "'out_head.weight' in");
  GraphOptions deep;
  deep.layers = 1000000;
  refused(kGptGraph, ReadCase("gpt_book_1l").model,
          "1000000 layers asked for, but '" + ReadCase("gpt_book_1l").model +
              "' holds a model of 1",
          deep);
}

// A whole model's file is checked with the heads the graph's nodes give
// when neither the options nor its metadata do.
TEST(GraphModelTest, HeadsFromTheGraphServeAFileWithoutThem) {
  test::TempDir dir;
  const std::string headless =
      CopyModel(dir, "gpt_book_1l", {}, {{"num_heads", ""}});
  std::ifstream in(kSource + "/tools/graphs/transformer_block.json");
  std::string block(std::istreambuf_iterator<char>(in), {});
  const std::string mha = "\"op\": \"mha\",";
  const size_t at = block.find(mha);
  ASSERT_NE(at, std::string::npos);
  block.insert(at + mha.size(), " \"attributes\": {\"num_heads\": 2},");
  GraphOptions one;
  one.layers = 1;
  const auto loaded = GraphModel::FromJson(block, headless, one, "block.json");
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
}

TEST(GraphModelTest, LayersOptionSetsTheRepeatCount) {
  // gpt_book_3l's first block alone, then its final norm and head: not the
  // golden logits, but a valid model of one layer.
  const Case c = ReadCase("gpt_book_3l");
  GraphOptions options;
  options.layers = 1;
  auto one = GraphModel::Load(kGptGraph, c.model, options).value();
  auto all = GraphModel::Load(kGptGraph, c.model).value();
  std::vector<float> y1(c.logits.size()), y3(c.logits.size());
  ASSERT_TRUE(
      GraphSession(one).Run(c.ids.data(), c.batch, c.width, y1.data()).ok());
  ASSERT_TRUE(
      GraphSession(all).Run(c.ids.data(), c.batch, c.width, y3.data()).ok());
  EXPECT_LE(WorstError(c, y3), c.bound);
  EXPECT_GT(WorstError(c, y1), c.bound);
}

}  // namespace
}  // namespace attn
