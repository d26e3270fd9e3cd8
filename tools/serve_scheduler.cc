#include "tools/serve_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attn/model.hpp"

namespace attn::serve {
namespace {

// A running sequence's cache is copied for a new prompt (Fork, then
// Truncate) when they share at least this many tokens: copying a token's
// K/V rows costs far less than computing them, but the copy is of the
// whole sequence.
constexpr int64_t kMinForkPrefix = 32;
// An idle sequence is taken over for a prompt sharing at least this many
// tokens with it (chat templates share a few header tokens between
// unrelated conversations).
constexpr int64_t kMinIdlePrefix = 16;

size_t CommonPrefix(const std::vector<int64_t>& a,
                    const std::vector<int64_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

TokenLogprob LogProbabilities(const float* logits, int64_t vocab, int64_t id,
                              int64_t top) {
  const float peak = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - peak);
  const double log_sum = peak + std::log(sum);
  TokenLogprob out;
  out.id = id;
  out.logprob = logits[id] - log_sum;
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<size_t>(std::min(top, vocab));
  std::partial_sort(
      order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
  for (size_t i = 0; i < k; ++i) {
    out.top.emplace_back(order[i], logits[order[i]] - log_sum);
  }
  return out;
}

// How many bytes at the end of `text` could begin one of `stops`.
size_t HeldForStops(const std::string& text,
                    const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& stop : stops) {
    for (size_t n = std::min(stop.size() - 1, text.size()); n > held; --n) {
      if (text.compare(text.size() - n, n, stop, 0, n) == 0) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace

bool Job::Take(std::deque<Event>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || over_; });
  for (Event& e : events_) out->push_back(std::move(e));
  events_.clear();
  return !over_;
}

int64_t Job::completion_tokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completion_tokens_;
}

void Job::Push(Event event, bool last) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (over_) return;
    events_.push_back(std::move(event));
    over_ = last;
  }
  ready_.notify_all();
}

void Job::AddCompletionTokens(int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  completion_tokens_ += count;
}

struct Scheduler::Slot {
  int64_t sequence = 0;
  std::vector<int64_t> tokens;  // what its cache holds
  bool owned = false;           // else idle, kept for its prefix
  uint64_t last_used = 0;
};

struct Scheduler::Choice {
  Choice(int64_t index, int64_t sequence, Sampler sampler,
         std::shared_ptr<const Tokenizer> tokenizer)
      : index(index),
        sequence(sequence),
        sampler(std::move(sampler)),
        stream(std::move(tokenizer)) {}
  int64_t index, sequence;
  Sampler sampler;
  DecodeStream stream;
  std::string held;  // text not sent yet: it may begin a stop string
  int64_t generated = 0;
  int64_t next = 0;  // the token the next step feeds
  bool done = false;
  Clock::time_point last_token;
};

struct Scheduler::Active {
  std::shared_ptr<Job> job;
  GenerationRequest request;
  Clock::time_point submitted;
  int64_t sequence = 0;         // the prompt's
  int64_t prefilled = 0;        // prompt tokens its cache holds
  std::vector<Choice> choices;  // empty while the prompt is prefilled
  int64_t open = 0;             // choices not done
  bool over = false;            // finished, failed or cancelled
};

Scheduler::Scheduler(std::shared_ptr<const LanguageModel> model,
                     std::shared_ptr<const Tokenizer> tokenizer,
                     const SchedulerOptions& options, Metrics* metrics)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      metrics_(metrics) {}

Scheduler::~Scheduler() { Stop(Clock::now()); }

Result<std::unique_ptr<Scheduler>> Scheduler::Start(
    std::shared_ptr<const LanguageModel> model,
    std::shared_ptr<const Tokenizer> tokenizer, const SchedulerOptions& options,
    Metrics* metrics) {
  std::unique_ptr<Scheduler> s(
      new Scheduler(std::move(model), std::move(tokenizer), options, metrics));
  BatchOptions batch;
  batch.max_sequences = options.parallel;
  batch.max_length = options.context;
  // The serving state beside the caches: per sequence its token list, and
  // a sample's scratch over the vocabulary.
  const auto vocab = static_cast<uint64_t>(s->model_->config().vocab_size);
  batch.caller_bytes =
      static_cast<uint64_t>(options.parallel * options.context) *
          sizeof(int64_t) * 2 +
      vocab * (sizeof(float) + sizeof(double) + 2 * sizeof(int64_t)) +
      s->tokenizer_->memory_bytes();
  ATTN_ASSIGN_OR_RETURN(s->batch_, Batch::Create(Model::Of(s->model_), batch));
  s->slots_.reserve(static_cast<size_t>(options.parallel));
  s->PublishGauges();
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

SubmitResult Scheduler::Submit(GenerationRequest request,
                               std::shared_ptr<Job>* job) {
  auto j = std::make_shared<Job>();
  j->prompt_tokens_ = static_cast<int64_t>(request.prompt.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return SubmitResult::kStopping;
    // Requests that fit a free slot now do not count as waiting.
    if (static_cast<int64_t>(queue_.size()) >=
        options_.max_queue + free_slots_.load()) {
      return SubmitResult::kQueueFull;
    }
    queue_.push_back({j, std::move(request), Clock::now()});
  }
  wake_.notify_one();
  *job = std::move(j);
  return SubmitResult::kQueued;
}

void Scheduler::Stop(Clock::time_point deadline) {
  std::deque<Pending> refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = deadline;
    }
    refused.swap(queue_);
  }
  for (Pending& p : refused) {
    p.job->Push({Event::Kind::kError,
                 0,
                 {},
                 {},
                 {},
                 "the server is shutting down",
                 503},
                true);
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int64_t Scheduler::FreeSlots() const {
  int64_t owned = 0;
  for (const Slot& slot : slots_) owned += slot.owned;
  return options_.parallel - owned - reserved_;
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<Pending> admitted;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !queue_.empty() || !active_.empty();
      });
      if (stopping_ && (active_.empty() || Clock::now() >= deadline_)) break;
      // A client that left while waiting gives its place up.
      queue_.erase(
          std::remove_if(queue_.begin(), queue_.end(),
                         [](const Pending& p) { return p.job->cancelled(); }),
          queue_.end());
      int64_t free = FreeSlots();
      while (!queue_.empty() && queue_.front().request.n <= free) {
        free -= queue_.front().request.n;
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    for (Pending& p : admitted) {
      if (!p.job->cancelled()) Admit(p);
    }
    DropCancelled();
    const Status status = RunStep();
    if (!status.ok()) FailAll("the engine failed: " + status.message(), 500);
    PublishGauges();
  }
  FailAll(
      "the server is shutting down: the request did not finish within "
      "--timeout",
      503);
  PublishGauges();
}

// Frees a place in the batch when every one holds a sequence: the least
// recently used idle one goes (admission counted that one is idle).
Status Scheduler::MakeRoom() {
  if (static_cast<int64_t>(slots_.size()) < options_.parallel) return {};
  auto oldest = slots_.end();
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (!it->owned &&
        (oldest == slots_.end() || it->last_used < oldest->last_used)) {
      oldest = it;
    }
  }
  if (oldest == slots_.end()) {
    return Status(StatusCode::kInternal, "no idle sequence to evict");
  }
  ATTN_RETURN_IF_ERROR(batch_->Remove(oldest->sequence));
  slots_.erase(oldest);
  return {};
}

// A new owned sequence: an empty one, or a copy of `source`'s holding
// `tokens`.
Result<int64_t> Scheduler::NewSequence(int64_t source,
                                       std::vector<int64_t> tokens) {
  ATTN_RETURN_IF_ERROR(MakeRoom());
  ATTN_ASSIGN_OR_RETURN(const int64_t sequence,
                        source < 0 ? batch_->Add() : batch_->Fork(source));
  slots_.push_back({sequence, std::move(tokens), true, 0});
  return sequence;
}

Scheduler::Slot* Scheduler::SlotOf(int64_t sequence) {
  for (Slot& slot : slots_) {
    if (slot.sequence == sequence) return &slot;
  }
  return nullptr;
}

// Gives `pending` a sequence whose cache holds the longest prefix of its
// prompt it can have for free (an idle slot's) or for a copy (a running
// one's, when long enough); steps prefill the rest.
void Scheduler::Admit(Pending& pending) {
  const std::vector<int64_t>& prompt = pending.request.prompt;
  const auto size = static_cast<int64_t>(prompt.size());
  Slot* idle = nullptr;
  Slot* running = nullptr;
  int64_t idle_match = 0, running_match = 0;
  for (Slot& slot : slots_) {
    const auto match = static_cast<int64_t>(CommonPrefix(slot.tokens, prompt));
    int64_t& best = slot.owned ? running_match : idle_match;
    if (match > best) {
      best = match;
      (slot.owned ? running : idle) = &slot;
    }
  }
  int64_t keep = 0;
  Result<int64_t> sequence = int64_t{0};
  // A short match is not worth another conversation's cache: a fresh
  // sequence (or the least recently used idle one) is taken instead.
  if (idle && idle_match >= running_match && idle_match >= kMinIdlePrefix) {
    idle->owned = true;
    keep = idle_match;
    sequence = idle->sequence;
  } else if (running && running_match >= kMinForkPrefix) {
    keep = running_match;
    sequence = NewSequence(running->sequence, running->tokens);
  } else {
    sequence = NewSequence(-1, {});
  }
  // The prompt's last token runs again when all of it is cached: its
  // logits start the reply.
  keep = std::min(keep, size - 1);
  Status status = sequence.status();
  if (status.ok()) status = batch_->Truncate(*sequence, keep);
  if (!status.ok()) {
    if (sequence.ok()) Release(*sequence);
    pending.job->Push({Event::Kind::kError,
                       0,
                       {},
                       {},
                       {},
                       "the engine failed: " + status.message()},
                      true);
    return;
  }
  SlotOf(*sequence)->tokens.resize(static_cast<size_t>(keep));
  metrics_->CountTokens(size, 0);
  metrics_->CountReused(keep);
  reserved_ += pending.request.n - 1;
  auto active = std::make_unique<Active>();
  active->job = std::move(pending.job);
  active->request = std::move(pending.request);
  active->submitted = pending.submitted;
  active->sequence = *sequence;
  active->prefilled = keep;
  active_.push_back(std::move(active));
}

// One step: the next token of every running choice, and prompt chunks (in
// arrival order, prefill_chunk tokens in all) of those still prefilling.
Status Scheduler::RunStep() {
  struct Owner {
    Active* active;
    int64_t choice;  // -1: a prompt chunk
    int64_t count;
  };
  std::vector<Batch::Request> requests;
  std::vector<Owner> owners;
  for (auto& active : active_) {
    for (Choice& c : active->choices) {
      if (c.done) continue;
      requests.push_back({c.sequence, &c.next, 1, false});
      owners.push_back({active.get(), c.index, 1});
    }
  }
  int64_t budget = options_.prefill_chunk;
  for (auto& active : active_) {
    if (!active->choices.empty() || budget == 0) continue;
    const auto size = static_cast<int64_t>(active->request.prompt.size());
    const int64_t take = std::min(budget, size - active->prefilled);
    requests.push_back({active->sequence,
                        active->request.prompt.data() + active->prefilled, take,
                        false});
    owners.push_back({active.get(), -1, take});
    budget -= take;
  }
  if (requests.empty()) return {};
  ATTN_RETURN_IF_ERROR(batch_->Step(requests.data(), requests.size()));
  for (size_t i = 0; i < requests.size(); ++i) {
    Owner& owner = owners[i];
    Active& active = *owner.active;
    // A job that failed earlier in this loop may have freed (and a fork
    // evicted) its sequences.
    if (active.over) continue;
    std::vector<int64_t>& cached = SlotOf(requests[i].sequence)->tokens;
    cached.insert(cached.end(), requests[i].tokens,
                  requests[i].tokens + requests[i].count);
    if (owner.choice >= 0) {
      Sample(active, active.choices[size_t(owner.choice)], batch_->logits(i));
      continue;
    }
    active.prefilled += owner.count;
    if (active.prefilled ==
        static_cast<int64_t>(active.request.prompt.size())) {
      StartChoices(active, batch_->logits(i));
    }
  }
  RemoveOver();
  return {};
}

// The prompt is in: its sequence is choice 0, forks are the others, and
// each samples its first token from the prompt's logits.
void Scheduler::StartChoices(Active& active, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  const std::vector<float> first(logits, logits + vocab);
  const GenerationRequest& request = active.request;
  active.choices.reserve(static_cast<size_t>(request.n));
  for (int64_t i = 0; i < request.n; ++i) {
    int64_t sequence = active.sequence;
    if (i > 0) {
      --reserved_;
      Result<int64_t> fork =
          NewSequence(active.sequence, SlotOf(active.sequence)->tokens);
      if (!fork.ok()) {
        reserved_ -= request.n - 1 - i;
        return FailJob(active, "the engine failed: " + fork.status().message());
      }
      sequence = *fork;
    }
    SamplingOptions sampling = request.sampling;
    sampling.stream = static_cast<uint64_t>(i);
    // The request's options were checked before it was queued.
    Result<Sampler> sampler = Sampler::Create(sampling);
    active.choices.emplace_back(i, sequence, std::move(*sampler), tokenizer_);
    ++active.open;
  }
  for (Choice& c : active.choices) {
    if (active.over) break;  // a choice failed the job
    Sample(active, c, first.data());
  }
}

// Ids past the tokenizer's (a model's padded vocabulary) have no text:
// they are never sampled.
int64_t Scheduler::SamplingVocab() const {
  return std::min(model_->config().vocab_size, tokenizer_->vocab_size());
}

void Scheduler::Sample(Active& active, Choice& choice, const float* logits) {
  const int64_t vocab = SamplingVocab();
  const int64_t id = choice.sampler.Sample(logits, vocab);
  TokenLogprob logprob;
  if (active.request.top_logprobs >= 0) {
    logprob = LogProbabilities(logits, vocab, id, active.request.top_logprobs);
  }
  const Clock::time_point now = Clock::now();
  if (choice.generated == 0) {
    if (choice.index == 0) {
      metrics_->ObserveFirstToken(Seconds(now - active.submitted));
    }
  } else {
    metrics_->ObserveTokenGap(Seconds(now - choice.last_token));
  }
  choice.last_token = now;
  ++choice.generated;
  active.job->AddCompletionTokens(1);
  metrics_->CountTokens(0, 1);
  const std::vector<int64_t>& eos = tokenizer_->eos_ids();
  if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
    return Finish(active, choice, "stop", true);
  }
  Emit(active, choice, id, std::move(logprob));
}

// Sends the text `id` adds, but for what may begin a stop string; a stop
// string found ends the choice there.
void Scheduler::Emit(Active& active, Choice& choice, int64_t id,
                     TokenLogprob logprob) {
  Result<std::string> piece = choice.stream.Next(id);
  if (!piece.ok()) return FailJob(active, piece.status().message());
  choice.held += *piece;
  const std::vector<std::string>& stops = active.request.stop;
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stops) {
    stop_at = std::min(stop_at, choice.held.find(stop));
  }
  const size_t send =
      stop_at != std::string::npos
          ? stop_at
          : choice.held.size() - HeldForStops(choice.held, stops);
  Event event{Event::Kind::kText,
              choice.index,
              choice.held.substr(0, send),
              {},
              {},
              {}};
  if (active.request.top_logprobs >= 0) event.logprobs.push_back(logprob);
  choice.held.erase(0, send);
  active.job->Push(std::move(event));
  if (stop_at != std::string::npos)
    return Finish(active, choice, "stop", false);
  if (choice.generated == active.request.max_tokens) {
    return Finish(active, choice, "length", true);
  }
  choice.next = id;
}

// Ends `choice`; `flush` sends the text held back. The job ends with its
// last choice.
void Scheduler::Finish(Active& active, Choice& choice,
                       const std::string& reason, bool flush) {
  if (choice.done) return;
  if (flush) {
    const std::string rest = choice.held + choice.stream.Finish();
    if (!rest.empty()) {
      active.job->Push({Event::Kind::kText, choice.index, rest, {}, {}, {}});
    }
  }
  choice.held.clear();
  choice.done = true;
  Release(choice.sequence);
  --active.open;
  active.over = active.open == 0;
  active.job->Push({Event::Kind::kFinish, choice.index, {}, {}, reason, {}},
                   active.over);
}

// Ends the whole job with `error`, its sequences freed.
void Scheduler::FailJob(Active& active, const std::string& error, int status) {
  if (active.choices.empty()) {
    Release(active.sequence);
    reserved_ -= active.request.n - 1;
  }
  for (Choice& c : active.choices) {
    if (!c.done) Release(c.sequence);
    c.done = true;
  }
  active.open = 0;
  active.over = true;
  active.job->Push({Event::Kind::kError, 0, {}, {}, {}, error, status}, true);
}

void Scheduler::Release(int64_t sequence) {
  if (Slot* slot = SlotOf(sequence)) {
    slot->owned = false;
    slot->last_used = ++clock_;
  }
}

void Scheduler::DropCancelled() {
  for (auto& active : active_) {
    if (active->job->cancelled()) FailJob(*active, "cancelled");
  }
  RemoveOver();
}

void Scheduler::RemoveOver() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const auto& a) { return a->over; }),
                active_.end());
}

void Scheduler::FailAll(const std::string& error, int status) {
  for (auto& active : active_) FailJob(*active, error, status);
  active_.clear();
}

void Scheduler::PublishGauges() {
  int64_t running = 0, tokens = 0;
  for (const Slot& slot : slots_) {
    running += slot.owned;
    tokens += static_cast<int64_t>(slot.tokens.size());
  }
  free_slots_.store(options_.parallel - running - reserved_);
  int64_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued = static_cast<int64_t>(queue_.size());
  }
  metrics_->SetGauges(queued, running, tokens,
                      options_.parallel * options_.context,
                      batch_->cache_bytes());
}

}  // namespace attn::serve
