// The attention's options that LoadOptions stand for: one rule for
// Model::Load and the C API's attn_model_create_mha.
#ifndef ATTN_ENGINE_API_MHA_OPTIONS_H_
#define ATTN_ENGINE_API_MHA_OPTIONS_H_

#include "attn/attn.hpp"
#include "attn/model.hpp"

namespace attn {

inline MhaOptions MhaOptionsOf(const LoadOptions& options) {
  MhaOptions mha;
  static_cast<ModelOptions&>(mha) = options;
  mha.decode = options.decode;
  mha.sessions = options.sessions;
  // bf16 weights on every path, decoders' steps too, as a language model.
  if (options.dtype == DType::kBF16) mha.step_weights = DType::kBF16;
  return mha;
}

}  // namespace attn

#endif  // ATTN_ENGINE_API_MHA_OPTIONS_H_
