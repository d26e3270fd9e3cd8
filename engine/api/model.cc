// Model and Session (attn/model.hpp): one face for the three kinds. A
// language model's session runs its prompts as a Batch of fresh sequences,
// every position's logits kept.
#include "attn/model.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/api/mha_options.h"
#include "engine/runtime/limits.h"

namespace attn {

struct Model::Impl {
  ModelKind kind = ModelKind::kAttention;
  std::shared_ptr<const MhaModel> attention;
  std::shared_ptr<const GraphModel> graph;
  std::shared_ptr<const LanguageModel> language_model;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::Make(Impl impl) {
  return std::shared_ptr<const Model>(
      new Model(std::make_unique<Impl>(std::move(impl))));
}

std::shared_ptr<const Model> Model::Of(std::shared_ptr<const MhaModel> model) {
  if (!model) return nullptr;
  return Make({ModelKind::kAttention, std::move(model), nullptr, nullptr});
}

std::shared_ptr<const Model> Model::Of(
    std::shared_ptr<const GraphModel> model) {
  if (!model) return nullptr;
  return Make({ModelKind::kGraph, nullptr, std::move(model), nullptr});
}

std::shared_ptr<const Model> Model::Of(
    std::shared_ptr<const LanguageModel> model) {
  if (!model) return nullptr;
  return Make({ModelKind::kLanguageModel, nullptr, nullptr, std::move(model)});
}

Result<std::shared_ptr<const Model>> Model::Load(const ModelFiles& files,
                                                 const LoadOptions& options) {
  const ModelOptions& common = options;
  if (!files.graph.empty()) {
    GraphOptions graph;
    static_cast<ModelOptions&>(graph) = common;
    graph.layers = options.layers;
    ATTN_ASSIGN_OR_RETURN(auto model,
                          GraphModel::Load(files.graph, files.weights, graph));
    return Of(std::move(model));
  }
  if (LanguageModel::IsLanguageModelFile(files.weights,
                                         options.max_memory_bytes)) {
    LmOptions lm;
    static_cast<ModelOptions&>(lm) = common;
    lm.norm_eps = options.norm_eps;
    ATTN_ASSIGN_OR_RETURN(auto model, LanguageModel::Load(files.weights, lm));
    return Of(std::move(model));
  }
  ATTN_ASSIGN_OR_RETURN(auto model,
                        MhaModel::Load(files.weights, MhaOptionsOf(options)));
  return Of(std::move(model));
}

ModelKind Model::kind() const { return impl_->kind; }

bool Model::token_input() const {
  return impl_->language_model || (impl_->graph && impl_->graph->token_input());
}

int64_t Model::input_width() const {
  if (token_input()) return 0;
  return impl_->graph ? impl_->graph->input_width()
                      : impl_->attention->config().d_in;
}

int64_t Model::output_width() const {
  if (impl_->language_model) return impl_->language_model->config().vocab_size;
  return impl_->graph ? impl_->graph->output_width()
                      : impl_->attention->config().d_out;
}

int Model::num_threads() const {
  if (impl_->language_model) return impl_->language_model->num_threads();
  return impl_->graph ? impl_->graph->num_threads()
                      : impl_->attention->num_threads();
}

uint64_t Model::memory_bytes() const {
  if (impl_->language_model) return impl_->language_model->memory_bytes();
  return impl_->graph ? impl_->graph->memory_bytes()
                      : impl_->attention->memory_bytes();
}

const std::shared_ptr<const MhaModel>& Model::attention() const {
  return impl_->attention;
}
const std::shared_ptr<const GraphModel>& Model::graph() const {
  return impl_->graph;
}
const std::shared_ptr<const LanguageModel>& Model::language_model() const {
  return impl_->language_model;
}

// One of the kinds' sessions; a language model's: a batch of `batch`
// sequences of up to `seq_len` tokens, made for the last shape run.
struct Session::Impl {
  std::optional<MhaSession> attention;
  std::optional<GraphSession> graph;
  std::unique_ptr<Batch> batch;
  std::vector<Batch::Request> requests;
  int64_t batch_size = 0, seq_len = 0;

  Status RunLanguageModel(const std::shared_ptr<const Model>& model,
                          const int64_t* tokens, int64_t batch, int64_t seq_len,
                          float* output);
};

Session::Session(std::shared_ptr<const Model> model)
    : model_(std::move(model)), impl_(std::make_unique<Impl>()) {
  if (!model_) return;
  if (model_->attention()) impl_->attention.emplace(model_->attention());
  if (model_->graph()) impl_->graph.emplace(model_->graph());
}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

namespace {

Status WrongInput(const Model& model, bool tokens) {
  return InvalidArgument(
      tokens ? "the model's input is floats [b, T, " +
                   std::to_string(model.input_width()) +
                   "], want Run with float input"
             : std::string("the model's input is token ids, want Run with "
                           "int64_t ids"));
}

}  // namespace

Status Session::Run(const float* input, int64_t batch, int64_t seq_len,
                    float* output) {
  if (!model_ || !impl_) return InvalidArgument("the session has no model");
  if (model_->token_input()) return WrongInput(*model_, false);
  if (impl_->graph) return impl_->graph->Run(input, batch, seq_len, output);
  return impl_->attention->Run(input, batch, seq_len, output);
}

Status Session::Run(const int64_t* tokens, int64_t batch, int64_t seq_len,
                    float* output) {
  if (!model_ || !impl_) return InvalidArgument("the session has no model");
  if (!model_->token_input()) return WrongInput(*model_, true);
  if (impl_->graph) return impl_->graph->Run(tokens, batch, seq_len, output);
  return impl_->RunLanguageModel(model_, tokens, batch, seq_len, output);
}

// Each row a fresh sequence of the batch; one step, every position's
// logits, copied out row by row.
Status Session::Impl::RunLanguageModel(
    const std::shared_ptr<const Model>& model, const int64_t* tokens, int64_t b,
    int64_t t, float* output) {
  if (!tokens || !output) {
    return InvalidArgument("token ids and output must not be null");
  }
  const int64_t context = model->language_model()->config().context_length;
  if (b <= 0 || t <= 0 || t > context || b > BatchOptions::kMaxSequences) {
    return InvalidArgument("input shape [" + std::to_string(b) + ", " +
                           std::to_string(t) + "] is invalid, want 1 to " +
                           std::to_string(BatchOptions::kMaxSequences) +
                           " rows of 1 to " + std::to_string(context) +
                           " tokens (the context)");
  }
  const int64_t vocab = model->output_width();
  const int64_t* bad = std::find_if(tokens, tokens + b * t, [&](int64_t id) {
    return id < 0 || id >= vocab;
  });
  if (bad != tokens + b * t) {
    const int64_t at = bad - tokens;
    return InvalidArgument("token ids[" + std::to_string(at / t) + ", " +
                           std::to_string(at % t) + "] is " +
                           std::to_string(*bad) + ", want 0 to " +
                           std::to_string(vocab - 1));
  }
  if (!batch || b != batch_size || t != seq_len) {
    batch.reset();
    batch_size = seq_len = 0;
    ATTN_ASSIGN_OR_RETURN(batch, Batch::Create(model, {b, t, 0}));
    batch_size = b;
    seq_len = t;
    requests.resize(static_cast<size_t>(b));
  }
  for (int64_t r = 0; r < b; ++r) {
    ATTN_ASSIGN_OR_RETURN(const int64_t sequence, batch->Add());
    requests[size_t(r)] = {sequence, tokens + r * t, t, true};
  }
  const Status step = batch->Step(requests.data(), requests.size());
  const size_t row =
      static_cast<size_t>(t) * static_cast<size_t>(model->output_width());
  for (size_t r = 0; r < requests.size() && step.ok(); ++r) {
    std::memcpy(output + r * row, batch->logits(r), row * sizeof(float));
  }
  for (const Batch::Request& request : requests) {
    ATTN_RETURN_IF_ERROR(batch->Remove(request.sequence));
  }
  return step;
}

}  // namespace attn
