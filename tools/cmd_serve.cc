// attn serve: an OpenAI-compatible HTTP server over one model's folder.
// The port opens first (/health says 503 while the model loads), then one
// scheduler thread runs every request as a sequence of one Batch. SIGTERM
// or SIGINT: stop accepting, let requests in flight finish within
// --timeout, end the rest with an error, exit 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "attn/lm.hpp"
#include "attn/tokenizer.hpp"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/lm_cli.h"
#include "tools/serve_http.h"
#include "tools/serve_scheduler.h"

namespace attn::cli {
namespace {

// Running and queued requests at most: each holds a connection thread.
constexpr int64_t kMaxWaiting = 1024;

struct ServeArgs {
  std::string model, alias, api_key, api_key_file;
  serve::HttpOptions http;
  serve::SchedulerOptions scheduler;
  int64_t timeout = 30;
  uint64_t max_body = 16u << 20;
  LmModelFlags flags;
};

Result<std::string> ReadKeyFile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return InvalidArgument("--api-key-file '" + path +
                           "': not a readable regular file");
  }
  std::ifstream in(path);
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) {
    key.pop_back();
  }
  if (key.empty()) {
    return InvalidArgument("--api-key-file '" + path +
                           "': its first line is empty, want the key");
  }
  return key;
}

// SIGTERM and SIGINT, blocked in every thread (the ones started after
// this inherit the mask) and taken by one: the first during the load ends
// the process at once (nothing is in flight), after it starts the drain; a
// second one ends the drain at once.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that left is a failed write
    thread_ = std::thread([this] { Watch(); });
    thread_.detach();  // it ends with the process
  }
  void Ready() {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_ = true;
  }
  // Waits for the first signal; its name.
  const char* Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    arrived_.wait(lock, [&] { return signal_ != 0; });
    return signal_ == SIGTERM ? "SIGTERM" : "SIGINT";
  }

 private:
  void Watch() {
    int number = 0;
    sigwait(&set_, &number);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ready_) std::_Exit(0);
      signal_ = number;
    }
    arrived_.notify_all();
    sigwait(&set_, &number);
    std::fprintf(stderr, "attn serve: a second signal: stopping now\n");
    std::_Exit(1);
  }
  sigset_t set_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  bool ready_ = false;
  int signal_ = 0;
  std::thread thread_;
};

// The key --api-key or --api-key-file gives (empty: none).
Result<std::string> ApiKey(const ServeArgs& args) {
  if (args.api_key_file.empty()) return args.api_key;
  return ReadKeyFile(args.api_key_file);
}

// The model, loaded on a thread of its own whose OpenMP team ends with it:
// libgomp gives every thread that starts parallel regions a team of its
// own, and while the teams' threads outnumber the cores their waits between
// regions spin only briefly, then sleep, which slowed each decode step on 2
// cores 1.8x. An exception is rethrown here, to attn_cli's last resorts.
Result<std::shared_ptr<const LanguageModel>> LoadOnItsOwnThread(
    const ServeArgs& args) {
  Result<std::shared_ptr<const LanguageModel>> model =
      InvalidArgument("not loaded");
  std::exception_ptr thrown;
  std::thread([&] {
    try {
      model = LoadLanguageModel(args.model, args.flags);
    } catch (...) {
      thrown = std::current_exception();
    }
  }).join();
  if (thrown) std::rethrow_exception(thrown);
  return model;
}

// What the API says of the model: --alias, else the folder's name.
serve::ServedModel Described(const ServeArgs& args) {
  serve::ServedModel served;
  served.id = args.alias.empty()
                  ? std::filesystem::path(args.model).filename().string()
                  : args.alias;
  if (served.id.empty()) served.id = "model";
  served.context = args.scheduler.context;
  served.parallel = args.scheduler.parallel;
  return served;
}

// New requests get 503 and /health turns 503; those running finish within
// --timeout or end with an error; then their replies are written out and
// the port closes.
void Drain(serve::HttpFrontEnd& front, serve::Scheduler& scheduler,
           int64_t timeout) {
  const serve::Clock::time_point deadline =
      serve::Clock::now() + std::chrono::seconds(timeout);
  front.Refuse();
  scheduler.Stop(deadline);
  front.WaitIdle(deadline + std::chrono::seconds(1));
  front.Close();
}

int Serve(ServeArgs& args) {
  if (!args.api_key.empty() && !args.api_key_file.empty()) {
    return Usage("--api-key and --api-key-file: give one");
  }
  // A connection holds a thread while its request waits or streams: room
  // for every running and queued one, and for /health and /metrics.
  if (args.scheduler.parallel + args.scheduler.max_queue > kMaxWaiting) {
    return Usage("--parallel " + std::to_string(args.scheduler.parallel) +
                 " + --max-queue " + std::to_string(args.scheduler.max_queue) +
                 ": at most " + std::to_string(kMaxWaiting) +
                 " (each running or waiting request holds a thread)");
  }
  Result<std::string> key = ApiKey(args);
  if (!key.ok()) return Fail(key.status().message());
  args.http.api_key = *key;
  args.http.max_body_bytes = args.max_body;
  args.http.read_timeout = std::chrono::seconds(args.timeout);
  args.http.threads =
      static_cast<int>(args.scheduler.parallel + args.scheduler.max_queue + 16);
  StopSignals signals;

  serve::HttpFrontEnd front(args.http);
  Result<int> port = front.Listen();
  if (!port.ok()) return Fail(port.status().message());
  std::fprintf(stderr, "attn serve: listening on http://%s:%d, loading %s\n",
               args.http.host.c_str(), *port, args.model.c_str());

  auto model = LoadOnItsOwnThread(args);
  if (!model.ok()) return Fail(model.status().message());
  auto tokenizer =
      LoadTokenizerFor(**model, args.model, "--model", args.flags.max_memory);
  if (!tokenizer.ok()) return Fail(tokenizer.status().message());
  auto context = ContextSize(args.scheduler.context, **model);
  if (!context.ok()) return Fail(context.status().message());
  args.scheduler.context = *context;
  auto scheduler = serve::Scheduler::Start(*model, *tokenizer, args.scheduler,
                                           &front.metrics());
  if (!scheduler.ok()) return Fail(scheduler.status().message());

  const serve::ServedModel served = Described(args);
  signals.Ready();
  front.Ready(*tokenizer, scheduler->get(), served);
  std::fprintf(stderr,
               "attn serve: ready: model '%s', %lld sequences of %lld "
               "tokens\n",
               served.id.c_str(), static_cast<long long>(served.parallel),
               static_cast<long long>(served.context));

  std::fprintf(stderr, "attn serve: stopping (%s)\n", signals.Wait());
  Drain(front, **scheduler, args.timeout);
  return 0;
}

}  // namespace

Command AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* command = app.add_subcommand(
      "serve",
      "Serve a model's folder over HTTP with OpenAI's API "
      "(/v1/chat/completions, /v1/completions), batching every request");
  command
      ->add_option("--model", args->model,
                   "a model's folder as Hugging Face publishes it, with its "
                   "tokenizer (a quantized folder too)")
      ->required()
      ->check(FilePath());
  command->add_option("--alias", args->alias,
                      "the model's name in the API (default: the folder's "
                      "name)");
  command->add_option("--host", args->http.host,
                      "address to listen on (default 127.0.0.1; 0.0.0.0 for "
                      "every interface)");
  command
      ->add_option("--port", args->http.port,
                   "port (default 8080; 0: any free one, printed)")
      ->check(IntegerIn(0, 65535));
  command
      ->add_option("--parallel", args->scheduler.parallel,
                   "sequences decoded at once; a request's n choices take n "
                   "(default 4)")
      ->check(IntegerIn(1, 4096));
  command
      ->add_option("--max-queue", args->scheduler.max_queue,
                   "requests that wait for a sequence; beyond, 429 (default "
                   "64)")
      ->check(IntegerIn(0, 65536));
  command
      ->add_option("--ctx-size", args->scheduler.context,
                   "tokens each sequence holds, prompt and reply, reserved "
                   "at start (default: the model's context, at most 4096)")
      ->check(IntegerIn(2));
  command
      ->add_option("--prefill-chunk", args->scheduler.prefill_chunk,
                   "most prompt tokens one step runs, so that running "
                   "streams keep getting tokens (default 256)")
      ->check(IntegerIn(1, 1 << 20));
  command->add_option("--api-key", args->api_key,
                      "every route but /health needs 'Authorization: Bearer "
                      "KEY'");
  command
      ->add_option("--api-key-file", args->api_key_file,
                   "as --api-key, the key read from the file's first line "
                   "(kept out of the process list)")
      ->check(FilePath());
  command
      ->add_option("--max-body-bytes", args->max_body,
                   "largest request body, e.g. 1M (default 16M); beyond, 413")
      ->check(ByteSize())
      ->transform(CLI::AsSizeValue(false));
  command
      ->add_option("--timeout", args->timeout,
                   "seconds a client may take to send a request (then 408), "
                   "and that SIGTERM gives requests in flight (default 30)")
      ->check(IntegerIn(1, 86400));
  args->flags.AddTo(command);
  return {command, [args] { return Serve(*args); }};
}

}  // namespace attn::cli
