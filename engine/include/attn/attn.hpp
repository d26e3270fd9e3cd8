/* attn/attn.hpp: C++ API for batched causal multi-head attention on the CPU.
 * The chapter-3 MultiHeadAttention of "Build a Large Language Model (From
 * Scratch)", with PyTorch's weight names. See attn/status.hpp for errors. */
#ifndef ATTN_ATTN_HPP_
#define ATTN_ATTN_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

enum class DType {
  kF32,   // fp32 everywhere (the default)
  kBF16,  // bf16 matmuls with fp32 accumulation; softmax in fp32
  // Language models only (LmOptions): every linear's weights quantized at
  // load into llama.cpp's blocks of 32 along the input with one fp16 scale
  // each, 8-bit (q8_0, 8.5 bits a weight) or 4-bit (q4_0, 4.5 bits).
  kQ8_0,
  kQ4_0,
};

// "f32", "bf16", "q8_0" or "q4_0": the names the CLI's --dtype takes.
ATTN_API const char* DTypeName(DType dtype);

// Rotary position embeddings on q and k after the projection (Llama's, in
// Hugging Face's rotate-half convention): for head_dim D, position p and
// i < D/2, the angle p * theta^(-2i/D) rotates the pair (x[i], x[i + D/2]).
struct RopeConfig {
  double theta = 0.0;  // 0: no rotary embeddings
  // Llama 3.1 frequency scaling (0: none): wavelengths above
  // original_context_length / low_freq_factor are divided by factor, those
  // below original_context_length / high_freq_factor kept, and those
  // between smoothly interpolated.
  double factor = 0.0;
  double low_freq_factor = 0.0;
  double high_freq_factor = 0.0;
  int64_t original_context_length = 0;
};

// The module's hyper-parameters, as in the book's constructor, and those of
// the attention of current models (Llama, Mistral, Qwen).
struct MhaConfig {
  int64_t d_in = 0;
  int64_t d_out = 0;
  int64_t num_heads = 0;
  int64_t context_length = 0;  // longest sequence accepted; 0 = no limit
  bool qkv_bias = false;
  float dropout = 0.0f;  // accepted for parity; identity at inference
  // Grouped-query attention: K and V have num_kv_heads heads of
  // d_out / num_heads, and query head h reads K/V head
  // h / (num_heads / num_kv_heads) (PyTorch's repeat_interleave). Must
  // divide num_heads; 1 is multi-query attention. 0: num_heads.
  int64_t num_kv_heads = 0;
  RopeConfig rope;
  // Query i sees keys j with i - sliding_window < j <= i. 0: every j <= i.
  int64_t sliding_window = 0;
  // The width out_proj maps the heads' d_out to: [out_dim, d_out]. 0: d_out
  // (the book's). Models whose heads are not d_in / num_heads wide (Gemma's
  // 16 heads of 256 over 3072) set d_in.
  int64_t out_dim = 0;
};

// The largest team size accepted from any source (an option, --threads,
// ATTN_NUM_THREADS or a tuned file).
constexpr int kMaxThreads = 4096;

// What every model takes (MhaOptions, GraphOptions). Zeros and empty strings
// mean "not set here".
struct ModelOptions {
  int64_t num_heads = 0;       // else metadata "num_heads" (graphs: else the
                               // mha node's attribute first)
  int64_t context_length = 0;  // else metadata "context_length", then the
                               // book's "mask" buffer, else no limit
  int num_threads = 0;  // else ATTN_NUM_THREADS, else tuned_config, else the
                        // file ATTN_CONFIG names, else the cores this
                        // process may run on
  DType dtype = DType::kF32;
  // Most bytes the model's weights, or a session's buffers plus the weights,
  // may take; a larger request is refused (kOutOfMemory) before anything is
  // allocated. 0 = DefaultMaxMemoryBytes().
  uint64_t max_memory_bytes = 0;
  // A tuned file (`attn tune --save`, see ReadTunedThreads) whose team size
  // is the default when neither num_threads nor ATTN_NUM_THREADS is set;
  // read once, at load. Empty: the file ATTN_CONFIG names, if any.
  std::string tuned_config;
  // The attention's variant (see MhaConfig), each else metadata
  // "num_kv_heads" (else the weights' shapes), "rope_theta" (with
  // "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
  // "rope_original_context_length"), "sliding_window" (graphs: the mha
  // node's attribute first).
  int64_t num_kv_heads = 0;
  RopeConfig rope;  // used when rope.theta is set
  int64_t sliding_window = 0;
};

// How to load and run an MHA model (MhaModel). dtype kBF16 (CPUs with
// AVX512_BF16): sessions run their matmuls in bf16, and decoders their
// prompts' projections and steps of more than 8 rows; with rotary
// embeddings such a model runs decoders only (sessions false, decode true:
// a decoder rotates fp32 rows; MhaSession refuses it).
struct MhaOptions : ModelOptions {
  // kBF16: the projections' weights are rounded to bf16 at load, and
  // decoders' steps of up to 8 rows read them in bf16 with fp32 math (half
  // the bytes per token; kF32: in fp32); every other path reads the same
  // values in dtype. Runs on any CPU. Language models set it, and dtype,
  // for bf16 weights. kQ8_0, kQ4_0: the projections quantized at load for
  // decoders alone (sessions false, decode true), as LmOptions::dtype says.
  DType step_weights = DType::kF32;
  // Whether decoders may run on the model: it then also holds, from load,
  // the projections as decoders read them (packed in dtype for prompts,
  // and panels for steps of a few rows). false: MhaSession only, and
  // MhaDecoder::Create refuses the model.
  bool decode = true;
  // Whether the model holds, from load, the projections as sessions read
  // them (packed into the q, k and v head planes), shared by all of them.
  // false: each MhaSession packs its own copy as it prepares a shape (the
  // same bits); for models that only decode, such as a language model's.
  bool sessions = true;
};

// Half of the physical memory (or of the cgroup's memory.max, if lower).
ATTN_API uint64_t DefaultMaxMemoryBytes();

// FLOPs of one forward of `config`'s attention over [batch, seq_len], as
// `attn bench` and the peer benchmarks count them: the q, k and v
// projections 2*b*T*d_in*(d_out + 2*kv_dim), out_proj 2*b*T*d_out^2, and
// the core (AttentionCoreFlops).
ATTN_API double AttentionFlops(const MhaConfig& config, int64_t batch,
                               int64_t seq_len);
// The core at its causal half: 4*b*pairs*d_out, pairs T^2/2, or T*W - W^2/2
// under a sliding window W < T.
ATTN_API double AttentionCoreFlops(const MhaConfig& config, int64_t batch,
                                   int64_t seq_len);

// Non-owning fp32 weights in PyTorch layout (nn.Linear: [out, in]).
// b_query, b_key and b_value are all null (qkv_bias = false) or all set.
// With K/V heads (MhaConfig::num_kv_heads) kv_dim is num_kv_heads *
// d_out / num_heads, else d_out.
struct MhaWeights {
  const float* w_query = nullptr;  // [d_out, d_in]
  const float* w_key = nullptr;    // [kv_dim, d_in]
  const float* w_value = nullptr;  // [kv_dim, d_in]
  const float* b_query = nullptr;  // [d_out]
  const float* b_key = nullptr;    // [kv_dim]
  const float* b_value = nullptr;  // [kv_dim]
  const float* w_out = nullptr;    // out_proj.weight [d_out, d_out]
  const float* b_out = nullptr;    // out_proj.bias [d_out]; null: none
};

// Loaded, validated weights and configuration. Immutable: one model may be
// shared by many threads, each running its own MhaSession.
class ATTN_API MhaModel {
 public:
  // Reads PyTorch state_dict names from a safetensors file: W_query.weight,
  // W_key.weight, W_value.weight, optional W_query.bias, W_key.bias,
  // W_value.bias, out_proj.weight, out_proj.bias. d_in, d_out and qkv_bias
  // follow from the tensors; other tensors in the file are ignored.
  static Result<std::shared_ptr<const MhaModel>> Load(
      const std::string& path, const MhaOptions& options = {});
  // Builds a model from weights in memory (e.g. from another framework or
  // generated): copies them, so the caller may free them on return. The
  // pointers must hold config.d_out x d_in floats (W_query), kv_dim x d_in
  // (W_key, W_value; kv_dim is d_out unless num_kv_heads, of config or
  // options, groups them: see MhaWeights), d_out x d_out (out_proj.weight)
  // and d_out or kv_dim (each bias); the q/k/v biases are given exactly when
  // config.qkv_bias; b_out may be null (no bias). Options override config
  // where set (heads, context length, the attention's variant); dtype,
  // num_threads and max_memory_bytes apply as for Load. The result equals
  // Load's for a file holding the same weights, bit for bit. C:
  // attn_model_create_mha.
  static Result<std::shared_ptr<const MhaModel>> Create(
      const MhaConfig& config, const MhaWeights& weights,
      const MhaOptions& options = {});

  ~MhaModel();
  const MhaConfig& config() const;
  DType dtype() const;
  int num_threads() const;  // the resolved team size
  // Bytes the model holds: its fp32 weights and their packed copies, which
  // every session and decoder laid out alike runs on, and (with
  // MhaOptions::decode) the panels that decode steps read. Fixed at load.
  uint64_t memory_bytes() const;

 private:
  friend struct ModelAccess;  // the engine's sessions read the model
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit MhaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Per-thread execution state: the primitives and buffers for the last input
// shape. Not thread-safe: one session per thread. Results are bitwise
// identical for any thread count and between sessions of one model.
class ATTN_API MhaSession {
 public:
  explicit MhaSession(std::shared_ptr<const MhaModel> model);
  MhaSession(MhaSession&&) noexcept;
  MhaSession& operator=(MhaSession&&) noexcept;
  ~MhaSession();

  // input: [batch, seq_len, d_in] fp32, output: [batch, seq_len, d_out]
  // fp32, both dense. A new (batch, seq_len) prepares the primitives and
  // buffers once; repeated calls with the same shape allocate no buffers.
  // NaN or Inf in the input propagate as in PyTorch: every query row that can
  // see a non-finite key, value or query comes out NaN.
  Status Run(const float* input, int64_t batch, int64_t seq_len, float* output);

  // Prepares for (batch, seq_len) without running (for benchmarks).
  Status Prepare(int64_t batch, int64_t seq_len);
  // Bytes this session holds for the current shape (buffers and packed
  // weights; not counting the model).
  size_t workspace_bytes() const;

 private:
  struct ATTN_NO_EXPORT Plan;
  std::shared_ptr<const MhaModel> model_;
  std::unique_ptr<Plan> plan_;
};

// Facts about the running build and machine, for logs and benchmarks.
struct RuntimeInfo {
  std::string version;      // attn's version
  std::string simd_target;  // Highway target the kernels dispatch to
  std::string onednn_isa;   // oneDNN's effective ISA
  std::string onednn_version;
  bool native_bf16 = false;  // oneDNN can run bf16 matmuls natively
  int default_threads = 0;   // team size with nothing set
};
ATTN_API RuntimeInfo GetRuntimeInfo();

// Reads the team size from a tuned file (`attn tune --save`, a JSON object
// with "num_threads"). Naming the file in ModelOptions::tuned_config (or,
// without that, in ATTN_CONFIG) makes it the default when neither
// ModelOptions::num_threads nor ATTN_NUM_THREADS is set.
ATTN_API Result<int> ReadTunedThreads(const std::string& path);

}  // namespace attn

#endif  // ATTN_ATTN_HPP_
