// The tuned file: what `attn tune --save` writes is read back by
// the library through ModelOptions::tuned_config or ATTN_CONFIG and by the
// CLI through --config (passed as that option), below the API's num_threads
// and ATTN_NUM_THREADS; a bad file is a one-line error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "engine/runtime/threads.h"
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

// ModelOptions::tuned_config names the file for one model: below the
// option and ATTN_NUM_THREADS, above ATTN_CONFIG; read at load, and a bad
// one fails the load naming the option.
TEST_F(TuneTest, TunedConfigOptionSitsAboveTheEnvironmentFile) {
  MhaOptions options;
  options.tuned_config = dir_.Write("three.json", R"({"num_threads": 3})");
  setenv("ATTN_CONFIG",
         dir_.Write("four.json", R"({"num_threads": 4})").c_str(), 1);
  EXPECT_EQ(*ResolveNumThreads(options), 3);
  EXPECT_EQ(*ResolveNumThreads(ModelOptions{}), 4);
  options.num_threads = 5;
  EXPECT_EQ(*ResolveNumThreads(options), 5);
  options.num_threads = 0;
  setenv("ATTN_NUM_THREADS", "2", 1);
  EXPECT_EQ(*ResolveNumThreads(options), 2);
  unsetenv("ATTN_NUM_THREADS");

  MhaConfig config;
  config.d_in = config.d_out = 4;
  config.num_heads = 2;
  const std::vector<float> w(16, 0.25f), b(4, 0.0f);
  MhaWeights weights;
  weights.w_query = weights.w_key = weights.w_value = weights.w_out = w.data();
  weights.b_out = b.data();
  auto model = MhaModel::Create(config, weights, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->num_threads(), 3);
  options.tuned_config = dir_.Path("missing.json");
  model = MhaModel::Create(config, weights, options);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message().rfind("tuned_config: tuned config '", 0),
            0u)
      << model.status().message();
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
      {"{\"num_threads\": 2, \"num_threads\": 3}",
       "names key 'num_threads' twice in one object"},
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

// nlohmann's DOM parser recurses per level: 200,000 levels would overflow
// the stack at every library user's model load. A FIFO would block, and
// /dev/zero would be read until memory ran out.
TEST_F(TuneTest, HostileFilesAreRefusedBeforeParsing) {
  const std::string deep =
      dir_.Write("deep.json", "{\"num_threads\": " + std::string(200000, '[') +
                                  "2" + std::string(200000, ']') + "}");
  const std::string fifo = dir_.Path("fifo.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir_.Write("huge.json", "");
  ASSERT_EQ(truncate(huge.c_str(), (off_t{1} << 20) + 1), 0);  // sparse
  const struct {
    std::string path, says;
  } cases[] = {
      {deep, "nests JSON deeper than 32 levels, the limit"},
      {fifo, "is not a regular file"},
      {"/dev/zero", "is not a regular file"},
      {huge, "is 1048577 bytes, over the limit of 1048576 bytes"},
  };
  for (const auto& c : cases) {
    Result<TunedConfig> read = ReadTunedConfig(c.path);
    ASSERT_FALSE(read.ok()) << c.path;
    EXPECT_EQ(
        read.status().message().rfind("tuned config '" + c.path + "' ", 0), 0u)
        << read.status().message();
    EXPECT_NE(read.status().message().find(c.says), std::string::npos)
        << read.status().message();
    setenv("ATTN_CONFIG", c.path.c_str(), 1);
    Result<int> resolved = ResolveNumThreads(0);
    ASSERT_FALSE(resolved.ok()) << c.path;
    EXPECT_EQ(resolved.status().message(),
              "ATTN_CONFIG: " + read.status().message());
    EXPECT_EQ(*ResolveNumThreads(2), 2) << "an explicit count needs no file";
  }
}

// `attn info` reports the team `attn run` would use, so it fails where run
// fails; --threads needs no environment, in info as in run.
TEST_F(TuneTest, InfoReportsAMalformedEnvironment) {
  std::string out, err;
  setenv("ATTN_NUM_THREADS", "abc", 1);
  EXPECT_EQ(Cli(dir_, "info", &out, &err), 1);
  EXPECT_EQ(err,
            "attn: error: ATTN_NUM_THREADS is 'abc', want a positive integer "
            "up to 4096\n");
  EXPECT_EQ(out, "");
  ASSERT_EQ(Cli(dir_, "info --threads 3", &out, &err), 0) << err;
  EXPECT_NE(out.find("threads: 3\n"), std::string::npos) << out;
  // A value that holds a newline is escaped: the error stays one line.
  setenv("ATTN_NUM_THREADS", "abc\ndef", 1);
  EXPECT_EQ(Cli(dir_, "info", &out, &err), 1);
  EXPECT_EQ(err,
            "attn: error: ATTN_NUM_THREADS is 'abc\\x0adef', want a positive "
            "integer up to 4096\n");

  unsetenv("ATTN_NUM_THREADS");
  const std::string bad = dir_.Write("bad.json", R"({"num_threads": [2]})");
  setenv("ATTN_CONFIG", bad.c_str(), 1);
  EXPECT_EQ(Cli(dir_, "info", &out, &err), 1);
  EXPECT_EQ(err, "attn: error: ATTN_CONFIG: tuned config '" + bad +
                     "' has \"num_threads\": '[2]', want a positive integer up "
                     "to 4096\n");
  ASSERT_EQ(Cli(dir_, "info --threads 2", &out, &err), 0) << err;
  EXPECT_NE(out.find("threads: 2\n"), std::string::npos) << out;

  setenv("ATTN_CONFIG",
         dir_.Write("good.json", R"({"num_threads": 3})").c_str(), 1);
  ASSERT_EQ(Cli(dir_, "info", &out, &err), 0) << err;
  EXPECT_NE(out.find("threads: 3\n"), std::string::npos) << out;
}

// A bad environment does not fail a run that names its team with --threads:
// the MHA, the KV-cache decoder (--incremental) and a graph.
TEST_F(TuneTest, ExplicitThreadsNeedNoEnvironment) {
  const std::string book =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_book.safetensors";
  const std::string block =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/block.safetensors";
  const std::string run = " --output " + dir_.Path("y.safetensors");
  const std::vector<std::string> commands = {
      "run --weights " + book + " --input " + book + run,
      "run --incremental --weights " + book + " --input " + book + run,
      "run --graph " + std::string(ATTN_SOURCE_DIR) +
          "/tools/graphs/transformer_block.json --weights " + block +
          " --input " + block + run,
  };
  const std::string deep =
      dir_.Write("deep.json", "{\"num_threads\": " + std::string(200000, '[') +
                                  std::string(200000, ']') + "}");
  std::string out, err;
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{"ATTN_NUM_THREADS", "abc"},
        {"ATTN_CONFIG", deep}}) {
    setenv(name, value.c_str(), 1);
    for (const std::string& command : commands) {
      EXPECT_EQ(Cli(dir_, command + " --threads 1", &out, &err), 0)
          << name << ": " << command << ": " << err;
      EXPECT_EQ(Cli(dir_, command, &out, &err), 1) << name << ": " << command;
      EXPECT_EQ(err.rfind(std::string("attn: error: ") + name, 0), 0u) << err;
    }
    unsetenv(name);
  }
}

// --save writes its file as attn run writes an output: whole or not at all,
// through a symbolic link into its target (the link kept), with the mode a
// plain create gets, nothing staged left behind. A directory, or a file in
// none, is a one-line error before the sweep (no progress lines).
TEST_F(TuneTest, SaveReplacesTheFileWholeAndKeepsLinks) {
  const std::string tune = "tune --shape seed --threads 1 --min-time 0.01 ";
  const std::string target = dir_.Write("target.json", "old");
  const std::string link = dir_.Path("link.json");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  std::string out, err;
  ASSERT_EQ(Cli(dir_, tune + "--save " + link, &out, &err), 0) << err;
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_TRUE(ReadTunedConfig(target).ok());
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  const mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.Path(""))) {
    files +=
        entry.path().filename().string().find("partial") == std::string::npos
            ? 1
            : 100;  // a staged file left behind
  }
  EXPECT_EQ(files, 4u);  // target, link, stdout, stderr

  const std::string directory = dir_.Path("a_directory");
  ASSERT_EQ(mkdir(directory.c_str(), 0755), 0);
  for (const auto& [save, why] :
       {std::pair<std::string, std::string>{directory, "it is a directory"},
        {directory + "/no/tuned.json", "there is no directory"}}) {
    EXPECT_EQ(Cli(dir_, tune + "--save " + save, &out, &err), 1);
    EXPECT_EQ(err, "attn: error: cannot write '" + save + "': " + why +
                       (why[0] == 'i' ? ", want a file name\n"
                                      : " '" + directory + "/no'\n"));
  }
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
  // So does bench --graph (the CLI passes the file as an option).
  ASSERT_EQ(Cli(dir_,
                "bench --graph " + std::string(ATTN_SOURCE_DIR) +
                    "/tools/graphs/transformer_block.json --shape 1,4,8,2 "
                    "--min-time 0.01 --json --config " +
                    one,
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("\"threads\":1"), std::string::npos) << out;

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
