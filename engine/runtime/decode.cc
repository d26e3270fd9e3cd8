// MhaDecoder: one attention layer's KV cache over a fixed batch of
// sequences (a one-layer KvCache whose slots are all live) and the forward
// of new tokens against it: the one-node program on the Runner, its mha
// step a CachedAttention.
#include "attn/decode.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/runtime/cached_attention.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/runner.h"

namespace attn {
struct MhaDecoder::Impl {
  std::shared_ptr<const MhaModel> model;
  const MhaModelData* m = nullptr;
  std::optional<KvCache> cache;
  CachedAttentionShared shared;
  std::optional<CachedAttention> attention;
  std::optional<AttentionProgram> program;
  // Prepared once: the program's one step is the cached attention, which
  // plans its own rows, and its tensors are the caller's.
  std::optional<Runner> runner;

  uint64_t HeldBytes() const {
    return AddSat(AddSat(MhaModelBytes(*m), cache ? cache->bytes() : 0),
                  AddSat(shared.bytes(), attention ? attention->bytes() : 0));
  }
  int64_t batch() const { return cache->shape().sequences; }
  // Validates the counts before any state changes; the total new rows.
  Result<int64_t> CountRows(const NewTokens& tokens) const;
  Status Append(const float* input, const NewTokens& tokens, float* output);
};

Result<int64_t> MhaDecoder::Impl::CountRows(const NewTokens& tokens) const {
  const int64_t capacity = cache->shape().capacity;
  int64_t rows = 0;
  for (size_t i = 0; i < tokens.num; ++i) {
    const int64_t b = tokens.sequence(i), n = tokens.count(i);
    const int64_t held = cache->length(b);
    if (n < 0) {
      return InvalidArgument("counts[" + std::to_string(b) + "] is " +
                             std::to_string(n) + ", want >= 0 new tokens");
    }
    if (n > capacity - held) {
      return InvalidArgument(
          "sequence " + std::to_string(b) + " holds " + std::to_string(held) +
          " tokens; " + std::to_string(n) + " more would exceed max_length " +
          std::to_string(capacity) +
          (capacity == m->config.context_length ? " (the context_length)"
                                                : "") +
          ": Truncate or Reset it");
    }
    rows += n;
  }
  return rows;
}

Status MhaDecoder::Impl::Append(const float* input, const NewTokens& tokens,
                                float* output) {
  if (!input || !output) {
    return InvalidArgument("input, output and counts must not be null");
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t rows, CountRows(tokens));
  if (rows == 0) return {};
  const auto attend = [&](size_t, size_t, const float* src, float* dst,
                          void* const*) {
    return attention->Append(src, tokens, rows, nullptr, dst);
  };
  ATTN_RETURN_IF_ERROR(
      runner->Run(0, RunRows{}, input, output, attend, m->num_threads));
  for (size_t i = 0; i < tokens.num; ++i) {
    cache->Extend(tokens.sequence(i), tokens.count(i));
  }
  return {};
}

MhaDecoder::MhaDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MhaDecoder::~MhaDecoder() = default;

// The batch's bounds and a max_length resolved against the model's context.
static Result<int64_t> CacheLength(const MhaConfig& c,
                                   const DecoderOptions& options) {
  if (options.batch <= 0 || options.batch > (int64_t{1} << 20)) {
    return InvalidArgument("decoder batch is " + std::to_string(options.batch) +
                           ", want a positive number of sequences");
  }
  const int64_t capacity = options.max_length;
  if (capacity < 0) {
    return InvalidArgument("decoder max_length is " + std::to_string(capacity) +
                           ", want a positive length (or 0 for the model's "
                           "context_length)");
  }
  if (capacity == 0 && c.context_length == 0) {
    return InvalidArgument(
        "decoder max_length is not given and the model has no "
        "context_length: set one of them (--context-length)");
  }
  if (capacity == 0) return c.context_length;
  if (c.context_length > 0 && capacity > c.context_length) {
    return InvalidArgument("decoder max_length " + std::to_string(capacity) +
                           " exceeds the model's context_length " +
                           std::to_string(c.context_length));
  }
  return capacity;
}

Result<std::unique_ptr<MhaDecoder>> MhaDecoder::Create(
    std::shared_ptr<const MhaModel> model, const DecoderOptions& options) {
  if (!model) return InvalidArgument("decoder: model is null");
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.m = &ModelAccess::Of(*model);
  const MhaConfig& c = d.m->config;
  if (!d.m->decode) {
    return InvalidArgument(
        "decoder: the model was made without the layouts decoders read "
        "(MhaOptions::decode false; C: attn_model_options.sessions_only 1); "
        "make it with decode true");
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t capacity, CacheLength(c, options));
  ATTN_ASSIGN_OR_RETURN(
      KvCache cache,
      KvCache::Create(
          CacheShapeFor(*d.m, 1, options.batch, capacity),
          /*all_live=*/true, MhaModelBytes(*d.m), d.m->max_memory_bytes,
          "a decoder cache of batch " + std::to_string(options.batch) +
              " x max_length " + std::to_string(capacity)));
  d.cache.emplace(std::move(cache));
  d.shared.held = [&d] { return d.HeldBytes(); };
  d.shared.cap = d.m->max_memory_bytes;
  ATTN_RETURN_IF_ERROR(d.shared.AllocatePartials(*d.cache, c.num_heads));
  ATTN_ASSIGN_OR_RETURN(CachedAttention attention,
                        CachedAttention::Create(*d.m, &*d.cache, 0, &d.shared));
  d.attention.emplace(std::move(attention));
  d.program.emplace(c.d_in, OutDim(c));
  d.runner.emplace(d.program->bound(), RunnerPolicy{}, d.m->num_threads);
  ATTN_RETURN_IF_ERROR(
      d.runner->Prepare(RunShape{options.batch, std::nullopt, 0}, {{}}, {},
                        d.HeldBytes(), d.m->max_memory_bytes, "a decoder"));
  d.model = std::move(model);
  return std::unique_ptr<MhaDecoder>(new MhaDecoder(std::move(impl)));
}

Status MhaDecoder::Prefill(const float* input, const int64_t* counts,
                           float* output) {
  if (!counts) {
    return InvalidArgument("input, output and counts must not be null");
  }
  NewTokens tokens;
  tokens.counts = counts;
  tokens.num = static_cast<size_t>(impl_->batch());
  return impl_->Append(input, tokens, output);
}

Status MhaDecoder::Prefill(const float* input, int64_t seq_len, float* output) {
  if (seq_len < 0) {
    return InvalidArgument("seq_len is " + std::to_string(seq_len) +
                           ", want >= 0");
  }
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  // [B, T, d_in] is already packed sequence after sequence.
  NewTokens tokens;
  tokens.each = seq_len;
  tokens.num = static_cast<size_t>(impl_->batch());
  return impl_->Append(input, tokens, output);
}

Status MhaDecoder::Decode(const float* input, int64_t batch, float* output) {
  Impl& d = *impl_;
  if (batch != d.batch()) {
    return InvalidArgument("decode batch is " + std::to_string(batch) +
                           ", but the decoder holds " +
                           std::to_string(d.batch()) + " sequences");
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (d.cache->length(b) == 0) {
      return InvalidArgument(
          "sequence " + std::to_string(b) +
          " is empty (new, or Reset): Prefill its prompt before Decode");
    }
  }
  NewTokens tokens;
  tokens.each = 1;
  tokens.num = static_cast<size_t>(batch);
  return d.Append(input, tokens, output);
}

void MhaDecoder::Reset() { impl_->cache->Clear(); }
Status MhaDecoder::Reset(int64_t sequence) { return Truncate(sequence, 0); }
Status MhaDecoder::Truncate(int64_t sequence, int64_t length) {
  return impl_->cache->Truncate(sequence, length);
}
Status MhaDecoder::Copy(int64_t from, int64_t to) {
  return impl_->cache->Copy(from, to);
}
int64_t MhaDecoder::batch() const { return impl_->batch(); }
int64_t MhaDecoder::max_length() const {
  return impl_->cache->shape().capacity;
}
int64_t MhaDecoder::length(int64_t sequence) const {
  return impl_->cache->length(sequence);
}
size_t MhaDecoder::cache_bytes() const { return impl_->cache->storage_bytes(); }
size_t MhaDecoder::workspace_bytes() const {
  const Impl& d = *impl_;
  return d.shared.bytes() + d.attention->bytes() + d.cache->bytes() -
         d.cache->storage_bytes();
}
size_t MhaDecoder::decode_kv_bytes() const {
  const Impl& d = *impl_;
  // A sliding window reads its last `window` keys only.
  const int64_t window = d.m->config.sliding_window;
  size_t keys = 0;
  for (int64_t b = 0; b < d.batch(); ++b) {
    const int64_t n = d.cache->length(b);
    keys += static_cast<size_t>(window > 0 ? std::min(n + 1, window) : n + 1);
  }
  // K/V rows are Hkv heads of D wide (d_out without grouping).
  const MhaConfig& c = d.m->config;
  return 2 * keys *
         static_cast<size_t>(c.num_kv_heads * (c.d_out / c.num_heads)) *
         sizeof(float);
}

}  // namespace attn
