// FakeEngineClient: a scripted engines::EngineClient for router tests.
//
// Tests queue one step per leg, per phase, either for a given engine iid or for
// whichever engine the leg lands on; a leg with nothing queued gets the default
// (prefill: a handoff; decode: two tokens then [DONE]). Every call is recorded
// (target, backend request id, body, deadlines, cancel token, the PrefillResult
// decode received, same-worker) so tests can assert B5, B6, B8 and deadlines.
//
// Decode feeds the scripted payloads to the DecodeObserver the way the HTTP
// adapter does: each is classified with engines::ClassifyEvent; [DONE] ends
// the leg (a failure when no token came first, B11); an error object ends it
// with engines::ClassifyEngineStatus (B11); an observer returning false ends it
// with kCancelled. A fired cancel token ends a leg with kCancelled (B19).
//
// With a FakeClock, scripted latencies advance fake time (so B9 arithmetic is
// exact), and a leg whose latency would cross its deadline ends at the
// deadline like the adapter's watchdog would (prefill: prefill timeout or
// request deadline; decode: request deadline).
//
// Legs are coroutines (engines::AsyncEngineClient) on the caller's loop:
// after each scripted event the observer's Flush() runs, as the HTTP adapter
// does after each engine read. Blocking steps wait on the leg's cancel token
// (without blocking the loop) for at most kBlockLimit of real time, then fail
// the leg loudly instead of hanging the suite. Thread-safe.
#ifndef NARWHAL_TESTS_FAKES_FAKE_ENGINE_CLIENT_H_
#define NARWHAL_TESTS_FAKES_FAKE_ENGINE_CLIENT_H_

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/stream_classifier.h"
#include "engines/prefill_result.h"
#include "engines/stream_event.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::testing {

using Duration = engines::MonoClock::duration;

// --- Failures as the HTTP adapter classifies them. `iid`, `evidence_iid` and
// `phase` are filled in by the fake when the leg runs. ---

inline engines::EngineFailure MakeEngineFailure(engines::FailureReason reason,
                                                engines::BreakerClass cls,
                                                engines::FailureCause cause, std::string detail,
                                                bool transient) {
  return engines::MakeFailure(engines::Phase::kPrefill, "", reason, cls, cause, std::move(detail),
                              transient);
}

// The engine answered `status` (or, `in_stream`, sent an error object in a
// 200 stream): exactly the adapter's classification.
inline engines::EngineFailure EngineStatusFailure(int status, const std::string& message = "boom",
                                                  bool in_stream = false) {
  return engines::ClassifyEngineStatus(engines::Phase::kPrefill, "", status, message, in_stream);
}
inline engines::EngineFailure ConnectRefused() {
  return MakeEngineFailure(
      engines::FailureReason::kEngineUnreachable, engines::BreakerClass::kConnection,
      engines::FailureCause::kConnectFailed, "engine unreachable: connection refused", true);
}
inline engines::EngineFailure ConnectionLost() {
  return MakeEngineFailure(engines::FailureReason::kEngineConnection,
                           engines::BreakerClass::kTimeout, engines::FailureCause::kConnectionLost,
                           "connection to engine lost before a response: Read", true);
}
inline engines::EngineFailure FirstTokenTimeout() {
  return MakeEngineFailure(engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
                           engines::FailureCause::kFirstTokenTimeout,
                           "no first token within 2.5s: no frames at all", true);
}
inline engines::EngineFailure ReadTimeout() {
  return MakeEngineFailure(
      engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
      engines::FailureCause::kReadTimeout,
      "engine went silent between tokens: nothing arrived within the 10s read timeout", true);
}
inline engines::EngineFailure MissingDone() {
  return MakeEngineFailure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                           engines::FailureCause::kUnterminated,
                           "stream ended before the [DONE] terminator", true);
}
inline engines::EngineFailure NoHandoff() {
  return MakeEngineFailure(engines::FailureReason::kInvalidResponse,
                           engines::BreakerClass::kKvHandoff, engines::FailureCause::kNoHandoff,
                           "no handoff: response carries no kv_transfer_params", false);
}
inline engines::EngineFailure RequestDeadline() {
  return MakeEngineFailure(engines::FailureReason::kDeadline, engines::BreakerClass::kNone,
                           engines::FailureCause::kNone,
                           "request deadline passed during the decode leg", false);
}

// --- Decode payloads. ---

inline std::string CompletionChunk(const std::string& text, const std::string& finish = "") {
  nlohmann::json c = {
      {"id", "cmpl-1"},
      {"object", "text_completion"},
      {"created", 1700000000},
      {"model", "m"},
      {"choices",
       {{{"index", 0},
         {"text", text},
         {"logprobs", nullptr},
         {"finish_reason", finish.empty() ? nlohmann::json(nullptr) : nlohmann::json(finish)}}}}};
  return c.dump();
}
inline std::string ChatRoleChunk() {
  nlohmann::json c = {{"id", "chatcmpl-1"},
                      {"object", "chat.completion.chunk"},
                      {"created", 1700000000},
                      {"model", "m"},
                      {"choices",
                       {{{"index", 0},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"finish_reason", nullptr}}}}};
  return c.dump();
}
inline std::string ChatChunk(const std::string& content, const std::string& finish = "") {
  nlohmann::json c = {
      {"id", "chatcmpl-1"},
      {"object", "chat.completion.chunk"},
      {"created", 1700000000},
      {"model", "m"},
      {"choices",
       {{{"index", 0},
         {"delta", nlohmann::json::object()},
         {"finish_reason", finish.empty() ? nlohmann::json(nullptr) : nlohmann::json(finish)}}}}};
  if (!content.empty()) c["choices"][0]["delta"]["content"] = content;
  return c.dump();
}
inline std::string UsageChunk(long long prompt, long long completion) {
  nlohmann::json c = {{"id", "chatcmpl-1"},
                      {"object", "chat.completion.chunk"},
                      {"created", 1700000000},
                      {"model", "m"},
                      {"choices", nlohmann::json::array()},
                      {"usage",
                       {{"prompt_tokens", prompt},
                        {"completion_tokens", completion},
                        {"total_tokens", prompt + completion}}}};
  return c.dump();
}
inline std::string StreamError(int code, const std::string& message) {
  return nlohmann::json{{"error", {{"message", message}, {"type", "x"}, {"code", code}}}}.dump();
}
inline constexpr const char* kDone = "[DONE]";

// --- Scripts. ---

struct PrefillStep {
  Duration latency{};                             // fake time the leg takes
  std::optional<nlohmann::json> descriptor;       // success: this descriptor (default: generated)
  std::optional<engines::EngineFailure> failure;  // set: the leg fails after `latency`
  bool block_until_cancelled = false;
  std::function<void()> on_start;  // runs first, on the leg's thread

  static PrefillStep Ok(Duration latency = {}) {
    PrefillStep s;
    s.latency = latency;
    return s;
  }
  static PrefillStep Fail(engines::EngineFailure f, Duration latency = {}) {
    PrefillStep s;
    s.failure = std::move(f);
    s.latency = latency;
    return s;
  }
  static PrefillStep Block() {
    PrefillStep s;
    s.block_until_cancelled = true;
    return s;
  }
};

struct DecodeEvent {
  std::string data;  // one SSE `data:` payload, "[DONE]" included
  Duration delay{};  // fake time before it arrives
};

struct DecodeStep {
  Duration latency{};  // fake time before anything happens (connect, queueing)
  std::vector<DecodeEvent> events;
  // After the events (when none of them ended the leg): fail with this, or
  // block until cancelled, or else end like a stream closed before [DONE].
  std::optional<engines::EngineFailure> failure;
  bool evidence_is_producer = false;  // B3: evidence counts against the producer
  bool block_until_cancelled = false;
  // The failure leaves the handoff with its producer (the consumer refused
  // it before admission, or never got it): DecodeOutcome's flag. A leg that
  // finds its cancel token fired or its deadline passed at the start sets
  // it by itself, like the HTTP adapter.
  bool left_with_producer = false;
  std::function<void()> on_start;

  // Each payload after `latency`, then [DONE].
  static DecodeStep Stream(std::vector<std::string> payloads, Duration latency = {},
                           Duration gap = {}) {
    DecodeStep s;
    s.latency = latency;
    for (auto& p : payloads) s.events.push_back(DecodeEvent{std::move(p), gap});
    s.events.push_back(DecodeEvent{kDone, {}});
    return s;
  }
  // Each payload, then `f`.
  static DecodeStep FailAfter(std::vector<std::string> payloads, engines::EngineFailure f,
                              Duration latency = {}) {
    DecodeStep s;
    s.latency = latency;
    for (auto& p : payloads) s.events.push_back(DecodeEvent{std::move(p), {}});
    s.failure = std::move(f);
    return s;
  }
  static DecodeStep Fail(engines::EngineFailure f, Duration latency = {}) {
    return FailAfter({}, std::move(f), latency);
  }
  // B3: the descriptor was rejected before any decode request.
  static DecodeStep InvalidContinuation() {
    engines::EngineFailure f = MakeEngineFailure(
        engines::FailureReason::kInvalidResponse, engines::BreakerClass::kKvHandoff,
        engines::FailureCause::kInvalidContinuation,
        "invalid continuation: remote_engine_id is missing", false);
    f.handoff_rejection = "missing_engine_id";
    DecodeStep s = Fail(std::move(f));
    s.evidence_is_producer = true;
    return s;
  }
  // Each payload, then wait for the cancel token.
  static DecodeStep BlockAfter(std::vector<std::string> payloads) {
    DecodeStep s;
    for (auto& p : payloads) s.events.push_back(DecodeEvent{std::move(p), {}});
    s.block_until_cancelled = true;
    return s;
  }
};

// --- Records. ---

struct PrefillCall {
  engines::EngineTarget target;
  engines::Api api = engines::Api::kCompletions;
  nlohmann::json body;
  std::string backend_request_id;
  std::string traceparent;  // the leg's W3C trace context headers
  std::string tracestate;
  engines::MonoTime request_deadline{};
  std::optional<engines::MonoTime> leg_deadline;
  engines::MonoTime started{};  // fake time at the call
  bool has_cancel_token = false;
  bool saw_cancel = false;                       // the leg ended because its cancel token fired
  std::optional<engines::PrefillResult> result;  // what the leg returned
  std::optional<engines::EngineFailure> failure;
};

struct DecodeCall {
  engines::EngineTarget target;
  std::optional<engines::PrefillResult> handoff;  // a copy of what Decode received
  nlohmann::json body;
  bool client_streams = false;
  std::string backend_request_id;
  std::string traceparent;
  std::string tracestate;
  engines::MonoTime request_deadline{};
  std::optional<engines::MonoTime> leg_deadline;
  engines::MonoTime started{};
  bool same_worker = false;  // consumer == the handoff's producer (B5)
  bool has_cancel_token = false;
  bool saw_cancel = false;
  int events_delivered = 0;  // OnEvent calls
  std::optional<engines::EngineFailure> failure;
};

struct ControlCall {
  engines::EngineTarget target;
  std::string method;
  std::string path;
  std::string body;
  double timeout_s = 0;
};

class FakeEngineClient : public engines::AsyncEngineClient {
 public:
  static constexpr std::chrono::seconds kBlockLimit{10};

  explicit FakeEngineClient(FakeClock* clock = nullptr) : clock_(clock) {}

  // An empty `iid` scripts whichever engine the leg lands on; a per-iid step
  // is used first when the leg lands on that engine.
  void QueuePrefill(PrefillStep step, const std::string& iid = "") {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_steps_[iid].push_back(std::move(step));
  }
  void QueueDecode(DecodeStep step, const std::string& iid = "") {
    std::lock_guard<std::mutex> lock(mu_);
    decode_steps_[iid].push_back(std::move(step));
  }
  // Drops every queued step.
  void ClearQueues() {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_steps_.clear();
    decode_steps_.clear();
  }
  // Control requests to `iid` (empty: any engine) for `path` get `response`;
  // unscripted ones get 200 with body "{}".
  void SetControlResponse(engines::ControlResponse response, const std::string& path,
                          const std::string& iid = "") {
    std::lock_guard<std::mutex> lock(mu_);
    control_[{iid, path}] = std::move(response);
  }
  std::vector<ControlCall> control_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return control_calls_;
  }
  // The step used when nothing is queued.
  void SetDefaultDecode(DecodeStep step) {
    std::lock_guard<std::mutex> lock(mu_);
    default_decode_ = std::move(step);
  }

  std::vector<PrefillCall> prefill_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {prefill_calls_.begin(), prefill_calls_.end()};
  }
  // Decode events handed to the router so far, legs still running included
  // (DecodeCall::events_delivered is set when a leg ends).
  int events_delivered_now() const { return events_delivered_now_.load(); }

  std::vector<DecodeCall> decode_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {decode_calls_.begin(), decode_calls_.end()};
  }
  // Waits (real time) until `n` legs have entered a blocking wait.
  bool WaitForBlocked(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return blocked_ >= n; });
  }

  engines::Awaitable<engines::PrefillOutcome> Prefill(engines::EngineTarget producer,
                                                      engines::Api api,
                                                      const nlohmann::json& client_body,
                                                      engines::LegOptions options) override {
    PrefillStep step;
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      step = TakeLocked(prefill_steps_, producer.iid).value_or(PrefillStep::Ok());
      PrefillCall call;
      call.target = producer;
      call.api = api;
      call.body = client_body;
      call.backend_request_id = options.backend_request_id;
      call.traceparent = options.traceparent;
      call.tracestate = options.tracestate;
      call.request_deadline = options.request_deadline;
      call.leg_deadline = options.leg_deadline;
      call.started = Now();
      call.has_cancel_token = options.cancel != nullptr;
      prefill_calls_.push_back(std::move(call));
      index = prefill_calls_.size() - 1;
    }
    if (step.on_start) step.on_start();

    engines::PrefillOutcome out;
    const engines::MonoTime deadline =
        std::min(options.request_deadline, options.leg_deadline.value_or(engines::MonoTime::max()));
    const bool deadline_is_request = deadline == options.request_deadline;
    auto timed_out = [&] {
      return deadline_is_request
                 ? Fill(
                       MakeEngineFailure(engines::FailureReason::kDeadline,
                                         engines::BreakerClass::kNone, engines::FailureCause::kNone,
                                         "request deadline passed during the prefill leg", false),
                       engines::Phase::kPrefill, producer.iid, "")
                 : Fill(MakeEngineFailure(
                            engines::FailureReason::kEngineTimeout, engines::BreakerClass::kTimeout,
                            engines::FailureCause::kLegTimeout, "prefill timed out", true),
                        engines::Phase::kPrefill, producer.iid, "");
    };
    if (Cancelled(options)) {
      out.failure = CancelledFailure(engines::Phase::kPrefill, producer.iid);
    } else if (clock_ != nullptr && clock_->Now() >= deadline) {
      out.failure = timed_out();
    } else if (step.block_until_cancelled) {
      out.failure = co_await Block(options, engines::Phase::kPrefill, producer.iid);
    } else if (!AdvanceBefore(step.latency, deadline)) {
      out.failure = timed_out();
    } else if (Cancelled(options)) {
      out.failure = CancelledFailure(engines::Phase::kPrefill, producer.iid);
    } else if (step.failure) {
      out.failure = Fill(*step.failure, engines::Phase::kPrefill, producer.iid, "");
    } else {
      nlohmann::json descriptor =
          step.descriptor ? *step.descriptor : DefaultDescriptor(producer, options);
      out.result.emplace(producer.iid, producer.url, api, options.backend_request_id,
                         "NixlConnector", std::move(descriptor));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      PrefillCall& call = prefill_calls_[index];
      call.result = out.result;
      call.failure = out.failure;
      call.saw_cancel = out.failure && out.failure->reason == engines::FailureReason::kCancelled;
    }
    co_return out;
  }

  engines::Awaitable<engines::DecodeOutcome> Decode(engines::EngineTarget consumer,
                                                    const engines::PrefillResult& handoff,
                                                    const nlohmann::json& client_body,
                                                    bool client_streams,
                                                    engines::LegOptions options,
                                                    engines::DecodeObserver& observer) override {
    DecodeStep step;
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      step = TakeLocked(decode_steps_, consumer.iid).value_or(DefaultDecodeLocked(handoff));
      DecodeCall call;
      call.target = consumer;
      call.handoff.emplace(handoff);
      call.body = client_body;
      call.client_streams = client_streams;
      call.backend_request_id = options.backend_request_id;
      call.traceparent = options.traceparent;
      call.tracestate = options.tracestate;
      call.request_deadline = options.request_deadline;
      call.leg_deadline = options.leg_deadline;
      call.started = Now();
      call.same_worker = consumer.iid == handoff.producer_iid();
      call.has_cancel_token = options.cancel != nullptr;
      decode_calls_.push_back(std::move(call));
      index = decode_calls_.size() - 1;
    }
    if (step.on_start) step.on_start();

    engines::DecodeOutcome out;
    int delivered = 0;
    const bool unsent =
        Cancelled(options) || (clock_ != nullptr && clock_->Now() >= options.request_deadline);
    out.failure = co_await RunDecode(step, consumer, handoff, options, observer, &delivered);
    out.handoff_left_with_producer = out.failure && (unsent || step.left_with_producer);
    {
      std::lock_guard<std::mutex> lock(mu_);
      DecodeCall& call = decode_calls_[index];
      call.events_delivered = delivered;
      call.failure = out.failure;
      call.saw_cancel = out.failure && out.failure->reason == engines::FailureReason::kCancelled;
    }
    co_return out;
  }

  engines::Awaitable<engines::ControlResponse> Control(engines::EngineTarget engine,
                                                       std::string method, std::string path,
                                                       std::string body,
                                                       double timeout_s) override {
    std::lock_guard<std::mutex> lock(mu_);
    control_calls_.push_back(ControlCall{engine, method, path, body, timeout_s});
    for (const std::string& iid : {engine.iid, std::string()}) {
      auto it = control_.find({iid, path});
      if (it != control_.end()) co_return it->second;
    }
    engines::ControlResponse ok;
    ok.status = 200;
    ok.body = "{}";
    co_return ok;
  }

 private:
  template <typename Step>
  static std::optional<Step> TakeLocked(std::map<std::string, std::deque<Step>>& steps,
                                        const std::string& iid) {
    for (const std::string& key : {iid, std::string()}) {
      auto it = steps.find(key);
      if (it != steps.end() && !it->second.empty()) {
        Step s = std::move(it->second.front());
        it->second.pop_front();
        return s;
      }
    }
    return std::nullopt;
  }

  DecodeStep DefaultDecodeLocked(const engines::PrefillResult& handoff) const {
    if (default_decode_) return *default_decode_;
    if (handoff.endpoint() == engines::Api::kChatCompletions) {
      return DecodeStep::Stream({ChatRoleChunk(), ChatChunk("hello"), ChatChunk(" world", "stop")});
    }
    return DecodeStep::Stream({CompletionChunk("hello"), CompletionChunk(" world", "stop")});
  }

  static nlohmann::json DefaultDescriptor(const engines::EngineTarget& producer,
                                          const engines::LegOptions& options) {
    return {{"do_remote_prefill", true},
            {"do_remote_decode", false},
            {"remote_engine_id", "engine-" + producer.iid},
            {"remote_block_ids", {1, 2, 3}},
            {"remote_host", "10.0.0.1"},
            {"remote_port", 5600},
            {"remote_request_id", options.backend_request_id}};
  }

  engines::MonoTime Now() const {
    return clock_ != nullptr ? clock_->Now() : engines::MonoClock::now();
  }

  // Advances fake time by `d` unless that reaches `deadline`; then advances
  // to the deadline and returns false (the watchdog would have fired).
  bool AdvanceBefore(Duration d, engines::MonoTime deadline) {
    if (clock_ == nullptr || d <= Duration::zero()) return true;
    const engines::MonoTime now = clock_->Now();
    if (deadline != engines::MonoTime::max() && now + d >= deadline) {
      clock_->Advance(deadline - now);
      return false;
    }
    clock_->Advance(d);
    return true;
  }

  static bool Cancelled(const engines::LegOptions& options) {
    return options.cancel != nullptr && options.cancel->cancelled();
  }

  static engines::EngineFailure Fill(engines::EngineFailure f, engines::Phase phase,
                                     const std::string& iid, const std::string& producer_iid) {
    f.phase = phase;
    if (f.iid.empty()) f.iid = iid;
    if (!producer_iid.empty()) {
      f.evidence_iid = producer_iid;
    } else if (f.evidence_iid.empty() && f.breaker_class != engines::BreakerClass::kNone) {
      f.evidence_iid = f.iid;
    }
    return f;
  }

  static engines::EngineFailure CancelledFailure(engines::Phase phase, const std::string& iid) {
    return Fill(MakeEngineFailure(engines::FailureReason::kCancelled, engines::BreakerClass::kNone,
                                  engines::FailureCause::kNone, "client went away", false),
                phase, iid, "");
  }

  // Waits for the leg's cancel token (bounded, without blocking the loop).
  engines::Awaitable<engines::EngineFailure> Block(const engines::LegOptions& options,
                                                   engines::Phase phase, const std::string& iid) {
    const engines::Executor executor = co_await boost::asio::this_coro::executor;
    auto timer = std::make_shared<boost::asio::steady_timer>(executor, kBlockLimit);
    std::weak_ptr<boost::asio::steady_timer> weak = timer;
    engines::CancelToken::Registration hook(options.cancel, [weak, executor] {
      boost::asio::post(executor, [weak] {
        if (auto t = weak.lock()) t->cancel();
      });
    });
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++blocked_;
    }
    cv_.notify_all();
    boost::system::error_code ec;
    co_await timer->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (!Cancelled(options)) {
      co_return Fill(MakeEngineFailure(engines::FailureReason::kEngineError,
                                       engines::BreakerClass::kNone, engines::FailureCause::kNone,
                                       "fake engine: blocked leg was never cancelled", false),
                     phase, iid, "");
    }
    co_return CancelledFailure(phase, iid);
  }

  engines::Awaitable<std::optional<engines::EngineFailure>> RunDecode(
      const DecodeStep& step, const engines::EngineTarget& consumer,
      const engines::PrefillResult& handoff, const engines::LegOptions& options,
      engines::DecodeObserver& observer, int* delivered) {
    constexpr engines::Phase kPhase = engines::Phase::kDecode;
    const std::string& iid = consumer.iid;
    auto deadline_failure = [&] {
      return Fill(MakeEngineFailure(engines::FailureReason::kDeadline, engines::BreakerClass::kNone,
                                    engines::FailureCause::kNone,
                                    "request deadline passed during the decode leg", false),
                  kPhase, iid, "");
    };
    if (Cancelled(options)) co_return CancelledFailure(kPhase, iid);
    if (clock_ != nullptr && clock_->Now() >= options.request_deadline) {
      co_return deadline_failure();
    }
    if (!AdvanceBefore(step.latency, options.request_deadline)) co_return deadline_failure();

    bool first_token = false;
    engines::StreamEvent event;
    for (const DecodeEvent& e : step.events) {
      if (!AdvanceBefore(e.delay, options.request_deadline)) co_return deadline_failure();
      if (Cancelled(options)) co_return CancelledFailure(kPhase, iid);
      // As the adapter: the repaired payload is relayed, a malformed one fails.
      const std::string_view data = engines::ClassifyEvent(e.data, &event);
      switch (event.kind) {
        case engines::EventKind::kMalformed:
          co_return Fill(MakeEngineFailure(engines::FailureReason::kEngineError,
                                           engines::BreakerClass::kStream,
                                           engines::FailureCause::kMalformedStream,
                                           "malformed stream: an event is not a JSON object", true),
                         kPhase, iid, "");
        case engines::EventKind::kDone:
          if (first_token) co_return std::nullopt;
          co_return Fill(
              MakeEngineFailure(engines::FailureReason::kEngineError,
                                engines::BreakerClass::kStream, engines::FailureCause::kEarlyDone,
                                "stream ended with [DONE] before any token arrived", true),
              kPhase, iid, "");
        case engines::EventKind::kError:
          co_return engines::ClassifyEngineStatus(kPhase, iid, event.error_status,
                                                  event.error_message, /*in_stream=*/true);
        case engines::EventKind::kToken:
          first_token = true;
          break;
        default:
          break;
      }
      ++*delivered;
      events_delivered_now_.fetch_add(1);
      if (!observer.OnEvent(data, event)) co_return CancelledFailure(kPhase, iid);
      // One scripted event per engine read: the observer hands it on.
      const bool taken = co_await observer.Flush();
      if (!taken) co_return CancelledFailure(kPhase, iid);
    }
    if (step.failure) {
      co_return Fill(*step.failure, kPhase, iid,
                     step.evidence_is_producer ? handoff.producer_iid() : std::string());
    }
    if (step.block_until_cancelled) {
      engines::EngineFailure f = co_await Block(options, kPhase, iid);
      co_return f;
    }
    co_return Fill(MissingDone(), kPhase, iid, "");
  }

  FakeClock* clock_;
  mutable std::mutex mu_;
  std::atomic<int> events_delivered_now_{0};
  std::condition_variable cv_;
  std::map<std::string, std::deque<PrefillStep>> prefill_steps_;
  std::map<std::string, std::deque<DecodeStep>> decode_steps_;
  std::optional<DecodeStep> default_decode_;
  std::map<std::pair<std::string, std::string>, engines::ControlResponse> control_;
  std::vector<ControlCall> control_calls_;
  std::deque<PrefillCall> prefill_calls_;
  std::deque<DecodeCall> decode_calls_;
  int blocked_ = 0;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_FAKE_ENGINE_CLIENT_H_
