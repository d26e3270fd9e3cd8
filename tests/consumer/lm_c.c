/* Greedy generation with a language model through attn's C API: prints the
 * N token ids that follow a prompt of token ids.
 *   lm_c MODEL.safetensors N TOKEN... */
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  int64_t prompt[512], token = 0, rows = 0, n;
  attn_model* model = NULL;
  attn_batch* batch = NULL; /* one thread's KV caches */
  attn_sampler* sampler = NULL;
  attn_lm_info info = ATTN_LM_INFO_INIT;
  attn_batch_request request = {0, prompt, argc - 3, 0}; /* the last logits */
  const float* logits = NULL;
  if (argc < 4 || argc - 3 > 512) return 2;
  for (n = 0; n < argc - 3; ++n) prompt[n] = strtoll(argv[n + 3], NULL, 10);
  attn_status s = attn_model_load(argv[1], NULL, NULL, &model); /* no graph */
  if (!s) s = attn_model_lm_info(model, &info);
  if (!s) s = attn_batch_create(model, NULL, &batch); /* one sequence */
  if (!s) s = attn_sampler_create(NULL, &sampler);    /* greedy */
  if (!s) s = attn_batch_add(batch, &request.sequence);
  for (n = 0; !s && n < atoll(argv[2]); ++n) {
    s = attn_batch_step(batch, &request, 1); /* the prompt, then a token */
    if (!s) s = attn_batch_logits(batch, 0, &logits, &rows);
    if (!s) s = attn_sampler_sample(sampler, logits, info.vocab_size, &token);
    if (!s) printf(n ? " %lld" : "%lld", (long long)token);
    request.tokens = &token;
    request.count = 1;
  }
  if (s)
    fprintf(stderr, "attn: %s\n", attn_last_error_message());
  else
    printf("\n");
  attn_sampler_destroy(sampler);
  attn_batch_destroy(batch);
  attn_model_destroy(model);
  return s != ATTN_OK;
}
