// `attn run` and `attn generate` on whole language models, as a user meets
// them: every golden case of tests/golden/lm (PyTorch's logits and greedy
// tokens) at 1 and 2 threads, the bad cases refused cleanly, seeded
// sampling reproducible, and the stop token.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/safetensors.hpp"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

const fs::path kLmGolden = fs::path(ATTN_SOURCE_DIR) / "tests/golden/lm";

// The case directories under `root` (each with a model.safetensors),
// sorted; the bad cases live apart, in root/bad.
std::vector<fs::path> CaseDirs(const fs::path& root) {
  std::vector<fs::path> dirs;
  if (!fs::is_directory(root)) return dirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (fs::exists(entry.path() / "io.safetensors")) {
      dirs.push_back(entry.path());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

struct Outcome {
  int exit_code;
  std::string stderr_text;
};

// A golden case's expected values, read from its io.safetensors.
struct GoldenCase {
  fs::path dir;
  std::string model, io;
  std::vector<float> logits;
  std::vector<int64_t> tokens;  // [batch, max_new_tokens]
  int64_t batch = 0, max_new_tokens = 0;
  double tolerance = 0.0;
};

GoldenCase ReadCase(const fs::path& dir) {
  GoldenCase c;
  c.dir = dir;
  // A sharded case's weights file is its index.
  const fs::path index = dir / "model.safetensors.index.json";
  c.model = (fs::exists(index) ? index : dir / "model.safetensors").string();
  c.io = (dir / "io.safetensors").string();
  Result<SafetensorsFile> io = SafetensorsFile::Open(c.io);
  EXPECT_TRUE(io.ok()) << io.status().message();
  if (!io.ok()) return c;
  c.logits = io->ReadF32("logits").value();
  c.tokens = io->ReadI64("tokens").value();
  c.batch = io->Find("tokens")->shape[0];
  c.max_new_tokens = std::stoll(io->metadata().at("max_new_tokens"));
  c.tolerance = std::stod(io->metadata().at("tolerance"));
  return c;
}

class LmCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attn_lm_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    output_ = (dir_ / "out.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `attn args` with stdout to `stdout_path` (discarded when empty).
  Outcome Attn(const std::string& args, const std::string& stdout_path = "") {
    const std::string err = (dir_ / "stderr.txt").string();
    const std::string out = stdout_path.empty() ? "/dev/null" : stdout_path;
    const int status = std::system(
        (std::string(ATTN_CLI) + " " + args + " >" + out + " 2>" + err)
            .c_str());
    std::ifstream in(err);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            std::string(std::istreambuf_iterator<char>(in), {})};
  }

  // The first line `attn bench ARGS --json` prints; null (the failure
  // reported) when it prints none.
  nlohmann::json BenchFirstLine(const std::string& args) {
    const std::string out = (dir_ / "bench.jsonl").string();
    const Outcome outcome = Attn("bench " + args + " --json", out);
    EXPECT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
    std::ifstream in(out);
    std::string line;
    if (!std::getline(in, line)) {
      ADD_FAILURE() << "no output from attn bench " << args;
      return nullptr;
    }
    return nlohmann::json::parse(line);
  }

  // `model`: a weights file (--weights) or a folder (--model).
  static std::string ModelFlag(const std::string& model) {
    return (fs::is_directory(model) ? "--model " : "--weights ") + model;
  }

  Outcome Run(const std::string& model, const std::string& input,
              const std::string& extra = "") {
    return Attn("run " + ModelFlag(model) + " --input " + input + " --output " +
                output_ + " " + extra);
  }

  Outcome Generate(const std::string& model, const std::string& input,
                   int64_t max_new_tokens, const std::string& extra = "") {
    return Attn("generate " + ModelFlag(model) + " --input " + input +
                " --output " + output_ + " --max-new-tokens " +
                std::to_string(max_new_tokens) + " " + extra);
  }

  // The output file's tokens or logits; the file is removed for the next run.
  std::vector<int64_t> TakeTokens() {
    std::vector<int64_t> tokens =
        SafetensorsFile::Open(output_)->ReadI64("tokens").value();
    fs::remove(output_);
    return tokens;
  }
  std::vector<float> TakeLogits() {
    std::vector<float> logits =
        SafetensorsFile::Open(output_)->ReadF32("logits").value();
    fs::remove(output_);
    return logits;
  }

  // Expects exit code 1, one stderr line, and no output file.
  void ExpectRefused(const Outcome& outcome) {
    EXPECT_EQ(outcome.exit_code, 1) << outcome.stderr_text;
    EXPECT_EQ(std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(),
                         '\n'),
              1)
        << outcome.stderr_text;
    EXPECT_FALSE(fs::exists(output_));
    fs::remove(output_);  // so that one wrong success fails only its check
  }

  // An input file of `ids` [batch, width] and, unless empty, `lengths`
  // (of its own size, which need not be batch).
  std::string WriteInput(const std::vector<int64_t>& ids, int64_t batch,
                         const std::vector<int64_t>& lengths) {
    const std::string path = (dir_ / "input.safetensors").string();
    std::vector<I64Tensor> tensors = {
        {"input_ids",
         {batch, static_cast<int64_t>(ids.size()) / batch},
         ids.data()}};
    if (!lengths.empty()) {
      tensors.push_back(
          {"lengths", {static_cast<int64_t>(lengths.size())}, lengths.data()});
    }
    EXPECT_TRUE(WriteSafetensors(path, {}, tensors).ok());
    return path;
  }

  fs::path dir_;
  std::string output_;
};

double MaxAbs(const std::vector<float>& values) {
  double largest = 0.0;
  for (float v : values) largest = std::max(largest, std::fabs(double{v}));
  return largest;
}

TEST_F(LmCliTest, GoldenCasesExist) {
  EXPECT_FALSE(CaseDirs(kLmGolden).empty()) << kLmGolden;
  EXPECT_FALSE(CaseDirs(kLmGolden / "bad").empty()) << kLmGolden / "bad";
}

// At 1 thread through the weights file, at 2 through the folder.
TEST_F(LmCliTest, RunMatchesGoldenLogitsAtOneAndTwoThreads) {
  for (const fs::path& dir : CaseDirs(kLmGolden)) {
    SCOPED_TRACE(dir.string());
    const GoldenCase golden = ReadCase(dir);
    const double bound = golden.tolerance * MaxAbs(golden.logits);
    std::vector<float> at_one_thread;
    for (int threads : {1, 2}) {
      const Outcome outcome =
          Run(threads == 1 ? golden.model : dir.string(), golden.io,
              "--threads " + std::to_string(threads));
      ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
      const std::vector<float> logits = TakeLogits();
      ASSERT_EQ(logits.size(), golden.logits.size());
      double worst = 0.0;
      for (size_t i = 0; i < logits.size(); ++i) {
        worst =
            std::max(worst, std::fabs(double{logits[i]} - golden.logits[i]));
      }
      EXPECT_LE(worst, bound) << "at " << threads << " threads";
      if (threads == 1) at_one_thread = logits;
      EXPECT_EQ(logits, at_one_thread) << "the thread count changed the logits";
    }
  }
}

TEST_F(LmCliTest, GenerateMatchesGoldenGreedyTokensAtOneAndTwoThreads) {
  for (const fs::path& dir : CaseDirs(kLmGolden)) {
    SCOPED_TRACE(dir.string());
    const GoldenCase golden = ReadCase(dir);
    for (int threads : {1, 2}) {
      const Outcome outcome = Generate(
          threads == 1 ? golden.model : dir.string(), golden.io,
          golden.max_new_tokens, "--threads " + std::to_string(threads));
      ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
      EXPECT_EQ(TakeTokens(), golden.tokens) << "at " << threads << " threads";
    }
  }
}

// --dtype bf16 on a file of BF16 weights: PyTorch's logits of those
// weights within bf16's rounding of the activations, and greedy tokens of
// the right shape; refused in one line on CPUs without native bf16.
TEST_F(LmCliTest, RunAndGenerateTakeDtypeBf16) {
  const GoldenCase golden = ReadCase(kLmGolden / "llama_gqa");
  const Outcome run = Run(golden.model, golden.io, "--dtype bf16");
  if (!GetRuntimeInfo().native_bf16) {
    ExpectRefused(run);
    ExpectRefused(Generate(golden.model, golden.io, 2, "--dtype bf16"));
    return;
  }
  ASSERT_EQ(run.exit_code, 0) << run.stderr_text;
  const std::vector<float> logits = TakeLogits();
  ASSERT_EQ(logits.size(), golden.logits.size());
  const double bound = 2e-2 * MaxAbs(golden.logits);
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_NEAR(logits[i], golden.logits[i], bound) << "logit " << i;
  }
  const Outcome generate =
      Generate(golden.model, golden.io, golden.max_new_tokens, "--dtype bf16");
  ASSERT_EQ(generate.exit_code, 0) << generate.stderr_text;
  EXPECT_EQ(TakeTokens().size(), golden.tokens.size());
}

// attn quantize writes a folder that run and generate read in its own type,
// to the logits and tokens of quantizing at load; info names the type. A
// --type that is not quantized and an --output that exists are refused.
TEST_F(LmCliTest, QuantizeWritesAFolderThatRunsAsQuantizedAtLoad) {
  const GoldenCase golden = ReadCase(kLmGolden / "hf_qwen2");
  const std::string out = (dir_ / "q4").string();
  const std::string quantize = "quantize --model " + golden.dir.string() +
                               " --type q4_0 --output " + out;
  const Outcome wrote = Attn(quantize);
  ASSERT_EQ(wrote.exit_code, 0) << wrote.stderr_text;
  EXPECT_EQ(wrote.stderr_text.rfind("attn: wrote " + out + " (q4_0) in ", 0),
            0u)
      << wrote.stderr_text;
  ASSERT_EQ(Run(golden.model, golden.io, "--dtype q4_0").exit_code, 0);
  const std::vector<float> at_load = TakeLogits();
  ASSERT_EQ(Run(out, golden.io, "--threads 2").exit_code, 0);
  EXPECT_EQ(TakeLogits(), at_load);
  ASSERT_EQ(Generate(golden.model, golden.io, 3, "--dtype q4_0").exit_code, 0);
  const std::vector<int64_t> tokens = TakeTokens();
  ASSERT_EQ(Generate(out, golden.io, 3).exit_code, 0);
  EXPECT_EQ(TakeTokens(), tokens);
  const std::string info = (dir_ / "info.txt").string();
  ASSERT_EQ(Attn("info --model " + out, info).exit_code, 0);
  std::ifstream in(info);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  EXPECT_NE(text.find("weights: q4_0, "), std::string::npos) << text;
  ExpectRefused(Run(out, golden.io, "--dtype bf16"));
  // A folder cut short (a copy stopped early) is refused, not run.
  const fs::path weights = fs::path(out) / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 100);
  ExpectRefused(Run(out, golden.io));
  const Outcome again = Attn(quantize);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.stderr_text, "attn: error: output '" + out +
                                   "' exists; want a new folder's name\n");
  const Outcome f32 = Attn("quantize --model " + golden.dir.string() +
                           " --type f32 --output " + out + "2");
  EXPECT_EQ(f32.exit_code, 2);
  EXPECT_EQ(f32.stderr_text,
            "attn: usage error: --type: got 'f32', want q8_0 or q4_0 (see "
            "--help)\n");
  EXPECT_FALSE(fs::exists(out + "2"));
}

// Three broken folders: a model type nothing runs, a shard gone, a tensor
// against config.json.
TEST_F(LmCliTest, BrokenFoldersAreRefusedInOneLine) {
  const auto copy = [&](const std::string& name, const std::string& as) {
    const fs::path to = dir_ / as;
    fs::copy(kLmGolden / name, to);
    return to;
  };
  const auto rewrite = [](const fs::path& config, const std::string& from,
                          const std::string& to) {
    std::ifstream in(config);
    std::string text(std::istreambuf_iterator<char>(in), {});
    text.replace(text.find(from), from.size(), to);
    std::ofstream(config) << text;
  };
  const fs::path type = copy("hf_llama_plain", "type");
  rewrite(type / "config.json", "\"llama\"", "\"llama4\"");
  const fs::path shard = copy("hf_mistral_window", "shard");
  fs::remove(shard / "model-00003-of-00003.safetensors");
  const fs::path width = copy("hf_qwen2", "width");
  rewrite(width / "config.json", "\"intermediate_size\": 96",
          "\"intermediate_size\": 128");
  for (const fs::path& dir : {type, shard, width}) {
    SCOPED_TRACE(dir.string());
    const std::string io = (dir / "io.safetensors").string();
    ExpectRefused(Run(dir.string(), io));
    ExpectRefused(Generate(dir.string(), io, 1));
  }
}

TEST_F(LmCliTest, InfoDescribesAFolder) {
  const std::string out = (dir_ / "info.txt").string();
  const Outcome outcome =
      Attn("info --model " + (kLmGolden / "hf_gemma_mqa").string(), out);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  std::ifstream in(out);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  for (const char* line :
       {"family: hf-gemma\n",
        "sizes: 2 layers, width 48, 2 heads of 32 (1 K/V heads), feed-forward "
        "96, vocabulary 88, context 24\n",
        "head: tied to the embedding\n", "weights: BF16, "}) {
    EXPECT_NE(text.find(line), std::string::npos) << text;
  }
  ExpectRefused(Attn("info --model " + (dir_ / "absent").string()));
}

TEST_F(LmCliTest, BadCasesAreRefusedByRunAndGenerate) {
  for (const fs::path& dir : CaseDirs(kLmGolden / "bad")) {
    SCOPED_TRACE(dir.string());
    const std::string model = (dir / "model.safetensors").string();
    const std::string io = (dir / "io.safetensors").string();
    ExpectRefused(Run(model, io));
    ExpectRefused(Generate(model, io, 1));
  }
}

// The first golden case, for the flag tests below.
GoldenCase FirstCase() {
  const std::vector<fs::path> dirs = CaseDirs(kLmGolden);
  return dirs.empty() ? GoldenCase{} : ReadCase(dirs.front());
}

TEST_F(LmCliTest, SeededSamplingIsReproducible) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const auto sample = [&](int seed, int threads) {
    const Outcome outcome = Generate(
        golden.model, golden.io, golden.max_new_tokens,
        "--temperature 2 --top-k 40 --top-p 0.95 --seed " +
            std::to_string(seed) + " --threads " + std::to_string(threads));
    EXPECT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
    return TakeTokens();
  };
  const std::vector<int64_t> first = sample(7, 1);
  EXPECT_EQ(sample(7, 1), first);
  EXPECT_EQ(sample(7, 2), first);  // the logits' bits do not change
  EXPECT_NE(sample(8, 1), first);
}

// Each row samples from its own stream of the seed: its tokens are the same
// beside other rows or without them, and when another row stops early.
TEST_F(LmCliTest, SampledRowsDoNotDependOnTheOtherRows) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  ASSERT_GE(golden.batch, 2);
  const int64_t n = golden.max_new_tokens;
  ASSERT_GE(n, 3);
  const std::string sampling = "--temperature 2 --seed 7";
  ASSERT_EQ(Generate(golden.model, golden.io, n, sampling).exit_code, 0);
  const std::vector<int64_t> all = TakeTokens();
  // The first row alone, as the only row of its file.
  const SafetensorsFile io = std::move(*SafetensorsFile::Open(golden.io));
  const std::vector<int64_t> ids = io.ReadI64("input_ids").value();
  const int64_t width = static_cast<int64_t>(ids.size()) / golden.batch;
  std::vector<int64_t> lengths(golden.batch, width);
  if (io.Find("lengths")) lengths = io.ReadI64("lengths").value();
  const std::vector<int64_t> first(ids.begin(), ids.begin() + lengths[0]);
  ASSERT_EQ(
      Generate(golden.model, WriteInput(first, 1, {}), n, sampling).exit_code,
      0);
  EXPECT_EQ(TakeTokens(), std::vector<int64_t>(all.begin(), all.begin() + n));
  // The same prompt in two rows: two streams, two samples.
  std::vector<int64_t> twice = first;
  twice.insert(twice.end(), first.begin(), first.end());
  ASSERT_EQ(
      Generate(golden.model, WriteInput(twice, 2, {}), n, sampling).exit_code,
      0);
  const std::vector<int64_t> pair = TakeTokens();
  EXPECT_EQ(std::vector<int64_t>(pair.begin(), pair.begin() + n),
            std::vector<int64_t>(all.begin(), all.begin() + n));
  EXPECT_NE(std::vector<int64_t>(pair.begin() + n, pair.end()),
            std::vector<int64_t>(pair.begin(), pair.begin() + n));
  // Row 0 stops at its second token: every row is as before up to its first
  // stop token, then that token.
  const int64_t stop = all[1];
  std::vector<int64_t> expected = all;
  for (int64_t row = 0; row < golden.batch; ++row) {
    const auto begin = expected.begin() + row * n, end = begin + n;
    std::fill(std::find(begin, end, stop), end, stop);
  }
  ASSERT_EQ(Generate(golden.model, golden.io, n,
                     sampling + " --stop-token " + std::to_string(stop))
                .exit_code,
            0);
  EXPECT_EQ(TakeTokens(), expected);
}

TEST_F(LmCliTest, StopTokenFillsTheRestOfTheRow) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const int64_t n = golden.max_new_tokens;
  ASSERT_GE(n, 2);
  ASSERT_EQ(Generate(golden.model, golden.io, n).exit_code, 0);
  std::vector<int64_t> expected = TakeTokens();  // greedy
  const int64_t stop = expected[1];              // row 0's second token
  // Greedy rows up to their first stop token, then the stop token.
  for (int64_t row = 0; row < golden.batch; ++row) {
    const auto begin = expected.begin() + row * n, end = begin + n;
    std::fill(std::find(begin, end, stop), end, stop);
  }
  const Outcome outcome = Generate(golden.model, golden.io, n,
                                   "--stop-token " + std::to_string(stop));
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  EXPECT_EQ(TakeTokens(), expected);
}

TEST_F(LmCliTest, PaddedRowsGiveTheirOwnPromptsResults) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  // Row 0 of the golden case alone, then as the short row of a padded batch.
  const std::vector<int64_t> ids =
      SafetensorsFile::Open(golden.io)->ReadI64("input_ids").value();
  const int64_t width = static_cast<int64_t>(ids.size()) / golden.batch;
  ASSERT_GE(width, 2);
  const std::vector<int64_t> row0(ids.begin(), ids.begin() + width - 1);
  ASSERT_EQ(Generate(golden.model, WriteInput(row0, 1, {}), 3).exit_code, 0);
  const std::vector<int64_t> alone = TakeTokens();
  std::vector<int64_t> padded(ids.begin(), ids.begin() + 2 * width);
  padded[width - 1] = 0;  // row 0's last token is padding now
  ASSERT_EQ(Generate(golden.model, WriteInput(padded, 2, {width - 1, width}), 3)
                .exit_code,
            0);
  const std::vector<int64_t> batched = TakeTokens();
  EXPECT_EQ(std::vector<int64_t>(batched.begin(), batched.begin() + 3), alone);
}

// A row takes its prompt and every new token but the last, which is never
// fed back: a prompt of the whole context still gets one new token, not
// two, and a --max-new-tokens past the context is refused in one line,
// however large.
TEST_F(LmCliTest, GenerateFitsThePromptAndAllButTheLastNewToken) {
  const GoldenCase golden = FirstCase();
  const Result<std::shared_ptr<const LanguageModel>> model =
      LanguageModel::Load(golden.model);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t context = (*model)->config().context_length;
  ASSERT_GT(context, 1);
  const std::string full = WriteInput(std::vector<int64_t>(context, 1), 1, {});
  const Outcome one_new = Generate(golden.model, full, 1);
  ASSERT_EQ(one_new.exit_code, 0) << one_new.stderr_text;
  EXPECT_EQ(TakeTokens().size(), 1u);
  ExpectRefused(Generate(golden.model, full, 2));
  const std::string short_prompt = WriteInput({1}, 1, {});
  const Outcome whole = Generate(golden.model, short_prompt, context);
  ASSERT_EQ(whole.exit_code, 0) << whole.stderr_text;
  EXPECT_EQ(TakeTokens().size(), static_cast<size_t>(context));
  ExpectRefused(Generate(golden.model, short_prompt, context + 1));
  ExpectRefused(Generate(golden.model, short_prompt,
                         std::numeric_limits<int64_t>::max()));
}

// Sampling flags a double or a uint64 cannot hold are usage errors naming
// the flag, not wrapped, saturated or rounded to 0.
TEST_F(LmCliTest, SamplingFlagsOutOfRangeAreUsageErrors) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const std::pair<const char*, const char*> cases[] = {
      {"--seed=-1",
       "--seed: got '-1', want an integer from 0 to "
       "18446744073709551615"},
      {"--seed 18446744073709551616", "--seed: got '18446744073709551616'"},
      {"--temperature 1e-400",
       "--temperature: got '1e-400', beyond a "
       "double's range"},
      {"--temperature 1e400", "--temperature: got '1e400', beyond"},
      {"--top-p 1.5",
       "--top-p: got '1.5', want a number above 0 and at most 1"},
      // CLI11 would read these as octal: 010 as 8, 09 not at all.
      {"--seed 010",
       "--seed: got '010', want an integer from 0 to 18446744073709551615, "
       "no leading zeros"},
      {"--top-k 09",
       "--top-k: got '09', want an integer of 0 or more, no leading zeros"}};
  for (const auto& [flag, message] : cases) {
    const Outcome outcome = Generate(golden.model, golden.io, 1, flag);
    EXPECT_EQ(outcome.exit_code, 2) << flag;
    EXPECT_NE(outcome.stderr_text.find(message), std::string::npos)
        << outcome.stderr_text;
    EXPECT_FALSE(fs::exists(output_));
  }
  // The largest seed, and a subnormal temperature (a double all the same).
  const Outcome top =
      Generate(golden.model, golden.io, 1,
               "--temperature 1e-310 --seed 18446744073709551615");
  EXPECT_EQ(top.exit_code, 0) << top.stderr_text;
}

TEST_F(LmCliTest, BadInputsAreRefused) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  ExpectRefused(Run(golden.model, WriteInput(ids, 2, {3, 2})));  // > width
  ExpectRefused(Run(golden.model, WriteInput(ids, 2, {0, 2})));
  ExpectRefused(Run(golden.model, WriteInput(ids, 2, {2})));  // bad shape
  ExpectRefused(Run(golden.model, WriteInput({1, -1}, 1, {})));
  ExpectRefused(Run(golden.model, golden.model));  // no input_ids
  ExpectRefused(Generate(golden.model, golden.io, 1000000));
  ExpectRefused(Generate(golden.model, golden.io, 1, "--stop-token 1000000"));
  // Rows past what one Batch holds, named before any work.
  const int64_t rows = BatchOptions::kMaxSequences + 1;
  const Outcome many = Generate(
      golden.model, WriteInput(std::vector<int64_t>(rows, 1), rows, {}), 1);
  ExpectRefused(many);
  EXPECT_NE(many.stderr_text.find("tensor 'input_ids'"), std::string::npos)
      << many.stderr_text;
  EXPECT_NE(many.stderr_text.find("batch at most 1048576"), std::string::npos)
      << many.stderr_text;
  // The tokens' output counts against --max-memory before it is made.
  const Outcome output = Generate(
      golden.model, WriteInput(std::vector<int64_t>(10000, 1), 10000, {}), 15,
      "--max-memory 1M");
  ExpectRefused(output);
  EXPECT_NE(output.stderr_text.find(
                "tokens [10000, 15] need 1200000 bytes, over the memory limit"),
            std::string::npos)
      << output.stderr_text;
  // An output in no directory: refused before the model is even opened.
  const std::string nowhere = (dir_ / "no" / "tokens.safetensors").string();
  const Outcome no_dir =
      Attn("generate --weights " + (dir_ / "absent").string() + " --input " +
           golden.io + " --output " + nowhere + " --max-new-tokens 1");
  ExpectRefused(no_dir);
  EXPECT_NE(no_dir.stderr_text.find("cannot write '" + nowhere +
                                    "': there is no directory"),
            std::string::npos)
      << no_dir.stderr_text;
  EXPECT_EQ(Attn("generate --weights " + golden.model + " --max-new-tokens 1")
                .exit_code,
            2);  // no prompts
}

// The smallest memory cap under which `work` succeeds on the model at
// `path` loaded at one thread under that cap: what the engine counts for
// that work, found by bisection.
uint64_t SmallestCap(
    const std::string& path,
    const std::function<Status(std::shared_ptr<const LanguageModel>)>& work) {
  uint64_t fails = 0, passes = uint64_t{1} << 32;
  while (passes - fails > 1) {
    const uint64_t cap = fails + (passes - fails) / 2;
    LmOptions options;
    options.num_threads = 1;
    options.max_memory_bytes = cap;
    auto model = LanguageModel::Load(path, options);
    (model.ok() && work(*model).ok() ? passes : fails) = cap;
  }
  return passes;
}

// `rows` one-token sequences of token 1 in one step, as `attn run` and the
// first step of `attn generate` make them; `steps` more of one token each.
Status StepRows(std::shared_ptr<const LanguageModel> model, int64_t rows,
                int64_t max_length, bool all_logits, int64_t steps) {
  ATTN_ASSIGN_OR_RETURN(auto batch,
                        Batch::Create(Model::Of(model), {rows, max_length}));
  static const int64_t token = 1;
  std::vector<Batch::Request> requests;
  for (int64_t b = 0; b < rows; ++b) {
    ATTN_ASSIGN_OR_RETURN(const int64_t sequence, batch->Add());
    requests.push_back({sequence, &token, 1, all_logits});
  }
  for (int64_t step = 0; step <= steps; ++step) {
    ATTN_RETURN_IF_ERROR(batch->Step(requests.data(), requests.size()));
  }
  return {};
}

// `attn run` counts its prompts, requests and logits in the one budget
// with the model, the caches and the step's buffers: under the smallest
// cap that the engine's own share of the run fits, it is refused (it would
// hold its output beside them), naming the flag; with room for the output
// beside them it runs.
TEST_F(LmCliTest, RunCountsItsOutputInTheMemoryCap) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  constexpr int64_t kRows = 4000;
  const std::string input =
      WriteInput(std::vector<int64_t>(kRows, 1), kRows, {});
  const uint64_t engine = SmallestCap(c.model, [](auto model) {
    return StepRows(std::move(model), kRows, 1, true, 0);
  });
  const uint64_t output = kRows * 64 * sizeof(float);  // vocabulary 64
  ASSERT_LT(output, engine);                           // the output alone fits
  const Outcome refused =
      Run(c.model, input, "--threads 1 --max-memory " + std::to_string(engine));
  ExpectRefused(refused);
  EXPECT_NE(refused.stderr_text.find("over the memory limit of"),
            std::string::npos)
      << refused.stderr_text;
  EXPECT_NE(refused.stderr_text.find("--max-memory"), std::string::npos);
  const Outcome fits =
      Run(c.model, input,
          "--threads 1 --max-memory " + std::to_string(engine + 2 * output));
  EXPECT_EQ(fits.exit_code, 0) << fits.stderr_text;
  EXPECT_EQ(TakeLogits().size(), size_t{kRows * 64});
}

// `attn generate` counts what it holds per row (a sampler, its requests,
// its prompt and its tokens) in the one budget with the model, the caches
// and the steps' buffers: under the smallest cap that the engine's own
// share of the generation fits, it is refused, naming the flag; with room
// for its rows beside them it runs.
TEST_F(LmCliTest, GenerateCountsItsRowsInTheMemoryCap) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  constexpr int64_t kRows = 4000, kNew = 4;
  const std::string input =
      WriteInput(std::vector<int64_t>(kRows, 1), kRows, {});
  const uint64_t engine = SmallestCap(c.model, [](auto model) {
    return StepRows(std::move(model), kRows, kNew, false, kNew - 1);
  });
  const std::string args = "--threads 1 --max-memory ";
  const Outcome refused =
      Generate(c.model, input, kNew, args + std::to_string(engine));
  ExpectRefused(refused);
  EXPECT_NE(refused.stderr_text.find("over the memory limit of"),
            std::string::npos)
      << refused.stderr_text;
  EXPECT_NE(refused.stderr_text.find("--max-memory"), std::string::npos);
  const uint64_t per_row = 512;  // more than a row holds in the tool
  const Outcome fits = Generate(
      c.model, input, kNew, args + std::to_string(engine + kRows * per_row));
  EXPECT_EQ(fits.exit_code, 0) << fits.stderr_text;
  EXPECT_EQ(TakeTokens().size(), size_t{kRows * kNew});
}

// A copy of the model file at `from`, its header given a __metadata__
// string of `bytes` bytes; its path.
std::string WithBigMetadata(const std::string& from, const fs::path& to,
                            size_t bytes) {
  std::ifstream in(from, std::ios::binary);
  const std::string file(std::istreambuf_iterator<char>(in), {});
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = len << 8 | uint8_t(file[size_t(i)]);
  nlohmann::json header = nlohmann::json::parse(file.substr(8, len));
  header["__metadata__"]["note"] = std::string(bytes, 'x');
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(text.size() >> (8 * i));
  std::ofstream(to, std::ios::binary) << out << text << file.substr(8 + len);
  return to.string();
}

// Parsing a file is charged against --max-memory before it is read: a
// model whose header holds a 2 MB metadata string needs 8 MB to parse,
// refused under 5M by run and generate, naming the file; a tokenizer's
// vocabulary of 100000 tokens needs more than 4M beside the model.
TEST_F(LmCliTest, ParsingIsChargedAgainstTheMemoryCap) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  const std::string model =
      WithBigMetadata(c.model, dir_ / "model.safetensors", 2000000);
  const std::string input = WriteInput({1, 2}, 1, {});
  for (const Outcome& outcome :
       {Run(model, input, "--max-memory 5M"),
        Generate(model, input, 2, "--max-memory 5M")}) {
    ExpectRefused(outcome);
    EXPECT_NE(
        outcome.stderr_text.find("parsing the header of '" + model + "' (2"),
        std::string::npos)
        << outcome.stderr_text;
    EXPECT_NE(outcome.stderr_text.find("over the memory limit of 5.00 MiB"),
              std::string::npos)
        << outcome.stderr_text;
  }
  const Outcome fits = Run(model, input, "--max-memory 16M");
  EXPECT_EQ(fits.exit_code, 0) << fits.stderr_text;
  EXPECT_EQ(TakeLogits().size(), 2u * 64);
  const fs::path tokenizer = dir_ / "tokenizer";
  fs::create_directories(tokenizer);
  {
    std::ofstream vocab(tokenizer / "vocab.json");
    vocab << "{";
    for (int i = 0; i < 100000; ++i) {
      vocab << (i ? "," : "") << "\"t" << i << "\":" << i;
    }
    vocab << "}";
    std::ofstream(tokenizer / "merges.txt") << "#version: 0.2\n";
  }
  const Outcome text = Attn("generate --weights " + c.model + " --tokenizer " +
                            tokenizer.string() +
                            " --prompt t1 --max-new-tokens 2 "
                            "--max-memory 4M");
  ExpectRefused(text);
  EXPECT_NE(text.stderr_text.find("'" + (tokenizer / "vocab.json").string() +
                                  "' (up to 100000 tokens) needs"),
            std::string::npos)
      << text.stderr_text;
  EXPECT_NE(text.stderr_text.find("over the memory limit of 4194304 bytes"),
            std::string::npos)
      << text.stderr_text;
}

// The vocabulary of a golden case's model: its logits per input id.
int64_t VocabOf(const GoldenCase& golden) {
  return static_cast<int64_t>(golden.logits.size()) /
         SafetensorsFile::Open(golden.io)->Find("input_ids")->num_elements;
}

// A tokenizer of `vocab` one-character tokens, '!' (id 0) onwards: GPT-2's
// byte table maps the printable bytes 33..126 to themselves, and no merges.
std::string WriteCharTokenizer(const fs::path& dir, int64_t vocab) {
  std::ofstream json(dir / "vocab.json");
  json << "{";
  for (int64_t id = 0; id < vocab; ++id) {
    const char c = static_cast<char>('!' + id);
    json << (id ? "," : "") << "\"" << (c == '"' || c == '\\' ? "\\" : "") << c
         << "\":" << id;
  }
  json << "}";
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
  return dir.string();
}

TEST_F(LmCliTest, TextModeStreamsTheTokensOfThePrompt) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const int64_t vocab = VocabOf(golden);
  ASSERT_LE(vocab, 94);  // printable characters only
  // "ABC" is ids 32, 33, 34; its greedy tokens, as characters.
  ASSERT_EQ(
      Generate(golden.model, WriteInput({32, 33, 34}, 1, {}), 5).exit_code, 0);
  std::string expected;
  for (int64_t id : TakeTokens()) expected += static_cast<char>('!' + id);
  const std::string out = (dir_ / "stdout.txt").string();
  const Outcome outcome = Attn(
      "generate --weights " + golden.model + " --tokenizer " +
          WriteCharTokenizer(dir_, vocab) + " --prompt ABC --max-new-tokens 5",
      out);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  std::ifstream in(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}),
            expected + "\n");
  // The stop token ends the text without being shown.
  const Outcome stopped = Attn(
      "generate --weights " + golden.model + " --tokenizer " + dir_.string() +
          " --prompt ABC --max-new-tokens 5 --stop-token " +
          std::to_string(expected[2] - '!'),
      out);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.stderr_text;
  std::ifstream stopped_in(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(stopped_in), {}),
            expected.substr(0, expected.find(expected[2])) + "\n");
  ExpectRefused(Attn("generate --weights " + golden.model + " --tokenizer " +
                     dir_.string() + " --prompt ABC --max-new-tokens 100000"));
}

// Text mode's faults, each one line naming its flag: a stdout that cannot
// be written (exit 1, not 0 with the text lost), an empty prompt (not a
// usage error), a tokenizer of another model, a byte it cannot encode.
TEST_F(LmCliTest, TextModeFaultsNameTheirFlag) {
  const GoldenCase golden = FirstCase();
  ASSERT_FALSE(golden.model.empty());
  const int64_t vocab = VocabOf(golden);
  const std::string text = "generate --weights " + golden.model +
                           " --max-new-tokens 3 --tokenizer " +
                           WriteCharTokenizer(dir_, vocab);
  const auto refused = [&](const Outcome& outcome, const std::string& needle) {
    ExpectRefused(outcome);
    EXPECT_NE(outcome.stderr_text.find(needle), std::string::npos)
        << outcome.stderr_text;
  };
  refused(Attn(text + " --prompt ABC", "/dev/full"),
          "cannot write the text to stdout");
  refused(Attn("generate --weights /no/such/model --max-new-tokens 3 "
               "--tokenizer " +
               dir_.string() + " --prompt ''"),
          "--prompt is empty");  // before the model is loaded
  refused(Attn(text + " --prompt 'A B'"), "--prompt: cannot encode");
  const fs::path larger = dir_ / "larger";
  fs::create_directories(larger);
  refused(Attn("generate --weights " + golden.model +
               " --max-new-tokens 3 --prompt ABC --tokenizer " +
               WriteCharTokenizer(larger, vocab + 1)),
          "has token ids up to " + std::to_string(vocab));
}

// A file name that is not UTF-8 reaches the JSON as U+FFFD, after a
// measurement that must not be lost to it.
TEST_F(LmCliTest, BenchModelJsonTakesAnyFileName) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  const fs::path odd = dir_ / "mod\xe9l.safetensors";
  fs::copy_file(c.model, odd);
  const nlohmann::json j =
      BenchFirstLine("--model gpt2-124m --weights '" + odd.string() +
                     "' --prompt 3 --steps 2 --batch 1 --rounds 1 --threads 1");
  ASSERT_FALSE(j.is_null());
  EXPECT_NE(j["model"].get<std::string>().find("mod\xef\xbf\xbdl"),
            std::string::npos)
      << j;
}

// attn bench --model on a golden file: one JSON line per batch size, with
// its documented keys and figures that agree with each other, after --rounds
// rounds of every batch size.
TEST_F(LmCliTest, BenchModelReportsEveryBatchOnce) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  const std::string out = (dir_ / "bench.jsonl").string();
  const Outcome outcome = Attn(
      "bench --model gpt2-124m --weights " + c.model +
          " --prompt 3 --steps 2 --batch 2,1 --rounds 3 --threads 1 --json",
      out);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  std::ifstream in(out);
  std::vector<int64_t> batches;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key :
         {"model", "threads", "batch", "prompt", "steps", "prefill_ms",
          "prefill_tok_s", "decode_ms_per_step", "decode_tok_s",
          "decode_weights_gb_s", "decode_kv_gb_s", "peak_rss_mb"}) {
      EXPECT_TRUE(j.contains(key)) << key << " in " << line;
    }
    const auto batch = j["batch"].get<int64_t>();
    batches.push_back(batch);
    EXPECT_EQ(j["threads"], 1);
    EXPECT_EQ(j["prompt"], 3);
    EXPECT_EQ(j["steps"], 2);
    EXPECT_EQ(j["rounds"], 3);
    EXPECT_EQ(j["model"], c.model);
    const double prefill_ms = j["prefill_ms"],
                 decode_ms = j["decode_ms_per_step"];
    ASSERT_GT(prefill_ms, 0.0);
    ASSERT_GT(decode_ms, 0.0);
    EXPECT_NEAR(j["prefill_tok_s"].get<double>(),
                double(batch * 3) / prefill_ms * 1e3,
                1e-6 * 3e3 * batch / prefill_ms);
    EXPECT_NEAR(j["decode_tok_s"].get<double>(),
                double(batch) / decode_ms * 1e3,
                1e-6 * 1e3 * batch / decode_ms);
    EXPECT_GT(j["peak_rss_mb"].get<double>(), 0.0);
  }
  EXPECT_EQ(batches, (std::vector<int64_t>{2, 1}));
  // Off a terminal each progress update is a line: every round ran.
  for (const char* round : {"batch=2 round 3 of 3", "batch=1 round 3 of 3"}) {
    EXPECT_NE(outcome.stderr_text.find(round), std::string::npos)
        << outcome.stderr_text;
  }
}

// decode_kv_gb_s counts the cache a step reads, averaged over the steps:
// the book's 1-layer GPT (2 heads of 16) after a prompt of 3 attends to 4
// and 5 positions; Mistral's window of 4 caps 4, 5 and 6 at 4 (2 sequences
// x 2 layers x 2 K/V heads of 8). K and V, 4 bytes a value.
TEST_F(LmCliTest, BenchModelCountsTheCacheAStepReads) {
  const GoldenCase gpt = ReadCase(kLmGolden / "gpt_book_1l");
  const struct {
    std::string args;
    double bytes;
  } cases[] = {
      {"--model gpt2-124m --weights " + gpt.model +
           " --prompt 3 --steps 2 --batch 1",
       1 * 1 * 2 * 32 * 4.5 * 4},
      {"--model " + (kLmGolden / "hf_mistral_window").string() +
           " --prompt 3 --steps 3 --batch 2",
       2 * 2 * 2 * 2 * 8 * 4 * 4},
  };
  for (const auto& c : cases) {
    const nlohmann::json j = BenchFirstLine(c.args + " --threads 1");
    ASSERT_FALSE(j.is_null()) << c.args;
    const double bytes = j.at("decode_kv_gb_s").get<double>() *
                         j.at("decode_ms_per_step").get<double>() * 1e6;
    EXPECT_NEAR(bytes, c.bytes, 1e-6 * c.bytes) << c.args;
  }
}

// --dtype f32,bf16: every (dtype, batch) point once, each with its dtype and
// its weights counted at its bytes, measured in turns: the last point's
// first round comes before the first point's last.
TEST_F(LmCliTest, BenchModelTakesDtypesInTurns) {
  if (!GetRuntimeInfo().native_bf16) {
    GTEST_SKIP() << "bf16 language models need native bf16";
  }
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  const std::string out = (dir_ / "bench.jsonl").string();
  const Outcome outcome = Attn(
      "bench --model gpt2-124m --weights " + c.model +
          " --prompt 3 --steps 2 --batch 2,1 --rounds 2 --threads 1 --json "
          "--dtype f32,bf16",
      out);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  std::ifstream in(out);
  std::vector<std::pair<std::string, int64_t>> points;
  std::map<std::string, double> bytes_per_step;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string dtype = j["dtype"];
    points.emplace_back(dtype, j["batch"].get<int64_t>());
    bytes_per_step[dtype] = j["decode_weights_gb_s"].get<double>() *
                            j["decode_ms_per_step"].get<double>();
  }
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"f32", 2}, {"f32", 1}, {"bf16", 2}, {"bf16", 1}};
  EXPECT_EQ(points, want);
  EXPECT_NEAR(bytes_per_step["f32"], 2 * bytes_per_step["bf16"],
              1e-9 * bytes_per_step["f32"]);
  const std::string& log = outcome.stderr_text;
  const size_t last_first = log.find("dtype=bf16 batch=1 round 1 of 2");
  const size_t first_last = log.find("dtype=f32 batch=2 round 2 of 2");
  ASSERT_NE(last_first, std::string::npos) << log;
  ASSERT_NE(first_last, std::string::npos) << log;
  EXPECT_LT(last_first, first_last) << log;
}

TEST_F(LmCliTest, BenchModelRefusesBadRounds) {
  const Outcome outcome = Attn("bench --model gpt2-124m --rounds 0");
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_EQ(
      std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(), '\n'),
      1)
      << outcome.stderr_text;
  EXPECT_NE(outcome.stderr_text.find("--rounds: got '0'"), std::string::npos)
      << outcome.stderr_text;
}

// A prompt and steps past the model's context are refused by naming both
// flags, however large (their sum would overflow), with nothing on stdout
// (not even the table's header).
TEST_F(LmCliTest, BenchModelRefusesPromptAndStepsPastTheContext) {
  const GoldenCase c = ReadCase(kLmGolden / "gpt_book_1l");
  const std::string table = (dir_ / "table.txt").string();
  for (const std::string sizes :
       {"--prompt 10 --steps 10", "--prompt 16 --steps 1",
        "--prompt 9223372036854775807 --steps 9223372036854775807"}) {
    SCOPED_TRACE(sizes);
    const Outcome outcome =
        Attn("bench --model gpt2-124m --threads 1 --weights " + c.model + " " +
                 sizes,
             table);
    EXPECT_EQ(outcome.exit_code, 1) << outcome.stderr_text;
    EXPECT_EQ(fs::file_size(table), 0u);
    const std::string& log = outcome.stderr_text;
    const std::string last = log.substr(log.rfind('\n', log.size() - 2) + 1);
    EXPECT_NE(last.find("--prompt"), std::string::npos) << log;
    EXPECT_NE(last.find("--steps"), std::string::npos) << log;
    EXPECT_NE(last.find("context_length 16"), std::string::npos) << log;
  }
  const Outcome fits = Attn("bench --model gpt2-124m --threads 1 --weights " +
                            c.model + " --prompt 15 --steps 1 --batch 1");
  EXPECT_EQ(fits.exit_code, 0) << fits.stderr_text;
}

TEST_F(LmCliTest, GenerateHelpNamesItsFlags) {
  const std::string help = (dir_ / "help.txt").string();
  ASSERT_EQ(Attn("generate --help", help).exit_code, 0);
  std::ifstream in(help);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  for (const char* flag :
       {"--weights", "--input", "--output", "--max-new-tokens", "--temperature",
        "--top-k", "--top-p", "--seed", "--stop-token", "--threads",
        "--tokenizer", "--prompt"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace attn
