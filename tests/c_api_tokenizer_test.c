/* The tokenizer's C API (attn_tokenizer_* in attn/attn.h), compiled as
 * C99, on a small GPT-2 vocabulary it writes: "hello world" merges into the
 * ids its merges' ranks give, each id decodes to its bytes, the buffers'
 * sizes are asked for and checked, and every misuse is refused with a
 * status and a message. Then a small SentencePiece-style tokenizer.json:
 * special tokens, BOS/EOS, the chat template, text decoding and the
 * decode stream.
 * Usage: c_api_tokenizer_test */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/attn.h"
#include "c_expect.h"

/* Bytes as GPT-2 spells them: printable ASCII as itself, a space as U+0120
 * (UTF-8 "\xc4\xa0" in merges.txt). */
static const char kVocab[] =
    "{\"h\": 0, \"e\": 1, \"l\": 2, \"o\": 3, \"w\": 4, \"r\": 5, \"d\": 6,"
    " \"\\u0120\": 7, \"he\": 8, \"ll\": 9, \"hell\": 10, \"\\u0120w\": 11,"
    " \"or\": 12, \"\\u0120wor\": 13}";
static const char kMerges[] =
    "#version: 0.2\nh e\nl l\nhe ll\n\xc4\xa0 w\no r\n\xc4\xa0w or\n";

/* "\u2581" is SentencePiece's space; 中 is three <0xNN> bytes. */
static const char kTokenizerJson[] =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", "
    "\"special\": true}, {\"id\": 1, \"content\": \"<s>\", \"special\": "
    "true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
    "{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": "
    "\"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": "
    "\"\\u2581\"}]}, \"pre_tokenizer\": null,"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
    "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, "
    "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\":"
    " {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
    "\"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": "
    "\" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, "
    "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
    "\"stop\": 0}]},"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", "
    "\"byte_fallback\": true, \"fuse_unk\": true, \"vocab\": {\"<unk>\": "
    "0, \"<s>\": 1, \"</s>\": 2, \"\\u2581\": 3, \"h\": 4, \"i\": 5, "
    "\"\\u2581h\": 6, \"\\u2581hi\": 7, \"<0xE4>\": 8, \"<0xB8>\": 9, "
    "\"<0xAD>\": 10}, \"merges\": [\"\\u2581 h\", [\"\\u2581h\", "
    "\"i\"]]}}";
static const char kTokenizerConfig[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, "
    "\"chat_template\": \"{{ messages }}\"}";
static const char kGenerationConfig[] = "{\"eos_token_id\": [2, 5]}";

static int WriteFile(const char* dir, const char* name, const char* text) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "wb");
  if (!f) return 0;
  fputs(text, f);
  return fclose(f) == 0;
}

static void RemoveDir(const char* dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/vocab.json", dir);
  remove(path);
  snprintf(path, sizeof path, "%s/merges.txt", dir);
  remove(path);
  rmdir(dir);
}

static void TestEncodeDecode(const attn_tokenizer* t) {
  /* hello -> hell o; " world" -> \u0120wor l d. */
  const int64_t want[] = {10, 3, 13, 2, 6};
  int64_t ids[8] = {0};
  size_t count = 99, length = 99, i;
  char bytes[8];
  EXPECT(attn_tokenizer_vocab_size(t) == 14);
  EXPECT_STATUS(ATTN_OK,
                attn_tokenizer_encode(t, "hello world", 11, NULL, 0, &count),
                "");
  EXPECT(count == 5);
  EXPECT_STATUS(
      ATTN_OK, attn_tokenizer_encode(t, "hello world", 11, ids, 8, &count), "");
  EXPECT(count == 5);
  for (i = 0; i < 5; ++i) EXPECT(ids[i] == want[i]);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_encode(t, "hello world", 11, ids, 4, &count),
                "ids has room for 4 values, want 5");
  EXPECT(count == 5);
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_encode(t, NULL, 0, ids, 8, &count), "");
  EXPECT(count == 0);
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_decode(t, 13, bytes, 8, &length), "");
  EXPECT(length == 4 && memcmp(bytes, " wor", 4) == 0);
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_decode(t, 10, NULL, 0, &length), "");
  EXPECT(length == 4);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_decode(t, 10, bytes, 3, &length),
                "bytes has room for 3 values, want 4");
}

static void TestMisuse(const attn_tokenizer* t, const char* dir) {
  attn_tokenizer* none = (attn_tokenizer*)&failures; /* overwritten */
  size_t count = 7;
  int64_t id;
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_tokenizer_load(NULL, 0, &none),
                "dir must not be NULL");
  EXPECT(none == NULL);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_tokenizer_load(dir, 0, NULL),
                "tokenizer must not be NULL");
  EXPECT_STATUS(ATTN_IO_ERROR,
                attn_tokenizer_load("/nonexistent-attn-dir", 0, &none),
                "vocab.json");
  EXPECT_STATUS(ATTN_OUT_OF_MEMORY, attn_tokenizer_load(dir, 100, &none),
                "memory limit");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_encode(NULL, "a", 1, &id, 1, &count),
                "tokenizer must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_encode(t, "a", 1, &id, 1, NULL),
                "count must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_encode(t, NULL, 3, &id, 1, &count),
                "text must not be NULL");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_encode(t, "hi!", 3, &id, 1, &count), "");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_decode(t, 14, NULL, 0, &count), "14");
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                attn_tokenizer_decode(t, 1, NULL, 4, &count),
                "bytes must not be NULL");
  EXPECT(attn_tokenizer_vocab_size(NULL) == -1);
  attn_tokenizer_destroy(NULL);
}

static void TestSentencePiece(const attn_tokenizer* t) {
  /* "hi 中" is "\u2581hi\u2581中": \u2581hi, \u2581, then 中's bytes. */
  const int64_t want[] = {1, 7, 3, 8, 9, 10};
  const char* expected_steps[] = {"hi", " ", "", "", "\xe4\xb8\xad"};
  int64_t ids[8] = {0};
  size_t count = 0, length = 0, i;
  char text[32];
  const char* step = NULL;
  attn_decode_stream* stream = NULL;
  EXPECT(strcmp(attn_tokenizer_kind(t), "sentencepiece-bpe") == 0);
  EXPECT_STATUS(
      ATTN_OK,
      attn_tokenizer_encode_special(t, "hi \xe4\xb8\xad", 6, 1, ids, 8, &count),
      "");
  EXPECT(count == 6);
  for (i = 0; i < 6 && i < count; ++i) EXPECT(ids[i] == want[i]);
  EXPECT_STATUS(ATTN_OK,
                attn_tokenizer_encode(t, "hi \xe4\xb8\xad", 6, ids, 8, &count),
                "");
  EXPECT(count == 5 && ids[0] == 7);
  EXPECT_STATUS(
      ATTN_OK,
      attn_tokenizer_decode_text(t, want, 6, text, sizeof text, &length), "");
  EXPECT(length == 10 && memcmp(text, "<s> hi \xe4\xb8\xad", 10) == 0);
  EXPECT(attn_tokenizer_bos_id(t) == 1 && attn_tokenizer_add_bos(t) == 1);
  EXPECT(attn_tokenizer_add_eos(t) == 0);
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_eos_ids(t, ids, 8, &count), "");
  EXPECT(count == 2 && ids[0] == 2 && ids[1] == 5);
  EXPECT(strcmp(attn_tokenizer_chat_template(t), "{{ messages }}") == 0);
  { /* The template prints the messages as Python's repr, as Jinja2 does. */
    char chat[64];
    const char* repr = "[{'role': 'user', 'content': 'hi'}]";
    EXPECT_STATUS(ATTN_OK,
                  attn_tokenizer_apply_chat_template(
                      t, "[{\"role\": \"user\", \"content\": \"hi\"}]", 1, NULL,
                      chat, sizeof chat, &length),
                  "");
    EXPECT(length == strlen(repr) && memcmp(chat, repr, length) == 0);
    EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                  attn_tokenizer_apply_chat_template(
                      t, "{\"role\": 1}", 1, NULL, chat, sizeof chat, &length),
                  "the messages is a JSON object, want a JSON array");
  }
  EXPECT_STATUS(ATTN_OK, attn_decode_stream_create(t, &stream), "");
  for (i = 0; stream && i < 5; ++i) {
    EXPECT_STATUS(ATTN_OK,
                  attn_decode_stream_next(stream, want[i + 1], &step, &length),
                  "");
    EXPECT(length == strlen(expected_steps[i]) &&
           memcmp(step, expected_steps[i], length) == 0);
  }
  if (stream) {
    EXPECT_STATUS(ATTN_INVALID_ARGUMENT,
                  attn_decode_stream_next(stream, 99, &step, &length), "99");
    EXPECT_STATUS(ATTN_OK, attn_decode_stream_finish(stream, &step, &length),
                  "");
    EXPECT(length == 0);
  }
  attn_decode_stream_destroy(stream);
  EXPECT_STATUS(ATTN_INVALID_ARGUMENT, attn_decode_stream_create(NULL, &stream),
                "tokenizer");
  EXPECT(attn_tokenizer_kind(NULL) == NULL);
}

static void RunSentencePiece(void) {
  char dir[] = "/tmp/attn_c_tokenizer_XXXXXX";
  char path[4096];
  attn_tokenizer* t = NULL;
  const char* names[] = {"tokenizer.json", "tokenizer_config.json",
                         "generation_config.json"};
  int i;
  if (!mkdtemp(dir) || !WriteFile(dir, names[0], kTokenizerJson) ||
      !WriteFile(dir, names[1], kTokenizerConfig) ||
      !WriteFile(dir, names[2], kGenerationConfig)) {
    fprintf(stderr, "FAILED: cannot write tokenizer.json under /tmp\n");
    ++failures;
    return;
  }
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_load(dir, 0, &t), "");
  if (t) TestSentencePiece(t);
  attn_tokenizer_destroy(t);
  for (i = 0; i < 3; ++i) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    remove(path);
  }
  rmdir(dir);
}

int main(void) {
  char dir[] = "/tmp/attn_c_tokenizer_XXXXXX";
  attn_tokenizer* t = NULL;
  if (!mkdtemp(dir) || !WriteFile(dir, "vocab.json", kVocab) ||
      !WriteFile(dir, "merges.txt", kMerges)) {
    fprintf(stderr, "FAILED: cannot write the vocabulary under /tmp\n");
    return 1;
  }
  EXPECT_STATUS(ATTN_OK, attn_tokenizer_load(dir, 0, &t), "");
  if (t) {
    TestEncodeDecode(t);
    TestMisuse(t, dir);
  }
  attn_tokenizer_destroy(t);
  RemoveDir(dir);
  RunSentencePiece();
  if (failures == 0) printf("tokenizer C API: all checks passed\n");
  return failures ? 1 : 0;
}
