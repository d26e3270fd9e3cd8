// attn serve's engine loop: one Batch, every running request a sequence.
// HTTP threads Submit requests and read their Job's events; one scheduler
// thread admits queued requests, runs each step (decode tokens of every
// running choice beside chunks of new prompts), samples, and hands text to
// the jobs. Finished sequences stay in the batch while their slot is free,
// so that a later prompt with the same prefix reuses their cache.
#ifndef ATTN_TOOLS_SERVE_SCHEDULER_H_
#define ATTN_TOOLS_SERVE_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "attn/status.hpp"
#include "attn/tokenizer.hpp"
#include "tools/serve_metrics.h"

namespace attn::serve {

using Clock = std::chrono::steady_clock;

// What one request asks the engine for.
struct GenerationRequest {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 1;         // prompt + max_tokens - 1 <= the context
  int64_t n = 1;                  // choices, forks of one prefill
  SamplingOptions sampling;       // choice i draws from stream i
  std::vector<std::string> stop;  // strings that end a choice, never sent
  int64_t top_logprobs = -1;      // -1: no log-probabilities
};

struct TokenLogprob {
  int64_t id = 0;
  double logprob = 0.0;
  std::vector<std::pair<int64_t, double>> top;  // best first
};

struct Event {
  enum class Kind { kText, kFinish, kError };
  Kind kind = Kind::kText;
  int64_t choice = 0;
  std::string text;  // kText: what the choice adds (UTF-8, maybe empty)
  std::vector<TokenLogprob> logprobs;  // kText: the tokens sampled
  std::string finish_reason;           // kFinish: "stop" or "length"
  std::string error;                   // kError: why the request ended
  int status = 500;  // kError: the HTTP status (503: shutting down)
};

// One request as its HTTP thread sees it: events arrive in order, each
// choice's text and then its finish; an error ends every choice.
class Job {
 public:
  // Waits up to `timeout` for events and moves them into `out`; false once
  // the job is over and every event was taken.
  bool Take(std::deque<Event>* out, std::chrono::milliseconds timeout);
  // The client went away: the scheduler drops the job at its next step.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;

 private:
  friend class Scheduler;
  void Push(Event event, bool last = false);
  void AddCompletionTokens(int64_t count);

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
  bool over_ = false;
  std::atomic<bool> cancelled_{false};
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;  // under mutex_
};

struct SchedulerOptions {
  int64_t parallel = 4;         // sequences decoded at once (choices count)
  int64_t max_queue = 64;       // requests waiting beyond them
  int64_t context = 0;          // tokens per sequence
  int64_t prefill_chunk = 256;  // prompt tokens a step takes at most
};

enum class SubmitResult { kQueued, kQueueFull, kStopping };

class Scheduler {
 public:
  // Creates the batch (every sequence's cache, checked against the model's
  // memory cap) and starts the scheduler thread.
  static Result<std::unique_ptr<Scheduler>> Start(
      std::shared_ptr<const LanguageModel> model,
      std::shared_ptr<const Tokenizer> tokenizer,
      const SchedulerOptions& options, Metrics* metrics);
  ~Scheduler();

  // Queues `request` (checked by the caller against the context and
  // parallel); `job` is its channel.
  SubmitResult Submit(GenerationRequest request, std::shared_ptr<Job>* job);
  // Stops admitting; running requests go on until `deadline`, when those
  // left end with an error. Returns once the thread has stopped.
  void Stop(Clock::time_point deadline);

 private:
  struct Slot;
  struct Choice;
  struct Active;
  struct Pending {
    std::shared_ptr<Job> job;
    GenerationRequest request;
    Clock::time_point submitted;
  };

  Scheduler(std::shared_ptr<const LanguageModel> model,
            std::shared_ptr<const Tokenizer> tokenizer,
            const SchedulerOptions& options, Metrics* metrics);
  void Loop();
  void Admit(Pending& pending);
  Status MakeRoom();
  Result<int64_t> NewSequence(int64_t source, std::vector<int64_t> tokens);
  Slot* SlotOf(int64_t sequence);  // null once evicted
  int64_t FreeSlots() const;
  Status RunStep();
  int64_t SamplingVocab() const;
  void StartChoices(Active& active, const float* logits);
  void Sample(Active& active, Choice& choice, const float* logits);
  void Emit(Active& active, Choice& choice, int64_t id, TokenLogprob logprob);
  void Finish(Active& active, Choice& choice, const std::string& reason,
              bool flush);
  void FailJob(Active& active, const std::string& error, int status = 500);
  void Release(int64_t sequence);
  void DropCancelled();
  void RemoveOver();
  void FailAll(const std::string& error, int status);
  void PublishGauges();

  std::shared_ptr<const LanguageModel> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  SchedulerOptions options_;
  Metrics* metrics_;
  std::unique_ptr<Batch> batch_;

  std::mutex mutex_;  // guards queue_, stopping_, deadline_
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  Clock::time_point deadline_;

  // The scheduler thread's own.
  std::vector<std::unique_ptr<Active>> active_;
  std::vector<Slot> slots_;  // every live sequence of the batch
  int64_t reserved_ = 0;     // slots promised to admitted requests' forks
  uint64_t clock_ = 0;       // use order of idle slots
  std::atomic<int64_t> free_slots_{0};  // published for Submit
  std::thread thread_;
};

}  // namespace attn::serve

#endif  // ATTN_TOOLS_SERVE_SCHEDULER_H_
