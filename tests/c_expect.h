/* The checks the C tests share: EXPECT(cond) and EXPECT_STATUS(want, call,
 * needle) report a failure with the library's last error message and count
 * it in `failures`, which main returns. Include once, in C. */
#ifndef ATTN_TESTS_C_EXPECT_H_
#define ATTN_TESTS_C_EXPECT_H_

#include <stdio.h>
#include <string.h>

#include "attn/attn.h"

static int failures = 0;

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s\n  last error: %s\n", __FILE__, \
              __LINE__, #cond, attn_last_error_message());               \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

/* EXPECT that `call` returns `want` and, when failing, leaves a message
 * containing `needle`. */
#define EXPECT_STATUS(want, call, needle)                                      \
  do {                                                                         \
    const attn_status got_ = (call);                                           \
    if (got_ != (want)) {                                                      \
      fprintf(stderr, "%s:%d: FAILED: %s\n  got %s, want %s; message: %s\n",   \
              __FILE__, __LINE__, #call, attn_status_string(got_),             \
              attn_status_string(want), attn_last_error_message());            \
      ++failures;                                                              \
    } else if ((want) != ATTN_OK &&                                            \
               strstr(attn_last_error_message(), (needle)) == NULL) {          \
      fprintf(stderr, "%s:%d: FAILED: %s\n  message '%s' lacks '%s'\n",        \
              __FILE__, __LINE__, #call, attn_last_error_message(), (needle)); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#endif /* ATTN_TESTS_C_EXPECT_H_ */
