// Tokens per second of attn::Tokenizer::Encode, one call per document as an
// embedder makes them, on one thread: the attn side of
// tests/tokenizers/bench_speed.sh. Public API only.
// Usage: tokenizer_speed TOKENIZER_DIR DOCS.jsonl [MIN_SECONDS]
// Prints one JSON line: documents, bytes, tokens, seconds, tokens_per_s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "attn/tokenizer.hpp"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: tokenizer_speed DIR DOCS.jsonl [MIN_SECONDS]\n");
    return 2;
  }
  const double min_seconds = argc > 3 ? std::atof(argv[3]) : 2.0;
  const auto tokenizer = attn::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().message().c_str());
    return 1;
  }
  std::vector<std::string> docs;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    const auto doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_object() && doc.contains("text")) docs.push_back(doc["text"]);
  }
  size_t bytes = 0;
  for (const std::string& doc : docs) bytes += doc.size();
  // One untimed pass, as HF's side gets one too.
  for (const std::string& doc : docs) (void)(*tokenizer)->Encode(doc);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  size_t tokens = 0, passes = 0;
  double seconds = 0;
  while (seconds < min_seconds) {
    for (const std::string& doc : docs) {
      const auto ids = (*tokenizer)->Encode(doc);
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", ids.status().message().c_str());
        return 1;
      }
      tokens += ids->size();
    }
    ++passes;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::printf(
      "{\"documents\": %zu, \"bytes\": %zu, \"passes\": %zu, \"tokens\": %zu, "
      "\"seconds\": %.3f, \"tokens_per_s\": %.0f}\n",
      docs.size(), bytes, passes, tokens, seconds, tokens / seconds);
  return 0;
}
