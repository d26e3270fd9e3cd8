/* Prints an integer tensor (I64 or I32) of a safetensors file, a row per
 * line: a golden's prompt and greedy tokens, for run.sh to check lm_c with.
 *   print_ids FILE.safetensors NAME */
#include <stdio.h>

#include "../golden_io.h"

int main(int argc, char** argv) {
  static int64_t ids[1 << 20];
  int64_t shape[8], i, n = 1;
  int rank = 0, d;
  if (argc != 3 ||
      !ReadGoldenIds(argv[1], argv[2], ids, 1 << 20, shape, &rank)) {
    return 1;
  }
  for (d = 0; d < rank; ++d) n *= shape[d];
  for (i = 0; i < n; ++i) {
    const int last = rank == 0 || (i + 1) % shape[rank - 1] == 0;
    printf("%lld%c", (long long)ids[i], last ? '\n' : ' ');
  }
  return 0;
}
