/* attn/lm.hpp: whole language models (C++ API). A LanguageModel is the
 * book's GPTModel, a Hugging Face GPT-2 file or the book's Llama 3.2 model:
 * token (and position) embeddings, transformer blocks running the one
 * attention operator, a final norm and the output head. An Batch is one
 * thread's generation state: one KV cache, every layer's, for the sequences it
 * holds, which join, leave and fork between steps (continuous batching). */
#ifndef ATTN_LM_HPP_
#define ATTN_LM_HPP_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "attn/attn.hpp"
#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

class Model;  // attn/model.hpp

// The block family: GPT-2's (learned positions, LayerNorm, GELU MLP, MHA
// with biases) or Llama's (RoPE, RMSNorm, SwiGLU, GQA, no biases).
enum class LmArchitecture { kGpt2, kLlama };

struct LmConfig {
  LmArchitecture architecture = LmArchitecture::kGpt2;
  // The file's naming: "book-gpt" (the book's GPTModel), "hf-gpt2" (Hugging
  // Face GPT-2, with or without "transformer."), "book-llama" (the book's
  // Llama 3.2).
  std::string layout;
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // longest sequence; positions of GPT-2
  int64_t emb_dim = 0;
  int64_t hidden_dim = 0;  // of the feed-forward block
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // num_heads without grouping
  int64_t head_dim = 0;      // of each head; 0: emb_dim / num_heads
  // Gemma: token embeddings are multiplied by this (sqrt(emb_dim) in the
  // checkpoint's dtype); 0: not scaled.
  float embedding_scale = 0.0f;
  // The file's: its weights' dtype ("F32", "BF16", "F16", "mixed", or a
  // quantized folder's "q8_0" or "q4_0") and their count; empty and 0 for
  // seeded weights.
  std::string file_dtype;
  int64_t file_parameters = 0;
  bool qkv_bias = false;
  bool tied_head = false;  // the head is the token embedding
  double norm_eps = 1e-5;
  RopeConfig rope;  // Llama only
  int64_t sliding_window = 0;
};

// How to load a language model: the fields every model takes, and the
// norms' epsilon (0: metadata "rms_norm_eps", else config.json's
// "layer_norm_epsilon", else 1e-5). dtype kBF16 (CPUs with native bf16
// only) holds every matrix in bf16, rounded once at load (a tied head's
// embeddings too), for half the bytes a decode step reads: steps of up to 8
// tokens multiply the bf16 weights with fp32 activations in fp32; longer
// ones run oneDNN's bf16 matmuls (activations rounded to bf16). Norms,
// biases, rotary embeddings and the cache stay fp32. dtype kQ8_0 or kQ4_0 (any
// CPU; emb_dim, hidden_dim and num_heads x head_dim multiples of 32) quantizes
// every linear at load as llama.cpp's reference quantizers do (a tied head its
// own copy; the embeddings, norms, biases and cache stay fp32): every linear
// quantizes its input per block of 32 to int8 too (llama.cpp's q8_0) and takes
// int8 dot products, in groups of 8 rows. A quantized folder (QuantizeModel)
// runs in its own type, which dtype kF32 (the default) stands for.
struct LmOptions : ModelOptions {
  double norm_eps = 0.0;
};

// Weights and configuration, immutable once loaded: any number of threads
// may share one model, each with its own Batch.
class ATTN_API LanguageModel {
 public:
  // Reads a safetensors file in one of the layouts of LmConfig::layout,
  // told apart by its tensor names. Hyper-parameters: options, then the
  // file's metadata (num_heads, num_kv_heads, context_length, rope_*,
  // rms_norm_eps), then, for Hugging Face files, a config.json beside the
  // file (n_head, n_positions, layer_norm_epsilon); widths, layers and the
  // vocabulary follow from the tensors. F32, F16 and BF16 files.
  static Result<std::shared_ptr<const LanguageModel>> Load(
      const std::string& path, const LmOptions& options = {});
  // The configuration Load gives `path`, read and checked without reading
  // the weights (for `attn info`).
  static Result<LmConfig> ReadConfig(const std::string& path,
                                     const LmOptions& options = {});
  // A model of `config`'s sizes with seeded random weights (benchmarks);
  // config.layout is ignored.
  static Result<std::shared_ptr<const LanguageModel>> Random(
      const LmConfig& config, uint64_t seed, const LmOptions& options = {});
  // True when the file's tensor names are one of the whole-model layouts
  // (a cheap check of the header, for front ends that take either an MHA
  // or a whole model). False for unreadable files, and for a header whose
  // parse does not fit max_memory_bytes (SafetensorsFile::Open).
  static bool IsLanguageModelFile(const std::string& path,
                                  uint64_t max_memory_bytes = 0);

  ~LanguageModel();
  const LmConfig& config() const;
  // The type its linears hold: LmOptions::dtype, or a quantized file's own.
  DType dtype() const;
  int num_threads() const;  // the resolved team size
  // Bytes the model holds: its weights and their packed copies, and while
  // a batch lives on it the attention's step copies (shared by every batch).
  uint64_t memory_bytes() const;

 private:
  friend struct ModelAccess;  // the engine's batches read the model
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit LanguageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes the model at `path` (as LanguageModel::Load reads it) into the new
// folder `output` with every linear's weight quantized to `dtype` (kQ8_0 or
// kQ4_0) exactly as LmOptions::dtype quantizes at load, so that Load reads
// the same blocks back and quantizes nothing (but a tied head's copy of the
// embeddings): model.safetensors, each matrix's quants and fp16 scales
// (engine/README.md has the format), every other tensor as stored, the
// metadata naming the type and block size; the configuration, tokenizer and
// license files beside `path` copied. One matrix is held at a time (within
// options.max_memory_bytes); options also give the team size and what Load
// takes. The folder appears whole or not at all; `output` must not exist.
// `stop`, if given, is asked on the calling thread between tensors, between
// 16 MiB of a copied one and before the folder is renamed into place: once
// it returns true the call removes what it wrote and returns kCancelled (the
// CLI stops this way on Ctrl-C).
ATTN_API Status QuantizeModel(const std::string& path,
                              const std::string& output, DType dtype,
                              const LmOptions& options = {},
                              const std::function<bool()>& stop = {});

struct BatchOptions {
  static constexpr int64_t kMaxSequences = int64_t{1} << 20;
  int64_t max_sequences = 1;  // sequences held at once, 1 to kMaxSequences
  int64_t max_length = 0;     // tokens per sequence; 0: context_length
  // Bytes the caller holds for the batch's work (its prompts, outputs and
  // per-sequence state), counted with the model's and the batch's own in
  // every check against the model's memory cap: one budget for the call.
  uint64_t caller_bytes = 0;
};

// One thread's generation state: up to max_sequences sequences, each with a
// KV cache in every layer (the K/V heads only). Sequences join (Add), leave
// (Remove) and fork (Fork) between steps; a Step advances any subset of
// them, mixing prompts with the next token of running ones. A sequence's
// logits equal running its tokens alone (within rounding: the matmuls'
// blocking follows a step's row count), and are bit for bit the same for
// every thread count. Not thread-safe.
class ATTN_API Batch {
 public:
  // Allocates every cache up front, checked against the model's memory cap.
  // The model is a language model (ModelKind::kLanguageModel).
  static Result<std::unique_ptr<Batch>> Create(
      std::shared_ptr<const Model> model, const BatchOptions& options = {});
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // A new empty sequence; its id (the lowest free slot, < max_sequences).
  // Add and Remove cost O(log max_sequences), Fork that and the copy, and
  // a Step its requests and tokens: none walks every slot.
  Result<int64_t> Add();
  // Frees `sequence`'s slot.
  Status Remove(int64_t sequence);
  // A new sequence holding a copy of `sequence`'s tokens and caches (for
  // parallel sampling); its id.
  Result<int64_t> Fork(int64_t sequence);
  // Keeps `sequence`'s first `length` tokens (0 <= length <= its length):
  // the next step continues from there (a conversation whose new prompt
  // shares only a prefix with what the cache holds).
  Status Truncate(int64_t sequence, int64_t length);
  // Tokens `sequence` holds; -1 when it is not a live sequence.
  int64_t length(int64_t sequence) const;
  int64_t max_sequences() const;
  int64_t max_length() const;

  // One sequence's part of a step: `count` new tokens (a prompt, or the
  // next token), and which of them get logits.
  struct Request {
    int64_t sequence = 0;
    const int64_t* tokens = nullptr;
    int64_t count = 0;
    bool all_logits = false;  // every new token's logits, else the last's
  };
  // Appends each request's tokens to its sequence (each sequence at most
  // once per step, so count <= max_sequences) and computes the logits asked
  // for. Token ids, lengths and sequences are checked first; on any error,
  // out of memory part-way included, no sequence changes. (Memory that runs
  // out inside a parallel region of several threads ends the process:
  // OpenMP lets no exception out of one.)
  Status Step(const Request* requests, size_t count);
  // Request i's logits from the last Step: [rows, vocab_size] with rows its
  // count when all_logits, else 1. Valid until the next Step; null after a
  // failed one.
  const float* logits(size_t request) const;

  // Bytes of every layer's KV cache and its decoder's buffers (not the
  // step's activations, which grow with the largest step; the weights every
  // step reads are the model's: memory_bytes).
  size_t cache_bytes() const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit Batch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Picking the next token from logits: greedy without a temperature, else
// the book's chapter-5 generate: top-k, temperature, top-p, then a draw
// from a generator seeded once.
struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, the lowest id on ties)
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: no nucleus cut
  uint64_t seed = 0;
  // Samplers of one seed and different streams draw independently, e.g.
  // one per sequence, so that a sequence's tokens do not depend on which
  // others are sampled beside it. Stream 0 draws as the seed alone.
  uint64_t stream = 0;
};

class ATTN_API Sampler {
 public:
  // Checks the options (temperature >= 0, top_k >= 0, 0 < top_p <= 1).
  static Result<Sampler> Create(const SamplingOptions& options);
  // The next token from `vocab` logits. Draws advance the generator, so a
  // seeded sequence of calls is reproducible.
  int64_t Sample(const float* logits, int64_t vocab);

 private:
  explicit Sampler(const SamplingOptions& options);
  SamplingOptions options_;
  uint64_t state_ = 0;
};

}  // namespace attn

#endif  // ATTN_LM_HPP_
