/* Runs a chapter-3 MultiHeadAttention from a safetensors file (weights,
 * `input`, `expected`) through attn's C API. */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>

int main(int argc, char** argv) {
  static float x[1 << 16], want[1 << 16], y[1 << 16];
  int64_t shape[ATTN_MAX_RANK], d_out = 0;
  attn_model* model = NULL;
  attn_session* session = NULL;
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT; /* all from file */
  if (argc != 2) return 2;
  attn_status s = attn_model_load(argv[1], NULL, &options, &model);
  if (!s) s = attn_tensor_read_f32(argv[1], "input", x, 1 << 16, shape, NULL);
  if (!s) s = attn_tensor_read_f32(argv[1], "expected", want, 1 << 16, 0, 0);
  if (!s) s = attn_model_dims(model, NULL, &d_out);
  if (!s) s = attn_session_create(model, &session); /* one per thread */
  if (!s) s = attn_session_run(session, x, shape[0], shape[1], y);
  double err = 0;
  for (int64_t i = 0; !s && i < shape[0] * shape[1] * d_out; ++i)
    err = fmax(err, fabs(y[i] - want[i]));
  if (s)
    fprintf(stderr, "attn: %s\n", attn_last_error_message());
  else
    printf("C: max |y - expected| = %g\n", err);
  attn_session_destroy(session);
  attn_model_destroy(model);
  return s || err > 1e-5;
}
