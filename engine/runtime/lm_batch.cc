// Batch (attn/lm.hpp): continuous batching over a LanguageModel. One
// KvCache holds every layer's keys and values for every slot; a step packs
// the new tokens of its requests slot after slot and runs the model's
// program on those rows (Runner; each mha step a layer's CachedAttention
// writing their K and V), the steps after the last attention on the rows
// whose logits were asked for alone, then counts the new tokens in the
// cache.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "engine/models/lm_model.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/cached_attention.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/runner.h"
#include "engine/runtime/threads.h"

namespace attn {
namespace {

template <class T>
uint64_t BytesOf(const std::vector<T>& list) {
  return uint64_t{list.capacity()} * sizeof(T);
}

// Bytes `list` grows by to hold `n` (its new block; the old one is counted
// as held until it goes).
template <class T>
uint64_t GrowthOf(const std::vector<T>& list, size_t n) {
  return n > list.capacity() ? uint64_t{n} * sizeof(T) : 0;
}

}  // namespace

struct Batch::Impl {
  std::shared_ptr<const LanguageModel> model;
  const lm::ModelData* m = nullptr;
  uint64_t caller_bytes = 0;  // BatchOptions::caller_bytes
  std::optional<KvCache> cache;
  CachedAttentionShared shared;            // what the layers share
  std::vector<CachedAttention> attention;  // per layer
  // The step being run, its lists as long as its requests or rows, not
  // max_sequences: the requests in slot order; its sequences (ascending)
  // and their new tokens; each row's token and position; the rows whose
  // logits are kept; and each request's first logits row.
  std::vector<size_t> order;
  std::vector<int64_t> step_seqs, step_counts;
  std::vector<int64_t> row_tokens, row_positions, logit_rows;
  std::vector<size_t> logits_first;
  std::optional<Runner> runner;
  std::optional<size_t> last_mha;  // the program's last mha step
  AlignedBuffer logits;            // [logit rows, vocab]
  int64_t logit_rows_allocated = 0;

  uint64_t ListBytes() const;
  uint64_t HeldBytes() const;
  // Bytes of the cache, what the layers share and their ops.
  uint64_t CacheBytes() const;
  Status ReserveLists(size_t requests, size_t rows, size_t logits);
  size_t FirstDuplicate(const Request* requests);
  Status CheckRequests(const Request* requests, size_t count);
  Status PackRows(const Request* requests);
  Status ReserveLogits(int64_t logit_rows);
  Status Prepare(int64_t rows);
  Status Run();  // the packed step
};

uint64_t Batch::Impl::ListBytes() const {
  uint64_t bytes = 0;
  for (const auto* list :
       {&step_seqs, &step_counts, &row_tokens, &row_positions, &logit_rows}) {
    bytes = AddSat(bytes, BytesOf(*list));
  }
  return AddSat(bytes, BytesOf(order) + BytesOf(logits_first));
}

uint64_t Batch::Impl::CacheBytes() const {
  uint64_t bytes = AddSat(cache ? cache->bytes() : 0, shared.bytes());
  for (const CachedAttention& layer : attention) {
    bytes = AddSat(bytes, layer.bytes());
  }
  return bytes;
}

uint64_t Batch::Impl::HeldBytes() const {
  uint64_t bytes = AddSat(model->memory_bytes(), CacheBytes());
  bytes = AddSat(bytes, AddSat(ListBytes(), caller_bytes));
  return AddSat(AddSat(bytes, logits.size()), runner->bytes());
}

// The step's lists for `requests` requests of `rows` new tokens, `logits`
// of them with logits, checked against the cap before any grows.
Status Batch::Impl::ReserveLists(size_t requests, size_t rows, size_t logits) {
  uint64_t more =
      AddSat(GrowthOf(order, requests), GrowthOf(logits_first, requests));
  for (const auto* list : {&step_seqs, &step_counts}) {
    more = AddSat(more, GrowthOf(*list, requests));
  }
  for (const auto* list : {&row_tokens, &row_positions}) {
    more = AddSat(more, GrowthOf(*list, rows));
  }
  more = AddSat(more, GrowthOf(logit_rows, logits));
  if (more == 0) return {};
  ATTN_RETURN_IF_ERROR(CheckMemory(
      "the lists of a step of " + std::to_string(int64_t(requests)) +
          " requests and " + std::to_string(int64_t(rows)) + " tokens",
      AddSat(HeldBytes(), more), m->max_memory_bytes));
  order.reserve(requests);
  logits_first.reserve(requests);
  for (auto* list : {&step_seqs, &step_counts}) list->reserve(requests);
  row_tokens.reserve(rows);
  row_positions.reserve(rows);
  logit_rows.reserve(logits);
  return {};
}

// Sorts `order` (the request indices) by sequence, then index; returns the
// first request, in the caller's order, naming a sequence an earlier one
// named (order.size() when none does).
size_t Batch::Impl::FirstDuplicate(const Request* requests) {
  std::sort(order.begin(), order.end(), [requests](size_t a, size_t b) {
    return requests[a].sequence != requests[b].sequence
               ? requests[a].sequence < requests[b].sequence
               : a < b;
  });
  size_t first = order.size();
  for (size_t k = 1; k < order.size(); ++k) {
    if (requests[order[k]].sequence == requests[order[k - 1]].sequence) {
      first = std::min(first, order[k]);
    }
  }
  return first;
}

// Everything a step can get wrong, before anything changes; leaves the
// requests in slot order in `order`.
Status Batch::Impl::CheckRequests(const Request* requests, size_t count) {
  if (count > 0 && !requests) return InvalidArgument("step: requests is null");
  const int64_t B = cache->shape().sequences;
  if (count > static_cast<size_t>(B)) {
    return InvalidArgument("step has " + std::to_string(int64_t(count)) +
                           " requests, want at most max_sequences " +
                           std::to_string(B) + " (each sequence once)");
  }
  ATTN_RETURN_IF_ERROR(ReserveLists(count, 0, 0));
  order.resize(count);
  for (size_t i = 0; i < count; ++i) order[i] = i;
  const size_t duplicate = FirstDuplicate(requests);
  const int64_t vocab = m->config.vocab_size;
  for (size_t i = 0; i < count; ++i) {
    const Request& r = requests[i];
    // Named only in a refusal: a step that passes builds no string.
    const auto who = [i] {
      return "step request " + std::to_string(int64_t(i)) + ": ";
    };
    const int64_t held = cache->length(r.sequence);
    if (held < 0) {
      return InvalidArgument(who() + "sequence " + std::to_string(r.sequence) +
                             " is not a live sequence of this batch");
    }
    if (i == duplicate) {
      return InvalidArgument(who() + "sequence " + std::to_string(r.sequence) +
                             " appears twice in one step");
    }
    if (r.count <= 0 || !r.tokens) {
      return InvalidArgument(who() + "has " + std::to_string(r.count) +
                             " tokens, want at least 1 (and non-null tokens)");
    }
    if (r.count > cache->shape().capacity - held) {
      return InvalidArgument(who() + "sequence " + std::to_string(r.sequence) +
                             " holds " + std::to_string(held) + " tokens; " +
                             std::to_string(r.count) +
                             " more exceed the batch's max_length " +
                             std::to_string(cache->shape().capacity));
    }
    for (int64_t t = 0; t < r.count; ++t) {
      if (r.tokens[t] < 0 || r.tokens[t] >= vocab) {
        return InvalidArgument(who() + "token id " +
                               std::to_string(r.tokens[t]) + " at position " +
                               std::to_string(t) + " is out of range [0, " +
                               std::to_string(vocab) + ")");
      }
    }
  }
  return {};
}

// Rows slot after slot (the decoders' order), and which give logits.
Status Batch::Impl::PackRows(const Request* requests) {
  size_t rows = 0, logits = 0;
  for (const size_t i : order) {
    rows += static_cast<size_t>(requests[i].count);
    logits +=
        requests[i].all_logits ? static_cast<size_t>(requests[i].count) : 1;
  }
  ATTN_RETURN_IF_ERROR(ReserveLists(order.size(), rows, logits));
  for (auto* list :
       {&step_seqs, &step_counts, &row_tokens, &row_positions, &logit_rows}) {
    list->clear();
  }
  logits_first.assign(order.size(), 0);
  for (const size_t i : order) {
    const Request& r = requests[i];
    const int64_t held = cache->length(r.sequence);
    step_seqs.push_back(r.sequence);
    step_counts.push_back(r.count);
    const int64_t first_row = static_cast<int64_t>(row_tokens.size());
    for (int64_t t = 0; t < r.count; ++t) {
      row_tokens.push_back(r.tokens[t]);
      row_positions.push_back(held + t);
    }
    logits_first[i] = logit_rows.size();
    for (int64_t t = r.all_logits ? 0 : r.count - 1; t < r.count; ++t) {
      logit_rows.push_back(first_row + t);
    }
  }
  return {};
}

// The logits of `rows` rows, grown to the most a step has asked for.
Status Batch::Impl::ReserveLogits(int64_t rows) {
  if (rows <= logit_rows_allocated) return {};
  const size_t bytes = static_cast<size_t>(rows) *
                       static_cast<size_t>(m->config.vocab_size) *
                       sizeof(float);
  logits = AlignedBuffer();
  logit_rows_allocated = 0;
  Workspace workspace;
  workspace.Add(&logits, bytes);
  ATTN_RETURN_IF_ERROR(workspace.Allocate(
      "the logits of a step of " + std::to_string(rows) + " rows", HeldBytes(),
      m->max_memory_bytes));
  logit_rows_allocated = rows;
  return {};
}

// The runner's plans and arena for `rows` rows, the steps after the last
// attention on the logit rows alone when they are fewer.
Status Batch::Impl::Prepare(int64_t rows) {
  const auto kept = static_cast<int64_t>(logit_rows.size());
  RunShape shape{rows, std::nullopt, rows};
  if (kept < rows) shape = {rows, last_mha, kept};
  if (shape == runner->shape()) return {};
  const std::vector<std::vector<size_t>> no_buffers(m->program.steps.size());
  return runner->Prepare(
      shape, no_buffers, {}, HeldBytes() - runner->bytes(), m->max_memory_bytes,
      "the buffers of a step of " + std::to_string(rows) + " tokens");
}

Status Batch::Impl::Run() {
  const auto rows = static_cast<int64_t>(row_tokens.size());
  if (rows == 0) return {};
  const ThreadScope threads(m->num_threads);
  ATTN_RETURN_IF_ERROR(ReserveLogits(static_cast<int64_t>(logit_rows.size())));
  ATTN_RETURN_IF_ERROR(Prepare(rows));
  NewTokens tokens;
  tokens.sequences = step_seqs.data();
  tokens.counts = step_counts.data();
  tokens.num = step_seqs.size();
  const KeptRows kept{logit_rows.data(), logit_rows.size()};
  const auto attend = [&](size_t, size_t k, const float* src, float* dst,
                          void* const*) {
    const bool keep = runner->shape().keep_step == k;
    return attention[size_t(m->mha_layer[m->program.steps[k].node])].Append(
        src, tokens, rows, keep ? &kept : nullptr, dst);
  };
  const RunRows run{0, row_tokens.data(), row_positions.data(),
                    logit_rows.data()};
  ATTN_RETURN_IF_ERROR(runner->Run(0, run, nullptr,
                                   static_cast<float*>(logits.data()), attend,
                                   m->num_threads));
  for (size_t k = 0; k < step_seqs.size(); ++k) {
    cache->Extend(step_seqs[k], step_counts[k]);
  }
  return {};
}

Batch::Batch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Batch::~Batch() = default;

Result<std::unique_ptr<Batch>> Batch::Create(std::shared_ptr<const Model> any,
                                             const BatchOptions& options) {
  if (!any) return InvalidArgument("batch: model is null");
  std::shared_ptr<const LanguageModel> model = any->language_model();
  if (!model) {
    return InvalidArgument(std::string("batch: the model is ") +
                           (any->graph() ? "a graph" : "an attention layer") +
                           ", want a language model");
  }
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  const lm::ModelData& m = ModelAccess::Of(*model);
  const LmConfig& c = m.config;
  if (options.max_sequences <= 0 ||
      options.max_sequences > BatchOptions::kMaxSequences) {
    return InvalidArgument(
        "batch max_sequences is " + std::to_string(options.max_sequences) +
        ", want 1 to " + std::to_string(BatchOptions::kMaxSequences));
  }
  if (options.max_length < 0 || options.max_length > c.context_length) {
    return InvalidArgument("batch max_length is " +
                           std::to_string(options.max_length) +
                           ", want 0 (the context) to context_length " +
                           std::to_string(c.context_length));
  }
  const int64_t capacity =
      options.max_length ? options.max_length : c.context_length;
  d.m = &m;
  d.caller_bytes = options.caller_bytes;
  d.runner.emplace(m.bound,
                   RunnerPolicy{false, ops::LinearFallback::kPlain, true},
                   m.num_threads);
  for (size_t k = 0; k < m.program.steps.size(); ++k) {
    if (m.program.steps[k].op == graph::Op::kMha) d.last_mha = k;
  }
  ATTN_ASSIGN_OR_RETURN(
      KvCache cache,
      KvCache::Create(
          CacheShapeFor(ModelAccess::Of(*m.layers[0].attention),
                        static_cast<int64_t>(m.layers.size()),
                        options.max_sequences, capacity),
          /*all_live=*/false,
          AddSat(model->memory_bytes(), options.caller_bytes),
          m.max_memory_bytes,
          "the KV caches of " + std::to_string(options.max_sequences) +
              " sequences x " + std::to_string(capacity) + " tokens in " +
              std::to_string(c.num_layers) + " layers"));
  d.cache.emplace(std::move(cache));
  d.model = std::move(model);  // HeldBytes reads the weights through it
  d.shared.held = [&d] { return d.HeldBytes(); };
  d.shared.cap = m.max_memory_bytes;
  const ThreadScope threads(m.num_threads);
  ATTN_RETURN_IF_ERROR(d.shared.AllocatePartials(
      *d.cache, ModelAccess::Of(*m.layers[0].attention).config.num_heads));
  d.attention.reserve(m.layers.size());
  for (size_t l = 0; l < m.layers.size(); ++l) {
    ATTN_ASSIGN_OR_RETURN(
        CachedAttention layer,
        CachedAttention::Create(ModelAccess::Of(*m.layers[l].attention),
                                &*d.cache, static_cast<int64_t>(l), &d.shared));
    d.attention.push_back(std::move(layer));
  }
  return std::unique_ptr<Batch>(new Batch(std::move(impl)));
}

Result<int64_t> Batch::Add() { return impl_->cache->Add(); }
Status Batch::Remove(int64_t sequence) {
  return impl_->cache->Remove(sequence);
}
Result<int64_t> Batch::Fork(int64_t sequence) {
  return impl_->cache->Fork(sequence);
}
Status Batch::Truncate(int64_t sequence, int64_t length) {
  return impl_->cache->Truncate(sequence, length);
}
int64_t Batch::length(int64_t sequence) const {
  return impl_->cache->length(sequence);
}
int64_t Batch::max_sequences() const { return impl_->cache->shape().sequences; }
int64_t Batch::max_length() const { return impl_->cache->shape().capacity; }

Status Batch::Step(const Request* requests, size_t count) {
  Impl& d = *impl_;
  d.logits_first.clear();  // no logits from a failed step, refused or not
  // A step that fails part-way, returning an error or out of memory in an
  // allocation, leaves every sequence as it was: only a step that ran
  // every layer counts its tokens in the cache.
  Status s;
  try {
    s = d.CheckRequests(requests, count);
    if (s.ok()) s = d.PackRows(requests);
    if (s.ok()) s = d.Run();
  } catch (const std::bad_alloc&) {
    s = OutOfMemory("out of memory");  // short: no allocation to make it
  } catch (...) {  // a oneDNN primitive that failed to run, say
    s = Internal("a step failed in a kernel; no sequence changed");
  }
  if (!s.ok()) d.logits_first.clear();
  return s;
}

const float* Batch::logits(size_t request) const {
  const Impl& d = *impl_;
  if (request >= d.logits_first.size()) return nullptr;
  return static_cast<const float*>(d.logits.data()) +
         d.logits_first[request] * size_t(d.m->config.vocab_size);
}

size_t Batch::cache_bytes() const { return impl_->CacheBytes(); }

}  // namespace attn
