#include "router/router.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "router/assembler.h"

namespace narwhal::router {
namespace {

using engines::EngineFailure;
using engines::FailureReason;
using engines::Phase;
using json = nlohmann::json;

// Metadata events held before the first token of a streaming attempt (they
// are flushed with it; later ones are dropped).
constexpr size_t kMaxHeldEvents = 64;

json OptionalSeconds(const std::optional<double>& s) {
  return s ? json(*s) : json(nullptr);
}

// Receives one decode attempt's events: holds them until the first token and
// then relays them in order (streaming clients), or assembles them
// (non-streaming clients).
class AttemptRelay : public engines::DecodeObserver {
 public:
  AttemptRelay(const Request& request, ResponseChannel& channel, const Clock& clock,
               Metrics* metrics)
      : request_(request),
        channel_(channel),
        clock_(clock),
        metrics_(metrics),
        assembler_(request.api) {}

  bool OnEvent(std::string_view data, const engines::StreamEvent& ev) override {
    if (ev.kind == engines::EventKind::kToken) {
      tokens_ += ev.tokens;
      last_token_ = clock_.Now();
      if (!first_token_) first_token_ = last_token_;
      if (metrics_ != nullptr) metrics_->decode_tokens_total.Increment(ev.tokens);
    }
    if (ev.completion_tokens >= 0) completion_tokens_ = ev.completion_tokens;
    if (ev.prompt_tokens >= 0) prompt_tokens_ = ev.prompt_tokens;
    if (!ev.finish_reason.empty()) finish_reason_ = ev.finish_reason;

    if (!request_.stream) {
      if (!assembler_.Add(data)) {
        assembly_failed_ = true;
        return false;
      }
      return true;
    }
    if (!first_token_) {
      if (held_.size() < kMaxHeldEvents) {
        held_.push_back(Chunk{std::string(data), ev.tokens, ev.text, ev.finish_reason});
      }
      return true;
    }
    if (!committed_) {
      committed_ = true;  // the first token: output becomes visible now
      for (const Chunk& h : held_) {
        if (!Push(h.data, h.tokens, h.text, h.finish_reason)) return false;
      }
      held_.clear();
    }
    return Push(data, ev.tokens, ev.text, ev.finish_reason);
  }

  bool output_started() const { return committed_; }
  bool assembly_failed() const { return assembly_failed_; }
  bool client_too_slow() const { return client_too_slow_; }
  const Assembler& assembler() const { return assembler_; }
  const std::optional<MonoTime>& first_token() const { return first_token_; }
  MonoTime last_token() const { return last_token_; }
  long long output_tokens() const {
    return completion_tokens_ >= 0 ? completion_tokens_ : tokens_;
  }
  long long prompt_tokens() const { return prompt_tokens_; }
  const std::string& finish_reason() const { return finish_reason_; }

 private:
  bool Push(std::string_view data, int tokens, std::string_view text,
            std::string_view finish_reason) {
    if (channel_.Push(data, tokens, text, finish_reason, request_.deadline)) return true;
    // Blocked until the request deadline by a client that stopped reading.
    if (!channel_.cancelled()) client_too_slow_ = true;
    return false;
  }

  const Request& request_;
  ResponseChannel& channel_;
  const Clock& clock_;
  Metrics* metrics_;
  Assembler assembler_;
  std::vector<Chunk> held_;
  std::optional<MonoTime> first_token_;
  MonoTime last_token_{};
  long long tokens_ = 0;
  long long completion_tokens_ = -1;
  long long prompt_tokens_ = -1;
  std::string finish_reason_;
  bool committed_ = false;
  bool assembly_failed_ = false;
  bool client_too_slow_ = false;
};

EngineFailure RouterFailure(Phase phase, const std::string& iid, FailureReason reason, int status,
                            std::string detail, bool transient) {
  EngineFailure f;
  f.phase = phase;
  f.iid = iid;
  f.reason = reason;
  f.status = status;
  f.detail = std::move(detail);
  f.transient = transient;
  return f;
}

// The SPEC §4 "situation" of an engine-leg failure: terminal, status, type.
Outcome OutcomeFromFailure(const EngineFailure& f, bool output_started) {
  Outcome o;
  o.output_started = output_started;
  o.message = f.detail;
  o.status = f.status;
  o.reason = std::string(engines::FailureReasonName(f.reason));
  switch (f.reason) {
    case FailureReason::kCancelled:
      o.terminal = Terminal::kCancelled;
      o.status = output_started ? 200 : 499;
      o.error_type = ErrorType::kNone;
      break;
    case FailureReason::kDeadline:
      o.terminal = Terminal::kExpired;
      o.status = 504;
      o.error_type = ErrorType::kRequestExpired;
      break;
    case FailureReason::kHandoffExpired:
      o.terminal = Terminal::kExpired;
      o.status = 504;
      o.error_type = ErrorType::kHandoffExpired;
      break;
    case FailureReason::kEngineRejected:
      o.terminal = Terminal::kFailed;
      o.error_type = ErrorType::kInvalidRequest;
      break;
    default:
      o.terminal = Terminal::kFailed;
      o.error_type = f.phase == Phase::kPrefill ? ErrorType::kPrefill : ErrorType::kDecode;
      break;
  }
  return o;
}

Outcome Refusal(Terminal terminal, std::string reason, int status, ErrorType type,
                std::string message) {
  Outcome o;
  o.terminal = terminal;
  o.reason = std::move(reason);
  o.status = status;
  o.error_type = type;
  o.message = std::move(message);
  return o;
}

}  // namespace

// One client request's life on a worker thread.
class Router::Run {
 public:
  Run(Router& router, Request request, std::shared_ptr<ResponseChannel> channel)
      : r_(router), request_(std::move(request)), channel_(std::move(channel)) {}

  void Execute() {
    for (int attempt = 1;; ++attempt) {
      attempts_ = attempt;
      if (attempt > 1) {
        if (r_.metrics_ != nullptr) r_.metrics_->retry_attempts_total.Increment();
        if (!r_.clock_.SleepFor(engines::FromSeconds(next_backoff_s_),
                                &channel_->cancel_token())) {
          RefundCredit();
          return Finish(OutcomeFromFailure(Cancelled(Phase::kPrefill), false));
        }
      }
      if (!RunAttempt(attempt)) return;
    }
  }

 private:
  EngineFailure Cancelled(Phase phase) {
    return RouterFailure(phase, "", FailureReason::kCancelled, 499, "client went away", false);
  }

  // One prefill + decode attempt. Returns true when a retry should follow.
  bool RunAttempt(int attempt) {
    const Settings& s = r_.settings_;
    if (channel_->cancelled()) {
      RefundCredit();
      Finish(OutcomeFromFailure(Cancelled(Phase::kPrefill), false));
      return false;
    }
    if (r_.clock_.Now() >= request_.deadline) {
      RefundCredit();
      Finish(OutcomeFromFailure(
          RouterFailure(Phase::kPrefill, "", FailureReason::kDeadline, 504,
                        "request deadline passed before the prefill leg", false),
          false));
      return false;
    }

    // --- prefill (B1, B2) ---
    std::optional<Fleet::Reservation> producer = r_.fleet_.PickAndReserve(Phase::kPrefill, excluded_);
    if (!producer) {
      RefundCredit();
      FinishNoEngine(Phase::kPrefill);
      return false;
    }
    credit_held_ = false;  // the retry's credit is spent once its prefill dispatches
    const engines::EngineTarget producer_target = producer->target();
    prefill_iid_ = producer_target.iid;
    decode_iid_.clear();
    engines::LegOptions prefill_options;
    prefill_options.backend_request_id = BackendId(attempt, 'p');  // B8
    prefill_options.request_deadline = request_.deadline;
    const MonoTime handoff_start = r_.clock_.Now();  // B7: handoff age starts here
    prefill_options.leg_deadline = handoff_start + engines::FromSeconds(s.serving.prefill_timeout_s);
    prefill_options.cancel = &channel_->cancel_token();
    engines::PrefillOutcome prefill =
        r_.engines_.Prefill(producer_target, request_.api, request_.body, prefill_options);
    producer->Release();
    if (!prefill.ok()) return OnFailure(attempt, *prefill.failure, /*output_started=*/false);

    const MonoTime prefill_done = r_.clock_.Now();
    ttft_s_ = engines::Seconds(prefill_done - request_.arrived);  // B9
    if (r_.metrics_ != nullptr) {
      r_.metrics_->prefill_seconds.Observe(engines::Seconds(prefill_done - handoff_start));
    }
    r_.fleet_.RecordSuccess(producer_target.iid, Success::kPrefillHandoff);

    // --- decode placement, off the producer unless nothing else can (B5) ---
    std::optional<Fleet::Reservation> consumer =
        r_.fleet_.PickAndReserve(Phase::kDecode, excluded_, producer_target.iid);
    if (!consumer) {
      FinishNoEngine(Phase::kDecode);
      return false;
    }
    const engines::EngineTarget consumer_target = consumer->target();
    decode_iid_ = consumer_target.iid;

    // B7: the handoff must still be young enough when decode dispatches.
    if (s.serving.handoff_timeout_s > 0 &&
        r_.clock_.Now() - handoff_start > engines::FromSeconds(s.serving.handoff_timeout_s)) {
      consumer->Release();
      if (r_.metrics_ != nullptr) {
        r_.metrics_->handoff_rejected_total.Add({{"reason", "expired"}}).Increment();
      }
      // The handoff aged on its producer: a retry avoids the producer, not
      // the idle consumer.
      return OnFailure(attempt,
                       RouterFailure(Phase::kDecode, producer_target.iid,
                                     FailureReason::kHandoffExpired, 504,
                                     "KV handoff expired before decode dispatch", true),
                       false);
    }

    // --- decode (B3, B4) ---
    engines::LegOptions decode_options;
    decode_options.backend_request_id = BackendId(attempt, 'd');  // B8
    decode_options.request_deadline = request_.deadline;
    decode_options.cancel = &channel_->cancel_token();
    AttemptRelay relay(request_, *channel_, r_.clock_, r_.metrics_);
    engines::DecodeOutcome decode =
        r_.engines_.Decode(consumer_target, *prefill.result, request_.body, request_.stream,
                           decode_options, relay);
    consumer->Release();
    if (relay.first_token()) {
      first_byte_s_ = engines::Seconds(*relay.first_token() - request_.arrived);  // B9
      output_tokens_ = relay.output_tokens();
      if (output_tokens_ >= 2) {
        tpot_s_ = engines::Seconds(relay.last_token() - prefill_done) /
                  static_cast<double>(output_tokens_ - 1);
      }
    }
    prompt_tokens_ = relay.prompt_tokens();

    if (decode.ok()) {
      r_.fleet_.RecordSuccess(consumer_target.iid, Success::kDecodeDone);
      // "completed" means the client took the whole stream, not only that
      // the engine finished it.
      if (request_.stream && !channel_->WaitDrained(request_.deadline)) {
        Outcome o = OutcomeFromFailure(
            channel_->cancelled()
                ? Cancelled(Phase::kDecode)
                : RouterFailure(Phase::kDecode, consumer_target.iid, FailureReason::kDeadline,
                                504, "request deadline passed while the client was not reading",
                                false),
            /*output_started=*/true);
        o.finish_reason = relay.finish_reason();
        Finish(std::move(o));
        return false;
      }
      Outcome o;
      o.terminal = Terminal::kCompleted;
      o.status = 200;
      o.output_started = request_.stream;
      o.finish_reason = relay.finish_reason();
      if (!request_.stream) o.body = relay.assembler().Build();
      Finish(std::move(o));
      return false;
    }
    EngineFailure failure = std::move(*decode.failure);
    if (failure.reason == FailureReason::kInvalidResponse &&
        failure.detail.rfind("invalid continuation:", 0) == 0 && r_.metrics_ != nullptr) {
      r_.metrics_->handoff_rejected_total.Add({{"reason", "invalid_continuation"}}).Increment();
    }
    if (relay.assembly_failed()) {
      failure = RouterFailure(Phase::kDecode, consumer_target.iid,
                              FailureReason::kInvalidResponse, 502,
                              "unassemblable decode response: " + relay.assembler().error(),
                              false);
    } else if (relay.client_too_slow()) {
      failure = RouterFailure(Phase::kDecode, consumer_target.iid, FailureReason::kDeadline, 504,
                              "request deadline passed while the client was not reading", false);
    }
    return OnFailure(attempt, std::move(failure), relay.output_started());
  }

  // Records a failed leg and decides whether to retry (B14).
  bool OnFailure(int attempt, EngineFailure f, bool output_started) {
    AttemptFailure af{attempt, f, output_started, false, ""};
    if (r_.metrics_ != nullptr) {
      r_.metrics_->attempt_failures_total
          .Add({{"phase", std::string(engines::PhaseName(f.phase))},
                {"reason", std::string(engines::FailureReasonName(f.reason))}})
          .Increment();
    }
    // Breaker evidence (never for client 4xx, cancellation or the deadline).
    r_.fleet_.RecordFailure(f, prefill_iid_);
    if (f.reason == FailureReason::kEngineRejected) {
      r_.fleet_.RecordSuccess(f.iid, Success::kEngineRejected);
    }
    // A retry avoids the engines that failed this request; a failed decode
    // also avoids that attempt's producer.
    for (const std::string& iid : {f.iid, f.evidence_iid, f.phase == Phase::kDecode ? prefill_iid_
                                                                                     : std::string()}) {
      if (!iid.empty() && std::find(excluded_.begin(), excluded_.end(), iid) == excluded_.end()) {
        excluded_.push_back(iid);
      }
    }

    const Settings& s = r_.settings_;
    if (f.reason == FailureReason::kCancelled) {
      af.retry_reason = "cancelled";
    } else if (output_started) {
      af.retry_reason = "output_started";
    } else if (f.reason == FailureReason::kDeadline) {
      af.retry_reason = "original_deadline";
    } else if (!f.transient) {
      af.retry_reason = "non_transient";
    } else if (attempt >= s.serving.max_attempts) {
      af.retry_reason = "attempt_limit";
    } else if (!r_.fleet_.CanPlace(Phase::kPrefill, excluded_) ||
               !r_.fleet_.CanPlace(Phase::kDecode, excluded_)) {
      af.retry_reason = "no_engine";
    } else {
      next_backoff_s_ = r_.Backoff(attempt);
      if (r_.clock_.Now() + engines::FromSeconds(next_backoff_s_) >= request_.deadline) {
        af.retry_reason = "original_deadline";
      } else if (!r_.retry_budget_.TryAcquire()) {
        af.retry_reason = "shared_budget";
        if (r_.metrics_ != nullptr) r_.metrics_->retry_denied_total.Increment();
      } else {
        af.retry_reason = "allowed";
        af.retry_scheduled = true;
        credit_held_ = true;
      }
    }
    failures_.push_back(af);
    if (af.retry_scheduled) return true;
    Finish(OutcomeFromFailure(f, output_started));
    return false;
  }

  void FinishNoEngine(Phase phase) {
    std::string why;
    if (r_.fleet_.Ready(&why)) {
      why = std::string("no engine left for the ") + std::string(engines::PhaseName(phase)) +
            " role after excluding the engines that failed this request";
    }
    Finish(Refusal(Terminal::kFailed, "no_engine", 503, ErrorType::kBackendUnavailable, why));
  }

  void RefundCredit() {
    if (credit_held_) r_.retry_budget_.Refund();
    credit_held_ = false;
  }

  std::string BackendId(int attempt, char phase) const {
    return request_.rid + "-" + std::to_string(attempt) + phase;
  }

  void Finish(Outcome o) {
    o.ttft_s = ttft_s_;
    o.first_byte_s = first_byte_s_;
    o.output_tokens = output_tokens_;
    o.prompt_tokens = prompt_tokens_;
    json failures = json::array();
    for (const AttemptFailure& af : failures_) {
      failures.push_back({{"attempt", af.attempt},
                          {"phase", engines::PhaseName(af.failure.phase)},
                          {"iid", af.failure.iid.empty() ? json(nullptr) : json(af.failure.iid)},
                          {"reason", engines::FailureReasonName(af.failure.reason)},
                          {"class", engines::BreakerClassName(af.failure.breaker_class)},
                          {"status", af.failure.status},
                          {"error", af.failure.detail},
                          {"transient", af.failure.transient},
                          {"output_started", af.output_started},
                          {"retry_scheduled", af.retry_scheduled},
                          {"retry_reason", af.retry_reason}});
    }
    json info = {{"prefill_iid", prefill_iid_.empty() ? json(nullptr) : json(prefill_iid_)},
                 {"decode_iid", decode_iid_.empty() ? json(nullptr) : json(decode_iid_)},
                 {"crossed", !decode_iid_.empty() && decode_iid_ != prefill_iid_},
                 {"attempts", attempts_},
                 {"attempt_failures", std::move(failures)},
                 {"tpot_s", OptionalSeconds(tpot_s_)}};
    r_.Finish(request_, *channel_, std::move(o), info);
  }

  Router& r_;
  const Request request_;
  std::shared_ptr<ResponseChannel> channel_;
  std::vector<std::string> excluded_;
  std::vector<AttemptFailure> failures_;
  std::string prefill_iid_;
  std::string decode_iid_;
  int attempts_ = 0;
  double next_backoff_s_ = 0;
  bool credit_held_ = false;
  std::optional<double> ttft_s_;
  std::optional<double> first_byte_s_;
  std::optional<double> tpot_s_;
  long long output_tokens_ = 0;
  long long prompt_tokens_ = -1;
};

Router::Router(const Settings& settings, engines::EngineClient& engines, Fleet& fleet,
               const Clock& clock, Metrics* metrics, Journal* journal, uint64_t seed)
    : settings_(settings),
      engines_(engines),
      fleet_(fleet),
      clock_(clock),
      metrics_(metrics),
      journal_(journal),
      retry_budget_(settings.serving.retry_budget, settings.serving.retry_replenish),
      rng_(seed),
      pool_(static_cast<size_t>(settings.serving.max_inflight)) {
  if (metrics_ != nullptr) metrics_->retry_credits.Set(retry_budget_.credits());
}

Router::~Router() {
  bool live;
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    live = !live_.empty();
  }
  if (live) Drain(engines::MonoClock::duration::zero());
}

std::string Router::NewRequestId() {
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(rng_mu_);
    a = rng_();
    b = rng_();
  }
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

double Router::Backoff(int failed_attempt) {
  const double ceiling =
      std::min(settings_.serving.retry_cap_s,
               settings_.serving.retry_base_s * std::pow(2.0, std::max(0, failed_attempt - 1)));
  std::lock_guard<std::mutex> lock(rng_mu_);
  return std::uniform_real_distribution<double>(0.0, std::max(0.0, ceiling))(rng_);
}

std::shared_ptr<ResponseChannel> Router::Submit(Request request) {
  auto channel = std::make_shared<ResponseChannel>();
  std::optional<Outcome> refusal;
  if (!accepting_.load()) {
    refusal = Refusal(Terminal::kRejected, "shutting_down", 503, ErrorType::kBackendUnavailable,
                      "router is shutting down");
  } else if (inflight_.fetch_add(1) >= settings_.serving.max_inflight) {
    inflight_.fetch_sub(1);
    refusal = Refusal(Terminal::kRejected, "inflight_limit", 429, ErrorType::kRateLimit,
                      "router in-flight limit reached (" +
                          std::to_string(settings_.serving.max_inflight) + ")");
  }
  if (refusal) {
    RecordRefused(request, *refusal);
    channel->Finish(std::move(*refusal));
    return channel;
  }
  if (metrics_ != nullptr) metrics_->inflight.Increment();
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.push_back(channel);
  }
  pool_.Run([this, request = std::move(request), channel]() mutable {
    Run(*this, std::move(request), channel).Execute();
  });
  return channel;
}

void Router::RecordRefused(const Request& request, const Outcome& outcome) {
  WriteJournal(request, outcome, json::object());
  CountRequest(request, outcome);
}

void Router::CountRequest(const Request& request, const Outcome& outcome) {
  if (metrics_ == nullptr) return;
  metrics_->requests_total
      .Add({{"api", std::string(engines::ApiLabel(request.api))},
            {"door", std::string(DoorName(request.door))},
            {"terminal", std::string(TerminalName(outcome.terminal))}})
      .Increment();
}

void Router::Finish(const Request& request, ResponseChannel& channel, Outcome outcome,
                    const json& attempt_info) {
  if (outcome.ok()) retry_budget_.OnSuccess();
  CountRequest(request, outcome);
  if (metrics_ != nullptr) {
    metrics_->retry_credits.Set(retry_budget_.credits());
    metrics_->duration_seconds.Observe(engines::Seconds(clock_.Now() - request.arrived));
    if (outcome.ok()) {
      if (outcome.ttft_s) metrics_->ttft_seconds.Observe(*outcome.ttft_s);
      if (outcome.first_byte_s) metrics_->first_byte_seconds.Observe(*outcome.first_byte_s);
      if (outcome.ttft_s && outcome.first_byte_s) {
        metrics_->handoff_seconds.Observe(std::max(0.0, *outcome.first_byte_s - *outcome.ttft_s));
      }
    }
    metrics_->inflight.Decrement();
  }
  // The row is written, and the admission slot freed, before the client can
  // see the end of its response.
  WriteJournal(request, outcome, attempt_info);
  inflight_.fetch_sub(1);
  channel.Finish(std::move(outcome));
  {
    // Drain waits for this: every admitted request's outcome delivered.
    std::lock_guard<std::mutex> lock(live_mu_);
    auto it = std::find_if(live_.begin(), live_.end(),
                           [&](const std::shared_ptr<ResponseChannel>& c) { return c.get() == &channel; });
    if (it != live_.end()) live_.erase(it);
  }
  live_cv_.notify_all();
}

void Router::WriteJournal(const Request& request, const Outcome& outcome,
                          const json& attempt_info) {
  if (journal_ == nullptr) return;
  const bool status_sent = !(outcome.terminal == Terminal::kCancelled && !outcome.output_started);
  json row = {
      {"rid", request.rid},
      {"client_rid", request.client_rid.empty() ? json(nullptr) : json(request.client_rid)},
      {"api", engines::ApiLabel(request.api)},
      {"door", DoorName(request.door)},
      {"stream", request.stream},
      {"arrived", request.arrived_wall},
      {"terminal", TerminalName(outcome.terminal)},
      {"reason", outcome.reason.empty() ? json(nullptr) : json(outcome.reason)},
      {"status", status_sent ? json(outcome.status) : json(nullptr)},
      {"error_type", outcome.error_type == ErrorType::kNone
                         ? json(nullptr)
                         : json(ErrorTypeName(outcome.error_type))},
      {"error", outcome.message.empty() ? json(nullptr) : json(outcome.message)},
      {"ttft_s", OptionalSeconds(outcome.ttft_s)},
      {"first_byte_s", OptionalSeconds(outcome.first_byte_s)},
      {"tpot_s", nullptr},
      {"duration_s", engines::Seconds(clock_.Now() - request.arrived)},
      {"prefill_iid", nullptr},
      {"decode_iid", nullptr},
      {"crossed", false},
      {"attempts", 0},
      {"attempt_failures", json::array()},
      {"output_started", outcome.output_started},
      {"output_tokens", outcome.output_tokens},
  };
  for (auto it = attempt_info.begin(); it != attempt_info.end(); ++it) row[it.key()] = *it;
  journal_->Write(row);
}

void Router::Drain(engines::MonoClock::duration grace) {
  accepting_.store(false);
  std::unique_lock<std::mutex> lock(live_mu_);
  live_cv_.wait_for(lock, grace, [&] { return live_.empty(); });
  std::vector<std::shared_ptr<ResponseChannel>> rest = live_;
  lock.unlock();
  for (auto& channel : rest) channel->Cancel();
  lock.lock();
  // Cancelled legs unwind within moments; the bound only guards against bugs.
  live_cv_.wait_for(lock, std::chrono::seconds(30), [&] { return live_.empty(); });
}

}  // namespace narwhal::router
