// The C API (attn/attn.h): a thin shim over the C++ API (attn/model.hpp).
// Every entry point catches everything, turns Status into attn_status and
// keeps the message in a thread-local string.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "attn/graph.hpp"
#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "attn/tokenizer.hpp"
#include "engine/api/mha_options.h"
#include "engine/runtime/threads.h"

// What runs on the model shares its loaded weights: nothing is parsed or
// read from a file after loading.
struct attn_model {
  std::shared_ptr<const attn::Model> model;
};

// Holds its model alive.
struct attn_session {
  attn::Session session;
};

namespace {

// This thread's last failure. `error_lost` is set when even recording the
// message ran out of memory.
thread_local std::string error_message;
thread_local bool error_lost = false;

attn_status Fail(attn_status code, const char* message,
                 const char* detail = "") noexcept {
  try {
    error_message.assign(message);
    error_message.append(detail);
    error_lost = false;
  } catch (...) {
    error_lost = true;
  }
  return code;
}

attn_status ToC(attn::StatusCode code) {
  switch (code) {
    case attn::StatusCode::kOk:
      return ATTN_OK;
    case attn::StatusCode::kInvalidArgument:
      return ATTN_INVALID_ARGUMENT;
    case attn::StatusCode::kIoError:
      return ATTN_IO_ERROR;
    case attn::StatusCode::kUnsupported:
      return ATTN_UNSUPPORTED;
    case attn::StatusCode::kOutOfMemory:
      return ATTN_OUT_OF_MEMORY;
    case attn::StatusCode::kInternal:
    case attn::StatusCode::kCancelled:  // no C call takes a stop
      return ATTN_INTERNAL;
  }
  return ATTN_INTERNAL;
}

attn_status Check(const attn::Status& status) noexcept {
  if (status.ok()) return ATTN_OK;
  return Fail(ToC(status.code()), status.message().c_str());
}

// Runs `body`, turning any exception into a status: no exception crosses the
// C API.
template <class Body>
attn_status Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(ATTN_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return Fail(ATTN_INTERNAL, "internal error: ", e.what());
  } catch (...) {
    return Fail(ATTN_INTERNAL, "internal error: unknown exception");
  }
}

attn_status NullArgument(const char* what) {
  return Fail(ATTN_INVALID_ARGUMENT, what, " must not be NULL");
}

// `n` values into the caller's `dst` of `capacity`: none when dst is NULL
// and capacity 0 (the caller asks for n), none and an error naming `what`
// when they do not fit.
template <class T>
attn_status CopyOut(const T* values, size_t n, T* dst, size_t capacity,
                    const char* what) {
  if (!dst && capacity == 0) return ATTN_OK;
  if (!dst) return NullArgument(what);
  if (capacity < n) {
    return Fail(ATTN_INVALID_ARGUMENT, (std::string(what) + " has room for " +
                                        std::to_string(capacity) +
                                        " values, want " + std::to_string(n))
                                           .c_str());
  }
  std::copy(values, values + n, dst);
  return ATTN_OK;
}

// Whether the field [offset, offset + size) lies inside a caller's struct of
// `struct_size` bytes (one from an older header may end before it).
bool Inside(size_t struct_size, size_t offset, size_t size) {
  return struct_size >= offset + size;
}

// Larger structs than 1 KiB are taken for an uninitialised struct_size.
constexpr size_t kMaxStructSize = 1024;

// An options struct the library reads: `struct_size` from `min_size` (where
// the struct's first version ended) to `known` (sizeof the struct here).
// Nothing past `known` is read, so a struct from a newer header, whose
// fields this library cannot check, is refused rather than read past.
attn_status CheckStructSize(const char* what, size_t struct_size,
                            size_t min_size, size_t known) {
  const std::string known_text = std::to_string(known);
  const std::string size_text =
      std::string(what) + ".struct_size is " + std::to_string(struct_size);
  if (struct_size < min_size || struct_size > kMaxStructSize) {
    return Fail(
        ATTN_INVALID_ARGUMENT,
        (size_text + (struct_size == 0 ? "" : ", which looks uninitialised") +
         "; set it to sizeof(" + what + ") (" + known_text +
         " in this library, version " ATTN_VERSION ")")
            .c_str());
  }
  if (struct_size > known) {
    return Fail(
        ATTN_UNSUPPORTED,
        (size_text + ", want at most " + known_text + " (sizeof(" + what +
         ") in this library, version " ATTN_VERSION
         ", which reads no field a newer header appends)")
            .c_str());
  }
  return ATTN_OK;
}

// Reads a caller's attn_dtype field by its bytes: C lets it hold any int,
// and loading a value outside the enum's range as the enum is undefined
// behaviour in C++.
attn_status ToDType(const char* what, const attn_dtype* field,
                    attn::DType* dtype) {
  static_assert(sizeof(attn_dtype) == sizeof(int32_t), "an int-sized enum");
  int32_t value = 0;
  std::memcpy(&value, field, sizeof(value));
  switch (value) {
    case ATTN_DTYPE_F32:
      *dtype = attn::DType::kF32;
      return ATTN_OK;
    case ATTN_DTYPE_BF16:
      *dtype = attn::DType::kBF16;
      return ATTN_OK;
    case ATTN_DTYPE_Q8_0:
      *dtype = attn::DType::kQ8_0;
      return ATTN_OK;
    case ATTN_DTYPE_Q4_0:
      *dtype = attn::DType::kQ4_0;
      return ATTN_OK;
    default:
      return Fail(ATTN_INVALID_ARGUMENT,
                  (std::string(what) + " is " + std::to_string(value) +
                   ", want ATTN_DTYPE_F32 (0), ATTN_DTYPE_BF16 (1), "
                   "ATTN_DTYPE_Q8_0 (2) or ATTN_DTYPE_Q4_0 (3)")
                      .c_str());
  }
}

// The attention's variant: num_kv_heads to the rope fields.
void ReadAttentionVariant(const attn_model_options* c,
                          attn::ModelOptions* options) {
  options->num_kv_heads = c->num_kv_heads;
  options->sliding_window = c->sliding_window;
  options->rope.theta = c->rope_theta;
  options->rope.factor = c->rope_factor;
  options->rope.low_freq_factor = c->rope_low_freq_factor;
  options->rope.high_freq_factor = c->rope_high_freq_factor;
  options->rope.original_context_length = c->rope_original_context_length;
}

// attn_model_options (this version's struct is its first: every field lies
// inside any size CheckStructSize accepts); NULL: the defaults.
attn_status ToOptions(const attn_model_options* c, attn::LoadOptions* options) {
  if (!c) return ATTN_OK;
  // struct_size first: no field is read before it is known to be sane.
  if (attn_status s = CheckStructSize("attn_model_options", c->struct_size,
                                      sizeof(*c), sizeof(*c));
      s != ATTN_OK) {
    return s;
  }
  options->num_heads = c->num_heads;
  options->context_length = c->context_length;
  options->num_threads = c->num_threads;
  options->max_memory_bytes = c->max_memory_bytes;
  if (c->tuned_config) options->tuned_config = c->tuned_config;
  ReadAttentionVariant(c, options);
  options->decode = c->sessions_only == 0;
  options->layers = c->layers;
  options->norm_eps = c->norm_eps;
  return ToDType("attn_model_options.dtype", &c->dtype, &options->dtype);
}

// Both structs are new in this version: every field lies inside any size
// CheckStructSize accepts.
attn_status ToConfig(const attn_mha_config* c, attn::MhaConfig* config) {
  if (!c) return NullArgument("config");
  if (attn_status s = CheckStructSize("attn_mha_config", c->struct_size,
                                      sizeof(*c), sizeof(*c));
      s != ATTN_OK) {
    return s;
  }
  config->d_in = c->d_in;
  config->d_out = c->d_out;
  config->num_heads = c->num_heads;
  config->context_length = c->context_length;
  config->qkv_bias = c->qkv_bias != 0;
  return ATTN_OK;
}

attn_status ToWeights(const attn_mha_weights* c, attn::MhaWeights* weights) {
  if (!c) return NullArgument("weights");
  if (attn_status s = CheckStructSize("attn_mha_weights", c->struct_size,
                                      sizeof(*c), sizeof(*c));
      s != ATTN_OK) {
    return s;
  }
  weights->w_query = c->w_query;
  weights->w_key = c->w_key;
  weights->w_value = c->w_value;
  weights->b_query = c->b_query;
  weights->b_key = c->b_key;
  weights->b_value = c->b_value;
  weights->w_out = c->w_out;
  weights->b_out = c->b_out;
  return ATTN_OK;
}

// Hands a new model to the caller.
attn_status Publish(std::shared_ptr<const attn::Model> loaded,
                    attn_model** model) {
  *model = new attn_model{std::move(loaded)};
  return ATTN_OK;
}

}  // namespace

extern "C" {

attn_status attn_model_load(const char* safetensors_path,
                            const char* graph_json_path,
                            const attn_model_options* options,
                            attn_model** model) {
  return Guard([&] {
    if (!model) return NullArgument("model");
    *model = nullptr;
    if (!safetensors_path) return NullArgument("safetensors_path");
    attn::LoadOptions opts;
    if (attn_status s = ToOptions(options, &opts); s != ATTN_OK) return s;
    const attn::ModelFiles files{safetensors_path,
                                 graph_json_path ? graph_json_path : ""};
    auto loaded = attn::Model::Load(files, opts);
    if (!loaded.ok()) return Check(loaded.status());
    return Publish(std::move(loaded).value(), model);
  });
}

attn_status attn_model_quantize(const char* path, const char* output,
                                attn_dtype dtype,
                                const attn_model_options* options) {
  return Guard([&] {
    if (!path) return NullArgument("path");
    if (!output) return NullArgument("output");
    attn::LoadOptions load;
    if (attn_status s = ToOptions(options, &load); s != ATTN_OK) return s;
    attn::DType type = attn::DType::kF32;
    if (attn_status s = ToDType("dtype", &dtype, &type); s != ATTN_OK) {
      return s;
    }
    attn::LmOptions lm;
    static_cast<attn::ModelOptions&>(lm) = load;
    lm.norm_eps = load.norm_eps;
    return Check(attn::QuantizeModel(path, output, type, lm));
  });
}

attn_status attn_model_create_mha(const attn_mha_config* config,
                                  const attn_mha_weights* weights,
                                  const attn_model_options* options,
                                  attn_model** model) {
  return Guard([&] {
    if (!model) return NullArgument("model");
    *model = nullptr;
    attn::MhaConfig cfg;
    attn::MhaWeights w;
    attn::LoadOptions load;
    if (attn_status s = ToConfig(config, &cfg); s != ATTN_OK) return s;
    if (attn_status s = ToWeights(weights, &w); s != ATTN_OK) return s;
    if (attn_status s = ToOptions(options, &load); s != ATTN_OK) return s;
    auto created = attn::MhaModel::Create(cfg, w, attn::MhaOptionsOf(load));
    if (!created.ok()) return Check(created.status());
    return Publish(attn::Model::Of(std::move(created).value()), model);
  });
}

attn_status attn_model_dims(const attn_model* model, int64_t* d_in,
                            int64_t* d_out) {
  return Guard([&] {
    if (!model) return NullArgument("model");
    const attn::Model& m = *model->model;
    if (d_in) *d_in = m.token_input() ? 1 : m.input_width();
    if (d_out) *d_out = m.output_width();
    return ATTN_OK;
  });
}

namespace {

// The attention's fields of attn_model_info.
void SetAttention(attn_model_info& info, int64_t num_heads,
                  int64_t context_length, bool qkv_bias, int64_t num_kv_heads,
                  int64_t sliding_window, const attn::RopeConfig& rope) {
  info.num_heads = num_heads;
  info.context_length = context_length;
  info.qkv_bias = qkv_bias ? 1 : 0;
  info.num_kv_heads = num_kv_heads;
  info.sliding_window = sliding_window;
  info.rope_theta = rope.theta;
  info.rope_factor = rope.factor;
  info.rope_low_freq_factor = rope.low_freq_factor;
  info.rope_high_freq_factor = rope.high_freq_factor;
  info.rope_original_context_length = rope.original_context_length;
}

// Every field of attn_model_info for `model`.
attn_model_info InfoOf(const attn::Model& model) {
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  info.d_in = model.token_input() ? 1 : model.input_width();
  info.d_out = model.output_width();
  info.num_threads = model.num_threads();
  info.token_input = model.token_input() ? 1 : 0;
  if (const auto& lm = model.language_model()) {
    const attn::LmConfig& c = lm->config();
    info.kind = ATTN_MODEL_LANGUAGE_MODEL;
    SetAttention(info, c.num_heads, c.context_length, c.qkv_bias,
                 c.num_kv_heads, c.sliding_window, c.rope);
  } else if (const auto& mha = model.attention()) {
    const attn::MhaConfig& c = mha->config();
    info.kind = ATTN_MODEL_ATTENTION;
    SetAttention(info, c.num_heads, c.context_length, c.qkv_bias,
                 c.num_kv_heads, c.sliding_window, c.rope);
  } else {
    info.kind = ATTN_MODEL_GRAPH;
  }
  return info;
}

}  // namespace

attn_status attn_model_config(const attn_model* model, attn_model_info* info) {
  return Guard([&] {
    if (!model) return NullArgument("model");
    if (!info) return NullArgument("info");
    const size_t size = info->struct_size;
    // Writes only what fits the caller's struct, so its tail is never
    // touched; a newer struct's unknown fields are left as they are.
    if (size < sizeof(size_t) || size > kMaxStructSize) {
      return CheckStructSize("attn_model_info", size, sizeof(size_t),
                             sizeof(*info));
    }
    const attn_model_info full = InfoOf(*model->model);
    // Field by field, so padding never counts as a field.
    auto copy = [&](size_t offset, size_t bytes) {
      if (Inside(size, offset, bytes)) {
        std::memcpy(reinterpret_cast<unsigned char*>(info) + offset,
                    reinterpret_cast<const unsigned char*>(&full) + offset,
                    bytes);
      }
    };
    copy(offsetof(attn_model_info, d_in), sizeof(int64_t));
    copy(offsetof(attn_model_info, d_out), sizeof(int64_t));
    copy(offsetof(attn_model_info, num_heads), sizeof(int64_t));
    copy(offsetof(attn_model_info, context_length), sizeof(int64_t));
    copy(offsetof(attn_model_info, qkv_bias), sizeof(int));
    copy(offsetof(attn_model_info, num_threads), sizeof(int));
    copy(offsetof(attn_model_info, num_kv_heads), sizeof(int64_t));
    copy(offsetof(attn_model_info, sliding_window), sizeof(int64_t));
    copy(offsetof(attn_model_info, rope_theta), sizeof(double));
    copy(offsetof(attn_model_info, rope_factor), sizeof(double));
    copy(offsetof(attn_model_info, rope_low_freq_factor), sizeof(double));
    copy(offsetof(attn_model_info, rope_high_freq_factor), sizeof(double));
    copy(offsetof(attn_model_info, rope_original_context_length),
         sizeof(int64_t));
    copy(offsetof(attn_model_info, token_input), sizeof(int));
    copy(offsetof(attn_model_info, kind), sizeof(int64_t));
    return ATTN_OK;
  });
}

void attn_model_destroy(attn_model* model) { delete model; }

attn_status attn_session_create(const attn_model* model,
                                attn_session** session) {
  return Guard([&] {
    if (!session) return NullArgument("session");
    *session = nullptr;
    if (!model) return NullArgument("model");
    *session = new attn_session{attn::Session(model->model)};
    return ATTN_OK;
  });
}

attn_status attn_session_run(attn_session* session, const float* input,
                             int64_t batch, int64_t seq_len, float* output) {
  return Guard([&] {
    if (!session) return NullArgument("session");
    if (!input) return NullArgument("input");
    if (!output) return NullArgument("output");
    if (session->session.model()->token_input()) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  "the model's input is token ids [b, T], not features: run "
                  "it with attn_session_run_tokens");
    }
    return Check(session->session.Run(input, batch, seq_len, output));
  });
}

attn_status attn_session_run_tokens(attn_session* session,
                                    const int64_t* token_ids, int64_t batch,
                                    int64_t seq_len, float* output) {
  return Guard([&] {
    if (!session) return NullArgument("session");
    if (!token_ids) return NullArgument("token_ids");
    if (!output) return NullArgument("output");
    if (!session->session.model()->token_input()) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  "the model's input is features [b, T, d_in], not token "
                  "ids: run it with attn_session_run");
    }
    return Check(session->session.Run(token_ids, batch, seq_len, output));
  });
}

void attn_session_destroy(attn_session* session) { delete session; }

const char* attn_last_error_message(void) {
  if (error_lost) return "out of memory (while recording an error message)";
  return error_message.c_str();
}

const char* attn_status_string(attn_status status) {
  switch (status) {
    case ATTN_OK:
      return "ATTN_OK";
    case ATTN_INVALID_ARGUMENT:
      return "ATTN_INVALID_ARGUMENT";
    case ATTN_IO_ERROR:
      return "ATTN_IO_ERROR";
    case ATTN_UNSUPPORTED:
      return "ATTN_UNSUPPORTED";
    case ATTN_OUT_OF_MEMORY:
      return "ATTN_OUT_OF_MEMORY";
    case ATTN_INTERNAL:
      return "ATTN_INTERNAL";
  }
  return "unknown attn_status";
}

const char* attn_version(void) { return ATTN_VERSION; }

int attn_default_num_threads(void) {
  int threads = -1;
  const attn_status status = Guard([&] {
    attn::Result<int> resolved = attn::ResolveNumThreads(0);
    if (!resolved.ok()) return Check(resolved.status());
    threads = *resolved;
    return ATTN_OK;
  });
  return status == ATTN_OK ? threads : -1;
}

attn_status attn_tensor_read_f32(const char* safetensors_path, const char* name,
                                 float* data, size_t capacity, int64_t* shape,
                                 int* rank) {
  return Guard([&] {
    if (!safetensors_path) return NullArgument("safetensors_path");
    if (!name) return NullArgument("name");
    auto file = attn::SafetensorsFile::Open(safetensors_path);
    if (!file.ok()) return Check(file.status());
    const attn::TensorInfo* t = file->Find(name);
    if (!t) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  ("tensor '" + std::string(name) + "' is missing from '" +
                   safetensors_path + "'")
                      .c_str());
    }
    if (t->shape.size() > ATTN_MAX_RANK) {
      return Fail(ATTN_UNSUPPORTED,
                  ("tensor '" + t->name + "' has rank " +
                   std::to_string(t->shape.size()) + ", want at most " +
                   std::to_string(ATTN_MAX_RANK))
                      .c_str());
    }
    if (data) {
      // Checks capacity, then converts straight into `data`: no copy.
      const attn_status read = Check(file->ReadF32(name, data, capacity));
      if (read != ATTN_OK) return read;
    }
    if (shape) std::copy(t->shape.begin(), t->shape.end(), shape);
    if (rank) *rank = static_cast<int>(t->shape.size());
    return ATTN_OK;
  });
}

// Incremental decoding (attn/decode.hpp).
struct attn_decoder {
  std::unique_ptr<attn::MhaDecoder> mha;
};

attn_status attn_decoder_create(const attn_model* model, int64_t batch,
                                int64_t max_length, attn_decoder** decoder) {
  return Guard([&] {
    if (!decoder) return NullArgument("decoder");
    *decoder = nullptr;
    if (!model) return NullArgument("model");
    const auto& mha = model->model->attention();
    if (!mha) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  "a decoder needs the chapter-3 attention's model (kind "
                  "ATTN_MODEL_ATTENTION), not a graph or a language model");
    }
    attn::DecoderOptions options;
    options.batch = batch;
    options.max_length = max_length;
    auto created = attn::MhaDecoder::Create(mha, options);
    if (!created.ok()) return Check(created.status());
    *decoder = new attn_decoder{std::move(created).value()};
    return ATTN_OK;
  });
}

attn_status attn_decoder_prefill(attn_decoder* decoder, const float* input,
                                 const int64_t* counts, float* output) {
  return Guard([&] {
    if (!decoder) return NullArgument("decoder");
    return Check(decoder->mha->Prefill(input, counts, output));
  });
}

attn_status attn_decoder_decode(attn_decoder* decoder, const float* input,
                                int64_t batch, float* output) {
  return Guard([&] {
    if (!decoder) return NullArgument("decoder");
    return Check(decoder->mha->Decode(input, batch, output));
  });
}

attn_status attn_decoder_truncate(attn_decoder* decoder, int64_t sequence,
                                  int64_t length) {
  return Guard([&] {
    if (!decoder) return NullArgument("decoder");
    return Check(decoder->mha->Truncate(sequence, length));
  });
}

attn_status attn_decoder_reset(attn_decoder* decoder) {
  return Guard([&] {
    if (!decoder) return NullArgument("decoder");
    decoder->mha->Reset();
    return ATTN_OK;
  });
}

int64_t attn_decoder_length(const attn_decoder* decoder, int64_t sequence) {
  return decoder ? decoder->mha->length(sequence) : -1;
}

void attn_decoder_destroy(attn_decoder* decoder) { delete decoder; }

// The batch (which holds its model alive) and the rows of each request of
// its last successful step: what attn_batch_logits may hand out.
struct attn_batch {
  std::unique_ptr<attn::Batch> batch;
  std::vector<int64_t> rows;
};

struct attn_tokenizer {
  std::shared_ptr<const attn::Tokenizer> tokenizer;
};

struct attn_sampler {
  attn::Sampler sampler;
};

}  // extern "C"

namespace {

// attn_batch_options (version 1 is the whole struct); zero: the default.
attn_status ToBatchOptions(const attn_batch_options* c,
                           attn::BatchOptions* options) {
  if (!c) return ATTN_OK;
  if (attn_status s = CheckStructSize("attn_batch_options", c->struct_size,
                                      sizeof(*c), sizeof(*c));
      s != ATTN_OK) {
    return s;
  }
  if (c->max_sequences != 0) options->max_sequences = c->max_sequences;
  options->max_length = c->max_length;
  return ATTN_OK;
}

// attn_sampler_options: version 1 ended at seed; stream is read when the
// caller's struct has it. Zero: the default.
attn_status ToSamplingOptions(const attn_sampler_options* c,
                              attn::SamplingOptions* options) {
  if (!c) return ATTN_OK;
  const size_t v1_end = offsetof(attn_sampler_options, seed) + sizeof(uint64_t);
  if (attn_status s = CheckStructSize("attn_sampler_options", c->struct_size,
                                      v1_end, sizeof(*c));
      s != ATTN_OK) {
    return s;
  }
  options->temperature = c->temperature;
  options->top_k = c->top_k;
  if (c->top_p != 0.0) options->top_p = c->top_p;
  options->seed = c->seed;
  if (Inside(c->struct_size, offsetof(attn_sampler_options, stream),
             sizeof(uint64_t))) {
    options->stream = c->stream;
  }
  return ATTN_OK;
}

// Every field of attn_lm_info for a model of config `c`.
attn_lm_info LmInfoOf(const attn::LmConfig& c) {
  attn_lm_info info = ATTN_LM_INFO_INIT;
  info.architecture = c.architecture == attn::LmArchitecture::kLlama
                          ? ATTN_LM_LLAMA
                          : ATTN_LM_GPT2;
  info.qkv_bias = c.qkv_bias ? 1 : 0;
  info.tied_head = c.tied_head ? 1 : 0;
  info.vocab_size = c.vocab_size;
  info.context_length = c.context_length;
  info.emb_dim = c.emb_dim;
  info.hidden_dim = c.hidden_dim;
  info.num_layers = c.num_layers;
  info.num_heads = c.num_heads;
  info.num_kv_heads = c.num_kv_heads;
  return info;
}

// The C++ requests of a step, each checked for a NULL token array.
attn_status ToRequests(const attn_batch_request* c, size_t count,
                       std::vector<attn::Batch::Request>* requests) {
  requests->resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (!c[i].tokens) {
      return NullArgument(
          ("requests[" + std::to_string(i) + "].tokens").c_str());
    }
    (*requests)[i].sequence = c[i].sequence;
    (*requests)[i].tokens = c[i].tokens;
    (*requests)[i].count = c[i].count;
    (*requests)[i].all_logits = c[i].all_logits != 0;
  }
  return ATTN_OK;
}

}  // namespace

extern "C" {

attn_status attn_model_lm_info(const attn_model* model, attn_lm_info* info) {
  return Guard([&] {
    if (!model) return NullArgument("model");
    if (!info) return NullArgument("info");
    const auto& lm = model->model->language_model();
    if (!lm) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  "the model is not a language model (attn_model_info.kind)");
    }
    const size_t size = info->struct_size;
    if (size < sizeof(*info) || size > kMaxStructSize) {
      return CheckStructSize("attn_lm_info", size, sizeof(*info),
                             sizeof(*info));
    }
    // Only our fields: a newer header's after them stay untouched.
    *info = LmInfoOf(lm->config());
    info->struct_size = size;
    return ATTN_OK;
  });
}

attn_status attn_batch_create(const attn_model* model,
                              const attn_batch_options* options,
                              attn_batch** batch) {
  return Guard([&] {
    if (!batch) return NullArgument("batch");
    *batch = nullptr;
    if (!model) return NullArgument("model");
    attn::BatchOptions opts;
    if (attn_status s = ToBatchOptions(options, &opts); s != ATTN_OK) return s;
    auto created = attn::Batch::Create(model->model, opts);
    if (!created.ok()) return Check(created.status());
    *batch = new attn_batch{std::move(created).value(), {}};
    return ATTN_OK;
  });
}

void attn_batch_destroy(attn_batch* batch) { delete batch; }

attn_status attn_batch_add(attn_batch* batch, int64_t* sequence) {
  return Guard([&] {
    if (!sequence) return NullArgument("sequence");
    *sequence = -1;
    if (!batch) return NullArgument("batch");
    auto added = batch->batch->Add();
    if (!added.ok()) return Check(added.status());
    *sequence = *added;
    return ATTN_OK;
  });
}

attn_status attn_batch_remove(attn_batch* batch, int64_t sequence) {
  return Guard([&] {
    if (!batch) return NullArgument("batch");
    return Check(batch->batch->Remove(sequence));
  });
}

attn_status attn_batch_fork(attn_batch* batch, int64_t sequence,
                            int64_t* new_sequence) {
  return Guard([&] {
    if (!new_sequence) return NullArgument("new_sequence");
    *new_sequence = -1;
    if (!batch) return NullArgument("batch");
    auto forked = batch->batch->Fork(sequence);
    if (!forked.ok()) return Check(forked.status());
    *new_sequence = *forked;
    return ATTN_OK;
  });
}

int64_t attn_batch_length(const attn_batch* batch, int64_t sequence) {
  return batch ? batch->batch->length(sequence) : -1;
}

attn_status attn_batch_step(attn_batch* batch,
                            const attn_batch_request* requests, size_t count) {
  return Guard([&] {
    if (!batch) return NullArgument("batch");
    batch->rows.clear();  // the last step's logits are gone either way
    if (!requests && count > 0) return NullArgument("requests");
    // Before the array is read: a sequence appears once at most.
    const int64_t most = batch->batch->max_sequences();
    if (count > static_cast<size_t>(most)) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  ("count is " + std::to_string(count) +
                   ", want at most max_sequences " + std::to_string(most) +
                   " (each sequence once)")
                      .c_str());
    }
    std::vector<attn::Batch::Request> reqs;
    if (attn_status s = ToRequests(requests, count, &reqs); s != ATTN_OK) {
      return s;
    }
    std::vector<int64_t> rows;  // made first: the step cannot fail after
    for (const attn::Batch::Request& r : reqs) {
      rows.push_back(r.all_logits ? r.count : 1);
    }
    if (attn_status s = Check(batch->batch->Step(reqs.data(), reqs.size()));
        s != ATTN_OK) {
      return s;
    }
    batch->rows = std::move(rows);
    return ATTN_OK;
  });
}

attn_status attn_batch_logits(const attn_batch* batch, size_t request,
                              const float** logits, int64_t* rows) {
  return Guard([&] {
    if (!batch) return NullArgument("batch");
    if (!logits) return NullArgument("logits");
    if (!rows) return NullArgument("rows");
    *logits = nullptr;
    *rows = 0;
    if (request >= batch->rows.size()) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  ("request is " + std::to_string(request) + ", want below " +
                   std::to_string(batch->rows.size()) +
                   " (the requests of the last successful step)")
                      .c_str());
    }
    *logits = batch->batch->logits(request);
    *rows = batch->rows[request];
    return ATTN_OK;
  });
}

attn_status attn_sampler_create(const attn_sampler_options* options,
                                attn_sampler** sampler) {
  return Guard([&] {
    if (!sampler) return NullArgument("sampler");
    *sampler = nullptr;
    attn::SamplingOptions opts;
    if (attn_status s = ToSamplingOptions(options, &opts); s != ATTN_OK) {
      return s;
    }
    auto created = attn::Sampler::Create(opts);
    if (!created.ok()) return Check(created.status());
    *sampler = new attn_sampler{std::move(created).value()};
    return ATTN_OK;
  });
}

attn_status attn_sampler_sample(attn_sampler* sampler, const float* logits,
                                int64_t vocab, int64_t* token) {
  return Guard([&] {
    if (!sampler) return NullArgument("sampler");
    if (!logits) return NullArgument("logits");
    if (!token) return NullArgument("token");
    if (vocab <= 0) {
      return Fail(ATTN_INVALID_ARGUMENT,
                  ("vocab is " + std::to_string(vocab) + ", want > 0").c_str());
    }
    *token = sampler->sampler.Sample(logits, vocab);
    return ATTN_OK;
  });
}

void attn_sampler_destroy(attn_sampler* sampler) { delete sampler; }

attn_status attn_tokenizer_load(const char* dir, uint64_t max_memory_bytes,
                                attn_tokenizer** tokenizer) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    *tokenizer = nullptr;
    if (!dir) return NullArgument("dir");
    attn::TokenizerOptions options;
    options.max_memory_bytes = max_memory_bytes;
    auto loaded = attn::Tokenizer::Load(dir, options);
    if (!loaded.ok()) return Check(loaded.status());
    *tokenizer = new attn_tokenizer{std::move(loaded).value()};
    return ATTN_OK;
  });
}

void attn_tokenizer_destroy(attn_tokenizer* tokenizer) { delete tokenizer; }

attn_status attn_tokenizer_encode(const attn_tokenizer* tokenizer,
                                  const char* text, size_t length, int64_t* ids,
                                  size_t capacity, size_t* count) {
  return attn_tokenizer_encode_special(tokenizer, text, length, 0, ids,
                                       capacity, count);
}

attn_status attn_tokenizer_encode_special(const attn_tokenizer* tokenizer,
                                          const char* text, size_t length,
                                          int add_special_tokens, int64_t* ids,
                                          size_t capacity, size_t* count) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    if (!count) return NullArgument("count");
    *count = 0;
    if (!text && length > 0) return NullArgument("text");
    auto encoded = tokenizer->tokenizer->Encode(
        std::string_view(text ? text : "", length), add_special_tokens != 0);
    if (!encoded.ok()) return Check(encoded.status());
    *count = encoded->size();
    return CopyOut(encoded->data(), encoded->size(), ids, capacity, "ids");
  });
}

attn_status attn_tokenizer_decode(const attn_tokenizer* tokenizer, int64_t id,
                                  char* bytes, size_t capacity,
                                  size_t* length) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    if (!length) return NullArgument("length");
    *length = 0;
    auto decoded = tokenizer->tokenizer->Decode(id);
    if (!decoded.ok()) return Check(decoded.status());
    *length = decoded->size();
    return CopyOut(decoded->data(), decoded->size(), bytes, capacity, "bytes");
  });
}

int64_t attn_tokenizer_vocab_size(const attn_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->vocab_size() : -1;
}

attn_status attn_tokenizer_decode_text(const attn_tokenizer* tokenizer,
                                       const int64_t* ids, size_t count,
                                       char* text, size_t capacity,
                                       size_t* length) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    if (!length) return NullArgument("length");
    *length = 0;
    if (!ids && count > 0) return NullArgument("ids");
    auto decoded = tokenizer->tokenizer->DecodeText(
        std::vector<int64_t>(ids, ids + count));
    if (!decoded.ok()) return Check(decoded.status());
    *length = decoded->size();
    return CopyOut(decoded->data(), decoded->size(), text, capacity, "text");
  });
}

attn_status attn_tokenizer_apply_chat_template(const attn_tokenizer* tokenizer,
                                               const char* messages_json,
                                               int add_generation_prompt,
                                               const char* variables_json,
                                               char* text, size_t capacity,
                                               size_t* length) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    if (!messages_json) return NullArgument("messages_json");
    if (!length) return NullArgument("length");
    *length = 0;
    auto rendered = tokenizer->tokenizer->ApplyChatTemplate(
        messages_json, add_generation_prompt != 0,
        variables_json ? variables_json : "");
    if (!rendered.ok()) return Check(rendered.status());
    *length = rendered->size();
    return CopyOut(rendered->data(), rendered->size(), text, capacity, "text");
  });
}

const char* attn_tokenizer_kind(const attn_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->kind() : nullptr;
}

int64_t attn_tokenizer_bos_id(const attn_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->bos_id() : -1;
}

attn_status attn_tokenizer_eos_ids(const attn_tokenizer* tokenizer,
                                   int64_t* ids, size_t capacity,
                                   size_t* count) {
  return Guard([&] {
    if (!tokenizer) return NullArgument("tokenizer");
    if (!count) return NullArgument("count");
    const std::vector<int64_t>& eos = tokenizer->tokenizer->eos_ids();
    *count = eos.size();
    return CopyOut(eos.data(), eos.size(), ids, capacity, "ids");
  });
}

int attn_tokenizer_add_bos(const attn_tokenizer* tokenizer) {
  return tokenizer && tokenizer->tokenizer->add_bos() ? 1 : 0;
}

int attn_tokenizer_add_eos(const attn_tokenizer* tokenizer) {
  return tokenizer && tokenizer->tokenizer->add_eos() ? 1 : 0;
}

const char* attn_tokenizer_chat_template(const attn_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->chat_template().c_str() : nullptr;
}

struct attn_decode_stream {
  attn::DecodeStream stream;
  std::string text;  // the last step's, handed out until the next call
};

attn_status attn_decode_stream_create(const attn_tokenizer* tokenizer,
                                      attn_decode_stream** stream) {
  return Guard([&] {
    if (!stream) return NullArgument("stream");
    *stream = nullptr;
    if (!tokenizer) return NullArgument("tokenizer");
    *stream = new attn_decode_stream{attn::DecodeStream(tokenizer->tokenizer),
                                     std::string()};
    return ATTN_OK;
  });
}

attn_status attn_decode_stream_next(attn_decode_stream* stream, int64_t id,
                                    const char** text, size_t* length) {
  return Guard([&] {
    if (!stream) return NullArgument("stream");
    if (!text) return NullArgument("text");
    if (!length) return NullArgument("length");
    *text = "";
    *length = 0;
    auto added = stream->stream.Next(id);
    if (!added.ok()) return Check(added.status());
    stream->text = std::move(added).value();
    *text = stream->text.data();
    *length = stream->text.size();
    return ATTN_OK;
  });
}

attn_status attn_decode_stream_finish(attn_decode_stream* stream,
                                      const char** text, size_t* length) {
  return Guard([&] {
    if (!stream) return NullArgument("stream");
    if (!text) return NullArgument("text");
    if (!length) return NullArgument("length");
    stream->text = stream->stream.Finish();
    *text = stream->text.data();
    *length = stream->text.size();
    return ATTN_OK;
  });
}

void attn_decode_stream_destroy(attn_decode_stream* stream) { delete stream; }

}  // extern "C"
