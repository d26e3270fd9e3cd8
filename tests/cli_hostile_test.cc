// `attn run` under hostile input and faults: every hostile file, as the
// weights and as the input, ends in an exit code from 1 to 123 with a message
// on stderr and no output file; a failed or interrupted run never leaves a
// partial output nor replaces an existing one. The 20 s bound per run is a
// hang guard (an alarm set before exec), not a timing assertion.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn/safetensors.hpp"
#include "tests/hostile_files.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

struct Outcome {
  int exit_code = -1;  // -1 when ended by a signal
  int signal = 0;
  std::string err;
};

// Starts `attn args...` with stderr to `err_path`; returns its pid.
pid_t Start(const std::vector<std::string>& args, const std::string& err_path,
            const std::string& shell_prefix = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);  // the hang guard: a run past 20 s dies of SIGALRM
    const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    if (!shell_prefix.empty()) {
      std::string cmd = shell_prefix + " exec '" ATTN_CLI "'";
      for (const std::string& a : args) cmd += " '" + a + "'";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    } else {
      std::vector<char*> argv = {const_cast<char*>(ATTN_CLI)};
      for (const std::string& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ATTN_CLI, argv.data());
    }
    _exit(127);
  }
  return pid;
}

Outcome Wait(pid_t pid, const std::string& err_path) {
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome out;
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  out.err = ReadAll(err_path);
  return out;
}

class CliHostileTest : public ::testing::Test {
 protected:
  Outcome Run(const std::vector<std::string>& args,
              const std::string& shell_prefix = "") {
    const std::string err = scratch_.Path("stderr");
    return Wait(Start(args, err, shell_prefix), err);
  }
  std::vector<std::string> RunArgs(const std::string& weights,
                                   const std::string& input) {
    return RunArgs(weights, input, output_);
  }
  std::vector<std::string> RunArgs(const std::string& weights,
                                   const std::string& input,
                                   const std::string& output) {
    return {"run",      "--weights", weights,     "--input", input,
            "--output", output,      "--threads", "1"};
  }
  // Files in the work directory other than the ones the test put there.
  std::vector<std::string> Leftovers(const std::vector<std::string>& mine) {
    std::vector<std::string> extra;
    for (const std::string& f : dir_.Files()) {
      if (std::find(mine.begin(), mine.end(), f) == mine.end()) {
        extra.push_back(f);
      }
    }
    return extra;
  }
  test::TempDir dir_, scratch_;
  const std::string output_ = dir_.Path("out.safetensors");
};

TEST_F(CliHostileTest, TinyModelRuns) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  const Outcome out = Run(RunArgs(w, x));
  ASSERT_EQ(out.exit_code, 0) << out.err;
  Result<SafetensorsFile> y = SafetensorsFile::Open(output_);
  ASSERT_TRUE(y.ok()) << y.status().message();
  ASSERT_NE(y->Find("output"), nullptr);
  EXPECT_EQ(y->Find("output")->shape, (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(Leftovers({"w", "x", "out.safetensors"}),
            std::vector<std::string>{});
}

// Each hostile file as --weights and as --input.
TEST_F(CliHostileTest, EveryHostileFileFailsCleanly) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  for (const test::HostileFile& f : test::HostileFiles()) {
    const std::string bad = dir_.Write("bad", f.bytes);
    for (const bool as_weights : {true, false}) {
      SCOPED_TRACE(f.name + (as_weights ? " as --weights" : " as --input"));
      const Outcome out = Run(as_weights ? RunArgs(bad, x) : RunArgs(w, bad));
      EXPECT_GE(out.exit_code, 1) << "signal " << out.signal << ": " << out.err;
      EXPECT_LE(out.exit_code, 123);
      EXPECT_NE(out.err.find("attn: error: "), std::string::npos) << out.err;
      EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
      EXPECT_FALSE(Exists(output_));
      EXPECT_EQ(Leftovers({"w", "x", "bad"}), std::vector<std::string>{});
    }
  }
}

// A file that is not there, a directory, /dev/zero: refused, not hung.
TEST_F(CliHostileTest, SpecialPathsFailCleanly) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  for (const std::string& bad :
       {dir_.Path("missing"), dir_.path(), std::string("/dev/zero"),
        std::string("/dev/null")}) {
    for (const bool as_weights : {true, false}) {
      SCOPED_TRACE(bad);
      const Outcome out = Run(as_weights ? RunArgs(bad, x) : RunArgs(w, bad));
      EXPECT_EQ(out.exit_code, 1) << out.err;
      EXPECT_NE(out.err.find("attn: error: "), std::string::npos);
      EXPECT_FALSE(Exists(output_));
    }
  }
}

// --graph and --config on a FIFO, /dev/zero, 200,000 nested brackets (a
// stack overflow in a recursive parser), a duplicate key and the empty
// graph: one line and exit 1, never a signal or a hang.
TEST_F(CliHostileTest, HostileGraphAndConfigFilesFailCleanly) {
  const std::string block =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/block.safetensors";
  const std::string fifo = dir_.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string brackets =
      std::string(200000, '[') + std::string(200000, ']');
  const std::vector<std::pair<std::string, std::string>> graphs = {
      {fifo, "is not a regular file"},
      {"/dev/zero", "is not a regular file"},
      {dir_.Write("deep", brackets), "nests JSON deeper than 32 levels"},
      {dir_.Write("dup", R"({"inputs": ["x"], "inputs": ["x"], )"
                         R"("outputs": ["y"], "nodes": []})"),
       "names key 'inputs' twice"},
      {dir_.Write("empty", R"({"inputs": ["x"], "outputs": ["x"], )"
                           R"("nodes": []})"),
       "field 'nodes' is empty"},
  };
  for (const auto& [graph, says] : graphs) {
    std::vector<std::string> args = RunArgs(block, block);
    args.insert(args.end(), {"--graph", graph});
    const Outcome out = Run(args);
    EXPECT_EQ(out.exit_code, 1) << graph << ": signal " << out.signal;
    EXPECT_EQ(out.err.rfind("attn: error: ", 0), 0u) << out.err;
    EXPECT_NE(out.err.find(says), std::string::npos) << out.err;
    EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
    EXPECT_FALSE(Exists(output_));
  }
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  const std::vector<std::pair<std::string, std::string>> configs = {
      {fifo, "is not a regular file"},
      {"/dev/zero", "is not a regular file"},
      {dir_.Write("deep_config", "{\"num_threads\": " + brackets + "}"),
       "nests JSON deeper than 32 levels"},
  };
  for (const auto& [config, says] : configs) {
    std::vector<std::string> args = RunArgs(w, x);
    args.insert(args.end(), {"--config", config});
    const Outcome out = Run(args);
    EXPECT_EQ(out.exit_code, 1) << config << ": signal " << out.signal;
    EXPECT_EQ(out.err.rfind("attn: error: tuned config '" + config + "' ", 0),
              0u)
        << out.err;
    EXPECT_NE(out.err.find(says), std::string::npos) << out.err;
    EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
    EXPECT_FALSE(Exists(output_));
  }
  // A name holding a newline is quoted: the message stays one line.
  const std::string odd = dir_.Write("odd\nconfig", "{\"num_threads\": 0}");
  std::vector<std::string> args = RunArgs(w, x);
  args.insert(args.end(), {"--config", odd});
  const Outcome out = Run(args);
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(out.err.find("odd\\x0aconfig'"), std::string::npos) << out.err;
  EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
}

TEST_F(CliHostileTest, FailedRunKeepsTheExistingOutput) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string bad = dir_.Write("bad", test::LyingLength(99, "{}", ""));
  dir_.Write("out.safetensors", "previous");
  const Outcome out = Run(RunArgs(w, bad));
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(ReadAll(output_), "previous");
}

// A write that fails midway (here: over the file-size limit, EFBIG) leaves
// the existing output as it was and no temporary file behind.
TEST_F(CliHostileTest, FailedWriteKeepsTheExistingOutput) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  // Output 1000 x 2 floats: over a 1-block file-size limit, which the
  // one-line message on stderr (a file too) stays under.
  const std::string x = dir_.Write(
      "x", test::SafetensorsBytes(
               "{" + test::Entry("input", "F32", "[1,1000,3]", 0, 12000) + "}",
               test::Floats(3000, 0.5f)));
  dir_.Write("out.safetensors", "previous");
  const Outcome out = Run(RunArgs(w, x), "ulimit -f 1;");
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(out.err.find("attn: error: cannot "), std::string::npos) << out.err;
  EXPECT_EQ(ReadAll(output_), "previous");
  EXPECT_EQ(Leftovers({"w", "x", "out.safetensors"}),
            std::vector<std::string>{});
  // An output directory that does not exist.
  const std::vector<std::string> args = {
      "run",
      "--weights",
      w,
      "--input",
      x,
      "--output",
      dir_.Path("no/such/dir/out.safetensors")};
  const Outcome missing = Run(args);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("attn: error: "), std::string::npos);
}

// SIGTERM or SIGINT at any moment: the run either finished (a complete,
// valid output) or died of the signal leaving no output and no temporary
// file. The delays sweep the load, the run and the write.
TEST_F(CliHostileTest, InterruptedRunNeverLeavesAPartialOutput) {
  const int64_t d = 128, T = 1024;
  std::string header = "{\"__metadata__\":{\"num_heads\":\"4\"},";
  header += test::Entry("W_query.weight", "F32", "[128,128]", 0, 65536) + ",";
  header +=
      test::Entry("W_key.weight", "F32", "[128,128]", 65536, 131072) + ",";
  header +=
      test::Entry("W_value.weight", "F32", "[128,128]", 131072, 196608) + ",";
  header +=
      test::Entry("out_proj.weight", "F32", "[128,128]", 196608, 262144) + ",";
  header += test::Entry("out_proj.bias", "F32", "[128]", 262144, 262656) + "}";
  const std::string w = dir_.Write(
      "w", test::SafetensorsBytes(header, test::Floats(4 * d * d + d, 0.01f)));
  const std::string x = dir_.Write(
      "x",
      test::SafetensorsBytes(
          "{" + test::Entry("input", "F32", "[4,1024,128]", 0, 4 * T * d * 4) +
              "}",
          test::Floats(static_cast<size_t>(4 * T * d), 0.5f)));
  int finished = 0, interrupted = 0;
  for (const int sig : {SIGTERM, SIGINT}) {
    for (const int delay_ms : {0, 1, 3, 10, 30, 60, 100, 150, 250, 400}) {
      SCOPED_TRACE("signal " + std::to_string(sig) + " after " +
                   std::to_string(delay_ms) + " ms");
      unlink(output_.c_str());
      const std::string err = scratch_.Path("stderr");
      const pid_t pid = Start(RunArgs(w, x), err);
      const timespec pause = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
      nanosleep(&pause, nullptr);
      kill(pid, sig);
      const Outcome out = Wait(pid, err);
      if (out.exit_code != 0) {
        ++interrupted;
        EXPECT_EQ(out.signal, sig)
            << "exit " << out.exit_code << ": " << out.err;
      } else {
        ++finished;
      }
      // Whether the signal came before the rename (no output) or after it
      // (the process dies on its way out), the output is never partial.
      if (out.exit_code == 0 || Exists(output_)) {
        Result<SafetensorsFile> y = SafetensorsFile::Open(output_);
        ASSERT_TRUE(y.ok()) << y.status().message();
        ASSERT_NE(y->Find("output"), nullptr);
        EXPECT_EQ(y->Find("output")->shape, (std::vector<int64_t>{4, T, d}));
      }
      EXPECT_EQ(Leftovers({"w", "x", "out.safetensors"}),
                std::vector<std::string>{});
    }
  }
  RecordProperty("finished", finished);
  RecordProperty("interrupted", interrupted);
  EXPECT_GT(interrupted, 0);
}

bool IsCharDevice(const std::string& path, dev_t rdev) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) &&
         st.st_rdev == rdev;
}

// --output on a character device writes into it and never replaces it (as
// root, /dev/null once became a regular file). A scratch null device first;
// the real /dev/null and /dev/stdout (here /dev/null too) only once the
// scratch one survived, and /dev/null is remade should it not survive. Root
// that cannot make a device could not remake /dev/null either: skipped.
TEST_F(CliHostileTest, OutputToACharacterDeviceKeepsTheDevice) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  const dev_t null_device = makedev(1, 3);
  const std::string scratch_null = dir_.Path("null");
  if (mknod(scratch_null.c_str(), S_IFCHR | 0666, null_device) == 0) {
    const Outcome out = Run(RunArgs(w, x, scratch_null));
    EXPECT_EQ(out.exit_code, 0) << out.err;
    ASSERT_TRUE(IsCharDevice(scratch_null, null_device));
    EXPECT_EQ(Leftovers({"w", "x", "null"}), std::vector<std::string>{});
  } else if (geteuid() == 0) {
    GTEST_SKIP() << "cannot make a scratch device: " << std::strerror(errno);
  }
  for (const std::string output : {"/dev/null", "/dev/stdout"}) {
    SCOPED_TRACE(output);
    const Outcome out = Run(RunArgs(w, x, output));
    const bool kept = IsCharDevice("/dev/null", null_device);
    if (!kept && geteuid() == 0) {
      unlink("/dev/null");
      mknod("/dev/null", S_IFCHR | 0666, null_device);
    }
    EXPECT_TRUE(kept) << "/dev/null was replaced";
    EXPECT_EQ(out.exit_code, 0) << out.err;
  }
}

// A FIFO gets the same bytes a regular file would, and stays a FIFO.
TEST_F(CliHostileTest, OutputToAFifoWritesIntoIt) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  ASSERT_EQ(Run(RunArgs(w, x)).exit_code, 0);
  const std::string fifo = dir_.Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // A non-blocking reader, so that a writer that never comes cannot hang
  // the test: read until the run has ended and the FIFO is drained.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const std::string err = scratch_.Path("stderr");
  const pid_t pid = Start(RunArgs(w, x, fifo), err);
  std::string bytes;
  int status = 0;
  for (bool ended = false;;) {
    char buffer[4096];
    const ssize_t n = read(reader, buffer, sizeof(buffer));
    if (n > 0) {
      bytes.append(buffer, static_cast<size_t>(n));
    } else if (ended) {
      break;
    } else {
      ended = waitpid(pid, &status, WNOHANG) == pid;
      if (!ended) usleep(1000);
    }
  }
  close(reader);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(err);
  EXPECT_EQ(bytes, ReadAll(output_));
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// `--output /dev/stdout >> log` appends to log through the open descriptor:
// the file keeps its inode and what it held, as any `>>` would.
TEST_F(CliHostileTest, OutputToStdoutAppendsToARedirectedFile) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  ASSERT_EQ(Run(RunArgs(w, x)).exit_code, 0);
  const std::string log = dir_.Write("log", "earlier lines\n");
  struct stat before, after;
  ASSERT_EQ(stat(log.c_str(), &before), 0);
  const std::string command = std::string(ATTN_CLI) + " run --weights " + w +
                              " --input " + x +
                              " --output /dev/stdout --threads 1 >> " + log;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ASSERT_EQ(stat(log.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(ReadAll(log), "earlier lines\n" + ReadAll(output_));
}

// Through a chain of symlinks (one relative, one absolute), the last target
// gets the output and every link stays a link; a dangling link's target is
// created, as a shell's `>` would.
TEST_F(CliHostileTest, OutputThroughSymlinksWritesTheirTarget) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  ASSERT_EQ(Run(RunArgs(w, x)).exit_code, 0);
  const std::string expected = ReadAll(output_);
  const std::string target = dir_.Write("target", "previous");
  ASSERT_EQ(symlink("target", dir_.Path("link").c_str()), 0);
  ASSERT_EQ(symlink(dir_.Path("link").c_str(), dir_.Path("link2").c_str()), 0);
  ASSERT_EQ(symlink("new", dir_.Path("dangling").c_str()), 0);
  for (const char* link : {"link2", "dangling"}) {
    const Outcome out = Run(RunArgs(w, x, dir_.Path(link)));
    EXPECT_EQ(out.exit_code, 0) << out.err;
  }
  struct stat st;
  for (const char* link : {"link", "link2", "dangling"}) {
    ASSERT_EQ(lstat(dir_.Path(link).c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << link << " is no longer a link";
  }
  EXPECT_EQ(ReadAll(target), expected);
  EXPECT_EQ(ReadAll(dir_.Path("new")), expected);
  EXPECT_EQ(Leftovers({"w", "x", "out.safetensors", "target", "link", "link2",
                       "dangling", "new"}),
            std::vector<std::string>{});
}

// A name of 250 bytes (the limit is 255): the temporary name beside it must
// stay short. A directory as the output, or one in no directory, is refused
// in one line.
TEST_F(CliHostileTest, OutputNamesOfAnyLengthWork) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  const std::string name(250, 'o');
  Outcome out = Run(RunArgs(w, x, dir_.Path(name)));
  EXPECT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(SafetensorsFile::Open(dir_.Path(name)).ok());
  EXPECT_EQ(Leftovers({"w", "x", name}), std::vector<std::string>{});
  out = Run(RunArgs(w, x, scratch_.path()));
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(out.err.find("is a directory"), std::string::npos) << out.err;
  EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
  // An output in no directory is refused before any work: before the
  // weights are even opened.
  const std::string nowhere = dir_.Path("no/such/dir/out.safetensors");
  out = Run(RunArgs(dir_.Path("absent_weights"), x, nowhere));
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(
      out.err.find("cannot write '" + nowhere + "': there is no directory '" +
                   dir_.Path("no/such/dir") + "'"),
      std::string::npos)
      << out.err;
  EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
}

TEST_F(CliHostileTest, MemoryCapIsEnforcedAndParsed) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string x = dir_.Write("x", test::TinyInput());
  std::vector<std::string> args = RunArgs(w, x);
  args.insert(args.end(), {"--max-memory", "150"});
  Outcome out = Run(args);
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(out.err.find("over the memory limit"), std::string::npos)
      << out.err;
  EXPECT_FALSE(Exists(output_));
  args.back() = "1M";
  out = Run(args);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  // Negative, zero or garbage never turns the cap off: a usage error.
  unlink(output_.c_str());
  for (const char* bad : {"lots", "-5", "0", "-1G", "5X", ""}) {
    SCOPED_TRACE(bad);
    args.back() = bad;
    out = Run(args);
    EXPECT_EQ(out.exit_code, 2) << out.err;
    EXPECT_NE(out.err.find("--max-memory"), std::string::npos) << out.err;
    EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
    EXPECT_FALSE(Exists(output_));
  }
}

// An address space of 1 GiB for a run. AddressSanitizer reserves terabytes
// of shadow memory at start, so under it the run is not limited: the
// release build's run of this test is the one that checks the limit.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kOneGibAddressSpace = "";
#else
constexpr const char* kOneGibAddressSpace = "ulimit -v 1048576;";
#endif

// Sizes far past the cap end in a one-line refusal naming them before
// anything is allocated: they run in an address space of 1 GiB, less than
// any of them would take (a 50,000,000-layer table alone was 1.2 GB).
TEST_F(CliHostileTest, HugeCountsAndShapesAreRefusedBeforeAllocating) {
  const std::string stack3 =
      ATTN_SOURCE_DIR "/tests/golden/graph/stack3.safetensors";
  const struct {
    std::vector<std::string> args;
    std::string want;
  } cases[] = {
      {{"run", "--graph",
        ATTN_SOURCE_DIR "/tools/graphs/transformer_block.json", "--weights",
        stack3, "--input", stack3, "--output", output_, "--threads", "1",
        "--layers", "50000000", "--max-memory", "1M"},
       "layer 3 of 50000000: node 'norm1' (layernorm): weight "
       "'trf_blocks.3.norm1.scale' is missing"},
      {{"bench", "--shape", "1000000,16,8,8,2", "--max-memory", "1M",
        "--threads", "1", "--min-time", "0.01"},
       "shape 1000000,16,8,8,2: its weights, input and output need 976.6 MiB, "
       "over the memory limit of 1048576 bytes"},
      {{"bench", "--shape", "4294967297,1,8,8,2", "--max-memory", "64G",
        "--threads", "1", "--min-time", "0.01"},
       "shape 4294967297,1,8,8,2: its weights, input and output need 2.621e+05 "
       "MiB, over the memory limit"},
      {{"bench", "--graph",
        ATTN_SOURCE_DIR "/tools/graphs/transformer_block.json", "--shape",
        "1,16,100000,4", "--max-memory", "1G", "--threads", "1"},
       "shape 1,16,100000,4: its weights, input and output need 4.578e+05 "
       "MiB, over the memory limit of 1073741824 bytes"},
      {{"bench", "--decode", "--dims", "64,64,4", "--context", "100000000",
        "--batch", "100", "--max-memory", "1G", "--threads", "1"},
       "--dims 64,64,4 at context 100000000 x batch 100: the weights, inputs "
       "and outputs need 9.766e+06 MiB, over the memory limit"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args[2]);
    const Outcome out = Run(c.args, kOneGibAddressSpace);
    EXPECT_EQ(out.exit_code, 1) << "signal " << out.signal << ": " << out.err;
    EXPECT_NE(out.err.find(c.want), std::string::npos) << out.err;
    EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
    EXPECT_EQ(out.err.find("alloc"), std::string::npos) << out.err;
    EXPECT_FALSE(Exists(output_));
  }
}

// Finite input whose scores overflow fp32 (1e30 squared): refused, since
// the math has a finite answer that fp32 cannot give; 1e15 is fine.
TEST_F(CliHostileTest, OverflowingScoresAreRefusedNotWrittenAsNaN) {
  const std::string w = dir_.Write("w", test::TinyWeights());
  const std::string huge = dir_.Write("x", test::TinyInput(1e30f));
  Outcome out = Run(RunArgs(w, huge));
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_NE(out.err.find("overflowed fp32"), std::string::npos) << out.err;
  EXPECT_FALSE(Exists(output_));
  const std::string large = dir_.Write("x", test::TinyInput(1e15f));
  out = Run(RunArgs(w, large));
  EXPECT_EQ(out.exit_code, 0) << out.err;
}

}  // namespace
}  // namespace attn
