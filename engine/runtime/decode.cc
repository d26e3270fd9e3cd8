// KvDecoder (kv_decoder.h) and MhaDecoder, its public face: a KV cache per
// sequence and the forward pass of new tokens against it. Fresh prompts of one
// length run through the attention operator (engine/attention_op.h), which
// copies their K and V into the cache. Other steps, straight-line: one fused
// QKV projection of the new tokens, K and V appended to the cache, the decode
// attention kernel (kernels/decode.h), one output projection. A language
// model's last block keeps only the rows whose logits it wants past the
// attention (KeptRows).
#include "kernels/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/ops/attention_op.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/decoder_owner.h"
#include "engine/runtime/kv_decoder.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/threads.h"
#include "hwy/base.h"
#include "kernels/matmul.h"

namespace attn {

using kernels::DataType;

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// The sequences one call appends to, in ascending order, and the tokens
// each gets: the public calls name every sequence of the batch, a language
// model's steps only those they advance, so that a step costs its rows,
// not the batch's size.
struct NewTokens {
  const int64_t* sequences = nullptr;  // null: 0, 1, ..., num - 1
  const int64_t* counts = nullptr;     // null: `each` for every sequence
  int64_t each = 0;
  size_t num = 0;
  int64_t sequence(size_t i) const {
    return sequences ? sequences[i] : static_cast<int64_t>(i);
  }
  int64_t count(size_t i) const { return counts ? counts[i] : each; }
};

}  // namespace

struct KvDecoder::Impl {
  std::shared_ptr<const MhaModel> model;
  const MhaModelData* m = nullptr;
  // B sequences of at most `capacity` tokens; H query and Hkv K/V heads of
  // D floats, each head's row of a key padded to Dp.
  int64_t B = 0, capacity = 0, H = 0, Hkv = 0, D = 0, Dp = 0;
  int64_t d_in = 0, d_out = 0;
  int num_threads = 1;
  std::vector<int64_t> lengths;
  // [B, Hkv, capacity, Dp] each where the decode kernel reads the heads in
  // blocks (head major), else [B, capacity, Hkv, Dp] (token major):
  // kernels::DecodeBlocksHeads.
  AlignedBuffer k_cache, v_cache;
  bool head_major = false;
  AlignedBuffer partials;   // the kernel's split-KV partials
  size_t max_partials = 0;  // slots in `partials`
  // Steps through the decode kernel: of B rows (Decode, and Prefill when
  // equal), and of the last other Prefill size. Row r is token
  // row_positions[r] of sequence row_seqs[r].
  std::unique_ptr<AttentionOp> step, other;
  std::vector<int64_t> row_seqs, row_positions;
  // Fresh prompts of one length run through the attention operator, their
  // K and V copied into the cache.
  std::unique_ptr<AttentionOp> prompt;
  // Its activations and scratch: the decoder's own, or its owner's.
  std::shared_ptr<OwnedBuffers> prompt_buffers;
  bool owner_counts_prompt_buffers = false;
  std::vector<int64_t> prompt_seqs;  // the cache sequence of each prompt

  // What the owner holds besides this decoder and its model (a language
  // model's other layers and buffers), or null for nothing.
  std::function<uint64_t()> held_elsewhere;

  // Bytes of the per-sequence and per-row lists.
  size_t ListBytes() const {
    return (lengths.capacity() + row_seqs.capacity() +
            row_positions.capacity() + prompt_seqs.capacity()) *
           sizeof(int64_t);
  }
  // Bytes of the decode and prompt buffers and ops and the lists
  // (workspace_bytes): an op being replaced is moved out before a check.
  size_t WorkspaceBytes() const {
    return partials.size() + (step ? step->bytes() : 0) +
           (other ? other->bytes() : 0) + (prompt ? prompt->bytes() : 0) +
           (owner_counts_prompt_buffers ? 0 : prompt_buffers->bytes()) +
           ListBytes();
  }
  // Bytes the model, the cache, the workspace and the owner's other memory
  // hold.
  uint64_t HeldBytes() const {
    return AddSat(
        AddSat(AddSat(MhaModelBytes(*m), k_cache.size() + v_cache.size()),
               WorkspaceBytes()),
        held_elsewhere ? held_elsewhere() : 0);
  }
  // A step op of `rows` rows.
  Result<std::unique_ptr<AttentionOp>> MakeStep(int64_t rows) const;
  Status AllocateCache();
  // Appends the new tokens; only the rows `keep` lists reach output (as
  // the sparse Prefill), or every row when it is null.
  Status Append(const float* input, const NewTokens& tokens,
                const KeptRows* keep, float* output);
  Result<int64_t> CountRows(const NewTokens& tokens) const;
  Status ReserveLists(int64_t rows, size_t sequences);
  int64_t FreshPromptLength(const NewTokens& tokens);
  Status PreparePrompt(int64_t batch, int64_t seq_len);
  Status AppendRows(const float* input, const NewTokens& tokens, int64_t R,
                    const KeptRows* keep, float* output);
  KvCache Cache() const {
    KvCache cache;
    cache.k = static_cast<float*>(k_cache.data());
    cache.v = static_cast<float*>(v_cache.data());
    cache.row_stride = head_major ? Dp : Hkv * Dp;
    cache.head_stride = head_major ? capacity * Dp : Dp;
    cache.batch_stride = capacity * Hkv * Dp;
    cache.capacity = capacity;
    return cache;
  }
};

Result<std::unique_ptr<AttentionOp>> KvDecoder::Impl::MakeStep(
    int64_t rows) const {
  return AttentionOp::CreateStep(*m, rows, Cache(), num_threads, HeldBytes(),
                                 "a decoder step of " + Str(rows) + " tokens");
}

Status KvDecoder::Impl::PreparePrompt(int64_t batch, int64_t seq_len) {
  if (prompt && prompt->batch() == batch && prompt->seq_len() == seq_len) {
    return {};
  }
  prompt.reset();  // a prompt of another length: its op goes first
  // The decoder's own buffers were the last prompt's and go with it; an
  // owner's stay (and count) in case another layer sized them for this one.
  if (!owner_counts_prompt_buffers) *prompt_buffers = OwnedBuffers();
  const KvCache cache = Cache();
  const std::string what =
      "a prompt of batch " + Str(batch) + " x " + Str(seq_len) + " tokens";
  ATTN_ASSIGN_OR_RETURN(
      std::unique_ptr<AttentionOp> op,
      AttentionOp::Create(*m, DataType::kF32, batch, seq_len, &cache,
                          num_threads, HeldBytes(), what));
  if (!prompt_buffers->Fit(*op)) {
    *prompt_buffers = OwnedBuffers();
    const uint64_t held = HeldBytes();
    ATTN_RETURN_IF_ERROR(prompt_buffers->Allocate(
        *op, AddSat(held, op->bytes()), m->max_memory_bytes, what));
  }
  prompt = std::move(op);
  return {};
}

// Validates the counts before any state changes; the total new rows.
Result<int64_t> KvDecoder::Impl::CountRows(const NewTokens& tokens) const {
  int64_t R = 0;
  for (size_t i = 0; i < tokens.num; ++i) {
    const int64_t b = tokens.sequence(i), n = tokens.count(i);
    if (n < 0) {
      return InvalidArgument("counts[" + Str(b) + "] is " + Str(n) +
                             ", want >= 0 new tokens");
    }
    if (n > capacity - lengths[b]) {
      return InvalidArgument(
          "sequence " + Str(b) + " holds " + Str(lengths[b]) + " tokens; " +
          Str(n) + " more would exceed max_length " + Str(capacity) +
          (capacity == m->config.context_length ? " (the context_length)"
                                                : "") +
          ": Truncate or Reset it");
    }
    R += n;
  }
  return R;
}

// The row lists of a step of `rows` tokens in `sequences` sequences,
// checked against the cap before they grow.
Status KvDecoder::Impl::ReserveLists(int64_t rows, size_t sequences) {
  const auto R = static_cast<size_t>(rows);
  if (R <= row_seqs.capacity() && R <= row_positions.capacity() &&
      sequences <= prompt_seqs.capacity()) {
    return {};
  }
  const uint64_t more = (2 * uint64_t{R} + sequences) * sizeof(int64_t);
  ATTN_RETURN_IF_ERROR(
      CheckMemory("the row lists of a decoder step of " + Str(rows) + " tokens",
                  AddSat(HeldBytes(), more), m->max_memory_bytes));
  row_seqs.reserve(R);
  row_positions.reserve(R);
  prompt_seqs.reserve(sequences);
  return {};
}

// Prompts of one length n >= kPromptCore, every one starting an empty
// sequence, are the full causal forward: the attention operator does them
// (as MhaSession::Run). Returns n then (and lists the sequences), else 0.
int64_t KvDecoder::Impl::FreshPromptLength(const NewTokens& tokens) {
  constexpr int64_t kPromptCore = 64;
  int64_t n = 0;
  bool fresh = true;
  prompt_seqs.clear();
  for (size_t i = 0; i < tokens.num; ++i) {
    const int64_t b = tokens.sequence(i), count = tokens.count(i);
    if (count == 0) continue;
    fresh = fresh && lengths[b] == 0 && (n == 0 || count == n);
    n = count;
    prompt_seqs.push_back(b);
  }
  return fresh && n >= kPromptCore ? n : 0;
}

Status KvDecoder::Impl::Append(const float* input, const NewTokens& tokens,
                               const KeptRows* keep, float* output) {
  if (!input || !output) {
    return InvalidArgument("input, output and counts must not be null");
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t R, CountRows(tokens));
  if (R == 0) return {};
  for (size_t i = 0; keep && i < keep->count; ++i) {
    HWY_DASSERT(keep->rows[i] < R &&
                (i == 0 || keep->rows[i - 1] < keep->rows[i]));
  }
  ATTN_RETURN_IF_ERROR(ReserveLists(R, tokens.num));
  const int64_t n = FreshPromptLength(tokens);
  if (n > 0) {
    const ThreadScope threads(num_threads);
    ATTN_RETURN_IF_ERROR(
        PreparePrompt(static_cast<int64_t>(prompt_seqs.size()), n));
    prompt->Forward(input, prompt_seqs.data(), output,
                    prompt_buffers->pointers(), keep);
  } else {
    ATTN_RETURN_IF_ERROR(AppendRows(input, tokens, R, keep, output));
  }
  for (size_t i = 0; i < tokens.num; ++i) {
    lengths[tokens.sequence(i)] += tokens.count(i);
  }
  return {};
}

// Token by token through the decode kernel (AttentionOp::Step).
Status KvDecoder::Impl::AppendRows(const float* input, const NewTokens& tokens,
                                   int64_t R, const KeptRows* keep,
                                   float* output) {
  AttentionOp* op = step.get();
  if (R != B) {
    if (!other || other->rows() != R) {
      other.reset();  // steps of another size: its op goes first
      ATTN_ASSIGN_OR_RETURN(other, MakeStep(R));
    }
    op = other.get();
  }
  row_seqs.clear();
  row_positions.clear();
  for (size_t s = 0; s < tokens.num; ++s) {
    const int64_t b = tokens.sequence(s);
    for (int64_t i = 0; i < tokens.count(s); ++i) {
      row_seqs.push_back(b);
      row_positions.push_back(lengths[b] + i);
    }
  }
  op->Step(input, row_seqs.data(), row_positions.data(), output,
           static_cast<float*>(partials.data()), max_partials, keep);
  return {};
}

KvDecoder::KvDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvDecoder::KvDecoder(KvDecoder&&) noexcept = default;
KvDecoder& KvDecoder::operator=(KvDecoder&&) noexcept = default;
KvDecoder::~KvDecoder() = default;

// The K and V caches and the decode kernel's partials, checked against the
// cap as one request.
Status KvDecoder::Impl::AllocateCache() {
  // 2 x B x Hkv x capacity x Dp floats, checked for overflow before asking.
  const double cache_floats =
      2.0 * double(B) * double(Hkv) * double(capacity) * double(Dp);
  if (cache_floats * sizeof(float) > 0.5 * double(SIZE_MAX)) {
    return OutOfMemory("decoder cache of batch " + Str(B) + " x max_length " +
                       Str(capacity) + " is too large");
  }
  const size_t cache_bytes = static_cast<size_t>(B * Hkv) *
                             static_cast<size_t>(capacity * Dp) * sizeof(float);
  max_partials = static_cast<size_t>(B * H) *
                 kernels::DecodeChunks(static_cast<size_t>(capacity));
  Workspace workspace;
  workspace.Add(&k_cache, cache_bytes);
  workspace.Add(&v_cache, cache_bytes);
  workspace.Add(&partials,
                max_partials *
                    kernels::DecodePartialFloats(static_cast<size_t>(Dp)) *
                    sizeof(float));
  ATTN_RETURN_IF_ERROR(workspace.Allocate(
      "a decoder cache of batch " + Str(B) + " x max_length " + Str(capacity),
      HeldBytes(), m->max_memory_bytes));
  // Zeroed now, for two reasons. A prompt's projection writes the first D
  // floats of each head's row of a key: the padding lanes, which the decode
  // kernel reads, start zero and stay. And the pages are touched here, not by
  // the steps that grow into them: a step never stops to fault one in (GPT-2 at
  // batch 8 grows into about 140 pages a step, each fault 10 us on a VM),
  // and the memory the cap counted is really held from the start.
  k_cache.ZeroAllPages();
  v_cache.ZeroAllPages();
  return {};
}

Result<KvDecoder> KvDecoder::Create(std::shared_ptr<const MhaModel> model,
                                    const DecoderOptions& options,
                                    const DecoderOwner& owner) {
  if (!model) return InvalidArgument("decoder: model is null");
  auto impl = std::make_unique<Impl>();
  impl->m = &ModelAccess::Of(*model);
  impl->held_elsewhere = owner.held_elsewhere;
  impl->owner_counts_prompt_buffers = owner.prompt_buffers != nullptr;
  impl->prompt_buffers = owner.prompt_buffers
                             ? owner.prompt_buffers
                             : std::make_shared<OwnedBuffers>();
  const MhaConfig& c = impl->m->config;
  if (!impl->m->qkv.present()) {
    return InvalidArgument(
        "decoder: the model was made with MhaOptions::decode false, without "
        "the layouts decoders read; make it with decode true");
  }
  if (options.batch <= 0 || options.batch > (int64_t{1} << 20)) {
    return InvalidArgument("decoder batch is " + Str(options.batch) +
                           ", want a positive number of sequences");
  }
  int64_t capacity = options.max_length;
  if (capacity < 0) {
    return InvalidArgument("decoder max_length is " + Str(capacity) +
                           ", want a positive length (or 0 for the model's "
                           "context_length)");
  }
  if (capacity == 0) {
    if (c.context_length == 0) {
      return InvalidArgument(
          "decoder max_length is not given and the model has no "
          "context_length: set one of them (--context-length)");
    }
    capacity = c.context_length;
  }
  if (c.context_length > 0 && capacity > c.context_length) {
    return InvalidArgument("decoder max_length " + Str(capacity) +
                           " exceeds the model's context_length " +
                           Str(c.context_length));
  }
  impl->B = options.batch;
  impl->capacity = capacity;
  impl->H = c.num_heads;
  impl->Hkv = c.num_kv_heads;
  impl->D = c.d_out / c.num_heads;
  impl->Dp = static_cast<int64_t>(
      kernels::DecodePaddedDim(static_cast<size_t>(impl->D)));
  impl->head_major = kernels::DecodeBlocksHeads(DecodeParamsOf(KvCache(), c));
  impl->d_in = c.d_in;
  impl->d_out = c.d_out;
  impl->num_threads = model->num_threads();
  impl->lengths.assign(static_cast<size_t>(impl->B), 0);

  impl->model = model;  // HeldBytes reads the weights through m
  ATTN_RETURN_IF_ERROR(impl->AllocateCache());
  // A one-token-per-sequence step grows no list.
  ATTN_RETURN_IF_ERROR(
      impl->ReserveLists(impl->B, static_cast<size_t>(impl->B)));
  ATTN_ASSIGN_OR_RETURN(impl->step, impl->MakeStep(impl->B));
  impl->model = std::move(model);
  return KvDecoder(std::move(impl));
}

Status KvDecoder::Prefill(const float* input, const int64_t* counts,
                          float* output) {
  if (!counts) {
    return InvalidArgument("input, output and counts must not be null");
  }
  NewTokens tokens;
  tokens.counts = counts;
  tokens.num = static_cast<size_t>(impl_->B);
  return impl_->Append(input, tokens, nullptr, output);
}

Status KvDecoder::Prefill(const float* input, const int64_t* sequences,
                          const int64_t* counts, size_t num_sequences,
                          const int64_t* keep, size_t num_keep, float* output) {
  NewTokens tokens;
  tokens.sequences = sequences;
  tokens.counts = counts;
  tokens.num = num_sequences;
  for (size_t i = 0; i < num_sequences; ++i) {
    HWY_DASSERT(sequences[i] >= 0 && sequences[i] < impl_->B &&
                (i == 0 || sequences[i - 1] < sequences[i]));
  }
  if (!keep) return impl_->Append(input, tokens, nullptr, output);
  const KeptRows kept{keep, num_keep};
  return impl_->Append(input, tokens, &kept, output);
}

Status KvDecoder::Prefill(const float* input, int64_t seq_len, float* output) {
  if (seq_len < 0) {
    return InvalidArgument("seq_len is " + Str(seq_len) + ", want >= 0");
  }
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  // [B, T, d_in] is already packed sequence after sequence.
  NewTokens tokens;
  tokens.each = seq_len;
  tokens.num = static_cast<size_t>(impl_->B);
  return impl_->Append(input, tokens, nullptr, output);
}

Status KvDecoder::Decode(const float* input, int64_t batch, float* output) {
  Impl& d = *impl_;
  if (batch != d.B) {
    return InvalidArgument("decode batch is " + Str(batch) +
                           ", but the decoder holds " + Str(d.B) +
                           " sequences");
  }
  for (int64_t b = 0; b < d.B; ++b) {
    if (d.lengths[static_cast<size_t>(b)] == 0) {
      return InvalidArgument(
          "sequence " + Str(b) +
          " is empty (new, or Reset): Prefill its prompt before Decode");
    }
  }
  NewTokens tokens;
  tokens.each = 1;
  tokens.num = static_cast<size_t>(d.B);
  return d.Append(input, tokens, nullptr, output);
}

void KvDecoder::Reset() {
  std::fill(impl_->lengths.begin(), impl_->lengths.end(), 0);
}

Status KvDecoder::Reset(int64_t sequence) { return Truncate(sequence, 0); }

Status KvDecoder::Truncate(int64_t sequence, int64_t length) {
  Impl& d = *impl_;
  if (sequence < 0 || sequence >= d.B) {
    return InvalidArgument("sequence " + Str(sequence) +
                           " is out of range [0, " + Str(d.B) + ")");
  }
  int64_t& held = d.lengths[static_cast<size_t>(sequence)];
  if (length < 0 || length > held) {
    return InvalidArgument("cannot truncate sequence " + Str(sequence) +
                           " of " + Str(held) + " tokens to " + Str(length) +
                           ", want 0 <= length <= " + Str(held));
  }
  held = length;
  return {};
}

Status KvDecoder::Copy(int64_t from, int64_t to) {
  Impl& d = *impl_;
  for (const int64_t sequence : {from, to}) {
    if (sequence < 0 || sequence >= d.B) {
      return InvalidArgument("sequence " + Str(sequence) +
                             " is out of range [0, " + Str(d.B) + ")");
    }
  }
  if (from == to) return {};
  const KvCache cache = d.Cache();
  // The first `lengths` keys: one run per K/V head (head major) or one in
  // all (token major).
  const int64_t runs = d.head_major ? d.Hkv : 1;
  const size_t bytes =
      static_cast<size_t>(d.lengths[from] * cache.row_stride) * sizeof(float);
  for (float* base : {cache.k, cache.v}) {
    for (int64_t g = 0; g < runs; ++g) {
      const int64_t at = g * cache.head_stride;
      std::memcpy(base + to * cache.batch_stride + at,
                  base + from * cache.batch_stride + at, bytes);
    }
  }
  d.lengths[to] = d.lengths[from];
  return {};
}

int64_t KvDecoder::batch() const { return impl_->B; }
int64_t KvDecoder::max_length() const { return impl_->capacity; }
int64_t KvDecoder::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->B) return -1;
  return impl_->lengths[static_cast<size_t>(sequence)];
}
size_t KvDecoder::cache_bytes() const {
  return impl_->k_cache.size() + impl_->v_cache.size();
}
size_t KvDecoder::workspace_bytes() const { return impl_->WorkspaceBytes(); }
size_t KvDecoder::decode_kv_bytes() const {
  // A sliding window reads its last `window` keys only.
  const int64_t window = impl_->m->config.sliding_window;
  size_t keys = 0;
  for (int64_t n : impl_->lengths) {
    keys += static_cast<size_t>(window > 0 ? std::min(n + 1, window) : n + 1);
  }
  // K/V rows are Hkv heads of D wide (d_out without grouping).
  return 2 * keys * static_cast<size_t>(impl_->Hkv * impl_->D) * sizeof(float);
}

// MhaDecoder: the public face of a KvDecoder.
struct MhaDecoder::Impl {
  KvDecoder decoder;
};

MhaDecoder::MhaDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MhaDecoder::~MhaDecoder() = default;

Result<std::unique_ptr<MhaDecoder>> MhaDecoder::Create(
    std::shared_ptr<const MhaModel> model, const DecoderOptions& options) {
  ATTN_ASSIGN_OR_RETURN(KvDecoder decoder,
                        KvDecoder::Create(std::move(model), options));
  return std::unique_ptr<MhaDecoder>(
      new MhaDecoder(std::make_unique<Impl>(Impl{std::move(decoder)})));
}

Status MhaDecoder::Prefill(const float* input, const int64_t* counts,
                           float* output) {
  return impl_->decoder.Prefill(input, counts, output);
}
Status MhaDecoder::Prefill(const float* input, int64_t seq_len, float* output) {
  return impl_->decoder.Prefill(input, seq_len, output);
}
Status MhaDecoder::Decode(const float* input, int64_t batch, float* output) {
  return impl_->decoder.Decode(input, batch, output);
}
void MhaDecoder::Reset() { impl_->decoder.Reset(); }
Status MhaDecoder::Reset(int64_t sequence) {
  return impl_->decoder.Reset(sequence);
}
Status MhaDecoder::Truncate(int64_t sequence, int64_t length) {
  return impl_->decoder.Truncate(sequence, length);
}
Status MhaDecoder::Copy(int64_t from, int64_t to) {
  return impl_->decoder.Copy(from, to);
}
int64_t MhaDecoder::batch() const { return impl_->decoder.batch(); }
int64_t MhaDecoder::max_length() const { return impl_->decoder.max_length(); }
int64_t MhaDecoder::length(int64_t sequence) const {
  return impl_->decoder.length(sequence);
}
size_t MhaDecoder::cache_bytes() const { return impl_->decoder.cache_bytes(); }
size_t MhaDecoder::workspace_bytes() const {
  return impl_->decoder.workspace_bytes();
}
size_t MhaDecoder::decode_kv_bytes() const {
  return impl_->decoder.decode_kv_bytes();
}

}  // namespace attn
