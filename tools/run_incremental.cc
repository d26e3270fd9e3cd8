// attn run --incremental: the input through the KV cache, one token per step.
#include <string>
#include <vector>

#include "attn/decode.hpp"
#include "tools/decode_cli.h"

namespace attn::cli {

Status RunIncremental(std::shared_ptr<const MhaModel> model, const float* input,
                      int64_t batch, int64_t seq_len, float* output) {
  const int64_t context = model->config().context_length;
  if (context > 0 && seq_len > context) {
    return InvalidArgument("sequence length " + std::to_string(seq_len) +
                           " exceeds context_length " +
                           std::to_string(context));
  }
  const auto d_in = static_cast<size_t>(model->config().d_in);
  const auto d_out = static_cast<size_t>(model->config().d_out);
  DecoderOptions options;
  options.batch = batch;
  options.max_length = seq_len;  // the cache needs no more than the input
  auto decoder = MhaDecoder::Create(std::move(model), options);
  if (!decoder.ok()) return decoder.status();
  const auto B = static_cast<size_t>(batch), T = static_cast<size_t>(seq_len);
  std::vector<float> x(B * d_in), y(B * d_out);
  for (size_t t = 0; t < T; ++t) {
    // Token t of every sequence: x [B, d_in] from input [B, T, d_in].
    for (size_t b = 0; b < B; ++b) {
      const float* from = input + (b * T + t) * d_in;
      std::copy(from, from + d_in, x.data() + b * d_in);
    }
    const Status st = t == 0 ? (*decoder)->Prefill(x.data(), 1, y.data())
                             : (*decoder)->Decode(x.data(), batch, y.data());
    if (!st.ok()) return st;
    for (size_t b = 0; b < B; ++b) {
      std::copy(y.data() + b * d_out, y.data() + (b + 1) * d_out,
                output + (b * T + t) * d_out);
    }
  }
  return {};
}

}  // namespace attn::cli
