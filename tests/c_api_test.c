/* The C API (attn/attn.h), compiled as C99 so the header can never need C++:
 * golden results, every argument check, the struct_size rules, the
 * per-thread error message. Links attn::attn exactly as an embedder does.
 * Usage: c_api_test SOURCE_DIR */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "c_expect.h"

static char book[4096], moderate[4096], missing[4096], bad_dir[4096];
static char block_json[4096], golden_graph[4096], biased[4096];
static char gqa_all[4096], gqa_g4[4096];

enum { kCap = 1 << 16 };
static float x[kCap], want[kCap], y[kCap];

static double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = fmax(worst, fabs(a[i] - b[i]));
  return worst;
}

/* Loads `path`, runs its `input`, compares with its `expected`. */
static void TestGolden(const char* path) {
  int64_t shape[ATTN_MAX_RANK], d_in = 0, d_out = 0;
  int rank = 0;
  attn_model* model = NULL;
  attn_session* session = NULL;
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "input", x, kCap, shape, &rank), "");
  EXPECT(rank == 3);
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "expected", want, kCap, NULL, NULL),
                "");
  EXPECT_STATUS(ATTN_OK, attn_model_dims(model, &d_in, &d_out), "");
  EXPECT(d_in == shape[2]);
  EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
  EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, shape[0], shape[1], y),
                "");
  EXPECT(MaxAbsDiff(y, want, shape[0] * shape[1] * d_out) < 1e-5);
  attn_session_destroy(session);
  attn_model_destroy(model);
}

static void TestBookAndDims(void) {
  attn_model* model = NULL;
  attn_session* session = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  int64_t d_in = -1, d_out = -1;
  EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK, attn_model_dims(model, &d_in, &d_out), "");
  EXPECT(d_in == 3 && d_out == 2);
  EXPECT_STATUS(ATTN_OK, attn_model_dims(model, NULL, NULL), "");
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.d_in == 3 && info.d_out == 2 && info.num_heads == 2);
  EXPECT(info.context_length == 6 && info.qkv_bias == 0);
  EXPECT(info.num_threads >= 1 && info.token_input == 0);

  /* T > context_length is refused with a message naming both. */
  EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(session, x, 1, 7, y),
                "exceeds context_length 6");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(session, x, 0, 6, y),
                "batch");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(session, NULL, 1, 6, y),
                "input must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(session, x, 1, 6, NULL),
                "output must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(NULL, x, 1, 6, y),
                "session must not be NULL");
  {
    const int64_t ids[6] = {0, 1, 2, 3, 4, 5};
    EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                  attn_session_run_tokens(session, ids, 1, 6, y),
                  "not token ids: run it with attn_session_run");
  }
  /* The session stays usable after failures, and after the model is gone. */
  attn_model_destroy(model);
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(book, "input", x, kCap, NULL, NULL), "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(book, "expected", want, kCap, NULL, NULL),
                "");
  EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, 2, 6, y), "");
  EXPECT(MaxAbsDiff(y, want, 2 * 6 * 2) < 1e-5);
  attn_session_destroy(session);
}

static void TestNullsAndFiles(void) {
  attn_model* model = (attn_model*)&model; /* must be reset to NULL */
  attn_session* session = (attn_session*)&session;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(NULL, NULL, NULL, &model),
                "safetensors_path must not be NULL");
  EXPECT(model == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_load(book, NULL, NULL, NULL),
                "model must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_create(NULL, &session),
                "model must not be NULL");
  EXPECT(session == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_dims(NULL, NULL, NULL),
                "model must not be NULL");
  EXPECT_STATUS(ATTN_IO_ERROR, attn_model_load(missing, NULL, NULL, &model),
                "cannot open");
  EXPECT(model == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(bad_dir, NULL, NULL, &model),
                "(from metadata 'num_heads' of");
  attn_model_destroy(NULL);
  attn_session_destroy(NULL);
}

static void TestOptions(void) {
  attn_model* model = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;

  options.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, NULL, &options, &model),
                "attn_model_options.struct_size is 0; set it to "
                "sizeof(attn_model_options)");
  options.struct_size = (size_t)0xdeadbeefcafe;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, NULL, &options, &model),
                "looks uninitialised");
  EXPECT(model == NULL);

  /* Options override the metadata. */
  options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
  options.num_heads = 1;
  options.context_length = 4;
  options.num_threads = 3;
  EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, &options, &model), "");
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.num_heads == 1 && info.context_length == 4 &&
         info.num_threads == 3);
  attn_model_destroy(model);

  /* A smaller struct than the struct's first version is refused: there is
   * no older header whose struct ended there. */
  options.struct_size = offsetof(attn_model_options, context_length);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, NULL, &options, &model),
                "attn_model_options.struct_size is 12, which looks "
                "uninitialised; set it to sizeof(attn_model_options)");
  EXPECT(model == NULL);

  /* Running out of memory is a status, not a crash: a run needing TiBs is
   * refused before anything is allocated, and the session stays usable. */
  options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
  options.context_length = 1 << 20;
  EXPECT_STATUS(ATTN_OK, attn_model_load(moderate, NULL, &options, &model), "");
  {
    attn_session* session = NULL;
    EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
    EXPECT_STATUS(ATTN_OUT_OF_MEMORY,
                  attn_session_run(session, x, 1 << 24, 1 << 10, y), "");
    EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, 1, 8, y), "");
    attn_session_destroy(session);
  }
  attn_model_destroy(model);

  /* Bad values name the field. */
  options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
  options.num_threads = -1;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, NULL, &options, &model),
                "num_threads is -1");
  options.num_threads = 0;
  options.num_heads = 3;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, NULL, &options, &model),
                "num_heads is 3 (from option num_heads, --heads)");
}

/* The struct_size rules at the top: a newer struct refused, its own size
 * taken whatever its padding holds. */
static void TestOptionsStructSize(void) {
  attn_model* model = NULL;
  union { /* aligned like the struct it extends */
    attn_model_options options;
    unsigned char bytes[sizeof(attn_model_options) + 16];
  } newer;

  /* A newer, larger struct is refused, its unknown fields zero or not: the
   * library reads no byte past the struct it knows. */
  memset(&newer, 0, sizeof newer);
  newer.options.struct_size = sizeof newer;
  EXPECT_STATUS(ATTN_UNSUPPORTED,
                attn_model_load(book, NULL, &newer.options, &model),
                "want at most");
  EXPECT(model == NULL);
  /* Its own size is taken whatever the padding between its fields holds
   * (never read): every field set one by one over 0xff bytes. */
  memset(&newer, 0xff, sizeof newer);
  {
    attn_model_options* o = &newer.options;
    o->struct_size = sizeof *o;
    o->num_heads = o->context_length = o->num_threads = 0;
    o->max_memory_bytes = 0;
    o->dtype = ATTN_DTYPE_F32;
    o->tuned_config = NULL;
    o->num_kv_heads = o->sliding_window = 0;
    o->rope_theta = o->rope_factor = 0;
    o->rope_low_freq_factor = o->rope_high_freq_factor = 0;
    o->rope_original_context_length = 0;
    o->sessions_only = 0;
    o->layers = 0;
    o->norm_eps = 0;
  }
  EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, &newer.options, &model),
                "");
  attn_model_destroy(model);
  model = NULL;
}

/* A tuned file as an option, and attn_model_info's own struct_size. */
static void TestOptionsFilesAndInfo(void) {
  attn_model* model = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;

  /* A tuned file as an option gives the default team size; a bad file
   * fails the load. */
  {
    static const char kTuned[] = "c_api_test_tuned.json";
    FILE* tuned = fopen(kTuned, "wb");
    EXPECT(tuned != NULL && fputs("{\"num_threads\": 3}", tuned) >= 0 &&
           fclose(tuned) == 0);
    options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
    options.tuned_config = kTuned;
    EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, &options, &model), "");
    EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
    EXPECT(info.num_threads == 3);
    attn_model_destroy(model);
    options.tuned_config = missing;
    EXPECT_STATUS(ATTN_IO_ERROR, attn_model_load(book, NULL, &options, &model),
                  "tuned_config: tuned config '");
    EXPECT(model == NULL);
    EXPECT(remove(kTuned) == 0);
  }

  /* attn_model_info: a smaller struct gets only what fits. */
  EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, NULL, &model), "");
  memset(&info, 0x7f, sizeof info);
  info.struct_size = offsetof(attn_model_info, num_heads);
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.d_in == 3 && info.d_out == 2);
  EXPECT(info.num_heads == 0x7f7f7f7f7f7f7f7fLL);
  info.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_config(model, &info),
                "attn_model_info.struct_size is 0");
  attn_model_destroy(model);
}

static void TestTensorRead(void) {
  int64_t shape[ATTN_MAX_RANK];
  int rank = 0;
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(book, "input", NULL, 0, shape, &rank), "");
  EXPECT(rank == 3 && shape[0] == 2 && shape[1] == 6 && shape[2] == 3);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tensor_read_f32(book, "input", x, 35, NULL, NULL),
                "capacity is 35");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tensor_read_f32(book, "nope", x, kCap, NULL, NULL),
                "'nope' is missing");
  EXPECT_STATUS(ATTN_IO_ERROR,
                attn_tensor_read_f32(missing, "input", x, kCap, NULL, NULL),
                "cannot open");
}

/* Copies file `from` to `to`; 1 on success. */
static int CopyFile(const char* from, const char* to) {
  char buffer[4096];
  size_t n = 0;
  int ok = 1;
  FILE* in = fopen(from, "rb");
  FILE* out = fopen(to, "wb");
  if (!in || !out) ok = 0;
  while (ok && (n = fread(buffer, 1, sizeof buffer, in)) > 0) {
    ok = fwrite(buffer, 1, n, out) == n;
  }
  if (in) fclose(in);
  if (out && fclose(out) != 0) ok = 0;
  return ok;
}

/* Runs a new session of `model` on x [shape[0], shape[1], d_in] into out. */
static attn_status RunNewSession(const attn_model* model, const int64_t* shape,
                                 float* out) {
  attn_session* session = NULL;
  attn_status status = attn_session_create(model, &session);
  if (status == ATTN_OK) {
    status = attn_session_run(session, x, shape[0], shape[1], out);
  }
  attn_session_destroy(session);
  return status;
}

/* A graph model owns what it loaded: its weights file replaced by one with
 * the same names and other widths (emb 24 for 16), emptied, or removed, its
 * new sessions still give the first session's output, bit for bit. */
static void TestGraphModelOwnsItsWeights(void) {
  static const char kCopy[] = "c_api_test_graph_weights.safetensors";
  static float first[kCap];
  char block[4200], wider[4200];
  int64_t shape[ATTN_MAX_RANK];
  attn_model* model = NULL;
  int change;
  FILE* emptied;

  snprintf(block, sizeof block, "%s/block.safetensors", golden_graph);
  snprintf(wider, sizeof wider, "%s/block_qkv_bias.safetensors", golden_graph);
  EXPECT(CopyFile(block, kCopy));
  EXPECT_STATUS(ATTN_OK, attn_model_load(kCopy, block_json, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(block, "input", x, kCap, shape, NULL), "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(block, "expected", want, kCap, NULL, NULL),
                "");
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, first), "");
  EXPECT(MaxAbsDiff(first, want, shape[0] * shape[1] * 16) < 1e-5);
  for (change = 0; change < 3; ++change) {
    if (change == 0) EXPECT(CopyFile(wider, kCopy));
    if (change == 1) {
      emptied = fopen(kCopy, "wb");
      EXPECT(emptied != NULL && fclose(emptied) == 0);
    }
    if (change == 2) EXPECT(remove(kCopy) == 0);
    memset(y, 0, sizeof y);
    EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, y), "");
    EXPECT(memcmp(y, first, sizeof(float) * shape[0] * shape[1] * 16) == 0);
  }
  attn_model_destroy(model);
}

/* Reads the MHA case `path`: its eight weights into w (each up to `cap`
 * floats, one after another), pointed at by *weights; its input into x (its
 * shape into shape) and its expected output into want. */
static void ReadMhaCase(const char* path, float* w, int64_t cap,
                        attn_mha_weights* weights, int64_t* shape) {
  static const char* const kNames[8] = {
      "W_query.weight", "W_key.weight", "W_value.weight",  "W_query.bias",
      "W_key.bias",     "W_value.bias", "out_proj.weight", "out_proj.bias"};
  const float** fields[8] = {&weights->w_query, &weights->w_key,
                             &weights->w_value, &weights->b_query,
                             &weights->b_key,   &weights->b_value,
                             &weights->w_out,   &weights->b_out};
  int i;
  for (i = 0; i < 8; ++i) {
    EXPECT_STATUS(
        ATTN_OK,
        attn_tensor_read_f32(path, kNames[i], w + i * cap, cap, NULL, NULL),
        "");
    *fields[i] = w + i * cap;
  }
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "input", x, kCap, shape, NULL), "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "expected", want, kCap, NULL, NULL),
                "");
}

/* The `biased` case's module, as attn_model_create_mha takes it. */
static attn_mha_config BiasedConfig(void) {
  attn_mha_config config = ATTN_MHA_CONFIG_INIT;
  config.d_in = 5;
  config.d_out = 6;
  config.num_heads = 2;
  config.context_length = 7;
  config.qkv_bias = 1;
  return config;
}

/* attn_model_create_mha: weights from memory (copied) give the model loaded
 * from the same file, bit for bit. */
static void TestCreateFromMemory(void) {
  static float w[8][64], from_file[kCap];
  attn_mha_config config = ATTN_MHA_CONFIG_INIT;
  attn_mha_weights weights = ATTN_MHA_WEIGHTS_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model* model = NULL;
  int64_t shape[ATTN_MAX_RANK], n;

  ReadMhaCase(biased, &w[0][0], 64, &weights, shape);
  n = shape[0] * shape[1] * 6;
  EXPECT_STATUS(ATTN_OK, attn_model_load(biased, NULL, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, from_file), "");
  attn_model_destroy(model);

  config = BiasedConfig();
  EXPECT_STATUS(ATTN_OK,
                attn_model_create_mha(&config, &weights, &options, &model), "");
  memset(w, 0, sizeof w); /* the model holds its own copy */
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, y), "");
  EXPECT(memcmp(y, from_file, sizeof(float) * n) == 0);
  EXPECT(MaxAbsDiff(y, want, n) < 1e-5);
  attn_model_destroy(model);
}

/* attn_model_create_mha's refusals: the options' dtype and cap, read from
 * memory or a file alike, and mistakes naming the argument or the field. */
static void TestCreateFromMemoryRefusals(void) {
  static float w[8][64];
  attn_mha_config config = BiasedConfig();
  attn_mha_weights weights = ATTN_MHA_WEIGHTS_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model* model = NULL;
  int64_t shape[ATTN_MAX_RANK];

  ReadMhaCase(biased, &w[0][0], 64, &weights, shape);
  options.dtype = (attn_dtype)99;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, &options, &model),
                "attn_model_options.dtype is 99, want ATTN_DTYPE_F32 (0), "
                "ATTN_DTYPE_BF16 (1), ATTN_DTYPE_Q8_0 (2) or ATTN_DTYPE_Q4_0 "
                "(3)");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(biased, NULL, &options, &model),
                "attn_model_options.dtype is 99");
  EXPECT(model == NULL);

  /* The full struct: the cap (the weights alone are 600 bytes) and dtype. */
  options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
  options.max_memory_bytes = 512;
  EXPECT_STATUS(ATTN_OUT_OF_MEMORY,
                attn_model_create_mha(&config, &weights, &options, &model),
                "over the memory limit of 512 bytes");
  EXPECT(model == NULL);
  EXPECT_STATUS(ATTN_OUT_OF_MEMORY,
                attn_model_load(biased, NULL, &options, &model),
                "over the memory limit of 512 bytes");
  options.max_memory_bytes = 0;
  options.dtype = (attn_dtype)7;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, &options, &model),
                "attn_model_options.dtype is 7, want ATTN_DTYPE_F32 (0)");
  /* Quantized dtypes are language models' alone. */
  options.dtype = ATTN_DTYPE_Q4_0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, &options, &model),
                "dtype q4_0 quantizes a language model's linears; an MHA model "
                "takes f32 or bf16");
  EXPECT(model == NULL);
  options.dtype = ATTN_DTYPE_BF16; /* runs where the CPU has AVX512_BF16 */
  {
    const attn_status bf16 =
        attn_model_create_mha(&config, &weights, &options, &model);
    EXPECT(bf16 == ATTN_OK ||
           (bf16 == ATTN_UNSUPPORTED &&
            strstr(attn_last_error_message(), "AVX512_BF16") != NULL));
    attn_model_destroy(model);
  }

  /* Mistakes name the argument or the field. */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(NULL, &weights, NULL, &model),
                "config must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, NULL, NULL, &model),
                "weights must not be NULL");
  weights.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, NULL, &model),
                "attn_mha_weights.struct_size is 0");
  weights.struct_size = sizeof weights;
  config.struct_size = offsetof(attn_mha_config, qkv_bias);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, NULL, &model),
                "set it to sizeof(attn_mha_config)");
  config.struct_size = sizeof config;
  config.qkv_bias = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, NULL, &model),
                "qkv_bias is false but the q/k/v biases are given");
  config.qkv_bias = 1;
  weights.w_out = NULL;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_create_mha(&config, &weights, NULL, &model),
                "are required");
  EXPECT(model == NULL);
}

/* Graphs (attn/graph.hpp) through the same model/session calls. */
static void TestGraph(void) {
  char weights[4200];
  int64_t shape[ATTN_MAX_RANK], d_in = 0, d_out = 0;
  attn_model* model = NULL;
  attn_session* session = NULL;
  attn_decoder* decoder = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;

  snprintf(weights, sizeof weights, "%s/block.safetensors", golden_graph);
  EXPECT_STATUS(ATTN_OK, attn_model_load(weights, block_json, NULL, &model),
                "");
  EXPECT_STATUS(ATTN_OK, attn_model_dims(model, &d_in, &d_out), "");
  EXPECT(d_in == 16 && d_out == 16);
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.d_in == 16 && info.num_heads == 0 && info.num_threads >= 1);
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(weights, "input", x, kCap, shape, NULL),
                "");
  EXPECT_STATUS(
      ATTN_OK,
      attn_tensor_read_f32(weights, "expected", want, kCap, NULL, NULL), "");
  EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
  EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, shape[0], shape[1], y),
                "");
  EXPECT(MaxAbsDiff(y, want, shape[0] * shape[1] * d_out) < 1e-5);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_session_run(session, x, 1, 9, y),
                "context_length");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_create(model, 1, 8, &decoder), "not a graph");
  EXPECT(decoder == NULL);
  attn_model_destroy(model); /* the session keeps working */
  EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, shape[0], shape[1], y),
                "");
  EXPECT(MaxAbsDiff(y, want, shape[0] * shape[1] * d_out) < 1e-5);
  attn_session_destroy(session);

  /* Three stacked blocks: layers from the option (also in the metadata). */
  snprintf(weights, sizeof weights, "%s/stack3.safetensors", golden_graph);
  options.layers = 3;
  options.num_threads = 1;
  EXPECT_STATUS(ATTN_OK, attn_model_load(weights, block_json, &options, &model),
                "");
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(weights, "input", x, kCap, shape, NULL),
                "");
  EXPECT_STATUS(
      ATTN_OK,
      attn_tensor_read_f32(weights, "expected", want, kCap, NULL, NULL), "");
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.num_threads == 1);
  EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
  EXPECT_STATUS(ATTN_OK, attn_session_run(session, x, shape[0], shape[1], y),
                "");
  EXPECT(MaxAbsDiff(y, want, shape[0] * shape[1] * shape[2]) < 1e-5);
  attn_session_destroy(session);
  attn_model_destroy(model);

  /* The memory cap is read (the weights alone are over 25 KiB). */
  options.max_memory_bytes = 1 << 10;
  EXPECT_STATUS(ATTN_OUT_OF_MEMORY,
                attn_model_load(weights, block_json, &options, &model),
                "over the memory limit of 1.00 KiB");

  /* Errors: no JSON file, a bad options struct, weights it cannot bind. */
  EXPECT_STATUS(ATTN_IO_ERROR, attn_model_load(weights, missing, NULL, &model),
                "cannot be opened");
  EXPECT(model == NULL);
  options.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(weights, block_json, &options, &model),
                "attn_model_options.struct_size is 0");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(book, block_json, NULL, &model), "norm1.scale");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(NULL, block_json, NULL, &model),
                "safetensors_path must not be NULL");
}

static void TestStrings(void) {
  EXPECT(strcmp(attn_status_string(ATTN_OK), "ATTN_OK") == 0);
  EXPECT(strcmp(attn_status_string(ATTN_OUT_OF_MEMORY), "ATTN_OUT_OF_MEMORY") ==
         0);
  EXPECT(strcmp(attn_status_string((attn_status)42), "unknown attn_status") ==
         0);
  EXPECT(attn_version() != NULL && strchr(attn_version(), '.') != NULL);
  EXPECT(attn_default_num_threads() >= 1);
  EXPECT(ATTN_OK == 0);
}

/* The message is per thread: a fresh thread has none, and its failure does
 * not replace this thread's. */
static void* OtherThread(void* arg) {
  attn_model* model = NULL;
  int ok = strcmp(attn_last_error_message(), "") == 0;
  ok = ok && attn_model_load(missing, NULL, NULL, &model) == ATTN_IO_ERROR;
  ok = ok && strstr(attn_last_error_message(), "cannot open") != NULL;
  *(int*)arg = ok;
  return NULL;
}

static void TestThreadLocalMessage(void) {
  pthread_t thread;
  int ok = 0;
  attn_model* model = NULL;
  EXPECT(attn_last_error_message() != NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(NULL, NULL, NULL, &model), "safetensors_path");
  EXPECT(pthread_create(&thread, NULL, OtherThread, &ok) == 0);
  EXPECT(pthread_join(thread, NULL) == 0);
  EXPECT(ok);
  EXPECT(strstr(attn_last_error_message(), "safetensors_path") != NULL);
  /* Success leaves the last failure's message in place. */
  EXPECT_STATUS(ATTN_OK, attn_model_load(book, NULL, NULL, &model), "");
  EXPECT(strstr(attn_last_error_message(), "safetensors_path") != NULL);
  attn_model_destroy(model);
}

/* gqa_g4's weights from memory (W_key, W_value: 2 K/V heads of 4 for 8 query
 * heads), grouped by options.num_kv_heads, give its expected output; the
 * same model without its out_proj.bias equals one with a bias of zeros. */
static void CreateGroupedFromMemory(void) {
  static float w[8][1024], no_bias[kCap];
  attn_mha_config config = ATTN_MHA_CONFIG_INIT;
  attn_mha_weights weights = ATTN_MHA_WEIGHTS_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model* model = NULL;
  int64_t shape[ATTN_MAX_RANK];
  ReadMhaCase(gqa_g4, &w[0][0], 1024, &weights, shape);
  config.d_in = 10;
  config.d_out = 32;
  config.num_heads = 8;
  config.context_length = 8;
  config.qkv_bias = 1;
  options.num_kv_heads = 2;
  EXPECT_STATUS(ATTN_OK,
                attn_model_create_mha(&config, &weights, &options, &model), "");
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, y), "");
  EXPECT(MaxAbsDiff(y, want, shape[0] * shape[1] * 32) < 1e-5);
  attn_model_destroy(model);
  weights.b_out = NULL;
  EXPECT_STATUS(ATTN_OK,
                attn_model_create_mha(&config, &weights, &options, &model), "");
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, no_bias), "");
  attn_model_destroy(model);
  memset(w[7], 0, sizeof w[7]);
  weights.b_out = w[7];
  EXPECT_STATUS(ATTN_OK,
                attn_model_create_mha(&config, &weights, &options, &model), "");
  EXPECT_STATUS(ATTN_OK, RunNewSession(model, shape, y), "");
  EXPECT(memcmp(y, no_bias, sizeof(float) * shape[0] * shape[1] * 32) == 0);
  attn_model_destroy(model);
}

/* Version 4 of the options and version 2 of the info: grouped K/V heads,
 * rotary embeddings and a sliding window, from the file or from options. */
static void TestAttentionVariant(void) {
  attn_model* model = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  TestGolden(gqa_all); /* metadata: 2 K/V heads of 6, scaled RoPE, window 5 */
  EXPECT_STATUS(ATTN_OK, attn_model_load(gqa_all, NULL, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.num_heads == 6 && info.num_kv_heads == 2);
  EXPECT(info.sliding_window == 5 && info.rope_theta == 500000.0);
  EXPECT(info.rope_factor == 8.0 && info.rope_original_context_length == 256);
  attn_model_destroy(model);
  /* Options override the metadata, and are checked. */
  options.sliding_window = 3;
  options.rope_theta = 10000.0;
  EXPECT_STATUS(ATTN_OK, attn_model_load(gqa_all, NULL, &options, &model), "");
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.sliding_window == 3 && info.rope_theta == 10000.0);
  EXPECT(info.rope_factor == 0.0);
  attn_model_destroy(model);
  CreateGroupedFromMemory();
  options = (attn_model_options)ATTN_MODEL_OPTIONS_INIT;
  options.num_kv_heads = 3; /* W_key holds 2 heads of 4 */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(gqa_g4, NULL, &options, &model),
                "num_kv_heads");
  EXPECT(model == NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOURCE_DIR\n", argv[0]);
    return 2;
  }
  snprintf(book, sizeof book, "%s/tests/golden/mha_book.safetensors", argv[1]);
  snprintf(moderate, sizeof moderate,
           "%s/tests/golden/mha_moderate.safetensors", argv[1]);
  snprintf(missing, sizeof missing, "%s/tests/golden/no_such_file.safetensors",
           argv[1]);
  snprintf(block_json, sizeof block_json,
           "%s/tools/graphs/transformer_block.json", argv[1]);
  snprintf(golden_graph, sizeof golden_graph, "%s/tests/golden/graph", argv[1]);
  snprintf(biased, sizeof biased, "%s/tests/golden/mha_t7_hd3_bias.safetensors",
           argv[1]);
  snprintf(gqa_all, sizeof gqa_all, "%s/tests/golden/mha_gqa_all.safetensors",
           argv[1]);
  snprintf(gqa_g4, sizeof gqa_g4, "%s/tests/golden/mha_gqa_g4.safetensors",
           argv[1]);
  snprintf(bad_dir, sizeof bad_dir,
           "%s/tests/golden/bad/heads_not_divisible.safetensors", argv[1]);
  TestThreadLocalMessage(); /* first: this thread has no message yet */
  TestStrings();
  TestGolden(book);
  TestGolden(moderate);
  TestGraph();
  TestGraphModelOwnsItsWeights();
  TestCreateFromMemory();
  TestCreateFromMemoryRefusals();
  TestBookAndDims();
  TestNullsAndFiles();
  TestOptions();
  TestOptionsStructSize();
  TestOptionsFilesAndInfo();
  TestTensorRead();
  TestAttentionVariant();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
