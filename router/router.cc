#include "router/router.h"

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <thread>
#include <utility>

#include "router/assembler.h"
#include "router/common/log.h"
#include "router/context_limit.h"
#include "router/continuation.h"
#include "router/fleet/kv_recompute.h"
#include "router/fleet/prefix_index.h"
#include "router/prompt_tokens.h"

namespace narwhal::router {
namespace {

using engines::EngineFailure;
using engines::FailureReason;
using engines::Phase;
using json = nlohmann::json;

// Metadata events held before the first token of a streaming attempt (they
// are flushed with it; later ones are dropped).
constexpr size_t kMaxHeldEvents = 64;

// Receives one decode attempt's events: holds them until the first token and
// then relays them in order (streaming clients), or assembles them
// (non-streaming clients). Each engine read's events reach the client in one
// write (Flush).
class AttemptRelay : public engines::DecodeObserver {
 public:
  // `assembler` folds a non-streaming answer (kept across a continuation's
  // legs); `ledger` (may be null) follows token ids and rewrites what the
  // client sees (B29); `base_tokens`: output tokens sent before this leg.
  AttemptRelay(const Request& request, ResponseSink& sink, const Clock& clock, Metrics* metrics,
               Assembler& assembler, StreamLedger* ledger, long long base_tokens)
      : request_(request),
        sink_(sink),
        clock_(clock),
        metrics_(metrics),
        assembler_(assembler),
        ledger_(ledger),
        tokens_(base_tokens) {}

  bool OnEvent(std::string_view engine_data, const engines::StreamEvent& engine_ev) override {
    std::string_view data = engine_data;
    const engines::StreamEvent* evp = &engine_ev;
    if (ledger_ != nullptr) {
      adjusted_ = engine_ev;
      data = ledger_->Pass(engine_data, &adjusted_);
      evp = &adjusted_;
    }
    const engines::StreamEvent& ev = *evp;
    if (ev.kind == engines::EventKind::kToken) {
      tokens_ += ev.tokens;
      pending_tokens_ += ev.tokens;
      last_token_ = clock_.Now();
      if (!first_token_) first_token_ = last_token_;
    }
    if (ev.completion_tokens >= 0) completion_tokens_ = ev.completion_tokens;
    if (ev.prompt_tokens >= 0) prompt_tokens_ = ev.prompt_tokens;
    if (ev.cached_tokens >= 0) cached_tokens_ = ev.cached_tokens;
    if (!ev.finish_reason.empty()) finish_reason_ = ev.finish_reason;

    if (!request_.stream) {
      if (!assembler_.Add(data)) {
        assembly_failed_ = true;
        return false;
      }
      return true;
    }
    if (!first_token_) {
      if (held_.size() < kMaxHeldEvents) held_.push_back(Held{std::string(data), ev});
      return true;
    }
    if (!committed_) {
      committed_ = true;  // the first token: output becomes visible now
      for (const Held& h : held_) sink_.Event(h.data, h.event);
      held_.clear();
    }
    sink_.Event(data, ev);
    return true;
  }

  engines::Awaitable<bool> Flush() override {
    if (metrics_ != nullptr && pending_tokens_ > 0) {
      metrics_->decode_tokens_total.Increment(static_cast<double>(pending_tokens_));
    }
    pending_tokens_ = 0;
    if (!committed_) co_return true;  // nothing visible yet
    const bool taken = co_await sink_.Flush(request_.deadline);
    if (taken) co_return true;
    // Blocked until the request deadline by a client that stopped reading.
    if (!sink_.cancelled()) client_too_slow_ = true;
    co_return false;
  }

  bool output_started() const { return committed_; }
  bool assembly_failed() const { return assembly_failed_; }
  bool client_too_slow() const { return client_too_slow_; }
  const Assembler& assembler() const { return assembler_; }
  const std::optional<MonoTime>& first_token() const { return first_token_; }
  MonoTime last_token() const { return last_token_; }
  long long output_tokens() const { return completion_tokens_ >= 0 ? completion_tokens_ : tokens_; }
  long long prompt_tokens() const { return prompt_tokens_; }
  long long cached_tokens() const { return cached_tokens_; }
  const std::string& finish_reason() const { return finish_reason_; }

 private:
  struct Held {
    std::string data;
    engines::StreamEvent event;
  };

  const Request& request_;
  ResponseSink& sink_;
  const Clock& clock_;
  Metrics* metrics_;
  Assembler& assembler_;
  StreamLedger* ledger_;
  engines::StreamEvent adjusted_;
  std::vector<Held> held_;
  std::optional<MonoTime> first_token_;
  MonoTime last_token_{};
  long long tokens_ = 0;
  long long pending_tokens_ = 0;
  long long completion_tokens_ = -1;
  long long prompt_tokens_ = -1;
  long long cached_tokens_ = -1;  // usage.prompt_tokens_details.cached_tokens
  std::string finish_reason_;
  bool committed_ = false;
  bool assembly_failed_ = false;
  bool client_too_slow_ = false;
};

// One leg's cancellation: its client went away (B19), or its engine left
// the fleet and the leg outlasted membership.drain_timeout_s (B23). The leg
// watches one token; which of the two fired decides what the failure is.
class LegCancel {
 public:
  // Holds `engine`: its reservation is released when the leg ends, and an
  // engine that left the fleet is freed once nothing holds it, while the
  // hook on its token lives until this is destroyed.
  LegCancel(engines::CancelToken& client, EngineRef engine)
      : engine_(std::move(engine)),
        client_hook_(&client, [this] { token_.Cancel(); }),
        engine_hook_(&engine_->removed(), [this] {
          engine_removed_.store(true, std::memory_order_release);
          token_.Cancel();
        }) {}
  engines::CancelToken* token() { return &token_; }
  // The leg ended cancelled by its engine's removal, not by its client:
  // an engine fault (retried before output as any), never breaker evidence.
  bool EngineRemoved(const engines::CancelToken& client) const {
    return engine_removed_.load(std::memory_order_acquire) && !client.cancelled();
  }

 private:
  engines::CancelToken token_;
  std::atomic<bool> engine_removed_{false};
  const EngineRef engine_;
  // Destroyed first (declared last): no callback runs after them.
  engines::CancelToken::Registration client_hook_;
  engines::CancelToken::Registration engine_hook_;
};

EngineFailure EngineRemovedFailure(Phase phase, const std::string& iid) {
  return engines::MakeFailure(
      phase, iid, FailureReason::kEngineConnection, engines::BreakerClass::kNone,
      engines::FailureCause::kEngineRemoved,
      "engine removed from the fleet: its legs outlasted membership.drain_timeout_s", true);
}

// A failure the router itself decides (deadline, handoff age, cancellation,
// an unassemblable body, a client too slow): never breaker evidence.
EngineFailure RouterFailure(Phase phase, const std::string& iid, FailureReason reason,
                            engines::FailureCause cause, std::string detail, bool transient) {
  return engines::MakeFailure(phase, iid, reason, engines::BreakerClass::kNone, cause,
                              std::move(detail), transient);
}

}  // namespace

// One client request's life, on one event loop.
class Router::Run {
 public:
  Run(Router& router, Request request, std::shared_ptr<ResponseSink> sink)
      : r_(router), request_(std::move(request)), sink_(std::move(sink)) {}

  engines::Awaitable<void> Execute() {
    const engines::Executor executor = co_await boost::asio::this_coro::executor;
    executor_ = executor;
    // Arrival to here: the door read and checked the request, admission ran.
    CloseSpan(OpenSpan("admission", SpanKind::kInternal, "", request_.arrived));
    const ContinuationSettings& cs = request_.config->settings.continuation;
    if (cs.enabled) {
      continuation_refusal_ = ContinuationRefusal(request_.body);
      // The engines are asked for token ids only when the request could move.
      if (continuation_refusal_.empty()) {
        ids_body_ = request_.body;
        ids_body_["return_token_ids"] = true;
        ask_ids_ = true;
      }
    }
    for (int attempt = 1;; ++attempt) {
      record_.attempts = attempt;
      // A retry or a continuation: its backoff and legs under one span.
      group_span_.clear();
      if (attempt > 1) {
        group_index_ = OpenSpan(continuing_ ? "continuation" : "retry", SpanKind::kInternal, "",
                                r_.clock_.Now());
        SpanAttribute(group_index_, "narwhal.attempt", attempt);
        if (group_index_ >= 0) {
          group_span_ = record_.spans[static_cast<size_t>(group_index_)].span_id;
        }
      }
      if (attempt > 1) {
        if (r_.metrics_ != nullptr && !continuing_) r_.metrics_->retry_attempts_total.Increment();
        const bool slept = co_await r_.clock_.Sleep(executor, engines::FromSeconds(next_backoff_s_),
                                                    &sink_->cancel_token());
        if (!slept) {
          RefundCredit();
          Finish(FailureOutcome(Cancelled(Phase::kPrefill), Visible()));
          co_return;
        }
      }
      const bool retry = co_await RunAttempt(attempt);
      // Ended: Finish closed the attempt's span, and the router may be gone.
      if (!retry) co_return;
      CloseSpan(std::exchange(group_index_, -1));
    }
  }

  // Ends a request whose coroutine failed unexpectedly (a router bug).
  void FinishInternal(const std::string& what) {
    // The cause goes to the log, never to the client.
    LogError("request " + request_.rid + " failed internally: " + what);
    Finish(RefusalOutcome(Terminal::kFailed, Reason::kInternal, "internal error"));
  }

 private:
  EngineFailure Cancelled(Phase phase) {
    return RouterFailure(phase, "", FailureReason::kCancelled, engines::FailureCause::kNone,
                         "client went away", false);
  }

  // One prefill + decode attempt. Returns true when a retry should follow.
  engines::Awaitable<bool> RunAttempt(int attempt) {
    const Settings& s = request_.config->settings;
    if (!continuing_) {
      // A fresh attempt starts the answer over.
      assembler_.emplace(request_.api);
      ledger_.reset();
      if (ask_ids_) ledger_.emplace(request_.api, ClientAsksTokenIds(request_.body));
    }
    if (sink_->cancelled()) {
      RefundCredit();
      Finish(FailureOutcome(Cancelled(Phase::kPrefill), Visible()));
      co_return false;
    }
    if (r_.clock_.Now() >= request_.deadline) {
      RefundCredit();
      Finish(FailureOutcome(
          RouterFailure(Phase::kPrefill, "", FailureReason::kDeadline, engines::FailureCause::kNone,
                        "request deadline passed before the prefill leg", false),
          Visible()));
      co_return false;
    }

    // A handoff that no consumer can take only pins its producer's KV blocks
    // until the lease ends: no prefill starts without a placeable consumer.
    if (!r_.fleet_.CanPlace(Phase::kDecode, excluded_)) {
      RefundCredit();
      FinishNoEngine(Phase::kDecode);
      co_return false;
    }

    // --- placement input: the prompt's text key and token ids (B27) ---
    if (continuing_) {
      // B29: the continuation prompt is token ids, placed as any prefill.
      PlacementPrompt prompt;
      prompt.tokens = continuation_ids_;
      prompt.block_size = s.kv_events.block_size;
      co_return co_await PrefillAndDecode(attempt, prompt, std::nullopt);
    }
    if (s.placement.cache_aware() && !keyed_) {
      prompt_key_ = PrefixIndex::Key(PromptText(request_.api, request_.body));
      keyed_ = true;
    }
    if (s.placement.needs_tokens() && !tokens_) {
      tokens_ = co_await TokenizePrompt(
          r_.engines_, r_.clock_, s, *r_.fleet_.View(), request_.api, request_.body,
          request_.deadline, r_.tokenize_rotation_.fetch_add(1, std::memory_order_relaxed));
      if (tokens_->failure) {
        record_.placement_fallback =
            std::string(TokenizeFailureName(*tokens_->failure)) + ": " + tokens_->detail;
        if (r_.metrics_ != nullptr) r_.metrics_->placement.CountTokenizeFailure(*tokens_->failure);
      }
    }
    PlacementPrompt prompt;
    prompt.text = keyed_ ? &prompt_key_ : nullptr;
    if (tokens_) prompt.tokens = tokens_->ids;
    prompt.block_size = s.kv_events.block_size;
    record_.disaggregated = true;
    record_.cached_tokens_est.reset();

    // --- B28: the decode engine first; a prompt it holds runs there alone ---
    std::optional<Fleet::Reservation> planned;
    if (s.placement.auto_disaggregate() && !prompt.tokens.empty()) {
      PlacementInfo decode_info;
      planned = r_.fleet_.ReserveDecode(excluded_, "", &decode_info, prompt);
      const size_t uncached = prompt.tokens.size() - decode_info.match_tokens;
      if (planned && uncached < static_cast<size_t>(s.placement.min_uncached_tokens)) {
        if (r_.fleet_.Activate(*planned, excluded_)) {
          record_.cached_tokens_est = decode_info.match_tokens;
          co_return co_await LocalAttempt(attempt, std::move(*planned));
        }
        planned.reset();
      }
    }
    co_return co_await PrefillAndDecode(attempt, prompt, std::move(planned));
  }

  // The prefill leg on a producer and the decode leg on a consumer
  // (`planned`: already reserved under B28's auto).
  engines::Awaitable<bool> PrefillAndDecode(int attempt, const PlacementPrompt& prompt,
                                            std::optional<Fleet::Reservation> planned) {
    const Settings& s = request_.config->settings;
    // --- prefill (B1, B2) ---
    std::optional<Fleet::Reservation> producer =
        r_.fleet_.PickAndReserve(Phase::kPrefill, excluded_, planned ? planned->target().iid : "",
                                 prompt, &record_.prefill_placement);
    if (!producer) {
      RefundCredit();
      FinishNoEngine(Phase::kPrefill);
      co_return false;
    }
    if (!prompt.tokens.empty()) record_.cached_tokens_est = record_.prefill_placement.match_tokens;
    credit_held_ = false;  // the retry's credit is spent once its prefill dispatches
    const engines::EngineTarget producer_target = producer->target();
    // What this attempt tells the fleet, posted once when it ends.
    report_.emplace();
    report_->producer = producer_target.iid;
    report_->producer_incarnation = producer->engine()->id();
    record_.prefill_iid = producer_target.iid;
    record_.decode_iid.clear();
    record_.placed = true;
    record_.decode_placement.reset();
    // The decode leg's consumer, counted as reserved while the prefill runs
    // (under B28's auto, already chosen).
    if (!planned) planned = r_.fleet_.ReserveDecode(excluded_, producer_target.iid);
    engines::LegOptions prefill_options;
    prefill_options.backend_request_id = BackendId(attempt, 'p');  // B8
    const std::string prefill_span_id = TraceLeg(&prefill_options);
    prefill_options.request_deadline = request_.deadline;
    const MonoTime handoff_start = r_.clock_.Now();  // B7: handoff age starts here
    const int prefill_span = OpenSpan("prefill", SpanKind::kClient, prefill_span_id, handoff_start);
    LegSpanAttributes(prefill_span, producer_target, attempt);
    prefill_options.leg_deadline =
        handoff_start + engines::FromSeconds(s.serving.prefill_timeout_s);
    LegCancel prefill_cancel(sink_->cancel_token(), producer->engine());
    prefill_options.cancel = prefill_cancel.token();
    engines::PrefillOutcome prefill =
        co_await r_.engines_.Prefill(producer_target, LegApi(), LegBody(), prefill_options);
    producer->Release();
    if (!prefill.ok() && prefill.failure->reason == FailureReason::kCancelled &&
        prefill_cancel.EngineRemoved(sink_->cancel_token())) {
      prefill.failure = EngineRemovedFailure(Phase::kPrefill, producer_target.iid);
    }
    CloseSpan(prefill_span, prefill.ok() ? "" : prefill.failure->detail);
    if (!prefill.ok()) {
      // Finishing may let the router (and its fleet) go: no reservation may
      // outlive it in this frame.
      planned.reset();
      co_return OnFailure(attempt, *prefill.failure, /*output_started=*/false);
    }

    const MonoTime prefill_done = r_.clock_.Now();
    if (!continuing_) ttft_s_ = engines::Seconds(prefill_done - request_.arrived);  // B9
    if (r_.metrics_ != nullptr) {
      r_.metrics_->prefill_seconds.Observe(engines::Seconds(prefill_done - handoff_start));
    }
    report_->prefill_ok = true;
    // The handoff check: the decode placement and the handoff's age.
    const int check_span = OpenSpan("handoff_check", SpanKind::kInternal, "", prefill_done);

    // --- decode placement, off the producer unless nothing else can (B5) ---
    std::optional<Fleet::Reservation> consumer;
    if (planned && r_.fleet_.Activate(*planned, excluded_)) {
      consumer = std::move(planned);
    } else {
      consumer = r_.fleet_.PickAndReserve(Phase::kDecode, excluded_, producer_target.iid);
    }
    if (consumer) record_.decode_placement = consumer->reason();
    if (!consumer) {
      CloseSpan(check_span, "no engine for the decode leg");
      planned.reset();
      Abandon(*prefill.result, AbandonReason::kNoConsumer, handoff_start, {});
      FinishNoEngine(Phase::kDecode);
      co_return false;
    }
    record_.decode_iid = consumer->target().iid;
    if (continuing_ && !record_.continuations.empty()) {
      record_.continuations.back().to_iid = record_.decode_iid;
    }

    // B7: the handoff must still be young enough when decode dispatches.
    if (s.serving.handoff_timeout_s > 0 &&
        r_.clock_.Now() - handoff_start > engines::FromSeconds(s.serving.handoff_timeout_s)) {
      consumer->Release();
      CloseSpan(check_span, "KV handoff expired before decode dispatch");
      if (r_.metrics_ != nullptr) {
        r_.metrics_->handoff_rejected_total.Add({{"reason", "expired"}}).Increment();
      }
      // Too old for the router, maybe not for the producer's lease.
      Abandon(*prefill.result, AbandonReason::kExpired, handoff_start, {});
      // The handoff aged on its producer: a retry avoids the producer, not
      // the idle consumer.
      co_return OnFailure(
          attempt,
          RouterFailure(Phase::kDecode, producer_target.iid, FailureReason::kHandoffExpired,
                        engines::FailureCause::kNone, "KV handoff expired before decode dispatch",
                        true),
          false);
    }
    SpanAttribute(check_span, "narwhal.engine.iid", record_.decode_iid);
    CloseSpan(check_span);
    co_return co_await DecodeAttempt(attempt, *consumer, *prefill.result, handoff_start,
                                     prefill_done);
  }

  // B28: the prompt runs on its decode engine alone (`consumer`, activated):
  // no prefill leg, no handoff, nothing to release.
  engines::Awaitable<bool> LocalAttempt(int attempt, Fleet::Reservation consumer) {
    credit_held_ = false;  // the retry's credit is spent once its leg dispatches
    const engines::EngineTarget target = consumer.target();
    report_.emplace();
    record_.prefill_iid = target.iid;
    record_.decode_iid = target.iid;
    record_.placed = true;
    record_.disaggregated = false;
    record_.prefill_placement = PlacementInfo{};
    record_.prefill_placement.reason = PlacementReason::kLocalPrefill;
    record_.prefill_placement.match_tokens = record_.cached_tokens_est.value_or(0);
    record_.decode_placement = consumer.reason();
    if (r_.metrics_ != nullptr) {
      r_.metrics_->placement.CountDecision(Phase::kPrefill, PlacementReason::kLocalPrefill);
    }
    const engines::PrefillResult local =
        engines::PrefillResult::Local(target.iid, target.url, request_.api);
    const MonoTime now = r_.clock_.Now();
    co_return co_await DecodeAttempt(attempt, consumer, local, now, now);
  }

  // The decode leg of an attempt on `consumer` (in flight), from `handoff`
  // (a local one: B28).
  engines::Awaitable<bool> DecodeAttempt(int attempt, Fleet::Reservation& consumer,
                                         const engines::PrefillResult& handoff,
                                         MonoTime handoff_start, MonoTime prefill_done) {
    const bool local = handoff.local();
    const engines::EngineTarget consumer_target = consumer.target();
    const std::string producer_iid = local ? std::string() : handoff.producer_iid();
    // --- decode (B3, B4) ---
    engines::LegOptions decode_options;
    decode_options.backend_request_id = BackendId(attempt, 'd');  // B8
    const std::string decode_span_id = TraceLeg(&decode_options);
    decode_options.request_deadline = request_.deadline;
    const int decode_span = OpenSpan("decode", SpanKind::kClient, decode_span_id, r_.clock_.Now());
    LegSpanAttributes(decode_span, consumer_target, attempt);
    if (local) SpanAttribute(decode_span, "narwhal.local_prefill", true);
    if (continuing_) SpanAttribute(decode_span, "narwhal.continuation", true);
    LegCancel decode_cancel(sink_->cancel_token(), consumer.engine());
    decode_options.cancel = decode_cancel.token();
    const long long base_tokens =
        continuing_ && ledger_ ? static_cast<long long>(ledger_->generated().size()) : 0;
    AttemptRelay relay(request_, *sink_, r_.clock_, r_.metrics_, *assembler_,
                       ledger_ ? &*ledger_ : nullptr, base_tokens);
    report_->consumer = consumer_target.iid;
    report_->consumer_incarnation = consumer.engine()->id();
    report_->crossed_decode = !local && consumer_target.iid != producer_iid;
    r_.fleet_.DecodeStarted(producer_iid, consumer_target.iid);
    engines::DecodeOutcome decode = co_await r_.engines_.Decode(
        consumer_target, handoff, LegBody(), request_.stream, decode_options, relay);
    CloseSpan(decode_span, decode.ok() ? "" : decode.failure->detail);
    consumer.Release();
    if (!decode.ok() && decode.failure->reason == FailureReason::kCancelled &&
        decode_cancel.EngineRemoved(sink_->cancel_token())) {
      decode.failure = EngineRemovedFailure(Phase::kDecode, consumer_target.iid);
    }
    // A continuation leg's usage is rewritten to the whole answer's: it says
    // nothing of its consumer's cache.
    if (!local && !continuing_) NoteRecompute(producer_iid, consumer_target.iid, decode, relay);
    if (relay.first_token()) output_tokens_ = relay.output_tokens();
    if (relay.first_token() && !continuing_) {
      first_byte_s_ = engines::Seconds(*relay.first_token() - request_.arrived);  // B9
      // A local prefill's first token is its decode's first.
      if (local) ttft_s_ = first_byte_s_;
      if (output_tokens_ >= 2) {
        const MonoTime first = local ? *relay.first_token() : prefill_done;
        record_.tpot_s =
            engines::Seconds(relay.last_token() - first) / static_cast<double>(output_tokens_ - 1);
      }
    }
    prompt_tokens_ = relay.prompt_tokens();
    cached_tokens_ = relay.cached_tokens();

    if (decode.ok()) {
      report_->decode_ok = true;
      // "completed" means the client took the whole stream, not only that
      // the engine finished it.
      bool drained = true;
      if (request_.stream) drained = co_await sink_->Drain(request_.deadline);
      if (!drained) {
        Outcome o = FailureOutcome(
            sink_->cancelled()
                ? Cancelled(Phase::kDecode)
                : RouterFailure(Phase::kDecode, consumer_target.iid, FailureReason::kDeadline,
                                engines::FailureCause::kClientTooSlow,
                                "request deadline passed while the client was not reading", false),
            /*output_started=*/true);
        o.finish_reason = relay.finish_reason();
        Finish(std::move(o));
        co_return false;
      }
      Outcome o;
      o.terminal = Terminal::kCompleted;
      o.output_started = request_.stream;
      o.finish_reason = relay.finish_reason();
      if (!request_.stream) o.body = assembler_->Build();
      Finish(std::move(o));
      co_return false;
    }
    EngineFailure failure = std::move(*decode.failure);
    if (decode.handoff_left_with_producer && !local) {
      // No consumer took the handoff: free it on the producer.
      const AbandonReason why =
          failure.reason == FailureReason::kCancelled  ? AbandonReason::kCancelled
          : failure.reason == FailureReason::kDeadline ? AbandonReason::kDeadline
                                                       : AbandonReason::kConsumerRefused;
      Abandon(handoff, why, handoff_start, {consumer_target.iid});
    }
    if (!failure.handoff_rejection.empty() && r_.metrics_ != nullptr) {
      r_.metrics_->handoff_rejected_total.Add({{"reason", failure.handoff_rejection}}).Increment();
    }
    if (relay.assembly_failed()) {
      failure = RouterFailure(Phase::kDecode, consumer_target.iid, FailureReason::kInvalidResponse,
                              engines::FailureCause::kUnassemblable,
                              "unassemblable decode response: " + assembler_->error(), false);
    } else if (relay.client_too_slow()) {
      failure = RouterFailure(Phase::kDecode, consumer_target.iid, FailureReason::kDeadline,
                              engines::FailureCause::kClientTooSlow,
                              "request deadline passed while the client was not reading", false);
    }
    co_return OnFailure(attempt, std::move(failure), relay.output_started());
  }

  // The engine API and body of this attempt's legs: the client's (with
  // return_token_ids when the engines are asked for token ids), or a
  // continuation's token-id completion (B29).
  engines::Api LegApi() const { return continuing_ ? engines::Api::kCompletions : request_.api; }
  const json& LegBody() const {
    if (continuing_) return continuation_body_;
    return ask_ids_ ? ids_body_ : request_.body;
  }
  // The client has seen output that a continuation carries on.
  bool Visible() const { return continuing_ && request_.stream; }

  // A leg whose connection was never established (refused, unreachable,
  // not within http.connect_timeout_s): no request reached the engine.
  static bool NothingReachedTheEngine(const EngineFailure& f) {
    return f.cause == engines::FailureCause::kConnectFailed ||
           f.cause == engines::FailureCause::kConnectTimeout;
  }

  // Records a failed leg and decides whether to retry (B14).
  bool OnFailure(int attempt, EngineFailure f, bool output_started) {
    output_started = output_started || Visible();
    AttemptFailure af{attempt, f, output_started, false, ""};
    CountAttemptFailure(f);
    // Breaker evidence goes to the fleet with the attempt's report.
    if (report_) report_->failure = f;
    SendReport();
    // Tokens this answer already holds (streamed, or assembled for a
    // non-streaming client): its handoff was good.
    const bool tokens_held = output_started || (ledger_ && !ledger_->generated().empty());
    // A retry avoids the engines that failed this request; a decode that
    // failed before any token also avoids that attempt's producer.
    for (const std::string& iid :
         {f.iid, f.evidence_iid,
          f.phase == Phase::kDecode && !tokens_held ? record_.prefill_iid : std::string()}) {
      if (!iid.empty() && std::find(excluded_.begin(), excluded_.end(), iid) == excluded_.end()) {
        excluded_.push_back(iid);
      }
    }
    if (continuing_) SettleContinuation(ContinuationOutcome::kFailed);

    const Settings& s = request_.config->settings;
    // B29: a decode that breaks after output continues on other engines.
    if (s.continuation.enabled && tokens_held && ContinuableFailure(f)) {
      if (Continue(f)) {
        af.retry_reason = "continuation";
        af.retry_scheduled = true;
        record_.failures.push_back(af);
        next_backoff_s_ = 0;
        return true;
      }
    }
    if (f.reason == FailureReason::kCancelled) {
      af.retry_reason = "cancelled";
    } else if (output_started) {
      af.retry_reason = "output_started";
    } else if (f.reason == FailureReason::kDeadline) {
      af.retry_reason = "original_deadline";
    } else if (NothingReachedTheEngine(f) && !connect_failover_used_ &&
               r_.fleet_.CanPlace(Phase::kPrefill, excluded_) &&
               r_.fleet_.CanPlace(Phase::kDecode, excluded_)) {
      // The connect failed: the engine saw nothing, so one more attempt on
      // another engine is always safe. It is taken at once, outside
      // max_attempts and without a retry credit (B14 governs attempts that
      // reached an engine); the deadline still bounds it.
      connect_failover_used_ = true;
      next_backoff_s_ = 0;
      af.retry_reason = "connect_failover";
      af.retry_scheduled = true;
    } else if (!f.transient) {
      af.retry_reason = "non_transient";
    } else if (attempt - (connect_failover_used_ ? 1 : 0) >= s.serving.max_attempts) {
      af.retry_reason = "attempt_limit";
    } else if (!r_.fleet_.CanPlace(Phase::kPrefill, excluded_) ||
               !r_.fleet_.CanPlace(Phase::kDecode, excluded_)) {
      af.retry_reason = "no_engine";
    } else {
      next_backoff_s_ = r_.Backoff(s, attempt);
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
    record_.failures.push_back(af);
    if (af.retry_scheduled) return true;
    Finish(FailureOutcome(f, output_started));
    return false;
  }

  // Silent recompute (router/fleet/kv_recompute.h): a crossed decode whose usage
  // says its consumer computed the prompt again; the answer is not failed.
  void NoteRecompute(const std::string& producer, const std::string& consumer,
                     const engines::DecodeOutcome& decode, const AttemptRelay& relay) {
    record_.recompute_evidence.reset();
    if (producer == consumer) return;
    const bool suspected =
        decode.ok() && RecomputeSuspected(relay.prompt_tokens(), relay.cached_tokens());
    const bool failed = !decode.ok() && !decode.handoff_left_with_producer;
    std::string evidence;
    if (suspected) {
      record_.recompute_evidence = json{{"source", "usage"},
                                        {"producer", producer},
                                        {"consumer", consumer},
                                        {"prompt_tokens", relay.prompt_tokens()},
                                        {"cached_tokens", relay.cached_tokens()}};
      evidence = "request " + request_.rid + ": cached_tokens " +
                 std::to_string(relay.cached_tokens()) + " of " +
                 std::to_string(relay.prompt_tokens()) + " prompt tokens";
    }
    report_->recompute_suspected = suspected;
    report_->decode_failed = failed;
    report_->recompute_evidence = std::move(evidence);
  }

  // attempt_failures_total{phase, reason, iid}: a failure on an engine is
  // counted by the fleet with the attempt's report (the engine's own series,
  // made when it joined); one of no engine here.
  void CountAttemptFailure(const EngineFailure& f) {
    if (r_.metrics_ == nullptr || (report_ && !f.iid.empty())) return;
    r_.metrics_->attempt_failures_total
        .Add({{"phase", std::string(engines::PhaseName(f.phase))},
              {"reason", std::string(engines::FailureReasonName(f.reason))},
              {"iid", f.iid}})
        .Increment();
  }

  // Hands the attempt's report to the fleet (once per attempt).
  void SendReport() {
    if (!report_) return;
    r_.fleet_.Report(std::move(*report_));
    report_.reset();
  }

  // Hands a valid handoff that will not be decoded to the releaser (it
  // returns at once; the release never touches this request).
  void Abandon(const engines::PrefillResult& handoff, AbandonReason reason, MonoTime handoff_start,
               std::vector<std::string> avoid) {
    HandoffReleaser::Abandoned a;
    a.handoff = &handoff;
    a.reason = reason;
    a.client_body = LegBody();
    a.handoff_start = handoff_start;
    a.avoid = std::move(avoid);
    a.rid = request_.rid;
    a.settings = &request_.config->settings.handoff;
    record_.abandoned = reason;
    record_.released = r_.releaser_.Release(a, executor_) == ReleaseDispatch::kStarted;
  }

  void FinishNoEngine(Phase phase) {
    std::string why;
    if (r_.fleet_.Ready(&why)) {
      why = std::string("no engine left for the ") + std::string(engines::PhaseName(phase)) +
            " role after excluding the engines that failed this request";
    }
    Outcome o = RefusalOutcome(Terminal::kFailed, Reason::kNoEngine, why);
    o.output_started = Visible();  // a continuation's stream ends as B16 says
    Finish(std::move(o));
  }

  // B29/B30: continues the answer after decode failure `f`, or records why
  // not. True when the continuation attempt is scheduled.
  bool Continue(const EngineFailure& f) {
    const ContinuationSettings& cs = request_.config->settings.continuation;
    const long long sent = ledger_ ? static_cast<long long>(ledger_->generated().size()) : 0;
    ContinuationRecord entry;
    entry.at_token = sent;
    entry.from_iid = f.iid;
    std::string refusal(continuation_refusal_);
    long long budget = -1;
    if (refusal.empty() && (!ledger_ || !ledger_->exact())) refusal = "no_token_ids";
    if (refusal.empty() && continuations_ >= cs.max_per_request) refusal = "max_per_request";
    if (refusal.empty() && r_.clock_.Now() >= request_.deadline) refusal = "deadline";
    if (refusal.empty()) {
      const long long total = static_cast<long long>(ledger_->prompt_ids().size()) + sent;
      budget = RemainingBudget(request_.api, request_.body, sent, total, r_.fleet_.max_model_len());
      if (budget < 0) refusal = "unknown_budget";
      if (budget == 0) refusal = "max_tokens_reached";
    }
    if (refusal.empty() && (!r_.fleet_.CanPlace(Phase::kPrefill, excluded_) ||
                            !r_.fleet_.CanPlace(Phase::kDecode, excluded_))) {
      refusal = "no_engine";
    }
    ContinuationOutcome outcome = ContinuationOutcome::kRefused;
    if (refusal.empty() && !r_.continuation_budget_.TryAcquire()) {
      refusal = "budget";
      outcome = ContinuationOutcome::kNoBudget;
    }
    if (!refusal.empty()) {
      entry.reason = std::move(refusal);
      entry.outcome = outcome;
      record_.continuations.push_back(std::move(entry));
      r_.CountContinuation(outcome);
      LogInfo("request " + request_.rid + ": not continued after token " + std::to_string(sent) +
              " on " + f.iid + ": " + record_.continuations.back().reason);
      return false;
    }
    entry.reason = std::string(engines::FailureReasonName(f.reason));
    record_.continuations.push_back(std::move(entry));
    ++continuations_;
    continuing_ = true;
    continuation_ids_ = ledger_->ContinuationPrompt();
    continuation_body_ = ContinuationBody(request_.body, continuation_ids_, sent, budget);
    ledger_->StartContinuation();
    LogInfo("request " + request_.rid + ": continuing after token " + std::to_string(sent) + " (" +
            f.iid + " failed: " + f.detail + ")");
    return true;
  }

  // The running continuation's end (once).
  void SettleContinuation(ContinuationOutcome outcome) {
    if (record_.continuations.empty() || record_.continuations.back().outcome) return;
    record_.continuations.back().outcome = outcome;
    r_.CountContinuation(outcome);
  }

  void RefundCredit() {
    if (credit_held_) r_.retry_budget_.Refund();
    credit_held_ = false;
  }

  // The leg's W3C trace context: a child of the request's trace, with a
  // span id of its own.
  // Returns the leg's span id ("" without a trace).
  std::string TraceLeg(engines::LegOptions* options) const {
    if (request_.trace.trace_id.empty()) return "";
    std::string span = r_.NewSpanId();
    options->traceparent = request_.trace.ChildTraceparent(span);
    options->tracestate = request_.trace.tracestate;
    return span;
  }

  // --- spans (router/request_spans.h) ---
  bool Tracing() const {
    return r_.span_sink_ != nullptr && !request_.trace.trace_id.empty() && Sampled(request_.trace);
  }
  double Wall(MonoTime t) const {
    return request_.arrived_wall + engines::Seconds(t - request_.arrived);
  }
  // Starts a span under the current retry or continuation (else the
  // request); returns its index in record_.spans, or -1 when not tracing.
  int OpenSpan(std::string name, SpanKind kind, std::string span_id, MonoTime start) {
    if (!Tracing()) return -1;
    PhaseSpan span;
    span.name = std::move(name);
    span.span_id = span_id.empty() ? r_.NewSpanId() : std::move(span_id);
    span.parent_id = group_span_;
    span.kind = kind;
    span.start_unix_s = Wall(start);
    span.end_unix_s = span.start_unix_s;
    record_.spans.push_back(std::move(span));
    return static_cast<int>(record_.spans.size()) - 1;
  }
  void CloseSpan(int index, std::string error = "") {
    if (index < 0) return;
    PhaseSpan& span = record_.spans[static_cast<size_t>(index)];
    span.end_unix_s = Wall(r_.clock_.Now());
    span.error = std::move(error);
  }
  void SpanAttribute(int index, const std::string& key, nlohmann::json value) {
    if (index >= 0) record_.spans[static_cast<size_t>(index)].attributes[key] = std::move(value);
  }
  // The attributes of a leg's span.
  void LegSpanAttributes(int index, const engines::EngineTarget& target, int attempt) {
    SpanAttribute(index, "narwhal.engine.iid", target.iid);
    SpanAttribute(index, "url.full", target.url);
    SpanAttribute(index, "http.request.method", "POST");
    SpanAttribute(index, "narwhal.attempt", attempt);
  }

  // The engine leg's request id; it carries the client's own id, if any
  // ("<rid>-<attempt><p|d>.<client_rid>").
  std::string BackendId(int attempt, char phase) const {
    const std::string own = request_.rid + "-" + std::to_string(attempt) + phase;
    return request_.client_rid.empty() ? own : own + "." + request_.client_rid;
  }

  void Finish(Outcome o) {
    if (finished_) return;  // exactly once
    finished_ = true;
    if (continuing_) {
      SettleContinuation(o.ok() ? ContinuationOutcome::kContinued : ContinuationOutcome::kFailed);
    }
    if (o.terminal == Terminal::kCancelled && r_.cutting_.load()) {
      // Cut at the drain deadline: the router's doing, not the client's.
      Outcome cut = RefusalOutcome(Terminal::kFailed, Reason::kShuttingDown,
                                   "router shut down before the request finished (the drain's "
                                   "serving.graceful_timeout_s passed)");
      cut.phase = o.phase;
      cut.output_started = o.output_started;
      o = std::move(cut);
    }
    // The running retry's or continuation's span ends with the request.
    CloseSpan(std::exchange(group_index_, -1), o.ok() ? "" : o.message);
    SendReport();  // before the outcome: whoever sees it sees the evidence queued
    o.ttft_s = ttft_s_;
    o.first_byte_s = first_byte_s_;
    o.output_tokens = output_tokens_;
    o.prompt_tokens = prompt_tokens_;
    o.cached_tokens = cached_tokens_;
    r_.Finish(request_, *sink_, std::move(o), record_);
  }

  Router& r_;
  const Request request_;
  std::shared_ptr<ResponseSink> sink_;
  std::vector<std::string> excluded_;
  // What the journal row records.
  RequestRecord record_;
  // The running attempt's report.
  std::optional<AttemptReport> report_;
  PromptKey prompt_key_;
  bool keyed_ = false;
  // The prompt's token ids, asked once per request (B27).
  std::optional<PromptTokens> tokens_;
  // B29/B30: why the request's own fields forbid continuing it ("" when
  // they do not); the client body with return_token_ids (ask_ids_); the
  // answer's stream ledger and assembly, kept across a continuation's legs;
  // the running continuation's prompt and body.
  std::string continuation_refusal_;
  bool ask_ids_ = false;
  json ids_body_;
  std::optional<StreamLedger> ledger_;
  std::optional<Assembler> assembler_;
  bool continuing_ = false;
  // The span of the retry or continuation running now ("" = none), and its
  // index in record_.spans (-1 = none).
  std::string group_span_;
  int group_index_ = -1;
  int continuations_ = 0;
  std::vector<uint32_t> continuation_ids_;
  json continuation_body_;
  double next_backoff_s_ = 0;
  bool credit_held_ = false;
  bool connect_failover_used_ = false;  // the one failover after a failed connect
  std::optional<double> ttft_s_;
  std::optional<double> first_byte_s_;
  long long output_tokens_ = 0;
  long long prompt_tokens_ = -1;
  long long cached_tokens_ = -1;
  bool finished_ = false;
  engines::Executor executor_;
};

Router::Router(const Settings& settings, engines::AsyncEngineClient& engines, Fleet& fleet,
               const Clock& clock, Metrics* metrics, Journal* journal, uint64_t seed,
               const JournalStatus* journal_status)
    : settings_(settings),
      fixed_(std::make_shared<const ConfigGeneration>(ConfigGeneration{1, settings})),
      engines_(engines),
      fleet_(fleet),
      clock_(clock),
      metrics_(metrics),
      journal_(journal),
      journal_status_(journal_status),
      retry_budget_(settings.serving.retry_budget, settings.serving.retry_replenish),
      continuation_budget_(settings.continuation.budget, settings.continuation.replenish),
      tenant_limits_(clock, metrics),
      releaser_(settings, engines, fleet, clock, metrics),
      seed_(seed) {
  if (metrics_ != nullptr) {
    metrics_->retry_credits.Set(retry_budget_.credits());
    ExportSeriesAtZero();
  }
}

void Router::CountContinuation(ContinuationOutcome outcome) {
  if (metrics_ == nullptr) return;
  metrics_->continuations_total.Add({{"outcome", std::string(ContinuationOutcomeName(outcome))}})
      .Increment();
}

void Router::ExportSeriesAtZero() {
  for (ContinuationOutcome o : kContinuationOutcomes) {
    metrics_->continuations_total.Add({{"outcome", std::string(ContinuationOutcomeName(o))}});
  }
  for (engines::Api api : {engines::Api::kCompletions, engines::Api::kChatCompletions}) {
    for (Door door : {Door::kHttp, Door::kGrpc}) {
      for (Terminal terminal : kTerminals) {
        prometheus::Counter& c =
            metrics_->requests_total.Add({{"api", std::string(engines::ApiLabel(api))},
                                          {"door", std::string(DoorName(door))},
                                          {"terminal", std::string(TerminalName(terminal))}});
        requests_counters_.push_back(CountedSeries{api, door, terminal, &c});
      }
    }
  }
  // Attempt failures per engine come with the engine (EngineRecord).
  metrics_->handoff_rejected_total.Add({{"reason", "expired"}});
  for (std::string_view reason : engines::HandoffRejectionReasons()) {
    metrics_->handoff_rejected_total.Add({{"reason", std::string(reason)}});
  }
}

Router::~Router() {
  bool live;
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    live = !live_.empty();
  }
  if (live) {
    accepting_.store(false);
    CancelLiveAndWait();
  }
}

std::mt19937_64& Router::Rng() {
  // One generator per thread (no lock shared by all requests), seeded from
  // the router's seed, the thread and a counter.
  struct Seeded {
    const Router* router = nullptr;
    std::mt19937_64 rng;
  };
  thread_local Seeded seeded;
  if (seeded.router != this) {
    seeded.router = this;
    std::seed_seq seq{
        seed_, static_cast<uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id())),
        next_stream_.fetch_add(1, std::memory_order_relaxed)};
    seeded.rng.seed(seq);
  }
  return seeded.rng;
}

std::string Router::NewRequestId() {
  std::mt19937_64& rng = Rng();
  const uint64_t a = rng();
  const uint64_t b = rng();
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::shared_ptr<const ConfigGeneration> Router::CurrentConfig() const {
  return live_settings_ != nullptr ? live_settings_->Current() : fixed_;
}

double Router::Backoff(const Settings& settings, int failed_attempt) {
  const double ceiling =
      std::min(settings.serving.retry_cap_s,
               settings.serving.retry_base_s * std::pow(2.0, std::max(0, failed_attempt - 1)));
  return std::uniform_real_distribution<double>(0.0, std::max(0.0, ceiling))(Rng());
}

engines::Awaitable<void> Router::Serve(Request request, std::shared_ptr<ResponseSink> sink) {
  if (request.config == nullptr) request.config = CurrentConfig();
  const int max_inflight = request.config->settings.serving.max_inflight;
  std::optional<Outcome> refusal;
  // A client mistake the consumer would refuse only after the prefill ran.
  std::string too_long = ContextLimitError(request.body, request.api, fleet_.max_model_len());
  if (!accepting_.load()) {
    refusal = RefusalOutcome(Terminal::kRejected, Reason::kShuttingDown, "router is shutting down");
  } else if (!too_long.empty()) {
    refusal =
        RefusalOutcome(Terminal::kInvalid, Reason::kContextLengthExceeded, std::move(too_long));
    // The field that is too long, as OpenAI names it.
    refusal->param = request.api == engines::Api::kChatCompletions ? "messages" : "prompt";
  } else if (inflight_.fetch_add(1) >= max_inflight) {
    inflight_.fetch_sub(1);
    refusal =
        RefusalOutcome(Terminal::kRejected, Reason::kInflightLimit,
                       "router in-flight limit reached (" + std::to_string(max_inflight) + ")");
  }
  if (refusal) {
    if (request.tenant_hold != nullptr) request.tenant_hold->Release();
    RecordRefused(request, *refusal);
    sink->Finish(std::move(*refusal));
    co_return;
  }
  if (metrics_ != nullptr) metrics_->inflight.Increment();
  {
    std::lock_guard<std::mutex> lock(live_mu_);
    live_.push_back(sink);
  }
  Run run(*this, std::move(request), sink);
  std::string failed;
  try {
    co_await run.Execute();
  } catch (const std::exception& e) {
    failed = e.what();
  } catch (...) {
    failed = "unknown exception";
  }
  // A router bug must still end its request exactly once (internal) and free
  // its slot; Finish() is a no-op for a request that already ended.
  if (!failed.empty()) run.FinishInternal(failed);
}

void Router::Submit(Request request, std::shared_ptr<ResponseSink> sink,
                    const engines::Executor& executor) {
  boost::asio::co_spawn(executor, Serve(std::move(request), std::move(sink)),
                        boost::asio::detached);
}

void Router::RecordRefused(const Request& request, const Outcome& outcome) {
  WriteJournal(request, outcome, RequestRecord{}, engines::Seconds(clock_.Now() - request.arrived));
  CountRequest(request, outcome);
  ExportSpans(request, outcome, RequestRecord{});
}

std::string Router::NewSpanId() {
  uint64_t id = 0;
  while (id == 0) id = Rng()();  // an all-zero span id is invalid
  char span[17];
  std::snprintf(span, sizeof(span), "%016llx", static_cast<unsigned long long>(id));
  return span;
}

void Router::ExportSpans(const Request& request, const Outcome& outcome,
                         const RequestRecord& record) {
  if (span_sink_ == nullptr || request.trace.trace_id.empty() || !Sampled(request.trace)) return;
  RequestSpans spans;
  spans.trace = request.trace;
  PhaseSpan& root = spans.request;
  // OpenTelemetry's GenAI conventions: "{operation} {model}".
  const std::string operation =
      request.api == engines::Api::kChatCompletions ? "chat" : "text_completion";
  std::string model;
  if (request.body.is_object()) {
    auto it = request.body.find("model");
    if (it != request.body.end() && it->is_string()) model = it->get<std::string>();
  }
  root.name = model.empty() ? operation : operation + " " + model;
  root.span_id = NewSpanId();
  root.kind = SpanKind::kServer;
  root.start_unix_s = request.arrived_wall;
  root.end_unix_s = request.arrived_wall + engines::Seconds(clock_.Now() - request.arrived);
  nlohmann::json& a = root.attributes;
  a["gen_ai.operation.name"] = operation;
  a["gen_ai.system"] = "vllm";
  if (!model.empty()) a["gen_ai.request.model"] = model;
  if (outcome.prompt_tokens >= 0) a["gen_ai.usage.input_tokens"] = outcome.prompt_tokens;
  if (outcome.ok()) a["gen_ai.usage.output_tokens"] = outcome.output_tokens;
  if (!outcome.finish_reason.empty()) {
    a["gen_ai.response.finish_reasons"] = nlohmann::json::array({outcome.finish_reason});
  }
  if (request.door == Door::kHttp) {
    a["http.request.method"] = "POST";
    if (journal_status_ != nullptr) {
      const nlohmann::json status = journal_status_->Status(outcome);
      if (status.is_number_integer()) a["http.response.status_code"] = status.get<int>();
    }
  } else {
    a["rpc.system"] = "grpc";
    a["rpc.service"] = "narwhal.v1.Inference";
  }
  a["narwhal.request_id"] = request.rid;
  a["narwhal.terminal"] = std::string(TerminalName(outcome.terminal));
  a["narwhal.attempts"] = record.attempts;
  if (!request.tenant.empty()) a["narwhal.tenant"] = request.tenant;
  if (!outcome.ok()) {
    a["error.type"] = std::string(ReasonName(outcome.reason));
    root.error =
        outcome.message.empty() ? std::string(ReasonName(outcome.reason)) : outcome.message;
  }
  spans.phases = record.spans;
  for (PhaseSpan& phase : spans.phases) {
    if (phase.parent_id.empty()) phase.parent_id = root.span_id;
  }
  span_sink_->Export(std::move(spans));
}

void Router::CountRequest(const Request& request, const Outcome& outcome) {
  if (metrics_ == nullptr) return;
  if (!request.tenant.empty()) {
    metrics_->tenant_requests_total
        .Add(
            {{"tenant", request.tenant}, {"terminal", std::string(TerminalName(outcome.terminal))}})
        .Increment();
  }
  // The series made at zero at construction: no family lock per request.
  for (const CountedSeries& c : requests_counters_) {
    if (c.api == request.api && c.door == request.door && c.terminal == outcome.terminal) {
      c.counter->Increment();
      return;
    }
  }
}

void Router::Finish(const Request& request, ResponseSink& sink, Outcome outcome,
                    const RequestRecord& record) {
  if (outcome.ok()) {
    retry_budget_.OnSuccess();
    continuation_budget_.OnSuccess();
  }
  CountRequest(request, outcome);
  const double duration_s = engines::Seconds(clock_.Now() - request.arrived);
  if (metrics_ != nullptr) {
    metrics_->retry_credits.Set(retry_budget_.credits());
    metrics_->duration_seconds.Observe(duration_s);
    if (outcome.ok()) {
      if (outcome.ttft_s) metrics_->ttft_seconds.Observe(*outcome.ttft_s);
      if (outcome.first_byte_s) metrics_->first_byte_seconds.Observe(*outcome.first_byte_s);
      if (outcome.ttft_s && outcome.first_byte_s) {
        metrics_->handoff_seconds.Observe(std::max(0.0, *outcome.first_byte_s - *outcome.ttft_s));
      }
      if (record.tpot_s) metrics_->tpot_seconds.Observe(*record.tpot_s);
    }
    metrics_->inflight.Decrement();
  }
  // The row is written, and the admission slot freed, before the client can
  // see the end of its response.
  WriteJournal(request, outcome, record, duration_s);
  ExportSpans(request, outcome, record);
  inflight_.fetch_sub(1);
  if (request.tenant_hold != nullptr) request.tenant_hold->Release();
  sink.Finish(std::move(outcome));
  {
    // Drain waits for this: every admitted request's outcome delivered.
    std::lock_guard<std::mutex> lock(live_mu_);
    auto it = std::find_if(live_.begin(), live_.end(), [&](const std::shared_ptr<ResponseSink>& c) {
      return c.get() == &sink;
    });
    if (it != live_.end()) live_.erase(it);
    // Under the lock: once a waiter (Drain, the destructor) sees live_
    // empty, this thread no longer touches the router.
    live_cv_.notify_all();
  }
}

void Router::WriteJournal(const Request& request, const Outcome& outcome,
                          const RequestRecord& record, double duration_s) {
  if (access_log_ != nullptr) {
    access_log_->Record(request, outcome, record, duration_s, clock_.WallNow(), journal_status_);
  }
  if (journal_ == nullptr) return;
  journal_->Write(JournalRow(request, outcome, record, duration_s, journal_status_));
}

size_t Router::Drain(engines::MonoClock::duration grace, const engines::Executor& executor) {
  accepting_.store(false);
  // The grace period ends when the clock's timer fires on the loop; the
  // timer lives and dies there.
  auto grace_over = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<engines::Timer> timer = clock_.NewTimer(executor);
  const engines::MonoTime deadline = clock_.Now() + grace;
  boost::asio::post(executor, [timer, deadline, grace_over] {
    timer->AsyncWait(deadline, [grace_over](bool) { grace_over->store(true); });
  });
  std::unique_lock<std::mutex> lock(live_mu_);
  // Woken by each finished request; the flag is looked at every 10 ms.
  while (!live_.empty() && !grace_over->load()) {
    live_cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  lock.unlock();
  // The timer is cancelled and destroyed on its loop before Drain returns:
  // it refers to the clock, which may go away once Drain has returned.
  auto released = std::make_shared<std::promise<void>>();
  std::future<void> done = released->get_future();
  auto holder = std::make_shared<std::shared_ptr<engines::Timer>>(std::move(timer));
  boost::asio::post(executor, [holder, released] {
    (*holder)->Cancel();
    holder->reset();
    released->set_value();
  });
  // Bounded: a loop that no longer runs would never get to it.
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    LogError("drain: the event loop did not release the grace timer within 10 s");
  }
  cutting_.store(true);
  const size_t cut = CancelLiveAndWait();
  // Releases still running end now, while the loops still run them.
  releaser_.Cancel();
  return cut;
}

size_t Router::CancelLiveAndWait() {
  std::unique_lock<std::mutex> lock(live_mu_);
  std::vector<std::shared_ptr<ResponseSink>> rest = live_;
  lock.unlock();
  for (auto& sink : rest) sink->cancel_token().Cancel();
  lock.lock();
  // Cancelled legs unwind within moments (on the loops, not on the clock);
  // the real-time bound only guards against bugs.
  live_cv_.wait_for(lock, std::chrono::seconds(30), [&] { return live_.empty(); });
  return rest.size();
}

}  // namespace narwhal::router
