/* The decoder's C API (attn_decoder_* in attn/attn.h), compiled as C99:
 * token-by-token decoding of a PyTorch golden file equals its forward pass,
 * a model made for sessions only refuses decoders, and every misuse is
 * refused with a status and a message.
 * Usage: c_api_decoder_test SOURCE_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"

static int failures = 0;

#define EXPECT_STATUS(want, call)                                            \
  do {                                                                       \
    const attn_status got_ = (call);                                         \
    if (got_ != (want)) {                                                    \
      fprintf(stderr, "%s:%d: FAILED: %s\n  got %s, want %s; message: %s\n", \
              __FILE__, __LINE__, #call, attn_status_string(got_),           \
              attn_status_string(want), attn_last_error_message());          \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

enum { kCap = 1 << 16 };
static float x[kCap], want[kCap], y[kCap], x1[kCap], y1[kCap], y2[kCap];

/* Decodes `path`'s input token by token and compares with its expected. */
static void TestGoldenIncremental(const char* path) {
  int64_t shape[ATTN_MAX_RANK], d_in = 0, d_out = 0, b, t, B, T, i;
  int rank = 0;
  double worst = 0, max_abs = 1;
  attn_model* model = NULL;
  attn_decoder* decoder = NULL;
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, NULL, &model));
  if (!model) return;
  EXPECT_STATUS(ATTN_OK, attn_model_dims(model, &d_in, &d_out));
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "input", x, kCap, shape, &rank));
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "expected", want, kCap, NULL, NULL));
  B = shape[0];
  T = shape[1];
  EXPECT_STATUS(ATTN_OK, attn_decoder_create(model, B, T, &decoder));
  attn_model_destroy(model); /* the decoder keeps the weights alive */
  if (!decoder) return;
  for (t = 0; t < T; ++t) {
    for (b = 0; b < B; ++b) {
      memcpy(x1 + b * d_in, x + (b * T + t) * d_in, sizeof(float) * d_in);
    }
    if (t == 0) {
      int64_t counts[64];
      for (b = 0; b < B; ++b) counts[b] = 1;
      EXPECT_STATUS(ATTN_OK, attn_decoder_prefill(decoder, x1, counts, y1));
    } else {
      EXPECT_STATUS(ATTN_OK, attn_decoder_decode(decoder, x1, B, y1));
    }
    for (b = 0; b < B; ++b) {
      memcpy(y + (b * T + t) * d_out, y1 + b * d_out, sizeof(float) * d_out);
    }
  }
  EXPECT(attn_decoder_length(decoder, 0) == T);
  for (i = 0; i < B * T * d_out; ++i) {
    worst = fmax(worst, fabs(y[i] - want[i]));
    max_abs = fmax(max_abs, fabs(want[i]));
  }
  if (!(worst <= 1e-5 * max_abs)) {
    fprintf(stderr, "FAILED: %s: max error %g\n", path, worst);
    ++failures;
  }
  attn_decoder_destroy(decoder);
}

static void TestErrors(const char* path) {
  attn_model* model = NULL;
  attn_decoder* decoder = NULL;
  int64_t counts[2] = {1, 1};
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, NULL, &model));
  if (!model) return;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_create(NULL, 2, 4, &decoder));
  EXPECT(decoder == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_create(model, 0, 4, NULL));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_create(model, 0, 4, &decoder));
  EXPECT_STATUS(ATTN_OK, attn_decoder_create(model, 2, 2, &decoder));
  if (!decoder) return;
  memset(x1, 0, sizeof(float) * 64);
  /* Decode before a prompt; prompt; wrong batch; past max_length. */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_decode(decoder, x1, 2, y1));
  EXPECT_STATUS(ATTN_OK, attn_decoder_prefill(decoder, x1, counts, y1));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_decode(decoder, x1, 3, y1));
  EXPECT_STATUS(ATTN_OK, attn_decoder_decode(decoder, x1, 2, y1));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_decode(decoder, x1, 2, y1));
  EXPECT(strstr(attn_last_error_message(), "max_length 2") != NULL);
  EXPECT(attn_decoder_length(decoder, 1) == 2);
  EXPECT(attn_decoder_length(decoder, 2) == -1);
  EXPECT(attn_decoder_length(NULL, 0) == -1);
  /* Truncate, reset, and use after reset. */
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_truncate(decoder, 0, 3));
  EXPECT_STATUS(ATTN_OK, attn_decoder_truncate(decoder, 0, 1));
  EXPECT(attn_decoder_length(decoder, 0) == 1);
  EXPECT_STATUS(ATTN_OK, attn_decoder_reset(decoder));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_decode(decoder, x1, 2, y1));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_prefill(decoder, NULL, counts, y1));
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decoder_reset(NULL));
  attn_decoder_destroy(decoder);
  attn_decoder_destroy(NULL);
  attn_model_destroy(model);
}

/* A model made for sessions only (sessions_only 1) runs sessions as the
 * default one does, bit for bit, and refuses decoders naming the option. */
static void TestSessionsOnly(const char* path) {
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  attn_model *full = NULL, *lean = NULL;
  attn_session *a = NULL, *b = NULL;
  attn_decoder* decoder = NULL;
  int64_t shape[ATTN_MAX_RANK] = {0}, d_out = 0;
  options.sessions_only = 1;
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, NULL, &full));
  EXPECT_STATUS(ATTN_OK, attn_model_load(path, NULL, &options, &lean));
  if (!full || !lean) return;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_decoder_create(lean, 1, 0, &decoder));
  EXPECT(decoder == NULL &&
         strstr(attn_last_error_message(), "sessions_only") != NULL);
  EXPECT_STATUS(ATTN_OK,
                attn_tensor_read_f32(path, "input", x1, kCap, shape, NULL));
  EXPECT_STATUS(ATTN_OK, attn_model_dims(full, NULL, &d_out));
  EXPECT_STATUS(ATTN_OK, attn_session_create(full, &a));
  EXPECT_STATUS(ATTN_OK, attn_session_create(lean, &b));
  EXPECT_STATUS(ATTN_OK, attn_session_run(a, x1, shape[0], shape[1], y1));
  EXPECT_STATUS(ATTN_OK, attn_session_run(b, x1, shape[0], shape[1], y2));
  EXPECT(memcmp(y1, y2,
                (size_t)(shape[0] * shape[1] * d_out) * sizeof(float)) == 0);
  attn_session_destroy(a);
  attn_session_destroy(b);
  attn_model_destroy(full);
  attn_model_destroy(lean);
}

int main(int argc, char** argv) {
  char path[4096];
  const char* names[] = {"mha_book", "mha_t7_hd3_bias", "mha_moderate",
                         "mha_t13_hd5_mask"};
  size_t n;
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOURCE_DIR\n", argv[0]);
    return 2;
  }
  for (n = 0; n < sizeof(names) / sizeof(names[0]); ++n) {
    snprintf(path, sizeof(path), "%s/tests/golden/%s.safetensors", argv[1],
             names[n]);
    TestGoldenIncremental(path);
  }
  snprintf(path, sizeof(path), "%s/tests/golden/mha_book.safetensors", argv[1]);
  TestErrors(path);
  snprintf(path, sizeof(path), "%s/tests/golden/mha_moderate.safetensors",
           argv[1]);
  TestSessionsOnly(path);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
