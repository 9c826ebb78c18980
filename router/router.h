// Router: the core that owns every client request from admission to its last
// byte (B7).
//
// Serve() admits a request (serving.max_inflight, else refused at once) and runs
// it to its end as a coroutine on the calling event loop: placement of the
// prefill and decode legs, the
// attempt loop with fresh backend ids (B8) and retries (B14), handoff-age
// enforcement (B7), breaker evidence and quarantine (B15, B17), failure to
// outcome mapping (B10, B11, B16; statuses come from server/status_table),
// disconnect cancellation (B19), measurement
// (B9), the release of handoffs it will not decode (router/handoff_releaser.h)
// and the journal row. The response goes to the door's ResponseSink:
// streaming events as they arrive (one write per engine read), then one
// Outcome. Every path releases every reservation exactly once (RAII) and
// writes exactly one journal row. No thread per request: a request lives on
// one loop from its client's connection to its engine legs.
//
// Thread-safe (requests run on any loops). No httplib, Beast or gRPC type
// appears here: front doors translate.
#ifndef NARWHAL_ROUTER_ROUTER_H_
#define NARWHAL_ROUTER_ROUTER_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "router/access_log.h"
#include "router/common/clock.h"
#include "router/common/journal.h"
#include "router/common/live_settings.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/continuation.h"
#include "router/fleet/fleet.h"
#include "router/handoff_releaser.h"
#include "router/journal_row.h"
#include "router/outcome.h"
#include "router/request.h"
#include "router/response_sink.h"
#include "router/retry_budget.h"
#include "router/tenant_limits.h"

namespace narwhal::router {

class Router {
 public:
  // `metrics` and `journal` may be null. `journal_status` is the server's
  // status table as the journal reads it (server/status_table.h); without
  // it the rows' status and error_type are null. All references must
  // outlive the Router.
  Router(const Settings& settings, engines::AsyncEngineClient& engines, Fleet& fleet,
         const Clock& clock, Metrics* metrics, Journal* journal, uint64_t seed,
         const JournalStatus* journal_status = nullptr);
  ~Router();  // cancels what still runs and joins the workers
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // A fresh router request id (the x-request-id sent to the client).
  std::string NewRequestId();

  // Admits `request` and runs it to its end on the calling coroutine's loop;
  // its response goes to `sink`, whose Finish() is called exactly once before
  // this completes (a refusal — the in-flight limit, draining — too).
  engines::Awaitable<void> Serve(Request request, std::shared_ptr<ResponseSink> sink);
  // Serve() started on `executor`'s loop, detached (for doors whose own
  // threads must not run requests, e.g. gRPC reactors).
  void Submit(Request request, std::shared_ptr<ResponseSink> sink,
              const engines::Executor& executor);

  // Journals and counts a request the front door refused before the core
  // (malformed JSON, wrong model, oversized body, bad API key).
  void RecordRefused(const Request& request, const Outcome& outcome);

  // Graceful shutdown: refuse new requests, let in-flight ones finish for up
  // to `grace` — measured on the injected clock, by a timer on `executor`'s
  // loop — then cut the rest and wait for them to unwind. A cut request
  // ends failed with reason shutting_down (503 backend_unavailable; a
  // committed stream gets its terminal error event, a gRPC call
  // UNAVAILABLE), never as the client's cancellation. Returns how many
  // were cut. Blocks: call it from a thread that runs no event loop.
  size_t Drain(engines::MonoClock::duration grace, const engines::Executor& executor);

  // Also writes each finished request's line to `log` (may be null). Call
  // before the first request; `log` must outlive the Router.
  void SetAccessLog(AccessLog* log) { access_log_ = log; }
  // Where each sampled request's spans go (SPEC §16); null = none. Set
  // before the first request.
  void SetSpanSink(SpanSink* sink) { span_sink_ = sink; }

  // Requests admitted from now on follow `live`'s generation (B20); without
  // it, the settings the router was made with. `live` must outlive the
  // Router. Call before the first request.
  void SetLiveSettings(const LiveSettings* live) { live_settings_ = live; }
  // The generation a request admitted now gets.
  std::shared_ptr<const ConfigGeneration> CurrentConfig() const;

  int inflight() const { return inflight_.load(); }
  // A reload's settings for the router's own state (the retry budget).
  void ApplySettings(const Settings& settings) {
    retry_budget_.Resize(settings.serving.retry_budget, settings.serving.retry_replenish);
    continuation_budget_.Resize(settings.continuation.budget, settings.continuation.replenish);
  }
  const RetryBudget& retry_budget() const { return retry_budget_; }
  const RetryBudget& continuation_budget() const { return continuation_budget_; }
  // Each tenant's own limits (serving.api_keys), applied at admission.
  TenantLimits& tenant_limits() { return tenant_limits_; }
  const Settings& settings() const { return settings_; }

 private:
  class Run;  // one request's life

  void Finish(const Request& request, ResponseSink& sink, Outcome outcome,
              const RequestRecord& record);
  void CountRequest(const Request& request, const Outcome& outcome);  // requests_total
  void CountContinuation(ContinuationOutcome outcome);                // continuations_total
  // Every label combination of the request counters at zero from the start.
  void ExportSeriesAtZero();
  // The request's one journal row, built from its one record.
  void WriteJournal(const Request& request, const Outcome& outcome, const RequestRecord& record,
                    double duration_s);
  // The request's span and its phases' spans, to the span sink.
  void ExportSpans(const Request& request, const Outcome& outcome, const RequestRecord& record);
  // A random span id (16 hex digits, never all zeros).
  std::string NewSpanId();
  double Backoff(const Settings& settings, int failed_attempt);
  // Cancels every admitted request and waits until each has finished;
  // returns how many there were.
  size_t CancelLiveAndWait();

  const Settings& settings_;
  // Generation 1, the settings above (when no LiveSettings is followed).
  const std::shared_ptr<const ConfigGeneration> fixed_;
  const LiveSettings* live_settings_ = nullptr;
  engines::AsyncEngineClient& engines_;
  Fleet& fleet_;
  const Clock& clock_;
  Metrics* metrics_;
  Journal* journal_;
  AccessLog* access_log_ = nullptr;
  SpanSink* span_sink_ = nullptr;
  const JournalStatus* journal_status_;
  RetryBudget retry_budget_;
  // B29: the continuation credit pool (continuation.budget, .replenish).
  RetryBudget continuation_budget_;
  TenantLimits tenant_limits_;
  // Releases of abandoned handoffs; destroyed (waited for) before the rest.
  HandoffReleaser releaser_;

  std::mt19937_64& Rng();
  const uint64_t seed_;
  std::atomic<uint64_t> next_stream_{0};
  std::atomic<size_t> tokenize_rotation_{0};  // which engine tokenizes next
  // requests_total's series, made at zero at construction.
  struct CountedSeries {
    engines::Api api;
    Door door;
    Terminal terminal;
    prometheus::Counter* counter;
  };
  std::vector<CountedSeries> requests_counters_;

  std::atomic<int> inflight_{0};
  std::atomic<bool> accepting_{true};
  // Set when the drain's grace is over: a request cancelled from now on was
  // cut by the shutdown, not by its client.
  std::atomic<bool> cutting_{false};
  std::mutex live_mu_;
  std::condition_variable live_cv_;
  std::vector<std::shared_ptr<ResponseSink>> live_;  // admitted, not finished
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_ROUTER_H_
