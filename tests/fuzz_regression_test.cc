// Replays the fuzz corpora (tests/fuzz/corpus/<target>/) and every finding
// the fuzzers made (tests/fuzz/regressions/): each file opens or is refused
// with a one-line message; no crash, no hang, no sanitizer report (this test
// also runs in the ASan/UBSan build). Findings must be refused cleanly.
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "attn/tokenizer.hpp"
#include "tests/fuzz/fuzz_tokenizer.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

const std::string kFuzzDir = ATTN_SOURCE_DIR "/tests/fuzz";

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> paths;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name[0] != '.' && name != "README.md")
        paths.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return paths;
}

// Opens `path` as weights and, when it loads, runs it on a small input.
Status LoadAndRun(const std::string& path) {
  MhaOptions options;
  options.num_threads = 1;
  options.max_memory_bytes = 256 << 20;
  auto model = MhaModel::Load(path, options);
  if (!model.ok()) return model.status();
  const MhaConfig& c = (*model)->config();
  const int64_t T =
      c.context_length ? std::min<int64_t>(c.context_length, 4) : 4;
  std::vector<float> x(static_cast<size_t>(T * c.d_in), 0.25f);
  std::vector<float> y(static_cast<size_t>(T * c.d_out));
  MhaSession session(*model);
  return session.Run(x.data(), 1, T, y.data());
}

TEST(FuzzRegressionTest, CorporaNeverCrash) {
  size_t files = 0;
  for (const std::string& target : FilesIn(kFuzzDir + "/corpus")) {
    for (const std::string& path : FilesIn(target)) {
      SCOPED_TRACE(path);
      ++files;
      Result<SafetensorsFile> file = SafetensorsFile::Open(path);
      if (!file.ok()) {
        EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
      }
      const Status status = LoadAndRun(path);
      EXPECT_EQ(status.message().find('\n'), std::string::npos);
    }
  }
  EXPECT_GT(files, 0u) << "no corpus under " << kFuzzDir;
}

// The tokenizer fuzzer's seeds (fuzz_tokenizer.h's format) load, or are
// refused in one line, and what loads encodes its own bytes.
TEST(FuzzRegressionTest, TokenizerCorpusLoadsOrIsRefusedInOneLine) {
  const std::vector<std::string> seeds =
      FilesIn(kFuzzDir + "/corpus/fuzz_tokenizer");
  EXPECT_FALSE(seeds.empty());
  size_t loaded = 0;
  for (const std::string& path : seeds) {
    SCOPED_TRACE(path);
    std::ifstream in(path, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), {}};
    test::TempDir dir;
    ASSERT_TRUE(fuzz::WriteTokenizerFiles(bytes, dir.path()));
    const auto tokenizer = Tokenizer::Load(dir.path());
    if (!tokenizer.ok()) {
      EXPECT_FALSE(tokenizer.status().message().empty());
      EXPECT_EQ(tokenizer.status().message().find('\n'), std::string::npos);
      continue;
    }
    ++loaded;
    const auto ids = (*tokenizer)->Encode("hello world");
    EXPECT_TRUE(ids.ok() ||
                ids.status().message().find('\n') == std::string::npos);
  }
  EXPECT_GT(loaded, 0u) << "no seed loads: the fuzzer would not get past Load";
}

TEST(FuzzRegressionTest, FindingsAreRefusedCleanly) {
  for (const std::string& path : FilesIn(kFuzzDir + "/regressions")) {
    SCOPED_TRACE(path);
    const Status status = LoadAndRun(path);
    EXPECT_FALSE(status.ok());
    EXPECT_FALSE(status.message().empty());
    EXPECT_EQ(status.message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace attn
