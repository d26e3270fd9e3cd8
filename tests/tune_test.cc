// The tuned file (issue 3): what `attn tune --save` writes is read back by
// the library through ATTN_CONFIG and by the CLI through --config, below
// the API option and ATTN_NUM_THREADS; a bad file is a one-line error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/threads.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

// Runs the attn CLI; returns its exit code, stdout and stderr in *out, *err.
int Cli(const test::TempDir& dir, const std::string& args, std::string* out,
        std::string* err) {
  const std::string o = dir.Path("stdout"), e = dir.Path("stderr");
  const int status = std::system(
      (std::string(ATTN_CLI) + " " + args + " >" + o + " 2>" + e).c_str());
  auto slurp = [](const std::string& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  *out = slurp(o);
  *err = slurp(e);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("ATTN_NUM_THREADS");
    unsetenv("ATTN_CONFIG");
  }
  void TearDown() override { SetUp(); }
  test::TempDir dir_;
};

TEST_F(TuneTest, TunedFileSitsBelowOptionAndEnvironment) {
  setenv("ATTN_CONFIG", dir_.Write("t.json", R"({"num_threads": 3})").c_str(),
         1);
  EXPECT_EQ(*ResolveNumThreads(0), 3);
  EXPECT_EQ(*ResolveNumThreads(5), 5);
  setenv("ATTN_NUM_THREADS", "2", 1);
  EXPECT_EQ(*ResolveNumThreads(0), 2);
  unsetenv("ATTN_CONFIG");
  unsetenv("ATTN_NUM_THREADS");
  EXPECT_EQ(*ResolveNumThreads(0), AffinityCores());
}

TEST_F(TuneTest, BadFilesAreOneLineErrorsNamingTheFile) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "not valid JSON"},
      {"{\"num_threads\": 2", "not valid JSON"},
      {"[2]", "want a JSON object"},
      {"{\"threads\": 2}", "has no \"num_threads\""},
      {"{\"num_threads\": 0}", "want a positive integer"},
      {"{\"num_threads\": 2.5}", "want a positive integer"},
      {"{\"num_threads\": \"2\"}", "want a positive integer"},
  };
  for (const auto& c : cases) {
    const std::string path = dir_.Write("bad.json", c.text);
    Result<TunedConfig> read = ReadTunedConfig(path);
    ASSERT_FALSE(read.ok()) << c.text;
    const std::string& message = read.status().message();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    setenv("ATTN_CONFIG", path.c_str(), 1);
    EXPECT_FALSE(ResolveNumThreads(0).ok()) << c.text;
    EXPECT_EQ(*ResolveNumThreads(1), 1) << "an explicit count needs no file";
  }
  Result<TunedConfig> missing = ReadTunedConfig(dir_.Path("missing.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot be opened"),
            std::string::npos);
}

TEST_F(TuneTest, SavedFileIsReadBackByBenchAndRun) {
  std::string out, err;
  const std::string saved = dir_.Path("tuned.json");
  ASSERT_EQ(Cli(dir_,
                "tune --shape seed --threads 1..2 --min-time 0.01 "
                "--save " +
                    saved,
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("recommended: "), std::string::npos) << out;
  EXPECT_NE(out.find("efficiency"), std::string::npos) << out;
  Result<TunedConfig> tuned = ReadTunedConfig(saved);
  ASSERT_TRUE(tuned.ok()) << tuned.status().message();

  // bench resolves its team from the file when no --threads is given.
  const std::string one = dir_.Write("one.json", R"({"num_threads": 1})");
  ASSERT_EQ(
      Cli(dir_, "bench --shape seed --min-time 0.01 --json --config " + one,
          &out, &err),
      0)
      << err;
  EXPECT_NE(out.find("\"threads\":1"), std::string::npos) << out;
  EXPECT_EQ(Cli(dir_, "bench --shape seed --config " + dir_.Path("no.json"),
                &out, &err),
            1);
  EXPECT_NE(err.find("no.json' cannot be opened"), std::string::npos) << err;

  const std::string book =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_book.safetensors";
  EXPECT_EQ(Cli(dir_,
                "run --weights " + book + " --input " + book + " --output " +
                    dir_.Path("y.safetensors") + " --config " +
                    dir_.Write("bad.json", "{}"),
                &out, &err),
            1);
  EXPECT_NE(err.find("has no \"num_threads\""), std::string::npos) << err;
}

}  // namespace
}  // namespace attn
