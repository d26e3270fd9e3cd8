// A family's builder and its graph file are one program: the GPT and
// Llama builders give the nodes and the lowered program of
// tools/graphs/gpt_model.json and llama_model.json, a model file loaded
// either way binds every node to the same weights, and the two run on the
// Runner to the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/graph.hpp"
#include "attn/lm.hpp"
#include "engine/models/graph_model.h"
#include "engine/models/lm_family.h"
#include "engine/models/lm_model.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/ops/attention_op.h"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/runner.h"
#include "engine/runtime/threads.h"

namespace attn {
namespace {

const std::string kSource = ATTN_SOURCE_DIR;
const std::string kLm = kSource + "/tests/golden/lm/";

graph::GraphDef Expanded(const std::string& path, int64_t layers) {
  const std::string text = graph::ReadGraphFile(path).value();
  const graph::GraphDef def = graph::ParseGraph(text, path).value();
  return graph::ExpandRepeats(
             def,
             [layers](const graph::Node&) { return Result<int64_t>(layers); })
      .value();
}

void ExpectSameNodes(const graph::GraphDef& a, const graph::GraphDef& b) {
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.output, b.output);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t n = 0; n < a.nodes.size(); ++n) {
    SCOPED_TRACE(a.nodes[n].name);
    EXPECT_EQ(a.nodes[n].name, b.nodes[n].name);
    EXPECT_EQ(a.nodes[n].op, b.nodes[n].op);
    EXPECT_EQ(a.nodes[n].inputs, b.nodes[n].inputs);
    EXPECT_EQ(a.nodes[n].outputs, b.nodes[n].outputs);
    auto weights = a.nodes[n].weights;  // JSON objects come sorted
    std::sort(weights.begin(), weights.end());
    auto want = b.nodes[n].weights;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(weights, want);
    EXPECT_EQ(a.nodes[n].eps, b.nodes[n].eps);
  }
}

void ExpectSameProgram(const graph::Program& a, const graph::Program& b) {
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.output, b.output);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(a.steps[k].op, b.steps[k].op);
    EXPECT_EQ(a.steps[k].node, b.steps[k].node);
    EXPECT_EQ(a.steps[k].src, b.steps[k].src);
    EXPECT_EQ(a.steps[k].src2, b.steps[k].src2);
    EXPECT_EQ(a.steps[k].dst, b.steps[k].dst);
    EXPECT_EQ(a.steps[k].gelu, b.steps[k].gelu);
  }
}

TEST(ProgramTest, BuildersGiveTheGraphFilesNodesAndProgram) {
  LmConfig config;
  config.num_layers = 3;
  config.norm_eps = 1e-5;
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama" : "gpt");
    const graph::GraphDef file =
        Expanded(kSource + (llama ? "/tools/graphs/llama_model.json"
                                  : "/tools/graphs/gpt_model.json"),
                 config.num_layers);
    const graph::GraphDef built =
        (llama ? lm::LlamaProgram(config) : lm::GptProgram(config)).value();
    ExpectSameNodes(built, file);
    ExpectSameProgram(graph::Lower(built), graph::Lower(file));
  }
}

size_t Floats(const BoundProgram& p, int tensor, int64_t rows) {
  return static_cast<size_t>(rows * p.widths[size_t(tensor)]);
}

// What `linear` computes for 16 rows of fixed x on a matmul (never the
// panels): linears of one shape give the same bits when their weights and
// biases are the same. A language model keeps no plain weights where its
// runs do not read them, so its linears are compared by what they compute.
std::vector<float> Apply(const ops::Linear& linear) {
  const int64_t rows = 16;
  ops::LinearEpilogue form;
  form.panels = false;
  const ops::LinearPlan plan =
      ops::LinearPlan::Create(linear, rows, form,
                              ops::LinearFallback::kOwnPacked, 1)
          .value();
  std::vector<float> x(static_cast<size_t>(rows * linear.in()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7 % 13) - 6) / 8;
  std::vector<float> y(static_cast<size_t>(rows * linear.out()));
  const AlignedBuffer own =
      AlignedBuffer::Allocate(plan.own_packed_bytes()).value();
  const AlignedBuffer scratch =
      AlignedBuffer::Allocate(plan.scratch_bytes()).value();
  if (plan.own_packed_bytes() > 0) {
    EXPECT_TRUE(plan.PackOwn(linear, own.data()).ok());
  }
  plan.Run(linear, x.data(), y.data(), {nullptr, scratch.data(), own.data()},
           1);
  return y;
}

// Node n reads the same numbers through either binding.
void ExpectSameWeights(const BoundProgram& a, const BoundProgram& b, size_t n) {
  const NodeBinding& x = a.layers[0][n];
  const NodeBinding& y = b.layers[0][n];
  ASSERT_EQ(x.linear == nullptr, y.linear == nullptr);
  if (x.linear) {
    ASSERT_EQ(x.linear->out(), y.linear->out());
    ASSERT_EQ(x.linear->in(), y.linear->in());
    EXPECT_EQ(Apply(*x.linear), Apply(*y.linear));
    ASSERT_EQ(x.linear->bias() == nullptr, y.linear->bias() == nullptr);
    if (x.linear->bias()) {
      EXPECT_EQ(0, std::memcmp(x.linear->bias(), y.linear->bias(),
                               size_t(x.linear->out()) * sizeof(float)));
    }
  }
  const size_t width = static_cast<size_t>(
      a.widths[size_t(a.program->steps.back().src)]);  // the model's e
  const size_t rows = x.rows ? size_t(x.rows) : 1;
  EXPECT_EQ(x.rows, y.rows);
  ASSERT_EQ(x.weight || x.bf16_table, y.weight || y.bf16_table);
  const auto value = [&](const NodeBinding& b, size_t i) {
    return b.weight ? b.weight[i] : hwy::F32FromBF16(b.bf16_table[i]);
  };
  for (size_t i = 0; (x.weight || x.bf16_table) && i < rows * width; ++i) {
    ASSERT_EQ(value(x, i), value(y, i)) << i;
  }
  ASSERT_EQ(x.bias == nullptr, y.bias == nullptr);
  if (x.bias) {
    EXPECT_EQ(0, std::memcmp(x.bias, y.bias, width * sizeof(float)));
  }
}

// The model's logits for `ids` [2, 16] on a Runner of `bound`, every mha
// step run by `attention`'s operators (one per layer).
std::vector<float> RunOn(
    const BoundProgram& bound,
    const std::vector<std::unique_ptr<AttentionOp>>& attention,
    const std::vector<int64_t>& mha_layer, const std::vector<int64_t>& ids) {
  const int64_t rows = static_cast<int64_t>(ids.size());
  Runner runner(bound, RunnerPolicy{false, ops::LinearFallback::kPlain}, 2);
  std::vector<std::vector<size_t>> attention_bytes(bound.program->steps.size());
  for (size_t k = 0; k < attention_bytes.size(); ++k) {
    if (bound.program->steps[k].op != graph::Op::kMha) continue;
    const auto& bytes = attention[0]->buffer_bytes();
    attention_bytes[k].assign(bytes.begin(), bytes.end());
  }
  EXPECT_TRUE(runner
                  .Prepare(RunShape{rows, std::nullopt, rows}, attention_bytes,
                           {}, 0, uint64_t{1} << 40, "test")
                  .ok());
  std::vector<float> logits(Floats(bound, bound.program->output, rows));
  const auto attend = [&](size_t, size_t k, const float* src, float* dst,
                          void* const* buffers) {
    AttentionOp::Buffers b;
    std::copy(buffers, buffers + AttentionOp::kNumBuffers, b.begin());
    const size_t node = bound.program->steps[k].node;
    attention[size_t(mha_layer[node])]->Forward(src, nullptr, dst, b);
    return Status();
  };
  const ThreadScope threads(2);
  const Status run = runner.Run(0, RunRows{16, ids.data(), nullptr, nullptr},
                                nullptr, logits.data(), attend, 2);
  EXPECT_TRUE(run.ok()) << run.message();
  return logits;
}

// Book GPT and Hugging Face GPT-2 files through gpt_model.json and through
// the builder: the same weights at every node, and, with each layer's
// attention run by one operator for both, the same logits bit for bit, on
// 32 rows (past RowsLinear's, so both read the packed copies).
TEST(ProgramTest, GptModelJsonAndTheBuilderGiveTheSameBits) {
  for (const char* name : {"gpt_book_3l", "hf_gpt2"}) {
    SCOPED_TRACE(name);
    const std::string file = kLm + name + "/model.safetensors";
    LmOptions lm_options;
    lm_options.num_threads = 2;
    const auto lm = LanguageModel::Load(file, lm_options).value();
    GraphOptions graph_options;
    graph_options.num_threads = 2;
    const auto graph =
        GraphModel::Load(kSource + "/tools/graphs/gpt_model.json", file,
                         graph_options)
            .value();
    const lm::ModelData& m = ModelAccess::Of(*lm);
    const graph::LoadedGraph& g = ModelAccess::Of(*graph);
    ExpectSameNodes(m.def, g.def);
    ExpectSameProgram(m.program, g.program);
    std::vector<std::unique_ptr<AttentionOp>> attention;
    std::vector<int64_t> mha_layer(g.def.nodes.size(), -1);
    for (size_t n = 0; n < g.def.nodes.size(); ++n) {
      if (g.def.nodes[n].op != graph::Op::kMha) {
        ExpectSameWeights(m.bound, g.bound, n);
        continue;
      }
      const MhaModelData& ours =
          ModelAccess::Of(*m.layers[attention.size()].attention);
      const MhaModelData& theirs = ModelAccess::Of(*g.layer[0][n].mha);
      EXPECT_EQ(Apply(ours.qkv), Apply(theirs.qkv));
      EXPECT_EQ(Apply(ours.out), Apply(theirs.out));
      mha_layer[n] = static_cast<int64_t>(attention.size());
      attention.push_back(PlanMhaRun(theirs, 2, 16, 0, "test").value());
    }
    EXPECT_EQ(mha_layer, m.mha_layer);
    std::vector<int64_t> ids(32);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>((i * 37 + 5) % 80);
    }
    const std::vector<float> ours = RunOn(m.bound, attention, mha_layer, ids);
    const std::vector<float> theirs = RunOn(g.bound, attention, mha_layer, ids);
    ASSERT_EQ(ours.size(), theirs.size());
    EXPECT_EQ(0, std::memcmp(ours.data(), theirs.data(),
                             ours.size() * sizeof(float)));
  }
}

// A bf16 model's prompts run every linear in bf16, the attention's
// projections as the feed-forward's (the projections ran fp32 matmuls on
// the rounded weights, at half the speed).
TEST(ProgramTest, Bf16ModelsProjectPromptsInBf16) {
  if (!GetRuntimeInfo().native_bf16) GTEST_SKIP() << "no native bf16";
  LmOptions options;
  options.num_threads = 1;
  options.dtype = DType::kBF16;
  const auto lm =
      LanguageModel::Load(kLm + "llama_gqa/model.safetensors", options).value();
  for (const lm::Layer& layer : ModelAccess::Of(*lm).layers) {
    const MhaModelData& attention = ModelAccess::Of(*layer.attention);
    EXPECT_EQ(attention.qkv.compute_type(), kernels::DataType::kBF16);
    EXPECT_EQ(attention.out.compute_type(), kernels::DataType::kBF16);
    EXPECT_EQ(layer.up.compute_type(), kernels::DataType::kBF16);
  }
}

// A runner makes its arena at each plan's size unless its policy keeps a
// larger one (a batch's, whose steps change size all the time); a
// refused Prepare leaves no shape prepared.
TEST(ProgramTest, ArenaFollowsThePlanUnlessGrowOnly) {
  LmOptions options;
  options.num_threads = 1;
  const auto lm =
      LanguageModel::Load(kLm + "gpt_book_3l/model.safetensors", options)
          .value();
  const BoundProgram& bound = ModelAccess::Of(*lm).bound;
  const std::vector<std::vector<size_t>> none(bound.program->steps.size());
  for (const bool grow_only : {false, true}) {
    SCOPED_TRACE(grow_only);
    Runner runner(
        bound, RunnerPolicy{false, ops::LinearFallback::kPlain, grow_only}, 1);
    const uint64_t cap = uint64_t{1} << 40;
    ASSERT_TRUE(
        runner.Prepare({20, std::nullopt, 0}, none, {}, 0, cap, "t").ok());
    const uint64_t large = runner.bytes();
    EXPECT_EQ(large, runner.planned_peak());
    ASSERT_TRUE(
        runner.Prepare({2, std::nullopt, 0}, none, {}, 0, cap, "t").ok());
    EXPECT_LT(runner.planned_peak(), large);
    EXPECT_EQ(runner.bytes(), grow_only ? large : runner.planned_peak());
    EXPECT_EQ(runner.shape(), (RunShape{2, std::nullopt, 0}));
    // Back to 20 rows: a grow-only arena holds them already and allocates
    // nothing (so even a cap of 1 byte passes); another is made anew.
    const Status again =
        runner.Prepare({20, std::nullopt, 0}, none, {}, 0, 1, "a big step");
    if (grow_only) {
      EXPECT_TRUE(again.ok()) << again.message();
      EXPECT_EQ(runner.bytes(), large);
    } else {
      EXPECT_EQ(again.code(), StatusCode::kOutOfMemory);
      EXPECT_EQ(runner.shape(), RunShape());
    }
  }
}

// A language model's linears hold their packed copy and panels, and their
// plain weights only where some run of rows reads them: never where every
// run reads the packed copy (AVX-512), always on AVX2's gemm.
TEST(ProgramTest, LanguageModelsDropPlainWeightsNoRunReads) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    if (dtype == DType::kBF16 && !kernels::HasNativeBF16()) continue;
    SCOPED_TRACE(dtype == DType::kF32 ? "f32" : "bf16");
    LmOptions options;
    options.num_threads = 2;
    options.dtype = dtype;
    const auto lm = LanguageModel::Load(
                        kLm + "hf_llama_tied_biases/model.safetensors", options)
                        .value();
    const lm::ModelData& m = ModelAccess::Of(*lm);
    const auto expect_dropped_where_served = [&](const ops::Linear& linear) {
      EXPECT_EQ(linear.weight().empty(),
                ops::Linear::PackedServesEveryRun(linear.out(), linear.in(),
                                                  linear.compute_type()))
          << "[" << linear.out() << ", " << linear.in() << "]";
    };
    for (const lm::Layer& layer : m.layers) {
      for (const ops::Linear* linear : {&layer.gate, &layer.up, &layer.down}) {
        expect_dropped_where_served(*linear);
      }
      const MhaModelData& attention = ModelAccess::Of(*layer.attention);
      for (const ops::Linear* linear : {&attention.qkv, &attention.out}) {
        expect_dropped_where_served(*linear);
      }
      EXPECT_EQ(attention.w_qkv.empty(), attention.qkv.weight().empty());
      EXPECT_EQ(attention.w_out.empty(), attention.out.weight().empty());
    }
    expect_dropped_where_served(m.head);
  }
}

// A model holds its token embeddings in bf16 where that keeps their
// numbers and no fp32 head borrows them: a bf16 model's tied ones (the head
// rounds them alike), or a bf16 checkpoint's in any dtype but f32 tied.
TEST(ProgramTest, ModelsHoldBf16EmbeddingsWhereExact) {
  if (!kernels::HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  struct Case {
    const char* file;
    DType dtype;
    bool bf16;  // whether held in bf16
  };
  const char* f16_tied = "hf_llama_tied_biases/model.safetensors";
  const char* bf16_tied = "hf_qwen2/model.safetensors";
  const char* bf16_untied =
      "hf_llama_scaled_shards/model.safetensors.index.json";
  const char* f32_untied = "hf_llama_plain/model.safetensors";
  const Case cases[] = {
      {f16_tied, DType::kBF16, true},    {f16_tied, DType::kQ8_0, false},
      {f16_tied, DType::kF32, false},    {bf16_tied, DType::kBF16, true},
      {bf16_tied, DType::kQ8_0, true},   {bf16_tied, DType::kF32, false},
      {bf16_untied, DType::kBF16, true}, {bf16_untied, DType::kF32, true},
      {f32_untied, DType::kBF16, false}, {f32_untied, DType::kF32, false}};
  for (const auto& [file, dtype, bf16] : cases) {
    SCOPED_TRACE(file);
    {
      LmOptions options;
      options.dtype = dtype;
      const auto lm = LanguageModel::Load(kLm + file, options).value();
      EXPECT_EQ(ModelAccess::Of(*lm).tok_emb.type(),
                bf16 ? kernels::DataType::kBF16 : kernels::DataType::kF32)
          << DTypeName(dtype);
    }
  }
}

// A BF16 checkpoint's linears and embeddings are read as stored, with no
// fp32 copy: the same numbers as the fp32 read widens, every role the
// source says it stores so; an F32 checkpoint stores none so, and a
// tensor of another dtype is refused naming it.
TEST(ProgramTest, Bf16CheckpointsAreReadAsStored) {
  using lm::Role;
  const auto open = [](const std::string& file) {
    return lm::OpenModelFile(kLm + file, LmOptions{}).value();
  };
  const lm::FileModel bf16 =
      open("hf_llama_scaled_shards/model.safetensors.index.json");
  const LmConfig& c = bf16.config;
  size_t compared = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const Role role :
         {Role::kTokEmb, Role::kQuery, Role::kKey, Role::kValue, Role::kOut,
          Role::kUp, Role::kGate, Role::kDown, Role::kHead}) {
      const bool whole_model = role == Role::kTokEmb || role == Role::kHead;
      if ((whole_model && l > 0) || !bf16.weights.has(role, l) ||
          !bf16.weights.stores_bf16(role, l)) {
        continue;
      }
      SCOPED_TRACE(static_cast<int>(role));
      const auto [rows, cols] = role == Role::kTokEmb
                                    ? std::pair{c.vocab_size, c.emb_dim}
                                    : lm::LinearShape(c, role);
      const StreamedVector<float> wide =
          bf16.weights.fetch(role, l, rows, cols).value();
      const StreamedVector<hwy::bfloat16_t> stored =
          bf16.weights.fetch_bf16(role, l, rows, cols).value();
      ASSERT_EQ(stored.size(), wide.size());
      for (size_t i = 0; i < wide.size(); ++i) {
        ASSERT_EQ(hwy::F32FromBF16(stored[i]), wide[i]) << i;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, size_t(7 * c.num_layers + 2));  // untied: its head too
  const lm::FileModel f32 = open("hf_llama_plain/model.safetensors");
  EXPECT_FALSE(f32.weights.stores_bf16(Role::kTokEmb, 0));
  EXPECT_FALSE(f32.weights.stores_bf16(Role::kUp, 0));
  const std::string name = f32.weights.name(Role::kUp, 0);
  const Result<StreamedVector<hwy::bfloat16_t>> refused =
      f32.files->ReadBF16(name);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has dtype F32, want BF16"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace attn
