/* Integer tensors of golden files (token ids, I64 or I32), which the C API
 * does not read: for the C tests and the consumer's checks, through the C++
 * reader (attn/safetensors.hpp). */
#ifndef ATTN_TESTS_GOLDEN_IDS_H_
#define ATTN_TESTS_GOLDEN_IDS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads tensor `name` of the safetensors file `path` (I64 or I32) into
 * out as int64, its shape (room for 8) and rank; fails, with the
 * reason on stderr, when it is missing, of another dtype or holds more than
 * `capacity` values. Returns 1 on success, 0 on failure. */
int ReadGoldenIds(const char* path, const char* name, int64_t* out,
                  size_t capacity, int64_t* shape, int* rank);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTN_TESTS_GOLDEN_IDS_H_ */
