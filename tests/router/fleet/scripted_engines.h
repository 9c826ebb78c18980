// Test doubles for breaker tests: a clock that moves only when told (the
// shared FakeClock), and an engines::EngineClient
// whose answers are scripted per engine and whose every call is recorded.
//
// ScriptedEngines behaves like the HTTP adapter where the breaker can tell:
//   Prefill - a fresh PrefillResult bound to the producer and the leg's
//             backend request id, or the scripted failure (phase, iid and
//             evidence_iid filled in as the adapter does);
//   Decode  - the scripted payloads are classified with
//             engines::ClassifyEvent and fed to the observer in order;
//             [DONE] ends the leg (a failure before any token, B11), an
//             error object ends it with engines::ClassifyEngineStatus, a
//             payload list without [DONE] ends with "stream ended before
//             the [DONE] terminator"; `silent` ends with the first-token
//             timeout after advancing the clock by the budget; handoffs of
//             listed producers are rejected as invalid continuations (B3);
//   Control - the scripted response per engine and path; by default
//             /health 200, /version {"version": "0.29.1"} and /v1/models
//             listing model "m".
// Thread-safe.
#ifndef NARWHAL_TESTS_BREAKERS_SCRIPTED_ENGINES_H_
#define NARWHAL_TESTS_BREAKERS_SCRIPTED_ENGINES_H_

#include <algorithm>
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
#include "router/common/clock.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::breaker_test {

using engines::MonoTime;

// The one fake clock (tests/fakes/fake_clock.h).
using ManualClock = testing::FakeClock;

// A failure as the adapter reports it (phase/iid/evidence filled in later).
inline engines::EngineFailure Failure(engines::FailureReason reason, engines::BreakerClass cls,
                                      engines::FailureCause cause, std::string detail) {
  engines::EngineFailure f;
  f.reason = reason;
  f.breaker_class = cls;
  f.cause = cause;
  f.detail = std::move(detail);
  f.transient = true;
  return f;
}
inline engines::EngineFailure Refused() {
  return Failure(engines::FailureReason::kEngineUnreachable, engines::BreakerClass::kConnection,
                 engines::FailureCause::kConnectFailed, "engine unreachable: connection refused");
}

inline std::string TokenChunk(const std::string& text) {
  return nlohmann::json({{"id", "cmpl-1"},
                         {"object", "text_completion"},
                         {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}}}})
      .dump();
}

struct PrefillScript {
  std::optional<engines::EngineFailure> failure;  // else a handoff
  double latency_s = 0;                           // advances the clock
};

struct DecodeScript {
  std::vector<std::string> payloads = {TokenChunk("ok"), "[DONE]"};
  bool silent = false;  // no frames: first-token timeout
  // Handoffs of these producers are rejected before any request (B3
  // invalid continuation: evidence against the producer).
  std::vector<std::string> reject_handoffs_from;
  double latency_s = 0;
};

struct Call {
  std::string kind;  // prefill | decode | control
  std::string iid;
  MonoTime at;
  engines::LegOptions options;  // cancel cleared
  nlohmann::json body;
  std::string handoff_producer;    // decode
  std::string handoff_request_id;  // decode
  std::string path;                // control
};

class ScriptedEngines : public engines::EngineClient {
 public:
  ScriptedEngines(router::Clock& clock, ManualClock* manual, double first_token_timeout_s)
      : clock_(clock), manual_(manual), first_token_timeout_s_(first_token_timeout_s) {}

  void SetPrefill(const std::string& iid, PrefillScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_[iid] = std::move(s);
  }
  void SetDecode(const std::string& iid, DecodeScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    decode_[iid] = std::move(s);
  }
  void SetControl(const std::string& iid, const std::string& path, engines::ControlResponse r) {
    std::lock_guard<std::mutex> lock(mu_);
    control_[iid + " " + path] = std::move(r);
  }
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<Call> calls(const std::string& kind) const {
    std::vector<Call> out;
    for (const Call& c : calls()) {
      if (c.kind == kind) out.push_back(c);
    }
    return out;
  }
  void ClearCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }

  engines::PrefillOutcome Prefill(const engines::EngineTarget& producer, engines::Api api,
                                  const nlohmann::json& client_body,
                                  const engines::LegOptions& options) override {
    PrefillScript s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Record("prefill", producer.iid, options, client_body);
      if (auto it = prefill_.find(producer.iid); it != prefill_.end()) s = it->second;
    }
    if (manual_ != nullptr) manual_->Advance(s.latency_s);
    engines::PrefillOutcome out;
    if (s.failure) {
      out.failure = Fill(*s.failure, engines::Phase::kPrefill, producer.iid);
      return out;
    }
    out.result.emplace(producer.iid, producer.url, api, options.backend_request_id, "NixlConnector",
                       nlohmann::json({{"do_remote_decode", false},
                                       {"do_remote_prefill", true},
                                       {"remote_engine_id", producer.iid},
                                       {"remote_block_ids", {1, 2, 3}},
                                       {"remote_request_id", options.backend_request_id}}));
    return out;
  }

  engines::DecodeOutcome Decode(const engines::EngineTarget& consumer,
                                const engines::PrefillResult& handoff,
                                const nlohmann::json& client_body, bool /*client_streams*/,
                                const engines::LegOptions& options,
                                engines::DecodeObserver& observer) override {
    DecodeScript s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Call& c = Record("decode", consumer.iid, options, client_body);
      c.handoff_producer = handoff.producer_iid();
      c.handoff_request_id = handoff.backend_request_id();
      if (auto it = decode_.find(consumer.iid); it != decode_.end()) s = it->second;
    }
    engines::DecodeOutcome out;
    if (std::find(s.reject_handoffs_from.begin(), s.reject_handoffs_from.end(),
                  handoff.producer_iid()) != s.reject_handoffs_from.end()) {
      engines::EngineFailure f = Failure(
          engines::FailureReason::kInvalidResponse, engines::BreakerClass::kKvHandoff,
          engines::FailureCause::kInvalidContinuation, "invalid continuation: connector mismatch");
      f.phase = engines::Phase::kDecode;
      f.iid = consumer.iid;
      f.evidence_iid = handoff.producer_iid();
      f.transient = false;
      f.handoff_rejection = "connector_mismatch";
      out.failure = f;
      return out;
    }
    if (manual_ != nullptr) manual_->Advance(s.latency_s);
    if (s.silent) {
      if (manual_ != nullptr) manual_->Advance(first_token_timeout_s_);
      out.failure =
          Fill(Failure(engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
                       engines::FailureCause::kFirstTokenTimeout,
                       "no first token within 0.75s: no frames at all"),
               engines::Phase::kDecode, consumer.iid);
      return out;
    }
    bool token = false;
    engines::StreamEvent event;
    for (const std::string& payload : s.payloads) {
      engines::ClassifyEvent(payload, &event);
      if (event.kind == engines::EventKind::kDone) {
        if (token) return out;
        out.failure =
            Fill(Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                         engines::FailureCause::kEarlyDone,
                         "stream ended with [DONE] before any token arrived"),
                 engines::Phase::kDecode, consumer.iid);
        return out;
      }
      if (event.kind == engines::EventKind::kError) {
        out.failure = engines::ClassifyEngineStatus(engines::Phase::kDecode, consumer.iid,
                                                    event.error_status, event.error_message,
                                                    /*in_stream=*/true);
        return out;
      }
      if (event.kind == engines::EventKind::kToken) token = true;
      if (!observer.OnEvent(payload, event)) {
        out.failure = Failure(engines::FailureReason::kCancelled, engines::BreakerClass::kNone,
                              engines::FailureCause::kNone, "client went away");
        out.failure->phase = engines::Phase::kDecode;
        out.failure->iid = consumer.iid;
        return out;
      }
    }
    out.failure = Fill(
        Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                engines::FailureCause::kUnterminated, "stream ended before the [DONE] terminator"),
        engines::Phase::kDecode, consumer.iid);
    return out;
  }

  engines::ControlResponse Control(const engines::EngineTarget& engine, std::string_view method,
                                   std::string_view path, const std::string& body,
                                   double /*timeout_s*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    Call& c = Record("control", engine.iid, engines::LegOptions(),
                     body.empty() ? nlohmann::json() : nlohmann::json::parse(body, nullptr, false));
    c.path = std::string(method) + " " + std::string(path);
    if (auto it = control_.find(engine.iid + " " + std::string(path)); it != control_.end()) {
      return it->second;
    }
    engines::ControlResponse r;
    r.status = 200;
    if (path == "/health") {
      r.body = "";
    } else if (path == "/version") {
      r.body = R"({"version": "0.29.1"})";
    } else if (path == "/v1/models") {
      r.body = R"({"object": "list", "data": [{"id": "m", "object": "model"}]})";
    } else {
      r.status = 404;
    }
    return r;
  }

 private:
  static engines::EngineFailure Fill(engines::EngineFailure f, engines::Phase phase,
                                     const std::string& iid) {
    f.phase = phase;
    f.iid = iid;
    f.evidence_iid = f.breaker_class == engines::BreakerClass::kNone ? "" : iid;
    return f;
  }
  Call& Record(const std::string& kind, const std::string& iid, engines::LegOptions options,
               const nlohmann::json& body) {
    options.cancel = nullptr;
    calls_.push_back(Call{kind, iid, clock_.Now(), options, body, "", "", ""});
    return calls_.back();
  }

  router::Clock& clock_;
  ManualClock* manual_;
  const double first_token_timeout_s_;
  mutable std::mutex mu_;
  std::map<std::string, PrefillScript> prefill_;
  std::map<std::string, DecodeScript> decode_;
  std::map<std::string, engines::ControlResponse> control_;
  std::vector<Call> calls_;
};

}  // namespace narwhal::breaker_test

#endif  // NARWHAL_TESTS_BREAKERS_SCRIPTED_ENGINES_H_
