// The one way the engine reaches what a public model holds: its sessions,
// decoders and batches read the model's data through here, so no public
// class befriends another.
#ifndef ATTN_ENGINE_MODELS_MODEL_ACCESS_H_
#define ATTN_ENGINE_MODELS_MODEL_ACCESS_H_

#include <memory>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "attn/lm.hpp"

namespace attn {

struct MhaModelData;
struct QuantizedMhaWeights;
namespace graph {
struct LoadedGraph;
}  // namespace graph
namespace lm {
struct ModelData;
}  // namespace lm

struct ModelAccess {
  static const MhaModelData& Of(const MhaModel& model);
  static const graph::LoadedGraph& Of(const GraphModel& model);
  static const lm::ModelData& Of(const LanguageModel& model);

  // MhaModel::Create; with `decoders_only` (a language model's layers:
  // sessions false, decode true), the projections then hold no plain
  // weights where no decoder's run reads them.
  static Result<std::shared_ptr<const MhaModel>> CreateMha(
      const MhaConfig& config, const MhaWeights& w, const MhaOptions& options,
      bool decoders_only);
  // MhaModel::Create for projections already quantized (mha_model.h):
  // options.step_weights is their type (sessions off, decode on); the
  // blocks are packed as they are.
  static Result<std::shared_ptr<const MhaModel>> CreateQuantizedMha(
      const MhaConfig& config, const QuantizedMhaWeights& w,
      const MhaOptions& options);
};

}  // namespace attn

#endif  // ATTN_ENGINE_MODELS_MODEL_ACCESS_H_
