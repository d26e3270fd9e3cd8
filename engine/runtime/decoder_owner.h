// What an owner of one KvDecoder per layer (LmBatch) gives each of them
// (KvDecoder::Create): a view of the memory it holds besides that decoder,
// and the buffers of fresh prompts, which its decoders share since one
// layer runs at a time.
#ifndef ATTN_ENGINE_RUNTIME_DECODER_OWNER_H_
#define ATTN_ENGINE_RUNTIME_DECODER_OWNER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/ops/attention_op.h"

namespace attn {

struct DecoderOwner {
  // Bytes the owner holds besides the decoder and its model's weights,
  // counted in every check the decoder makes against the model's cap.
  std::function<uint64_t()> held_elsewhere;
  // Forward's buffers for fresh prompts, counted by the owner (once), not
  // by the decoders' workspace_bytes. Null: the decoder keeps its own.
  std::shared_ptr<OwnedBuffers> prompt_buffers;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_DECODER_OWNER_H_
