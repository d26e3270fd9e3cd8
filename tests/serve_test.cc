// attn serve as a client sees it, on the chat folder of tests/chat_folder.h:
// replies against the same model run in this process (greedy tokens, sampled
// choices of a seed, log-probabilities), stop strings, streams, and every
// refusal in OpenAI's error shape; the API key, the body cap, a slow body,
// the queue's 429, a client that leaves mid-stream, SIGTERM. Each server is
// a child process on a free port, killed by a 60 s alarm if it hangs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/tokenizer.hpp"
#include "httplib.h"
#include "tests/chat_folder.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

using test::Json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `attn serve --model dir --port 0 extra...` as a child; its port read
// from the line it prints on stderr.
class Server {
 public:
  Server(const std::string& dir, const std::vector<std::string>& extra,
         const test::TempDir& scratch)
      : err_(scratch.Path("serve" + std::to_string(++count_) + ".err")) {
    std::vector<std::string> args = {"serve", "--model",   dir, "--port",
                                     "0",     "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      alarm(60);  // the hang guard
      const int fd = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      std::vector<char*> argv = {const_cast<char*>(ATTN_CLI)};
      for (const std::string& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ATTN_CLI, argv.data());
      _exit(127);
    }
    const std::string listening = "listening on http://127.0.0.1:";
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      const std::string text = ReadAll(err_);
      const size_t at = text.find(listening);
      if (at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + listening.size());
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    for (int i = 0; i < 500 && port_ != 0; ++i) {
      auto res = Client().Get("/health");
      if (res && res->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  void Signal(int number) const { kill(pid_, number); }
  // The exit status once it ended.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string err() const { return ReadAll(err_); }

 private:
  static inline int count_ = 0;
  std::string err_;
  pid_t pid_ = -1;
  int port_ = 0;
};

struct Reply {
  int status = 0;
  Json body;
  std::string text;
};

Reply Post(const Server& server, const std::string& path, const Json& body,
           const httplib::Headers& headers = {}) {
  auto res = server.Client().Post(path.c_str(), headers, body.dump(),
                                  "application/json");
  Reply r;
  if (!res) return r;
  r.status = res->status;
  r.text = res->body;
  r.body = Json::parse(res->body, nullptr, false);
  return r;
}

// The JSON of each "data:" event of a stream, and whether it ended with
// [DONE].
std::vector<Json> Events(const std::string& stream, bool* done) {
  std::vector<Json> events;
  std::istringstream in(stream);
  std::string line;
  *done = false;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]")
      *done = true;
    else
      events.push_back(Json::parse(data));
  }
  return events;
}

// A connected socket to the server, for what a client library won't do.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  return fd;
}

// Reads from `fd` until `text` has arrived; false if the connection ends.
bool ReadUntil(int fd, const std::string& text) {
  std::string seen;
  char buffer[512];
  while (seen.find(text) == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return false;
    seen.append(buffer, size_t(n));
  }
  return true;
}

double Metric(const Server& server, const std::string& name) {
  auto res = server.Client().Get("/metrics");
  if (!res) return -1;
  const std::string line = "\n" + name + " ";
  const size_t at = res->body.find(line);
  return at == std::string::npos
             ? -1
             : std::strtod(res->body.c_str() + at + line.size(), nullptr);
}

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    scratch_ = new test::TempDir;
    ASSERT_TRUE(test::WriteChatFolder(dir_->path()).ok());
    server_ = new Server(dir_->path(), {"--parallel", "4"}, *scratch_);
    auto model = LanguageModel::Load(dir_->path());
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = new std::shared_ptr<const LanguageModel>(*model);
    auto tokenizer = Tokenizer::Load(dir_->path());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    tokenizer_ = new std::shared_ptr<const Tokenizer>(*tokenizer);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete model_;
    delete tokenizer_;
    delete scratch_;
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(server_->port(), 0) << server_->err(); }

  // The prompt's logits, run here.
  static std::vector<float> PromptLogits(const std::vector<int64_t>& ids) {
    auto batch = Batch::Create(Model::Of(*model_), {1, 512});
    const Batch::Request r{*(*batch)->Add(), ids.data(),
                           static_cast<int64_t>(ids.size()), false};
    EXPECT_TRUE((*batch)->Step(&r, 1).ok());
    const float* l = (*batch)->logits(0);
    return {l, l + (*model_)->config().vocab_size};
  }

  // The text `n` tokens sampled after `ids` give (greedy without a
  // temperature), stopping at the tokenizer's EOS, as the server samples
  // choice `stream`.
  static std::string Sampled(const std::vector<int64_t>& ids, int64_t n,
                             SamplingOptions sampling = {}) {
    auto batch = Batch::Create(Model::Of(*model_), {1, 512});
    const int64_t seq = *(*batch)->Add();
    Sampler sampler = *Sampler::Create(sampling);
    std::vector<int64_t> out, feed = ids;
    const auto& eos = (*tokenizer_)->eos_ids();
    for (int64_t i = 0; i < n; ++i) {
      const Batch::Request r{seq, feed.data(),
                             static_cast<int64_t>(feed.size()), false};
      EXPECT_TRUE((*batch)->Step(&r, 1).ok());
      const int64_t id =
          sampler.Sample((*batch)->logits(0), (*model_)->config().vocab_size);
      if (std::find(eos.begin(), eos.end(), id) != eos.end()) break;
      out.push_back(id);
      feed = {id};
    }
    return *(*tokenizer_)->DecodeText(out);
  }

  static std::vector<int64_t> ChatIds(const Json& messages) {
    return *(*tokenizer_)
                ->Encode(
                    *(*tokenizer_)->ApplyChatTemplate(messages.dump(), true),
                    false);
  }

  static inline test::TempDir* dir_ = nullptr;
  static inline test::TempDir* scratch_ = nullptr;
  static inline Server* server_ = nullptr;
  static inline std::shared_ptr<const LanguageModel>* model_ = nullptr;
  static inline std::shared_ptr<const Tokenizer>* tokenizer_ = nullptr;
};

TEST_F(ServeTest, HealthAndModels) {
  auto health = server_->Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = server_->Client().Get("/v1/models");
  ASSERT_TRUE(models);
  const Json list = Json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 1u);
  const std::string id = list["data"][0]["id"];
  EXPECT_EQ(id, std::filesystem::path(dir_->path()).filename().string());
  EXPECT_EQ(list["data"][0]["max_model_len"], 512);
}

TEST_F(ServeTest, ChatGreedyIsTheModelsGreedyReply) {
  const Json messages = {{{"role", "user"}, {"content", "Hello there"}}};
  const Reply r =
      Post(*server_, "/v1/chat/completions",
           {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.text;
  const std::vector<int64_t> ids = ChatIds(messages);
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], Sampled(ids, 12));
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r.body["usage"]["total_tokens"],
            r.body["usage"]["prompt_tokens"].get<int64_t>() +
                r.body["usage"]["completion_tokens"].get<int64_t>());
}

TEST_F(ServeTest, CompletionGreedyIsAttnGenerates) {
  const std::string out = scratch_->Path("generate.txt");
  ASSERT_EQ(
      std::system((std::string(ATTN_CLI) + " generate --model " + dir_->path() +
                   " --prompt 'Once upon' --max-new-tokens 10 >" + out)
                      .c_str()),
      0);
  std::string want = ReadAll(out);
  want.pop_back();  // generate's newline
  const Reply r =
      Post(*server_, "/v1/completions",
           {{"prompt", "Once upon"}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["choices"][0]["text"], want);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 10);
}

TEST_F(ServeTest, StreamJoinsToTheWholeReply) {
  const Json request = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                        {"max_tokens", 9},
                        {"temperature", 0}};
  const Reply whole = Post(*server_, "/v1/chat/completions", request);
  Json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const Reply r = Post(*server_, "/v1/chat/completions", streamed);
  ASSERT_EQ(r.status, 200) << r.text;
  bool done = false;
  const std::vector<Json> events = Events(r.text, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const Json& e : events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, whole.body["choices"][0]["message"]["content"]);
  const Json& finish = events[events.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"], whole.body["usage"]);
}

TEST_F(ServeTest, StopStringsEndTheReplyAndAreNeverSent) {
  const Json base = {{"prompt", "The"}, {"max_tokens", 16}, {"temperature", 0}};
  const Reply whole = Post(*server_, "/v1/completions", base);
  ASSERT_EQ(whole.status, 200) << whole.text;
  const std::string text = whole.body["choices"][0]["text"];
  // Three characters from the fourth on, whole UTF-8 sequences.
  auto utf8_len = [](unsigned char c) {
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  };
  size_t begin = 0;
  for (int i = 0; i < 3; ++i) begin += utf8_len(text[begin]);
  size_t end = begin;
  for (int i = 0; i < 3; ++i) end += utf8_len(text[end]);
  const std::string stop = text.substr(begin, end - begin);
  const std::string want = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    Json request = base;
    request["stop"] = {"never there", stop};
    request["stream"] = stream;
    const Reply r = Post(*server_, "/v1/completions", request);
    ASSERT_EQ(r.status, 200) << r.text;
    std::string got, reason;
    if (stream) {
      bool done = false;
      for (const Json& e : Events(r.text, &done)) {
        got += e["choices"][0]["text"].get<std::string>();
        if (!e["choices"][0]["finish_reason"].is_null()) {
          reason = e["choices"][0]["finish_reason"];
        }
      }
    } else {
      got = r.body["choices"][0]["text"];
      reason = r.body["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(got, want) << "stream " << stream;
    EXPECT_EQ(reason, "stop");
  }
}

TEST_F(ServeTest, ChoicesAreSeededForksOfOnePrefill) {
  const Reply r = Post(*server_, "/v1/completions",
                       {{"prompt", "Seeds"},
                        {"max_tokens", 8},
                        {"n", 3},
                        {"temperature", 0.9},
                        {"top_k", 40},
                        {"seed", 1234}});
  ASSERT_EQ(r.status, 200) << r.text;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  const std::vector<int64_t> ids = *(*tokenizer_)->Encode("Seeds", true);
  for (uint64_t i = 0; i < 3; ++i) {
    SamplingOptions sampling;
    sampling.temperature = 0.9;
    sampling.top_k = 40;
    sampling.seed = 1234;
    sampling.stream = i;
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    EXPECT_EQ(r.body["choices"][i]["text"], Sampled(ids, 8, sampling))
        << "choice " << i;
  }
}

TEST_F(ServeTest, LogprobsAreTheModelsLogSoftmax) {
  const Json messages = {{{"role", "user"}, {"content", "Numbers"}}};
  const Reply r = Post(*server_, "/v1/chat/completions",
                       {{"messages", messages},
                        {"max_tokens", 2},
                        {"temperature", 0},
                        {"logprobs", true},
                        {"top_logprobs", 3}});
  ASSERT_EQ(r.status, 200) << r.text;
  const std::vector<float> logits = PromptLogits(ChatIds(messages));
  double sum = 0;
  const float peak = *std::max_element(logits.begin(), logits.end());
  for (float l : logits) sum += std::exp(double(l) - peak);
  const int64_t best =
      std::max_element(logits.begin(), logits.end()) - logits.begin();
  const double want = logits[size_t(best)] - peak - std::log(sum);
  const Json& first = r.body["choices"][0]["logprobs"]["content"][0];
  EXPECT_NEAR(first["logprob"].get<double>(), want, 1e-4);
  EXPECT_EQ(first["token"], *(*tokenizer_)->Decode(best));
  ASSERT_EQ(first["top_logprobs"].size(), 3u);
  EXPECT_EQ(first["top_logprobs"][0]["logprob"], first["logprob"]);
  EXPECT_GE(first["top_logprobs"][1]["logprob"].get<double>(),
            first["top_logprobs"][2]["logprob"].get<double>());
}

TEST_F(ServeTest, ARepeatedPromptReusesItsCache) {
  const double before = Metric(*server_, "attn_prefix_reused_tokens_total");
  const Json request = {{"prompt", "A prompt sent twice, word for word"},
                        {"max_tokens", 3},
                        {"temperature", 0}};
  const Reply first = Post(*server_, "/v1/completions", request);
  const Reply second = Post(*server_, "/v1/completions", request);
  ASSERT_EQ(second.status, 200) << second.text;
  EXPECT_EQ(first.body["choices"], second.body["choices"]);
  const double prompt = second.body["usage"]["prompt_tokens"];
  EXPECT_GE(Metric(*server_, "attn_prefix_reused_tokens_total") - before,
            prompt - 1);
}

TEST_F(ServeTest, RefusalsNameTheField) {
  struct Case {
    std::string path, body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1]", 400, ""},
      {"/v1/completions", "{\"prompt\": \"\xff\"}", 400, ""},
      {"/v1/completions", R"({"prompt": "x", "bogus": 1})", 400, "bogus"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 7})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, 300]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1.5})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 600})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400,
       "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "n": 5})", 400, "n"},
      {"/v1/completions", R"({"prompt": "x", "stop": [""]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 6})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "echo": true})", 400, "echo"},
      {"/v1/completions", R"({"prompt": "x", "stream_options": {}})", 400,
       "stream_options"},
      {"/v1/completions", R"({"prompt": "x", "model": "other"})", 404, "model"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot"}]})", 400,
       "messages[0].role"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       400, "messages[0].content"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       400, "top_logprobs"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})",
       400, "tools"},
      {"/tokenize", R"({"text": "x"})", 400, "prompt"},
      {"/detokenize", R"({"tokens": [-1]})", 400, "tokens"},
  };
  // A prompt past the context.
  const Json long_prompt = {{"prompt", std::vector<int64_t>(600, 65)}};
  std::vector<Case> all = cases;
  all.push_back({"/v1/completions", long_prompt.dump(), 400, "prompt"});
  // Nesting deep enough to overflow a recursive printer or copier.
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  all.push_back({"/v1/completions", deep, 400, ""});
  all.push_back(
      {"/v1/chat/completions", "{\"messages\": " + deep + "}", 400, ""});
  for (const Case& c : all) {
    auto res =
        server_->Client().Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, c.status) << c.body << " -> " << res->body;
    const Json body = Json::parse(res->body, nullptr, false);
    ASSERT_TRUE(body.contains("error")) << res->body;
    const Json& e = body["error"];
    EXPECT_TRUE(e["message"].is_string() &&
                !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_TRUE(e.contains("code"));
    if (c.param.empty())
      EXPECT_TRUE(e["param"].is_null()) << res->body;
    else
      EXPECT_EQ(e["param"], c.param) << c.body;
  }
  auto missing = server_->Client().Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(Json::parse(missing->body).contains("error"));
  // And it still serves.
  EXPECT_EQ(
      Post(*server_, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}})
          .status,
      200);
}

TEST_F(ServeTest, MetricsArePrometheusText) {
  Post(*server_, "/v1/completions",
       {{"prompt", "m"}, {"max_tokens", 2}, {"temperature", 0}});
  // A request is counted once its reply is written, a moment after the
  // client has it.
  const std::string counted =
      "attn_requests_total{route=\"/v1/completions\",status=\"200\"}";
  auto res = server_->Client().Get("/metrics");
  for (int i = 0;
       i < 100 && res && res->body.find(counted) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    res = server_->Client().Get("/metrics");
  }
  ASSERT_TRUE(res);
  for (const char* name :
       {"attn_requests_total{route=\"/v1/completions\",status=\"200\"}",
        "attn_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
        "attn_time_per_output_token_seconds_count", "attn_queue_depth",
        "attn_running_sequences", "attn_kv_cache_tokens",
        "attn_generated_tokens_total"}) {
    EXPECT_NE(res->body.find(name), std::string::npos) << name;
  }
  EXPECT_GE(Metric(*server_, "attn_generated_tokens_total"), 2);
  EXPECT_EQ(Metric(*server_, "attn_kv_cache_capacity_tokens"), 4 * 512);
}

// A folder whose model takes 8192 positions: replies long enough (some
// seconds) to still run when a test acts on them.
const std::string& LongFolder(const test::TempDir& scratch) {
  static const std::string dir = [&] {
    const std::string path = scratch.Path("long");
    std::filesystem::create_directory(path);
    EXPECT_TRUE(test::WriteChatFolder(path, 8192).ok());
    return path;
  }();
  return dir;
}

TEST_F(ServeTest, AClientThatLeavesMidStreamFreesItsSequence) {
  Server server(LongFolder(*scratch_), {"--ctx-size", "8192"}, *scratch_);
  ASSERT_NE(server.port(), 0) << server.err();
  const int fd = Connect(server.port());
  const std::string body = Json{
      {"prompt", "Leaving"},
      {"max_tokens", 8000},
      {"temperature", 0},
      {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(ReadUntil(fd, "data: "));  // the stream began
  // The gauges follow the step that sent it.
  double running = 0;
  for (int i = 0; i < 200 && running != 1; ++i) {
    running = Metric(server, "attn_running_sequences");
    if (running != 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(running, 1);
  close(fd);
  for (int i = 0; i < 500 && running != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    running = Metric(server, "attn_running_sequences");
  }
  EXPECT_EQ(running, 0);
  // Cut short, not run to its 8000 tokens.
  EXPECT_LT(Metric(server, "attn_generated_tokens_total"), 4000);
}

TEST_F(ServeTest, ChunkedPrefillGivesTheSameLogprobs) {
  Server chunked(dir_->path(), {"--prefill-chunk", "5"}, *scratch_);
  ASSERT_NE(chunked.port(), 0) << chunked.err();
  std::vector<int64_t> ids;
  for (int i = 0; i < 37; ++i) ids.push_back(32 + (i * 7) % 90);
  const Reply r = Post(chunked, "/v1/completions",
                       {{"prompt", ids},
                        {"max_tokens", 1},
                        {"temperature", 0},
                        {"logprobs", 1}});
  ASSERT_EQ(r.status, 200) << r.text;
  const std::vector<float> logits = PromptLogits(ids);
  const int64_t best =
      std::max_element(logits.begin(), logits.end()) - logits.begin();
  const Json& lp = r.body["choices"][0]["logprobs"];
  // As JSON sends it: bytes that are not UTF-8 as U+FFFD.
  EXPECT_EQ(lp["tokens"][0].dump(),
            Json(*(*tokenizer_)->Decode(best))
                .dump(-1, ' ', false, Json::error_handler_t::replace));
  double sum = 0;
  const float peak = logits[size_t(best)];
  for (float l : logits) sum += std::exp(double(l) - peak);
  EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), -std::log(sum), 1e-4);
}

TEST_F(ServeTest, KeysBodiesAndSlowClients) {
  Server guarded(
      dir_->path(),
      {"--api-key", "s3cret", "--max-body-bytes", "2K", "--timeout", "2"},
      *scratch_);
  ASSERT_NE(guarded.port(), 0) << guarded.err();
  const Json ok = {{"prompt", "k"}, {"max_tokens", 1}};
  EXPECT_EQ(Post(guarded, "/v1/completions", ok).status, 401);
  const Reply wrong = Post(guarded, "/v1/completions", ok,
                           {{"Authorization", "Bearer s3creT"}});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(guarded.Client().Get("/health")->status, 200);
  EXPECT_EQ(guarded.Client().Get("/v1/models")->status, 401);
  const httplib::Headers key = {{"Authorization", "Bearer s3cret"}};
  EXPECT_EQ(Post(guarded, "/v1/completions", ok, key).status, 200);
  const Reply big = Post(guarded, "/v1/completions",
                         {{"prompt", std::string(4096, 'x')}}, key);
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(big.body["error"]["code"], "body_too_large");

  // A body sent a byte a second: 408 after --timeout, while others are
  // served.
  const int fd = Connect(guarded.port());
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
      "s3cret\r\nContent-Length: 100\r\n\r\n{";
  ASSERT_EQ(write(fd, head.data(), head.size()), ssize_t(head.size()));
  std::thread trickle([fd] {
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      if (write(fd, " ", 1) != 1) return;
    }
  });
  EXPECT_EQ(Post(guarded, "/v1/completions", ok, key).status, 200);
  trickle.join();
  char buffer[1024] = {};
  const ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buffer).find("408"), std::string::npos) << buffer;
  EXPECT_NE(std::string(buffer).find("request_timeout"), std::string::npos);
}

TEST_F(ServeTest, AFullQueueAnswers429) {
  Server one(LongFolder(*scratch_),
             {"--parallel", "1", "--max-queue", "0", "--ctx-size", "8192"},
             *scratch_);
  ASSERT_NE(one.port(), 0) << one.err();
  // Eight at once for one sequence and no queue: the first runs, those
  // that arrive while it does are refused.
  std::vector<Reply> replies(8);
  std::vector<std::thread> clients;
  for (Reply& r : replies) {
    clients.emplace_back([&] {
      auto res = one.Client().Post("/v1/completions",
                                   R"({"prompt": "busy", "max_tokens": 500})",
                                   "application/json");
      if (!res) return;
      r.status = res->status;
      r.text = res->get_header_value("Retry-After");
      r.body = Json::parse(res->body, nullptr, false);
    });
  }
  for (std::thread& t : clients) t.join();
  int ok = 0, refused = 0;
  for (const Reply& r : replies) {
    if (r.status == 200) ++ok;
    if (r.status != 429) continue;
    ++refused;
    EXPECT_EQ(r.text, "1");
    EXPECT_EQ(r.body["error"]["type"], "rate_limit_error");
    EXPECT_EQ(r.body["error"]["code"], "queue_full");
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  EXPECT_EQ(ok + refused, 8);
}

TEST_F(ServeTest, SigtermFinishesRequestsInFlightThenExits) {
  Server stopping(LongFolder(*scratch_),
                  {"--timeout", "20", "--ctx-size", "8192"}, *scratch_);
  ASSERT_NE(stopping.port(), 0) << stopping.err();
  Reply whole, streamed;
  std::thread plain([&] {
    whole = Post(
        stopping, "/v1/completions",
        {{"prompt", "last words"}, {"max_tokens", 3000}, {"temperature", 0}});
  });
  std::thread stream([&] {
    streamed = Post(stopping, "/v1/completions",
                    {{"prompt", "a stream"},
                     {"max_tokens", 3000},
                     {"temperature", 0},
                     {"stream", true}});
  });
  for (int i = 0; i < 500 && Metric(stopping, "attn_running_sequences") != 2;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(Metric(stopping, "attn_running_sequences"), 2);
  stopping.Signal(SIGTERM);
  // Draining: the balancer's check and new requests are refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto health = stopping.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Post(stopping, "/v1/completions", {{"prompt", "late"}}).status,
            503);
  plain.join();
  stream.join();
  EXPECT_EQ(stopping.Wait(), 0) << stopping.err();
  EXPECT_EQ(whole.status, 200) << whole.text;
  EXPECT_EQ(whole.body["usage"]["completion_tokens"], 3000);
  bool done = false;
  const std::vector<Json> events = Events(streamed.text, &done);
  EXPECT_TRUE(done) << "the stream was cut";
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(stopping.Client().Get("/health"));  // no longer listening
}

}  // namespace
}  // namespace attn
