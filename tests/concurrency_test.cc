// The concurrency promise of attn/attn.h, through the C API as an embedder
// uses it: one model shared by many threads, each with its own session,
// decoder or language-model batch, gives bitwise the serial output;
// create/run/destroy cycles do not grow memory (LeakSanitizer checks the same
// in the ASan build).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"

#if defined(__SANITIZE_ADDRESS__)
#define ATTN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_TEST_ASAN 1
#endif
#endif

namespace {

std::string Golden(const char* name) {
  return std::string(ATTN_SOURCE_DIR) + "/tests/golden/" + name +
         ".safetensors";
}

struct Tensor {
  std::vector<float> data;
  int64_t shape[ATTN_MAX_RANK] = {};
  int rank = 0;
};

Tensor Read(const std::string& path, const char* name) {
  Tensor t;
  EXPECT_EQ(
      attn_tensor_read_f32(path.c_str(), name, nullptr, 0, t.shape, &t.rank),
      ATTN_OK)
      << attn_last_error_message();
  size_t count = 1;
  for (int i = 0; i < t.rank; ++i) count *= static_cast<size_t>(t.shape[i]);
  t.data.resize(count);
  EXPECT_EQ(attn_tensor_read_f32(path.c_str(), name, t.data.data(), count,
                                 nullptr, nullptr),
            ATTN_OK)
      << attn_last_error_message();
  return t;
}

// The MHA model at `path` and its output width; null on failure.
attn_model* LoadMha(const std::string& path, int64_t* d_out) {
  attn_model* model = nullptr;
  int64_t d_in = 0;
  if (attn_model_load(path.c_str(), NULL, nullptr, &model) != ATTN_OK ||
      attn_model_dims(model, &d_in, d_out) != ATTN_OK) {
    attn_model_destroy(model);
    return nullptr;
  }
  return model;
}

// One run on a fresh session; the output, empty on failure.
std::vector<float> RunOnce(const attn_model* model, const float* x,
                           int64_t batch, int64_t seq_len, int64_t d_out) {
  attn_session* session = nullptr;
  std::vector<float> y(static_cast<size_t>(batch * seq_len * d_out));
  if (attn_session_create(model, &session) != ATTN_OK ||
      attn_session_run(session, x, batch, seq_len, y.data()) != ATTN_OK) {
    y.clear();
  }
  attn_session_destroy(session);
  return y;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 8 threads call `run` `runs` times each, at once: every output must be
// `serial`, bit for bit (an empty output is a failed run).
template <typename Run>
void ExpectEveryRunMatches(const std::vector<float>& serial, int runs,
                           const Run& run) {
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::string> messages(kThreads);  // the last error is per thread
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < runs; ++r) {
        const std::vector<float> y = run();
        if (y.empty()) {
          ++failures[t];
          messages[t] = attn_last_error_message();
        } else if (!BitwiseEqual(y, serial)) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t << ": " << messages[t];
    EXPECT_EQ(mismatches[t], 0) << "thread " << t << " differed from serial";
  }
}

// 8 threads x 50 runs on one model, each thread with its own session,
// alternating between two shapes so that sessions re-prepare concurrently;
// every output is compared bitwise with the serial one.
TEST(Concurrency, OneModelManyThreadsMatchesSerialBitwise) {
  const std::string path = Golden("mha_moderate");
  int64_t d_out = 0;
  attn_model* model = LoadMha(path, &d_out);
  ASSERT_NE(model, nullptr) << attn_last_error_message();
  const Tensor x = Read(path, "input");
  const Tensor expected = Read(path, "expected");
  ASSERT_EQ(x.rank, 3);
  const int64_t batch = x.shape[0], seq_len = x.shape[1];
  ASSERT_GE(batch, 2);

  // Serial references: the whole batch, and its first sequence cut short.
  const int64_t short_len = seq_len / 2 + 1;
  const std::vector<float> serial_full =
      RunOnce(model, x.data.data(), batch, seq_len, d_out);
  const std::vector<float> serial_short =
      RunOnce(model, x.data.data(), 1, short_len, d_out);
  ASSERT_FALSE(serial_full.empty()) << attn_last_error_message();
  ASSERT_FALSE(serial_short.empty()) << attn_last_error_message();
  ASSERT_EQ(serial_full.size(), expected.data.size());
  for (size_t i = 0; i < serial_full.size(); ++i) {
    ASSERT_NEAR(serial_full[i], expected.data[i], 1e-5) << "element " << i;
  }

  constexpr int kThreads = 8, kRuns = 50;
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::string> messages(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      attn_session* session = nullptr;
      if (attn_session_create(model, &session) != ATTN_OK) {
        failures[t] = kRuns;
        messages[t] = attn_last_error_message();
        return;
      }
      std::vector<float> y(serial_full.size());
      for (int r = 0; r < kRuns; ++r) {
        // Odd threads start with the short shape, so shapes interleave.
        const bool full = (r + t) % 2 == 0;
        const int64_t b = full ? batch : 1, len = full ? seq_len : short_len;
        const std::vector<float>& want = full ? serial_full : serial_short;
        std::fill(y.begin(), y.end(), -1.0f);
        if (attn_session_run(session, x.data.data(), b, len, y.data()) !=
            ATTN_OK) {
          ++failures[t];
          messages[t] = attn_last_error_message();
          continue;
        }
        if (std::memcmp(y.data(), want.data(), want.size() * sizeof(float))) {
          ++mismatches[t];
        }
      }
      attn_session_destroy(session);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t << ": " << messages[t];
    EXPECT_EQ(mismatches[t], 0) << "thread " << t << " differed from serial";
  }
  attn_model_destroy(model);
}

// A decoder's prompts (the first rows of x, as many as leave room for the
// steps) and three steps of one new token per sequence; empty on failure.
std::vector<float> DecodeOnce(const attn_model* model, const Tensor& x,
                              int64_t d_out) {
  constexpr int64_t kSteps = 3;
  const int64_t batch = x.shape[0], d_in = x.shape[2];
  const int64_t prompt = x.shape[1] - kSteps, rows = batch * prompt;
  attn_decoder* decoder = nullptr;
  std::vector<float> y(static_cast<size_t>((rows + kSteps * batch) * d_out));
  const std::vector<int64_t> counts(static_cast<size_t>(batch), prompt);
  bool ok =
      attn_decoder_create(model, batch, x.shape[1], &decoder) == ATTN_OK &&
      attn_decoder_prefill(decoder, x.data.data(), counts.data(), y.data()) ==
          ATTN_OK;
  for (int64_t s = 0; ok && s < kSteps; ++s) {
    const int64_t row = rows + s * batch;  // x's rows after the prompts'
    ok = attn_decoder_decode(decoder, x.data.data() + row * d_in, batch,
                             y.data() + row * d_out) == ATTN_OK;
  }
  attn_decoder_destroy(decoder);
  if (!ok) y.clear();
  return y;
}

// 8 threads each create, run and destroy decoders on one model, which all
// read its decode layouts: every output is bitwise the serial one.
TEST(Concurrency, DecodersOnOneModelMatchSerialBitwise) {
  const std::string path = Golden("mha_moderate");
  int64_t d_out = 0;
  attn_model* model = LoadMha(path, &d_out);
  ASSERT_NE(model, nullptr) << attn_last_error_message();
  const Tensor x = Read(path, "input");
  ASSERT_EQ(x.rank, 3);
  ASSERT_GE(x.shape[1], 4);
  const std::vector<float> serial = DecodeOnce(model, x, d_out);
  ASSERT_FALSE(serial.empty()) << attn_last_error_message();

  ExpectEveryRunMatches(serial, 20,
                        [&] { return DecodeOnce(model, x, d_out); });
  attn_model_destroy(model);
}

// Sessions outlive their model's handle; threads may destroy the handle
// while others still run.
TEST(Concurrency, SessionsKeepTheModelAlive) {
  const std::string path = Golden("mha_book");
  attn_model* model = nullptr;
  ASSERT_EQ(attn_model_load(path.c_str(), NULL, nullptr, &model), ATTN_OK);
  const Tensor x = Read(path, "input");
  const std::vector<float> serial =
      RunOnce(model, x.data.data(), x.shape[0], x.shape[1], 2);
  std::vector<attn_session*> sessions(4, nullptr);
  for (attn_session*& s : sessions) {
    ASSERT_EQ(attn_session_create(model, &s), ATTN_OK);
  }
  attn_model_destroy(model);
  std::vector<std::vector<float>> outputs(sessions.size(), serial);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sessions.size(); ++i) {
    threads.emplace_back([&, i] {
      std::fill(outputs[i].begin(), outputs[i].end(), 0.0f);
      if (attn_session_run(sessions[i], x.data.data(), x.shape[0], x.shape[1],
                           outputs[i].data()) != ATTN_OK) {
        outputs[i].clear();
      }
      attn_session_destroy(sessions[i]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::vector<float>& y : outputs)
    EXPECT_TRUE(BitwiseEqual(y, serial));
}

// The same promise for a graph model (the chapter-4 TransformerBlock): every
// thread's session gives bitwise the serial output.
TEST(Concurrency, GraphModelManyThreadsMatchesSerialBitwise) {
  const std::string json =
      std::string(ATTN_SOURCE_DIR) + "/tools/graphs/transformer_block.json";
  const std::string weights =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/block.safetensors";
  attn_model* model = nullptr;
  ASSERT_EQ(attn_model_load(weights.c_str(), json.c_str(), nullptr, &model),
            ATTN_OK)
      << attn_last_error_message();
  int64_t d_out = 0;
  ASSERT_EQ(attn_model_dims(model, nullptr, &d_out), ATTN_OK);
  const Tensor x = Read(weights, "input");
  const std::vector<float> serial =
      RunOnce(model, x.data.data(), x.shape[0], x.shape[1], d_out);
  ASSERT_FALSE(serial.empty()) << attn_last_error_message();
  constexpr int kThreads = 4, kRuns = 10;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      attn_session* session = nullptr;
      std::vector<float> y(serial.size());
      if (attn_session_create(model, &session) != ATTN_OK) {
        bad[t] = kRuns;
        return;
      }
      for (int r = 0; r < kRuns; ++r) {
        const bool ok = attn_session_run(session, x.data.data(), x.shape[0],
                                         x.shape[1], y.data()) == ATTN_OK;
        bad[t] += !ok || !BitwiseEqual(y, serial);
      }
      attn_session_destroy(session);
    });
  }
  for (std::thread& thread : threads) thread.join();
  attn_model_destroy(model);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

size_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<size_t>(resident) *
                        static_cast<size_t>(sysconf(_SC_PAGESIZE))
                  : 0;
}

// One full lifecycle: load, create, run, destroy both. True on success.
// One thread per run: the memory promise does not depend on the team size,
// and waking a team for a 2x6x3 input would only measure the scheduler.
bool Cycle(const std::string& path, const float* x, int64_t batch,
           int64_t seq_len, float* y) {
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  options.num_threads = 1;
  attn_model* model = nullptr;
  attn_session* session = nullptr;
  const bool ok =
      attn_model_load(path.c_str(), NULL, &options, &model) == ATTN_OK &&
      attn_session_create(model, &session) == ATTN_OK &&
      attn_session_run(session, x, batch, seq_len, y) == ATTN_OK;
  attn_session_destroy(session);
  attn_model_destroy(model);
  return ok;
}

// A prompt of two sequences, then greedy decode steps, on a new batch of
// `model`: every step's logits, in order; empty on failure.
std::vector<float> GenerateOnce(const attn_model* model, int64_t vocab) {
  constexpr int64_t kSequences = 2, kPrompt = 5, kSteps = 6;
  attn_batch_options options = ATTN_BATCH_OPTIONS_INIT;
  options.max_sequences = kSequences;
  options.max_length = kPrompt + kSteps;
  attn_batch* batch = nullptr;
  std::vector<float> all;
  bool ok = attn_batch_create(model, &options, &batch) == ATTN_OK;
  std::vector<int64_t> tokens(kSequences * kPrompt);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int64_t>(i * 7 + 3) % vocab;
  }
  attn_batch_request requests[kSequences];
  for (int64_t s = 0; ok && s < kSequences; ++s) {
    ok = attn_batch_add(batch, &requests[s].sequence) == ATTN_OK;
    requests[s].tokens = tokens.data() + s * kPrompt;
    requests[s].count = kPrompt;
    requests[s].all_logits = 0;
  }
  int64_t next[kSequences] = {};
  for (int64_t step = 0; ok && step <= kSteps; ++step) {
    ok = attn_batch_step(batch, requests, kSequences) == ATTN_OK;
    for (int64_t s = 0; ok && s < kSequences; ++s) {
      const float* logits = nullptr;
      int64_t rows = 0;
      ok = attn_batch_logits(batch, static_cast<size_t>(s), &logits, &rows) ==
           ATTN_OK;
      ok = ok && rows == 1;  // the last token's logits only
      if (!ok) break;
      all.insert(all.end(), logits, logits + vocab);
      next[s] = std::max_element(logits, logits + vocab) - logits;
      requests[s].tokens = &next[s];
      requests[s].count = 1;
    }
  }
  attn_batch_destroy(batch);
  if (!ok) all.clear();
  return all;
}

// One language model (grouped-query attention and RoPE, 2 threads per
// step) shared by 8 threads, each generating with its own batch: every
// step's logits bitwise those of a serial run.
TEST(Concurrency, BatchesOnOneLanguageModelMatchSerialBitwise) {
  const std::string path = std::string(ATTN_SOURCE_DIR) +
                           "/tests/golden/lm/llama_gqa/model.safetensors";
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  options.num_threads = 2;
  attn_model* model = nullptr;
  ASSERT_EQ(attn_model_load(path.c_str(), NULL, &options, &model), ATTN_OK)
      << attn_last_error_message();
  attn_lm_info info = ATTN_LM_INFO_INIT;
  ASSERT_EQ(attn_model_lm_info(model, &info), ATTN_OK);
  const std::vector<float> serial = GenerateOnce(model, info.vocab_size);
  ASSERT_FALSE(serial.empty()) << attn_last_error_message();

  ExpectEveryRunMatches(serial, 10,
                        [&] { return GenerateOnce(model, info.vocab_size); });
  attn_model_destroy(model);
}

// 10,000 load/create/run/destroy cycles on a tiny model. LeakSanitizer (the
// ASan build runs with detect_leaks=1) reports any unreleased block at exit;
// here, without ASan (whose quarantine holds freed memory), the resident set
// must not grow either.
TEST(Concurrency, TenThousandCyclesDoNotGrowMemory) {
  const std::string path = Golden("mha_book");
  const Tensor x = Read(path, "input");
  const Tensor expected = Read(path, "expected");
  const int64_t batch = x.shape[0], seq_len = x.shape[1];
  std::vector<float> y(expected.data.size());
  // Warm-up: one-time allocations (oneDNN's primitive cache, OpenMP's pool,
  // thread-local streams) happen here.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(Cycle(path, x.data.data(), batch, seq_len, y.data()))
        << attn_last_error_message();
  }
  const size_t before = ResidentBytes();
  constexpr int kCycles = 10000;
  int failed = 0;
  for (int i = 0; i < kCycles; ++i) {
    failed += !Cycle(path, x.data.data(), batch, seq_len, y.data());
  }
  const size_t after = ResidentBytes();
  EXPECT_EQ(failed, 0) << attn_last_error_message();
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y[i], expected.data[i], 1e-5) << "element " << i;
  }
  const double growth_kib =
      (static_cast<double>(after) - static_cast<double>(before)) / 1024.0;
  std::printf("resident set: %zu KiB before, %zu KiB after %d cycles\n",
              before / 1024, after / 1024, kCycles);
#ifndef ATTN_TEST_ASAN
  // A leak of 100 bytes per cycle would be ~1 MiB; allow allocator noise.
  EXPECT_LT(growth_kib, 512.0) << "resident set grew by " << growth_kib
                               << " KiB over " << kCycles << " cycles";
#else
  (void)growth_kib;  // LeakSanitizer checks at exit instead
#endif
}

}  // namespace
