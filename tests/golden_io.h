/* What the C API does not read from golden files: integer tensors (token
 * ids, I64 or I32) and metadata. For the C tests and the consumer's checks,
 * through the C++ API (attn/safetensors.hpp). */
#ifndef ATTN_TESTS_GOLDEN_IO_H_
#define ATTN_TESTS_GOLDEN_IO_H_

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

/* The metadata value of `key` in `path` (e.g. "tolerance") into out, cut to
 * `capacity` bytes with its terminating NUL. Returns 1 on success, 0 when the
 * file or the key is missing (the reason on stderr). */
int ReadGoldenMetadata(const char* path, const char* key, char* out,
                       size_t capacity);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTN_TESTS_GOLDEN_IO_H_ */
