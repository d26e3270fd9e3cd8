/* The language-model C API (attn_batch_*, attn_sampler_* in attn/attn.h),
 * compiled as C99: every golden model of tests/golden/lm gives PyTorch's
 * logits and greedy tokens through a batch, a fork continues exactly as its
 * original, a removed slot is reused clean, and every misuse is refused with
 * a status and a message, as are the files of tests/golden/lm/bad. Token
 * ids and metadata are read with golden_io.h.
 * Usage: c_api_lm_test SOURCE_DIR */
#define _POSIX_C_SOURCE 200809L /* opendir */
#define _DEFAULT_SOURCE         /* MAP_ANONYMOUS */

#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attn/attn.h"
#include "c_expect.h"
#include "golden_io.h"

enum { kMaxBatch = 64 };

/* One case of tests/golden/lm: its model and io.safetensors. */
typedef struct Golden {
  char name[256], model_path[4096];
  int64_t b, T, V, N;
  int64_t lengths[kMaxBatch]; /* each prompt's tokens: T without `lengths` */
  int64_t* ids;               /* input_ids [b, T] */
  float* logits;              /* [b, T, V] */
  int64_t* tokens;            /* greedy continuations [b, N] */
  double tolerance;           /* metadata "tolerance" times max |logits| */
} Golden;

static void FreeGolden(Golden* g) {
  free(g->ids);
  free(g->logits);
  free(g->tokens);
}

/* The number of values of `name`, its shape into shape (any dtype). */
static int64_t Count(const char* path, const char* name, int64_t* shape) {
  int rank = 0, i;
  int64_t n = 1;
  if (attn_tensor_read_f32(path, name, NULL, 0, shape, &rank) != ATTN_OK) {
    return -1;
  }
  for (i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

/* Reads case `dir`/`name`: 0 when it has no model file (not a case) or
 * could not be read (a failure). */
static int ReadGolden(const char* dir, const char* name, Golden* g) {
  char io[4096], tolerance[64] = "";
  int64_t shape[ATTN_MAX_RANK] = {0}, n_logits, n_tokens, i;
  int rank = 0;
  FILE* model;
  memset(g, 0, sizeof(*g));
  snprintf(g->name, sizeof g->name, "%s", name);
  if (snprintf(g->model_path, sizeof g->model_path, "%s/%s/model.safetensors",
               dir, name) >= (int)sizeof g->model_path ||
      snprintf(io, sizeof io, "%s/%s/io.safetensors", dir, name) >=
          (int)sizeof io) {
    EXPECT(!"a golden path fits in 4096 bytes");
    return 0;
  }
  if ((model = fopen(g->model_path, "rb")) == NULL) return 0;
  fclose(model);
  n_tokens = Count(io, "tokens", shape);
  g->N = shape[1];
  n_logits = Count(io, "logits", shape);
  g->b = shape[0];
  g->T = shape[1];
  g->V = shape[2];
  EXPECT(n_tokens > 0 && n_logits > 0 && g->b <= kMaxBatch);
  if (n_tokens <= 0 || n_logits <= 0 || g->b > kMaxBatch) return 0;
  g->ids = malloc(sizeof(int64_t) * g->b * g->T);
  g->logits = malloc(sizeof(float) * n_logits);
  g->tokens = malloc(sizeof(int64_t) * n_tokens);
  EXPECT(g->ids && g->logits && g->tokens);
  if (!g->ids || !g->logits || !g->tokens) return 0;
  EXPECT(ReadGoldenIds(io, "input_ids", g->ids, g->b * g->T, shape, &rank));
  EXPECT(ReadGoldenIds(io, "tokens", g->tokens, n_tokens, shape, &rank));
  EXPECT_STATUS(
      ATTN_OK,
      attn_tensor_read_f32(io, "logits", g->logits, n_logits, NULL, NULL), "");
  for (i = 0; i < g->b; ++i) g->lengths[i] = g->T;
  if (Count(io, "lengths", shape) == g->b) {
    EXPECT(ReadGoldenIds(io, "lengths", g->lengths, kMaxBatch, shape, &rank));
  }
  EXPECT(ReadGoldenMetadata(io, "tolerance", tolerance, sizeof tolerance));
  for (i = 0; i < n_logits; ++i) {
    g->tolerance = fmax(g->tolerance, fabs(g->logits[i]));
  }
  g->tolerance *= atof(tolerance);
  return 1;
}

static attn_batch* NewBatch(const attn_model* model, int64_t sequences,
                            int64_t max_length) {
  attn_batch_options options = ATTN_BATCH_OPTIONS_INIT;
  attn_batch* batch = NULL;
  options.max_sequences = sequences;
  options.max_length = max_length;
  EXPECT_STATUS(ATTN_OK, attn_batch_create(model, &options, &batch), "");
  return batch;
}

/* Compares `rows` rows of logits with prompt `i`'s expected ones. */
static void ExpectLogits(const Golden* g, int64_t i, const float* got,
                         int64_t rows) {
  const float* want = g->logits + i * g->T * g->V;
  double worst = 0;
  int64_t k;
  EXPECT(rows == g->lengths[i]);
  for (k = 0; k < rows * g->V; ++k) {
    worst = fmax(worst, fabs(got[k] - want[k]));
  }
  if (!(worst <= g->tolerance)) {
    fprintf(stderr, "FAILED: %s: prompt %lld: max error %g, tolerance %g\n",
            g->name, (long long)i, worst, g->tolerance);
    ++failures;
  }
}

/* Adds a sequence per prompt into seq[] and runs every prompt in one step. */
static void StepPrompts(attn_batch* batch, const Golden* g, int all_logits,
                        int64_t* seq) {
  attn_batch_request requests[kMaxBatch];
  int64_t i;
  for (i = 0; i < g->b; ++i) {
    EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &seq[i]), "");
    requests[i].sequence = seq[i];
    requests[i].tokens = g->ids + i * g->T;
    requests[i].count = g->lengths[i];
    requests[i].all_logits = all_logits;
  }
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, requests, (size_t)g->b), "");
}

/* Every prompt in one step, every position's logits. */
static void TestLogits(const attn_model* model, const Golden* g) {
  attn_batch* batch = NewBatch(model, g->b, g->T);
  int64_t seq[kMaxBatch], i, rows = 0;
  const float* logits = NULL;
  if (!batch) return;
  StepPrompts(batch, g, 1, seq);
  for (i = 0; i < g->b; ++i) {
    EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, i, &logits, &rows), "");
    if (logits) ExpectLogits(g, i, logits, rows);
    EXPECT(attn_batch_length(batch, seq[i]) == g->lengths[i]);
  }
  attn_batch_destroy(batch);
}

/* Request i's logits (one row) sampled greedily. */
static int64_t Greedy(attn_batch* batch, attn_sampler* sampler, const Golden* g,
                      size_t i) {
  const float* logits = NULL;
  int64_t rows = 0, token = -1;
  EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, i, &logits, &rows), "");
  EXPECT(rows == 1);
  if (logits) {
    EXPECT_STATUS(ATTN_OK, attn_sampler_sample(sampler, logits, g->V, &token),
                  "");
  }
  return token;
}

/* The fork (request b) and sequence 0 (request 0) got the same logits. */
static void ExpectForkIdentical(attn_batch* batch, const Golden* g) {
  const float *original = NULL, *fork = NULL;
  int64_t rows = 0;
  EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, 0, &original, &rows), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, g->b, &fork, &rows), "");
  EXPECT(original && fork && memcmp(original, fork, sizeof(float) * g->V) == 0);
}

/* Greedy generation, all prompts together, one step per token; halfway,
 * sequence 0 forks and the fork runs beside it with the same tokens. */
static void TestGreedyAndFork(const attn_model* model, const Golden* g) {
  attn_batch* batch = NewBatch(model, g->b + 1, g->T + g->N);
  attn_sampler* sampler = NULL;
  attn_batch_request requests[kMaxBatch + 1];
  int64_t seq[kMaxBatch + 1], next[kMaxBatch + 1], i, k, fork = -1;
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(NULL, &sampler), "");
  if (!batch || !sampler) goto done;
  StepPrompts(batch, g, 0, seq);
  for (k = 0; k < g->N; ++k) {
    if (fork >= 0) ExpectForkIdentical(batch, g);
    for (i = 0; i < g->b; ++i) {
      next[i] = Greedy(batch, sampler, g, (size_t)i);
      EXPECT(next[i] == g->tokens[i * g->N + k]);
      requests[i].sequence = seq[i];
      requests[i].tokens = &next[i];
      requests[i].count = 1;
      requests[i].all_logits = 0;
    }
    if (k == g->N / 2) {
      EXPECT_STATUS(ATTN_OK, attn_batch_fork(batch, seq[0], &fork), "");
      EXPECT(attn_batch_length(batch, fork) ==
             attn_batch_length(batch, seq[0]));
    }
    requests[g->b] = requests[0];
    requests[g->b].sequence = fork;
    if (k + 1 < g->N) {
      EXPECT_STATUS(
          ATTN_OK,
          attn_batch_step(batch, requests, (size_t)(g->b + (fork >= 0))), "");
    }
  }
done:
  attn_sampler_destroy(sampler);
  attn_batch_destroy(batch);
}

/* A slot freed after another prompt serves the next sequence from empty. */
static void TestSlotReuse(const attn_model* model, const Golden* g) {
  attn_batch* batch = NewBatch(model, 1, g->T + g->N);
  const int64_t last = g->b - 1;
  attn_batch_request request = {0, NULL, 0, 1};
  const float* logits = NULL;
  int64_t rows = 0;
  if (!batch) return;
  EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &request.sequence), "");
  request.tokens = g->ids + last * g->T;
  request.count = g->lengths[last];
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, &request, 1), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_remove(batch, request.sequence), "");
  EXPECT(attn_batch_length(batch, request.sequence) == -1);
  EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &request.sequence), "");
  EXPECT(attn_batch_length(batch, request.sequence) == 0);
  request.tokens = g->ids;
  request.count = g->lengths[0];
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, &request, 1), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, 0, &logits, &rows), "");
  if (logits) ExpectLogits(g, 0, logits, rows);
  attn_batch_destroy(batch);
}

/* The model's info against the golden's sizes; a newer header's longer
 * struct keeps its unknown tail. */
static void TestInfo(const attn_model* model, const Golden* g) {
  struct {
    attn_lm_info info;
    unsigned char tail[8];
  } newer;
  attn_lm_info info = ATTN_LM_INFO_INIT;
  EXPECT_STATUS(ATTN_OK, attn_model_lm_info(model, &info), "");
  EXPECT(info.vocab_size == g->V);
  EXPECT(info.context_length >= g->T + g->N);
  EXPECT(info.num_layers > 0 && info.num_heads > 0);
  EXPECT(info.num_kv_heads > 0 && info.num_heads % info.num_kv_heads == 0);
  EXPECT(info.architecture == ATTN_LM_GPT2 ||
         info.architecture == ATTN_LM_LLAMA);
  memset(&newer, 0xab, sizeof newer);
  newer.info.struct_size = sizeof newer;
  EXPECT_STATUS(ATTN_OK, attn_model_lm_info(model, &newer.info), "");
  EXPECT(newer.info.vocab_size == g->V && newer.tail[7] == 0xab);
}

/* The last logits of prompt 0, or of its last token alone, loaded with
 * `options`; 1 when both are in `last` and `alone` ([V] each). */
static int LastLogits(const Golden* g, const attn_model_options* options,
                      float* last, float* alone) {
  attn_model* model = NULL;
  attn_batch* batch = NULL;
  attn_batch_request r[2];
  const float* logits = NULL;
  int64_t rows = 0, i;
  int ok = 0;
  EXPECT_STATUS(ATTN_OK, attn_model_load(g->model_path, NULL, options, &model),
                "");
  if (model) batch = NewBatch(model, 2, g->T);
  if (batch) {
    EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &r[0].sequence), "");
    EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &r[1].sequence), "");
    r[0].tokens = g->ids;
    r[0].count = g->lengths[0];
    r[1].tokens = g->ids + g->lengths[0] - 1;
    r[1].count = 1;
    r[0].all_logits = r[1].all_logits = 0;
    EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, r, 2), "");
    for (i = 0; i < 2; ++i) {
      EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, i, &logits, &rows), "");
      if (!logits) break;
      memcpy(i == 0 ? last : alone, logits, (size_t)g->V * sizeof(float));
      ok = i == 1;
    }
  }
  attn_batch_destroy(batch);
  attn_model_destroy(model);
  return ok;
}

static double MaxDiff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  int64_t k;
  for (k = 0; k < n; ++k) worst = fmax(worst, fabs(a[k] - b[k]));
  return worst;
}

/* attn_model_options.sliding_window (version 3) reaches the attention: under
 * RoPE (no learned positions) a window of 1 leaves each token its own
 * value alone in every layer, so a prompt's last logits are those of its
 * last token by itself, which without the window they are not. A negative
 * window is refused, and a version-2 struct (ending at dtype) still loads. */
static void TestSlidingWindow(const Golden* g) {
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model* model = NULL;
  float* last = malloc((size_t)g->V * sizeof(float));
  float* alone = malloc((size_t)g->V * sizeof(float));
  if (last && alone && g->lengths[0] >= 2) {
    if (LastLogits(g, &options, last, alone)) {
      EXPECT(MaxDiff(last, alone, g->V) > 10 * g->tolerance);
    }
    options.sliding_window = 1;
    if (LastLogits(g, &options, last, alone)) {
      EXPECT(MaxDiff(last, alone, g->V) <= g->tolerance);
    }
  }
  options.sliding_window = -1;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, &options, &model),
                "sliding_window is -1");
  free(last);
  free(alone);
}

/* attn_model_quantize: the folder it writes loads to the very logits
 * quantizing at load gives; writing over it, or to a type that is not
 * quantized, is refused. */
static void TestQuantize(const Golden* g) {
  char dir[] = "/tmp/attn-c-quantize.XXXXXX", out[4096], file[4200];
  const char* written[] = {"model.safetensors", "config.json"};
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  Golden quantized = *g; /* its model read from the new folder */
  float* want = malloc(2 * (size_t)g->V * sizeof(float));
  float* got = malloc(2 * (size_t)g->V * sizeof(float));
  size_t i;
  if (want && got && mkdtemp(dir)) {
    snprintf(out, sizeof out, "%s/q4", dir);
    EXPECT_STATUS(
        ATTN_INVALID_ARGUMENT,
        attn_model_quantize(g->model_path, out, ATTN_DTYPE_BF16, NULL),
        "dtype bf16 is not a quantized type");
    EXPECT_STATUS(
        ATTN_OK, attn_model_quantize(g->model_path, out, ATTN_DTYPE_Q4_0, NULL),
        "");
    EXPECT_STATUS(
        ATTN_INVALID_ARGUMENT,
        attn_model_quantize(g->model_path, out, ATTN_DTYPE_Q4_0, NULL),
        "exists; want a new folder's name");
    options.dtype = ATTN_DTYPE_Q4_0;
    snprintf(quantized.model_path, sizeof quantized.model_path, "%s", out);
    if (LastLogits(g, &options, want, want + g->V) &&
        LastLogits(&quantized, NULL, got, got + g->V)) {
      EXPECT(memcmp(want, got, 2 * (size_t)g->V * sizeof(float)) == 0);
    }
    for (i = 0; i < sizeof written / sizeof *written; ++i) {
      snprintf(file, sizeof file, "%s/%s", out, written[i]);
      EXPECT(remove(file) == 0);
    }
    EXPECT(rmdir(out) == 0 && rmdir(dir) == 0);
  } else {
    EXPECT(!"logits and a scratch folder");
  }
  free(want);
  free(got);
}

/* The source tree (main's argument), where tools/graphs/ lies. */
static const char* source_dir = ".";

/* A session of `model` (token input) gives every prompt's logits within
 * the tolerance on its own tokens' positions (a padded prompt's later rows
 * are causal, so its own rows are unaffected), and refuses float input and
 * NULL ids, naming the right call. */
static void ExpectSessionLogits(const attn_model* model, const Golden* g) {
  attn_session* session = NULL;
  float* logits = malloc((size_t)(g->b * g->T * g->V) * sizeof(float));
  int64_t i;
  EXPECT_STATUS(ATTN_OK, attn_session_create(model, &session), "");
  if (session && logits) {
    EXPECT_STATUS(ATTN_OK,
                  attn_session_run_tokens(session, g->ids, g->b, g->T, logits),
                  "");
    for (i = 0; i < g->b; ++i) {
      ExpectLogits(g, i, logits + i * g->T * g->V, g->lengths[i]);
    }
    EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                  attn_session_run(session, logits, g->b, g->T, logits),
                  "run it with attn_session_run_tokens");
    EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                  attn_session_run_tokens(session, NULL, g->b, g->T, logits),
                  "token_ids must not be NULL");
  }
  attn_session_destroy(session);
  free(logits);
}

/* A GPT case as a graph (tools/graphs/gpt_model.json) through the token-id
 * path of the session API. */
static void TestGraphTokens(const Golden* g) {
  char graph_path[4096];
  attn_model* model = NULL;
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  snprintf(graph_path, sizeof graph_path, "%s/tools/graphs/gpt_model.json",
           source_dir);
  EXPECT_STATUS(ATTN_OK,
                attn_model_load(g->model_path, graph_path, NULL, &model), "");
  if (!model) return;
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.kind == ATTN_MODEL_GRAPH && info.token_input == 1 &&
         info.d_in == 1 && info.d_out == g->V);
  ExpectSessionLogits(model, g);
  attn_model_destroy(model);
}

/* A language model is an attn_model like any other: its info names its
 * kind, a session gives every prompt's logits (its own tokens' positions)
 * within the tolerance, and what needs another kind says so. */
static void TestOneVocabulary(const attn_model* model, const Golden* g) {
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  attn_decoder* decoder = NULL;
  EXPECT_STATUS(ATTN_OK, attn_model_config(model, &info), "");
  EXPECT(info.kind == ATTN_MODEL_LANGUAGE_MODEL && info.token_input == 1 &&
         info.d_in == 1 && info.d_out == g->V && info.num_heads > 0);
  ExpectSessionLogits(model, g);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_create(model, 1, 0, &decoder),
                "a decoder needs the chapter-3 attention's model");
  EXPECT(decoder == NULL);
}

static void TestCase(const Golden* g) {
  attn_lm_info info = ATTN_LM_INFO_INIT;
  attn_model* model = NULL;
  EXPECT_STATUS(ATTN_OK, attn_model_load(g->model_path, NULL, NULL, &model),
                "");
  if (!model) return;
  TestInfo(model, g);
  TestOneVocabulary(model, g);
  TestLogits(model, g);
  TestGreedyAndFork(model, g);
  TestSlotReuse(model, g);
  EXPECT_STATUS(ATTN_OK, attn_model_lm_info(model, &info), "");
  if (info.architecture == ATTN_LM_LLAMA) TestSlidingWindow(g);
  if (strcmp(g->name, "hf_qwen2") == 0) TestQuantize(g);
  if (info.architecture == ATTN_LM_GPT2) TestGraphTokens(g);
  attn_model_destroy(model);
  printf("%s: checked %lld prompt(s), %lld greedy token(s) each\n", g->name,
         (long long)g->b, (long long)g->N);
}

/* Loading: NULLs, a missing file, the struct_size rules. */
static void TestLoadErrors(const Golden* g) {
  struct {
    attn_model_options options;
    unsigned char tail[8];
  } newer;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model* model = (attn_model*)&options;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, NULL, NULL),
                "model must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(NULL, NULL, NULL, &model),
                "safetensors_path must not be NULL");
  EXPECT(model == NULL);
  EXPECT_STATUS(ATTN_IO_ERROR,
                attn_model_load("/no/such.safetensors", NULL, 0, &model),
                "/no/such.safetensors");
  options.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, &options, &model),
                "attn_model_options.struct_size is 0");
  options.struct_size = 1 << 20;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, &options, &model),
                "uninitialised");
  /* A newer header's larger struct is refused, its tail zero or not: the
   * library reads no byte past the struct it knows. */
  memset(&newer, 0, sizeof newer);
  newer.options.struct_size = sizeof newer;
  EXPECT_STATUS(ATTN_UNSUPPORTED,
                attn_model_load(g->model_path, NULL, &newer.options, &model),
                "want at most");
  EXPECT(model == NULL);
  /* A struct shorter than its first version is refused; a dtype out of the
   * enum is named. */
  options.struct_size = offsetof(attn_model_options, dtype);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, &options, &model),
                "which looks uninitialised");
  EXPECT(model == NULL);
  options.struct_size = sizeof options;
  options.dtype = (attn_dtype)7;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(g->model_path, NULL, &options, &model),
                "attn_model_options.dtype is 7");
  attn_model_destroy(NULL);
}

/* The last `size` bytes of a readable page followed by a PROT_NONE page,
 * zeroed: a library reading past them crashes. NULL if mmap fails; release
 * with FreePageEnd. */
static void* PageEnd(size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char* pages =
      (unsigned char*)mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) return NULL;
  if (mprotect(pages + page, page, PROT_NONE) != 0) {
    munmap(pages, 2 * page);
    return NULL;
  }
  memset(pages + page - size, 0, size);
  return pages + page - size;
}

static void FreePageEnd(void* end, size_t size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (end) munmap((unsigned char*)end + size - page, 2 * page);
}

/* Options structs whose struct_size claims more than the struct, up to the
 * unreadable page after them (a language model's and an MHA's among
 * them), are refused without reading past the struct, naming the size
 * given and the largest taken. */
static void TestStructSizePastThePage(const Golden* g,
                                      const attn_model* model) {
  attn_model_options* lm = (attn_model_options*)PageEnd(sizeof *lm);
  attn_batch_options* bo = (attn_batch_options*)PageEnd(sizeof *bo);
  attn_sampler_options* so = (attn_sampler_options*)PageEnd(sizeof *so);
  const size_t own = sizeof(attn_model_options);
  attn_model_options* mo = (attn_model_options*)PageEnd(own);
  char mha_path[4096];
  attn_model* mha = NULL;
  attn_model* loaded = NULL;
  attn_batch* batch = NULL;
  attn_sampler* sampler = NULL;
  char want[64];
  EXPECT(lm && bo && so && mo);
  if (lm) {
    lm->struct_size = 1000;
    EXPECT_STATUS(ATTN_UNSUPPORTED,
                  attn_model_load(g->model_path, NULL, lm, &loaded),
                  "attn_model_options.struct_size is 1000");
    snprintf(want, sizeof want, "want at most %zu", sizeof *lm);
    EXPECT_STATUS(ATTN_UNSUPPORTED,
                  attn_model_load(g->model_path, NULL, lm, &loaded), want);
    EXPECT(loaded == NULL);
    lm->struct_size = sizeof *lm; /* its own size still loads */
    EXPECT_STATUS(ATTN_OK, attn_model_load(g->model_path, NULL, lm, &loaded),
                  "");
    attn_model_destroy(loaded);
  }
  if (bo) {
    bo->struct_size = 200;
    snprintf(want, sizeof want, "want at most %zu", sizeof *bo);
    EXPECT_STATUS(ATTN_UNSUPPORTED, attn_batch_create(model, bo, &batch), want);
    EXPECT(batch == NULL);
  }
  if (so) {
    so->struct_size = 1024;
    EXPECT_STATUS(ATTN_UNSUPPORTED, attn_sampler_create(so, &sampler),
                  "attn_sampler_options.struct_size is 1024");
    EXPECT(sampler == NULL);
  }
  if (mo) {
    mo->struct_size = 1000;
    snprintf(mha_path, sizeof mha_path, "%s/tests/golden/mha_book.safetensors",
             source_dir);
    EXPECT_STATUS(ATTN_UNSUPPORTED, attn_model_load(mha_path, NULL, mo, &mha),
                  "attn_model_options.struct_size is 1000");
    EXPECT(mha == NULL);
    mo->struct_size = own; /* its own size still loads */
    EXPECT_STATUS(ATTN_OK, attn_model_load(mha_path, NULL, mo, &mha), "");
    attn_model_destroy(mha);
  }
  FreePageEnd(mo, own);
  FreePageEnd(lm, sizeof *lm);
  FreePageEnd(bo, sizeof *bo);
  FreePageEnd(so, sizeof *so);
}

/* Info and batch creation: NULLs, struct_size, sizes. */
static void TestCreateErrors(const attn_model* model) {
  attn_lm_info info = ATTN_LM_INFO_INIT;
  attn_batch_options options = ATTN_BATCH_OPTIONS_INIT;
  attn_batch* batch = (attn_batch*)&options;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_lm_info(NULL, &info),
                "model");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_lm_info(model, NULL), "info");
  info.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_lm_info(model, &info),
                "attn_lm_info.struct_size is 0");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_create(model, 0, NULL),
                "batch must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_create(NULL, 0, &batch),
                "model must not be NULL");
  EXPECT(batch == NULL);
  options.struct_size = 3;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_create(model, &options, &batch),
                "attn_batch_options.struct_size is 3");
  options.struct_size = sizeof options;
  options.max_sequences = -1;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_create(model, &options, &batch),
                "max_sequences is -1");
  options.max_sequences = 1;
  options.max_length = (int64_t)1 << 40;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_create(model, &options, &batch),
                "max_length is 1099511627776");
  EXPECT(batch == NULL);
  attn_batch_destroy(NULL);
}

/* Adding, removing and forking: NULLs, sequences out of range or not live,
 * a full batch. */
static void TestSequenceErrors(const attn_model* model) {
  attn_batch* batch = NewBatch(model, 2, 4);
  int64_t a = -1, b = -1, c = 7;
  const char* not_live = "is not a live sequence";
  if (!batch) return;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_add(NULL, &c),
                "batch must not be NULL");
  EXPECT(c == -1);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_add(batch, NULL),
                "sequence must not be NULL");
  EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &a), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_fork(NULL, a, &b),
                "batch must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_fork(batch, a, NULL),
                "new_sequence must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_fork(batch, 2, &b),
                "fork sequence 2");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_fork(batch, 1 - a, &b),
                "not a live sequence");
  EXPECT(b == -1);
  EXPECT_STATUS(ATTN_OK, attn_batch_fork(batch, a, &b), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_add(batch, &c),
                "max_sequences");
  EXPECT(c == -1);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_fork(batch, a, &c),
                "max_sequences");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_remove(NULL, a),
                "batch must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_remove(batch, -1), not_live);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_remove(batch, 2), not_live);
  EXPECT_STATUS(ATTN_OK, attn_batch_remove(batch, b), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_remove(batch, b), not_live);
  EXPECT(attn_batch_length(NULL, a) == -1);
  EXPECT(attn_batch_length(batch, -1) == -1);
  EXPECT(attn_batch_length(batch, 2) == -1);
  EXPECT(attn_batch_length(batch, b) == -1);
  EXPECT(attn_batch_length(batch, a) == 0);
  attn_batch_destroy(batch);
}

/* Steps and logits: NULLs, bad sequences, token ids out of range, past
 * max_length, a sequence twice; nothing changes and no logits remain. */
static void TestStepErrors(const attn_model* model, int64_t vocab) {
  attn_batch* batch = NewBatch(model, 2, 4);
  int64_t tokens[5] = {1, 2, 3, 4, 5}, rows = 0;
  attn_batch_request r[2] = {{0, NULL, 1, 0}, {0, NULL, 1, 0}};
  const float* logits = NULL;
  char out_of_range[64];
  if (!batch) return;
  EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &r[0].sequence), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(NULL, r, 1),
                "batch must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, NULL, 1),
                "requests must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 1),
                "requests[0].tokens must not be NULL");
  r[0].tokens = tokens;
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, r, 1), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_logits(NULL, 0, &logits, &rows),
                "batch must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_logits(batch, 0, NULL, &rows),
                "logits must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_logits(batch, 0, &logits, NULL),
                "rows must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_logits(batch, 1, &logits, &rows),
                "request is 1, want below 1");
  EXPECT(logits == NULL && rows == 0); /* nothing left from before */
  /* More requests than sequences: refused before the array is read (it
   * has two elements). */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 3),
                "count is 3, want at most max_sequences 2");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, SIZE_MAX),
                "want at most max_sequences 2");
  tokens[1] = vocab;
  r[0].tokens = tokens + 1;
  snprintf(out_of_range, sizeof out_of_range, "token id %lld",
           (long long)vocab);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 1),
                out_of_range);
  tokens[1] = -1;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 1),
                "token id -1");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_logits(batch, 0, &logits, &rows), "request is 0");
  r[0].tokens = tokens + 2;
  r[0].count = 4; /* 1 + 4 > max_length 4 */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 1),
                "exceed the batch's max_length 4");
  r[0].count = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 1),
                "has 0 tokens");
  r[0].count = 1;
  r[1] = r[0];
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 2),
                "appears twice");
  r[1].sequence = 1 - r[0].sequence; /* a free slot */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 2),
                "is not a live sequence");
  r[1].sequence = 2;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, r, 2),
                "sequence 2 is not a live sequence");
  EXPECT(attn_batch_length(batch, r[0].sequence) == 1);
  /* An empty step, requests NULL or not, is no error and changes nothing. */
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, NULL, 0), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, r, 0), "");
  EXPECT(attn_batch_length(batch, r[0].sequence) == 1);
  /* A step refused for NULL requests leaves no logits of the last one. */
  r[0].tokens = tokens;
  EXPECT_STATUS(ATTN_OK, attn_batch_step(batch, r, 1), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_logits(batch, 0, &logits, &rows), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, NULL, 1),
                "requests must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_batch_logits(batch, 0, &logits, &rows), "request is 0");
  attn_batch_destroy(batch);
}

/* Loads bad/`name` and steps its input_ids, which must be refused. */
static void ExpectStepRefused(const char* dir, const char* name,
                              const char* needle) {
  char model_path[8192], io[8192];
  int64_t ids[64], shape[ATTN_MAX_RANK];
  int rank = 0;
  attn_model* model = NULL;
  attn_batch* batch = NULL;
  attn_batch_request request = {0, ids, 0, 0};
  snprintf(model_path, sizeof model_path, "%s/bad/%s/model.safetensors", dir,
           name);
  snprintf(io, sizeof io, "%s/bad/%s/io.safetensors", dir, name);
  EXPECT(ReadGoldenIds(io, "input_ids", ids, 64, shape, &rank));
  request.count = shape[1];
  EXPECT_STATUS(ATTN_OK, attn_model_load(model_path, NULL, NULL, &model), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_create(model, NULL, &batch), "");
  EXPECT_STATUS(ATTN_OK, attn_batch_add(batch, &request.sequence), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_step(batch, &request, 1),
                needle);
  EXPECT(attn_batch_length(batch, request.sequence) == 0);
  attn_batch_destroy(batch);
  attn_model_destroy(model);
}

/* tests/golden/lm/bad: a token id == vocab_size and a prompt longer than
 * context_length are refused by the step, names of no known layout by the
 * load. */
static void TestBadFiles(const char* dir) {
  char path[8192];
  attn_model* model = NULL;
  ExpectStepRefused(dir, "token_out_of_range", "token id 50");
  ExpectStepRefused(dir, "too_long", "exceed the batch's max_length 8");
  snprintf(path, sizeof path, "%s/bad/unknown_layout/model.safetensors", dir);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_model_load(path, NULL, NULL, &model), "layout");
  EXPECT(model == NULL);
}

/* The sampler: NULLs, struct_size, option ranges; a seed reproduces. */
static void TestSampler(void) {
  float logits[4] = {0.5f, 1.0f, 1.0f, -2.0f};
  attn_sampler_options options = ATTN_SAMPLER_OPTIONS_INIT;
  attn_sampler *s = NULL, *t = NULL;
  int64_t token = -1, other = -1;
  int i;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_create(NULL, NULL),
                "sampler must not be NULL");
  options.struct_size = 0;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_create(&options, &s),
                "attn_sampler_options.struct_size is 0");
  options.struct_size = sizeof options;
  options.temperature = -1;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_create(&options, &s),
                "temperature is -1");
  options.temperature = 1;
  options.top_p = 2;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_create(&options, &s),
                "top_p is 2");
  EXPECT(s == NULL);
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(NULL, &s), "");
  EXPECT_STATUS(ATTN_OK, attn_sampler_sample(s, logits, 4, &token), "");
  EXPECT(token == 1); /* greedy: the lowest id on ties */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_sample(NULL, logits, 4, 0),
                "sampler must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_sample(s, NULL, 4, &token),
                "logits must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_sampler_sample(s, logits, 4, NULL),
                "token must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_sampler_sample(s, logits, 0, &token), "vocab is 0");
  attn_sampler_destroy(s);
  options.top_p = 0; /* not set: no nucleus cut */
  options.seed = 42;
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(&options, &s), "");
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(&options, &t), "");
  for (i = 0; s && t && i < 20; ++i) {
    EXPECT_STATUS(ATTN_OK, attn_sampler_sample(s, logits, 4, &token), "");
    EXPECT_STATUS(ATTN_OK, attn_sampler_sample(t, logits, 4, &other), "");
    EXPECT(token == other && token >= 0 && token < 4);
  }
  attn_sampler_destroy(s);
  attn_sampler_destroy(t);
  /* A version-1 struct (it ended at seed) draws as stream 0; stream 1
   * draws otherwise. */
  options.temperature = 5;
  options.struct_size = offsetof(attn_sampler_options, stream);
  options.stream = 1; /* past the struct: not read */
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(&options, &s), "");
  options.struct_size = sizeof options;
  EXPECT_STATUS(ATTN_OK, attn_sampler_create(&options, &t), "");
  {
    attn_sampler* zero = NULL;
    int differ = 0;
    options.stream = 0;
    EXPECT_STATUS(ATTN_OK, attn_sampler_create(&options, &zero), "");
    for (i = 0; s && t && zero && i < 40; ++i) {
      EXPECT_STATUS(ATTN_OK, attn_sampler_sample(s, logits, 4, &token), "");
      EXPECT_STATUS(ATTN_OK, attn_sampler_sample(zero, logits, 4, &other), "");
      EXPECT(token == other);
      EXPECT_STATUS(ATTN_OK, attn_sampler_sample(t, logits, 4, &other), "");
      differ += token != other;
    }
    EXPECT(differ > 0);
    attn_sampler_destroy(zero);
  }
  attn_sampler_destroy(s);
  attn_sampler_destroy(t);
  attn_sampler_destroy(NULL);
}

/* A batch or a language model's info on the chapter-3 attention's model is
 * refused, naming what it wants. */
static void TestOtherKinds(void) {
  char path[4096];
  attn_model* mha = NULL;
  attn_batch* batch = NULL;
  attn_lm_info info = ATTN_LM_INFO_INIT;
  attn_model_info kind = ATTN_MODEL_INFO_INIT;
  snprintf(path, sizeof path, "%s/tests/golden/mha_book.safetensors",
           source_dir);
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, NULL, &mha), "");
  if (!mha) return;
  EXPECT_STATUS(ATTN_OK, attn_model_config(mha, &kind), "");
  EXPECT(kind.kind == ATTN_MODEL_ATTENTION && kind.token_input == 0);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_batch_create(mha, NULL, &batch),
                "batch: the model is an attention layer, want a language "
                "model");
  EXPECT(batch == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_model_lm_info(mha, &info),
                "the model is not a language model");
  attn_model_destroy(mha);
}

static void TestErrors(const Golden* g) {
  attn_model* model = NULL;
  TestOtherKinds();
  TestLoadErrors(g);
  TestSampler();
  EXPECT_STATUS(ATTN_OK, attn_model_load(g->model_path, NULL, NULL, &model),
                "");
  if (!model) return;
  TestCreateErrors(model);
  TestStructSizePastThePage(g, model);
  TestSequenceErrors(model);
  TestStepErrors(model, g->V);
  attn_model_destroy(model);
}

int main(int argc, char** argv) {
  char dir[4096];
  struct dirent* entry;
  DIR* d;
  int cases = 0;
  Golden g;
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOURCE_DIR\n", argv[0]);
    return 2;
  }
  source_dir = argv[1];
  snprintf(dir, sizeof dir, "%s/tests/golden/lm", argv[1]);
  d = opendir(dir);
  while (d && (entry = readdir(d)) != NULL) {
    const int failed = failures;
    if (entry->d_name[0] == '.') continue;
    if (ReadGolden(dir, entry->d_name, &g) && failures == failed) {
      TestCase(&g);
      if (cases++ == 0) TestErrors(&g);
    }
    FreeGolden(&g);
  }
  if (d) closedir(d);
  TestBadFiles(dir);
  if (cases == 0) {
    fprintf(stderr, "FAILED: no golden language model under %s\n", dir);
    ++failures;
  }
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
