// `attn run` as a user meets it: a good run matches PyTorch, and every bad
// input (file, header, weights, input, flags) ends with exit code 1 or 2,
// one line on stderr naming the problem, and no output file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(ATTN_SOURCE_DIR) / "tests" / "golden";
const std::string kBook = (kGolden / "mha_book.safetensors").string();

struct Outcome {
  int exit_code;
  std::string stderr_text;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attn_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    output_ = (dir_ / "out.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome Attn(const std::string& args) {
    const std::string err = (dir_ / "stderr.txt").string();
    const int status =
        std::system((std::string(ATTN_CLI) + " " + args + " 2>" + err).c_str());
    std::ifstream in(err);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            std::string(std::istreambuf_iterator<char>(in), {})};
  }

  // stdout of `attn args` (stderr discarded), for help and version text.
  std::string AttnStdout(const std::string& args) {
    const std::string out = (dir_ / "stdout.txt").string();
    std::system(
        (std::string(ATTN_CLI) + " " + args + " >" + out + " 2>/dev/null")
            .c_str());
    std::ifstream in(out);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  Outcome RunOn(const std::string& weights, const std::string& input,
                const std::string& extra = "") {
    return Attn("run --weights " + weights + " --input " + input +
                " --output " + output_ + " " + extra);
  }

  // Expects a clean failure: `code`, one stderr line containing `needle`,
  // and no output file.
  void ExpectRefused(const Outcome& outcome, int code,
                     const std::string& needle) {
    EXPECT_EQ(outcome.exit_code, code) << outcome.stderr_text;
    EXPECT_NE(outcome.stderr_text.find(needle), std::string::npos)
        << "stderr '" << outcome.stderr_text << "' lacks '" << needle << "'";
    EXPECT_EQ(std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(),
                         '\n'),
              1)
        << outcome.stderr_text;
    EXPECT_FALSE(fs::exists(output_));
  }

  // Writes a safetensors file from a raw header and data bytes.
  std::string WriteRaw(const std::string& name, const std::string& header,
                       const std::string& data, uint64_t header_len = 0) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    if (header_len == 0) header_len = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(header_len >> 8 * i));
    out << header << data;
    return path;
  }

  fs::path dir_;
  std::string output_;
};

TEST_F(CliTest, RunMatchesPyTorchAtOneAndTwoThreads) {
  std::vector<float> previous;
  for (int threads : {1, 2}) {
    const Outcome outcome =
        RunOn(kBook, kBook, "--threads " + std::to_string(threads));
    ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
    EXPECT_EQ(outcome.stderr_text, "");
    auto out = SafetensorsFile::Open(output_);
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->tensors().size(), 1u);
    EXPECT_EQ(out->tensors()[0].name, "output");
    EXPECT_EQ(out->tensors()[0].shape, (std::vector<int64_t>{2, 6, 2}));
    auto y = out->ReadF32("output");
    auto expected = SafetensorsFile::Open(kBook)->ReadF32("expected");
    for (size_t i = 0; i < y->size(); ++i) {
      EXPECT_NEAR((*y)[i], (*expected)[i], 1e-5) << i;
    }
    if (!previous.empty()) {
      EXPECT_EQ(previous, *y);
    }
    previous = *y;
    fs::remove(output_);
  }
}

// F16 weights and an F16 input, widened on load, give PyTorch's fp32 answer
// from the same rounded values.
TEST_F(CliTest, RunsSixteenBitWeightsAndInput) {
  const std::string f16 = (kGolden / "mha_weights_f16.safetensors").string();
  const Outcome outcome = RunOn(f16, f16);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  auto y = SafetensorsFile::Open(output_)->ReadF32("output");
  auto expected = SafetensorsFile::Open(f16)->ReadF32("expected");
  ASSERT_TRUE(y.ok() && expected.ok());
  ASSERT_EQ(y->size(), expected->size());
  for (size_t i = 0; i < y->size(); ++i) {
    EXPECT_NEAR((*y)[i], (*expected)[i], 1e-5) << i;
  }
}

// --dtype bf16 with rotary embeddings: whole sequences at once are refused,
// naming --incremental, which runs them through decoders alone: PyTorch's
// fp32 answer within bf16's rounding, not the fp32 run's, the same bits at
// 1 and 2 threads.
TEST_F(CliTest, Bf16RotaryEmbeddingsRunIncrementally) {
  if (!GetRuntimeInfo().native_bf16) GTEST_SKIP() << "no native bf16";
  const std::string rope = (kGolden / "mha_gqa_rope.safetensors").string();
  ExpectRefused(RunOn(rope, rope, "--dtype bf16"), 1, "--incremental");
  auto expected = SafetensorsFile::Open(rope)->ReadF32("expected");
  ASSERT_TRUE(expected.ok());
  const std::vector<double> e(expected->begin(), expected->end());
  const auto run = [&](const std::string& flags) {
    const Outcome outcome = RunOn(rope, rope, "--incremental " + flags);
    EXPECT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
    auto file = SafetensorsFile::Open(output_);
    if (!file.ok()) return std::vector<float>();
    auto y = file->ReadF32("output");
    EXPECT_TRUE(y.ok());
    fs::remove(output_);
    return y.ok() ? *y : std::vector<float>();
  };
  const std::vector<float> f32 = run("--threads 1");
  const std::vector<float> one = run("--dtype bf16 --threads 1");
  ASSERT_EQ(one.size(), e.size());
  test::ExpectAllClose(e, one.data(), 2e-2 * test::MaxAbs(e), "bf16");
  EXPECT_NE(one, f32) << "ran in fp32";
  EXPECT_EQ(run("--dtype bf16 --threads 2"), one);
}

TEST_F(CliTest, InputNameAndHeadsFlags) {
  // The golden file's `expected` has the input's shape only by chance of
  // d_out; use a file whose input is also stored under another name.
  auto book = SafetensorsFile::Open(kBook);
  auto x = book->ReadF32("input");
  const std::string input = (dir_ / "x.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(input, {{"tokens", {2, 6, 3}, x->data()}}).ok());
  EXPECT_EQ(RunOn(kBook, input, "--input-name tokens").exit_code, 0);
  fs::remove(output_);
  ExpectRefused(RunOn(kBook, input), 1, "input tensor 'input' is missing");
  ExpectRefused(RunOn(kBook, input, "--input-name tokens --heads 3"), 1,
                "num_heads is 3 (from option num_heads, --heads), want a "
                "positive divisor of "
                "d_out 2 (the rows of 'W_query.weight')");
  ExpectRefused(RunOn(kBook, input, "--input-name tokens --context-length 5"),
                1, "sequence length 6 exceeds context_length 5");
}

// The attention variant's flags override the file's metadata; a bad one is
// one line naming it, exit 1 (a value CLI11 refuses: 2), and no output.
TEST_F(CliTest, AttentionVariantFlags) {
  const std::string gqa = (kGolden / "mha_gqa_g4.safetensors").string();
  const std::string all = (kGolden / "mha_gqa_all.safetensors").string();
  EXPECT_EQ(RunOn(all, all).exit_code, 0);  // heads, RoPE, window: metadata
  fs::remove(output_);
  ExpectRefused(
      RunOn(gqa, gqa, "--kv-heads 3"), 1,
      "num_kv_heads is 3 (from option num_kv_heads, --kv-heads), want a "
      "divisor of num_heads 8");
  ExpectRefused(RunOn(gqa, gqa, "--kv-heads 4"), 1,
                "'W_key.weight' has shape [8, 10], want [16, 10]");
  ExpectRefused(RunOn(all, all, "--rope-factor 8"), 2, "--rope-theta");
  ExpectRefused(RunOn(all, all, "--sliding-window 0"), 2, "--sliding-window");
  ExpectRefused(
      RunOn(all, all,
            "--rope-theta 10000 --rope-factor 8 --rope-low-freq-factor 4 "
            "--rope-high-freq-factor 1 --rope-original-context-length 64"),
      1, "rope scaling");
  // A wider window than the file's changes the answer: it is used.
  EXPECT_EQ(RunOn(all, all, "--sliding-window 20").exit_code, 0);
  auto y = SafetensorsFile::Open(output_)->ReadF32("output");
  auto expected = SafetensorsFile::Open(all)->ReadF32("expected");
  EXPECT_GT(test::MaxAbsDiff(*y, *expected), 1e-3);
}

TEST_F(CliTest, BadGoldenFilesAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"wkey_transposed", "'W_key.weight' has shape [3, 4], want [4, 3]"},
      {"heads_not_divisible", "num_heads is 3 (from metadata 'num_heads' of '"},
      {"t_exceeds_context", "sequence length 5 exceeds context_length 4"},
      {"input_wrong_d_in", "has shape [1, 3, 5], want [batch, seq_len, 3]"},
      {"input_rank2", "has shape [3, 3], want [batch, seq_len, 3]"},
      {"f64_weight", "has dtype F64, want F32, F16 or BF16"},
      {"missing_out_proj_bias", "'out_proj.bias' is missing"},
      {"partial_qkv_bias", "'W_value.bias' is missing"},
  };
  for (const auto& [name, needle] : cases) {
    SCOPED_TRACE(name);
    const std::string path =
        (kGolden / "bad" / (std::string(name) + ".safetensors")).string();
    ExpectRefused(RunOn(path, path), 1, needle);
  }
}

TEST_F(CliTest, BrokenFilesAreRefused) {
  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "these are not tensors at all, just words\n";
  ExpectRefused(RunOn((dir_ / "absent.safetensors").string(), kBook), 1,
                "No such file or directory");
  ExpectRefused(RunOn(kBook, (dir_ / "absent.safetensors").string()), 1,
                "No such file or directory");
  ExpectRefused(RunOn(dir_.string(), kBook), 1, "not a regular file");
  ExpectRefused(RunOn(text, kBook), 1, "header length");

  // Truncated: the first 200 bytes of a real file.
  std::ifstream in(kBook, std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  const std::string truncated = (dir_ / "truncated.safetensors").string();
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, 200);
  ExpectRefused(RunOn(truncated, kBook), 1, "runs past the end");
  ExpectRefused(RunOn(kBook, truncated), 1, "runs past the end");
  const std::string tiny = (dir_ / "tiny.safetensors").string();
  std::ofstream(tiny, std::ios::binary) << bytes.substr(0, 5);
  ExpectRefused(RunOn(tiny, kBook), 1, "not a safetensors file");

  const std::string f4(16, '\0');  // four floats
  const auto tensor = [](const char* offsets) {
    return std::string(R"({"input":{"dtype":"F32","shape":[1,1,3],)") +
           R"("data_offsets":)" + offsets + "}";
  };
  ExpectRefused(
      RunOn(kBook, WriteRaw("past.st", tensor("[4,16]") + "}", f4, 1000)), 1,
      "header length 1000");
  ExpectRefused(RunOn(kBook, WriteRaw("json.st", "{\"input\": [", f4)), 1,
                "not valid JSON");
  ExpectRefused(RunOn(kBook, WriteRaw("range.st", tensor("[4,20]") + "}", f4)),
                1, "outside the data section");
  ExpectRefused(
      RunOn(kBook, WriteRaw("reversed.st", tensor("[12,0]") + "}", f4)), 1,
      "outside the data section");
  ExpectRefused(
      RunOn(
          kBook,
          WriteRaw(
              "overlap.st",
              tensor("[0,12]") +
                  R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
              f4)),
      1, "overlap");
  ExpectRefused(RunOn(kBook, WriteRaw("hole.st", tensor("[4,16]") + "}", f4)),
                1, "hole");
  ExpectRefused(RunOn(kBook, WriteRaw("span.st", tensor("[0,16]") + "}", f4)),
                1, "spans 16 bytes, but F32 [1, 1, 3] needs 12");
}

TEST_F(CliTest, NonFiniteInputIsRefusedUnlessAllowed) {
  auto book = SafetensorsFile::Open(kBook);
  std::vector<float> x = *book->ReadF32("input");
  x[7] = std::numeric_limits<float>::quiet_NaN();
  const std::string input = (dir_ / "nan.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(input, {{"input", {2, 6, 3}, x.data()}}).ok());
  ExpectRefused(RunOn(kBook, input), 1, "holds nan at element 7");
  EXPECT_EQ(RunOn(kBook, input, "--allow-nonfinite").exit_code, 0);
  auto y = SafetensorsFile::Open(output_)->ReadF32("output");
  EXPECT_TRUE(std::isnan((*y)[2 * 2]));     // sequence 0 from token 2 on
  EXPECT_TRUE(std::isfinite((*y)[6 * 2]));  // sequence 1 untouched
}

TEST_F(CliTest, UsageErrorsExitWithTwo) {
  ExpectRefused(Attn("run --weights " + kBook + " --input " + kBook), 2,
                "--output is required");
  ExpectRefused(RunOn(kBook, kBook, "--threads 0"), 2, "--threads");
  ExpectRefused(RunOn(kBook, kBook, "--heads two"), 2, "--heads");
  ExpectRefused(RunOn(kBook, kBook, "--dtype f64"), 2, "--dtype");
  ExpectRefused(Attn("frobnicate"), 2, "frobnicate");
  EXPECT_EQ(Attn("run --help").exit_code, 0);
  EXPECT_EQ(Attn("info").exit_code, 0);
}

// Every numeric flag of every subcommand: a bad value is one short line
// naming the flag, what it got and the valid range (never CLI11's range of
// doubles written out in 300 digits), and exit code 2.
TEST_F(CliTest, BadNumbersSayTheValidRange) {
  const std::string run = "run --weights " + kBook + " --input " + kBook +
                          " --output " + output_ + " ";
  const std::pair<std::string, std::string> cases[] = {
      {run + "--threads 0",
       "--threads: got '0', want an integer from 1 to 4096"},
      {run + "--threads 5000", "want an integer from 1 to 4096"},
      {run + "--threads 99999999999999999999", "from 1 to 4096"},
      {run + "--heads two", "--heads: got 'two', want an integer of 1 or more"},
      {run + "--heads 0", "--heads: got '0'"},
      {run + "--context-length -3", "--context-length: got '-3'"},
      {run + "--layers 0", "--layers: got '0'"},
      {run + "--max-memory -5", "--max-memory: got '-5', want a size"},
      {"bench --threads 1,0", "--threads: got '0'"},
      {"bench --min-time 0", "--min-time: got '0', want a number above 0"},
      {"bench --min-time nan", "--min-time: got 'nan'"},
      {"bench --max-memory 0", "--max-memory: got '0'"},
      {"bench --decode --context 0", "--context: got '0'"},
      {"bench --decode --batch -1", "--batch: got '-1'"},
      {"info --threads 0", "--threads: got '0'"},
      {"tune --min-time 0", "--min-time: got '0'"},
      {"tune --threads 0..2", "--threads: got '0..2', want a range A..B"},
      {"tune --threads 1,99999", "--threads: got '1,99999'"},
      {"soak --iterations 0", "--iterations: got '0'"},
      {"soak --seconds -1", "--seconds: got '-1'"},
      {"soak --seed -1", "--seed: got '-1', want an integer of 0 or more"},
      {"soak --models 65", "--models: got '65', want an integer from 1 to 64"},
      {"soak --max-batch 0", "--max-batch: got '0'"},
      {"soak --max-seq 0", "--max-seq: got '0'"},
      {"soak --max-head-dim 2000", "--max-head-dim: got '2000'"},
      {"soak --max-heads 0", "--max-heads: got '0'"},
      {"soak --threads 0", "--threads: got '0'"},
      {"soak --warmup 0", "--warmup: got '0'"},
      {"soak --max-growth -1", "--max-growth: got '-1', want a number of 0"},
      {"soak --replan-every -1", "--replan-every: got '-1'"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    const Outcome outcome = Attn(args);
    ExpectRefused(outcome, 2, needle);
    EXPECT_LT(outcome.stderr_text.size(), 160u) << outcome.stderr_text;
  }
}

// --dtype takes the names f32 and bf16 alone, in every subcommand (bench: a
// list of them, each once): anything else, the enum's integers included, is
// one line naming the flag, what it got and what it wants, and exit code 2.
TEST_F(CliTest, DtypeTakesItsNamesAlone) {
  const std::string run = "run --weights " + kBook + " --input " + kBook +
                          " --output " + output_ + " ";
  const std::string generate = "generate --weights " + kBook + " --input " +
                               kBook + " --output " + output_ +
                               " --max-new-tokens 1 ";
  const std::pair<std::string, std::string> cases[] = {
      {run + "--dtype f16", "--dtype: got 'f16', want f32, bf16, q8_0 or q4_0"},
      {run + "--dtype 1", "--dtype: got '1', want f32, bf16, q8_0 or q4_0"},
      {run + "--dtype f32,bf16", "--dtype: got 'f32,bf16'"},
      {generate + "--dtype 0",
       "--dtype: got '0', want f32, bf16, q8_0 or q4_0"},
      {generate + "--dtype BF16", "--dtype: got 'BF16'"},
      {"tune --dtype fp32",
       "--dtype: got 'fp32', want f32, bf16, q8_0 or q4_0"},
      {"bench --dtype f32,f16",
       "--dtype: got 'f16', want f32, bf16, q8_0 or q4_0"},
      {"bench --model gpt2-124m --dtype 1", "--dtype: got '1'"},
      {"bench --dtype f32,bf16,f32", "--dtype: got 'f32' twice"},
      {"bench --model gpt2-124m --dtype bf16,bf16",
       "--dtype: got 'bf16' twice"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    ExpectRefused(Attn(args), 2, needle);
  }
}

// bench --decode --dtype f32,bf16: a table per dtype, the decode step's
// weights counted at 4 and 2 bytes (bf16 where the CPU has it natively).
TEST_F(CliTest, BenchDecodeMeasuresEveryDtype) {
  const std::string dtypes = GetRuntimeInfo().native_bf16 ? "f32,bf16" : "f32";
  const std::string out = (dir_ / "decode.jsonl").string();
  const Outcome outcome = Attn(
      "bench --decode --context 4 --batch 1 --dims 4,4,2 --threads 1 "
      "--min-time 0.01 --no-recompute --json --dtype " +
      dtypes + " >" + out);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
  std::ifstream in(out);
  std::vector<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    seen.push_back(j["dtype"].get<std::string>());
    // The step reads q, k, v and out_proj (4 x 4 x 4 weights) and the cache.
    const double bytes_per_weight = seen.back() == "bf16" ? 2 : 4;
    const double step_s = j["step_ms"].get<double>() / 1e3;
    EXPECT_NEAR(j["all_gb_per_s"].get<double>() * 1e9 * step_s,
                j["kv_bytes"].get<double>() + 64 * bytes_per_weight, 1e-3);
  }
  EXPECT_EQ(seen, GetRuntimeInfo().native_bf16
                      ? std::vector<std::string>({"f32", "bf16"})
                      : std::vector<std::string>({"f32"}));
}

// Progress lines on a log (stderr not a terminal) are plain lines: no
// carriage return, no terminal escape.
TEST_F(CliTest, ProgressOnALogIsPlainLines) {
  for (const std::string args :
       {"bench --shape seed --threads 1 --min-time 0.01",
        "tune --shape seed --threads 1 --min-time 0.01",
        "bench --decode --context 4 --batch 1 --dims 4,4,2 --threads 1 "
        "--min-time 0.01"}) {
    SCOPED_TRACE(args);
    const Outcome outcome = Attn(args + " >/dev/null");
    EXPECT_EQ(outcome.exit_code, 0) << outcome.stderr_text;
    EXPECT_EQ(outcome.stderr_text.find('\r'), std::string::npos);
    EXPECT_EQ(outcome.stderr_text.find('\033'), std::string::npos);
    EXPECT_NE(outcome.stderr_text.find("threads"), std::string::npos);
    EXPECT_EQ(outcome.stderr_text.back(), '\n');
  }
}

TEST_F(CliTest, VersionAndHelpWord) {
  const std::string version = AttnStdout("--version");
  EXPECT_EQ(version.rfind("attn ", 0), 0u) << version;
  EXPECT_NE(AttnStdout("info").find(version), std::string::npos)
      << "--version and info disagree";
  EXPECT_EQ(Attn("--version").exit_code, 0);
  EXPECT_EQ(Attn("help").exit_code, 0);
  EXPECT_EQ(AttnStdout("help"), AttnStdout("--help"));
  EXPECT_EQ(AttnStdout("help run"), AttnStdout("run --help"));
  EXPECT_NE(AttnStdout("help").find("attn help COMMAND"), std::string::npos);
  // What `seed` is, from the grid itself.
  const std::string bench_help = AttnStdout("help bench");
  EXPECT_NE(bench_help.find("seed (2,6,3,2,2)"), std::string::npos)
      << bench_help;
  EXPECT_NE(bench_help.find("chapter-3 toy example"), std::string::npos);
  ExpectRefused(Attn("help frobnicate"), 2, "unknown subcommand 'frobnicate'");
}

// The grouped-query, RoPE and window variants through `attn bench`: the
// llama-2k entry is listed with its K/V heads and theta, the flags reach a
// forward pass and a decode step, and the JSON says what ran.
TEST_F(CliTest, BenchTakesTheAttentionFlags) {
  const std::string bench_help = AttnStdout("help bench");
  EXPECT_NE(
      bench_help.find("llama-2k (1,2048,2048,2048,32, kv heads 8, rope theta "
                      "500000)"),
      std::string::npos)
      << bench_help;
  const std::string forward = AttnStdout(
      "bench --shape 1,16,32,32,4 --kv-heads 2 --rope-theta 10000 "
      "--sliding-window 4 --threads 1 --min-time 0.01 --json");
  EXPECT_NE(forward.find("\"kv_heads\":2"), std::string::npos) << forward;
  EXPECT_NE(forward.find("\"rope_theta\":10000.0"), std::string::npos)
      << forward;
  EXPECT_NE(forward.find("\"sliding_window\":4"), std::string::npos) << forward;
  const std::string decode = AttnStdout(
      "bench --decode --context 8 --batch 1 --dims 32,32,4 --kv-heads 2 "
      "--rope-theta 10000 --threads 1 --min-time 0.01 --json");
  EXPECT_NE(decode.find("\"kv_heads\":2"), std::string::npos) << decode;
  ExpectRefused(Attn("bench --shape 1,16,32,32,4 --kv-heads 3"), 1,
                "does not divide its 4 heads");
}

// attn bench refuses what it would ignore or measure twice, as usage errors:
// two benchmarks at once, flags the chosen one does not read, a repeated
// value in a list.
TEST_F(CliTest, BenchRefusesFlagsItWouldIgnore) {
  const std::pair<const char*, const char*> cases[] = {
      {"bench --decode --graph x.json", "--decode, --graph and --model"},
      {"bench --decode --model gpt2-124m", "want one of them"},
      {"bench --shape seed --weights w.safetensors",
       "--weights: want it with --graph or --model"},
      {"bench --shape seed --batch 2", "--batch: want it with --decode"},
      {"bench --shape seed --threads 1,1", "--threads: got '1' twice"},
      {"bench --shape seed --config ''", "--config: got '', want a file path"},
      {"tune --shape seed --save ''", "--save: got '', want a file path"},
      {"bench --decode --batch 2,2", "--batch: got '2' twice"},
      {"bench --model gpt2-124m --batch 2000000", "--batch: got '2000000'"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    ExpectRefused(Attn(args), 2, needle);
  }
  // A prompt past GPT-2's context, before the 124M model is made.
  ExpectRefused(Attn("bench --model gpt2-124m --prompt 2000 --steps 1"), 1,
                "--prompt 2000 + --steps 1 tokens a sequence, over the "
                "model's context_length 1024");
}

// --graph's random weights go to a file in TMPDIR that a failed run removes
// too; a TMPDIR that does not exist is one line naming it.
TEST_F(CliTest, BenchGraphLeavesNoWeightsBehind) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  const std::string bench = "bench --graph " + std::string(ATTN_SOURCE_DIR) +
                            "/tools/graphs/transformer_block.json --threads 1 "
                            "--min-time 0.01 --json --shape ";
  const auto in_tmpdir = [&](const std::string& dir, const std::string& args) {
    setenv("TMPDIR", dir.c_str(), 1);
    const Outcome outcome = Attn(args);
    unsetenv("TMPDIR");
    return outcome;
  };
  // e 16 with 3 heads: the load fails after the weights are written.
  ExpectRefused(in_tmpdir(tmp.string(), bench + "1,8,16,3"), 1,
                "num_heads is 3");
  EXPECT_TRUE(fs::is_empty(tmp));
  const Outcome ok = in_tmpdir(tmp.string(), bench + "1,8,16,2 >/dev/null");
  EXPECT_EQ(ok.exit_code, 0) << ok.stderr_text;
  EXPECT_TRUE(fs::is_empty(tmp));
  ExpectRefused(in_tmpdir("/nonexistent", bench + "1,8,16,2"), 1,
                "no temporary directory for the random weights (TMPDIR)");
  // Given weights need no temporary file.
  const Outcome given = in_tmpdir(
      "/nonexistent", "bench --graph " + std::string(ATTN_SOURCE_DIR) +
                          "/tools/graphs/transformer_block.json --weights " +
                          (kGolden / "graph" / "block.safetensors").string() +
                          " --threads 1 --min-time 0.01 --json --shape "
                          "1,8,16,2 >/dev/null");
  EXPECT_EQ(given.exit_code, 0) << given.stderr_text;
}

// A graph of other names than the random block's needs --weights, and the
// refusal says so rather than naming a temporary file. With them, the
// FLOPs are the Llama block's own (GraphModel::flops): at b 1, T 8, the
// 2 x 8 x 7680 of its weight matrices (q and out 32x32, k and v 16x32, the
// gated feed-forward three of 48x32) and the core's 4 x 32 pairs x 32.
TEST_F(CliTest, BenchGraphOfOtherNamesNeedsItsWeights) {
  const std::string llama =
      "bench --graph " + std::string(ATTN_SOURCE_DIR) +
      "/tools/graphs/llama_block.json --threads 1 --min-time 0.01 --json "
      "--shape 1,8,32,4";
  const Outcome random = Attn(llama);
  ExpectRefused(random, 1,
                "weight 'norm1.weight' is missing from the random weights, "
                "which hold the book's TransformerBlock (give the graph's own "
                "with --weights)");
  EXPECT_EQ(random.stderr_text.find("safetensors"), std::string::npos)
      << random.stderr_text;
  const std::string out =
      AttnStdout(llama + " --weights " +
                 (kGolden / "graph" / "llama_block.safetensors").string());
  const nlohmann::json line = nlohmann::json::parse(out);
  EXPECT_EQ(line["flops"].get<double>(), 2.0 * 8 * 7680 + 4.0 * 32 * 32);
}

// tune measures each thread count once, smallest first, however listed: the
// first row is the one the speedups are over.
TEST_F(CliTest, TuneSortsItsThreadCounts) {
  std::istringstream out(
      AttnStdout("tune --shape seed --threads 2,1,2 --min-time 0.01"));
  std::vector<int> rows;
  for (std::string line; std::getline(out, line);) {
    std::istringstream fields(line);
    std::string shape;
    int threads = 0;
    if (fields >> shape >> threads && shape == "seed") rows.push_back(threads);
  }
  EXPECT_EQ(rows, std::vector<int>({1, 2}));
}

TEST_F(CliTest, FifoIsRefusedNotWaitedOn) {
  const std::string fifo = (dir_ / "fifo.safetensors").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectRefused(RunOn(fifo, kBook), 1, "is not a regular file");
  ExpectRefused(RunOn(kBook, fifo), 1, "is not a regular file");
}

TEST_F(CliTest, OutputHasTheModeAPlainCreateGives) {
  const mode_t mask = umask(022);
  ASSERT_EQ(RunOn(kBook, kBook).exit_code, 0);
  umask(mask);
  EXPECT_EQ(fs::status(output_).permissions(),
            fs::perms::owner_read | fs::perms::owner_write |
                fs::perms::group_read | fs::perms::others_read);
}

TEST_F(CliTest, WriterRefusesMalformedTensors) {
  const float x[2] = {1, 2};
  EXPECT_EQ(WriteSafetensors(output_, {{"t", {-1, 2}, x}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(output_, {{"t", {2}, nullptr}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(output_, {{"t", {2}, x}, {"t", {2}, x}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(output_, {{"__metadata__", {2}, x}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(output_));
  EXPECT_EQ(WriteSafetensors((dir_ / "no" / "dir.st").string(), {{"t", {2}, x}})
                    .message()
                    .find("No such file or directory") != std::string::npos,
            true);
}

TEST_F(CliTest, MemoryCapCoversGraphs) {
  const std::string graph = (fs::path(ATTN_SOURCE_DIR) / "tools" / "graphs" /
                             "transformer_block.json")
                                .string();
  const std::string block = (kGolden / "graph" / "block.safetensors").string();
  EXPECT_EQ(RunOn(block, block, "--graph " + graph).exit_code, 0);
  fs::remove(output_);
  ExpectRefused(RunOn(block, block, "--graph " + graph + " --max-memory 4096"),
                1, "over the memory limit");
}

TEST_F(CliTest, FailedRunKeepsAnExistingOutput) {
  std::ofstream(output_) << "previous result";
  EXPECT_EQ(RunOn(kBook, kBook, "--heads 3").exit_code, 1);
  std::ifstream in(output_);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}),
            "previous result");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 2)
      << "a temporary file was left behind";
}

}  // namespace
}  // namespace attn
