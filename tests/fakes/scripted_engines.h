// ScriptedEngines: the scripted engines::AsyncEngineClient of the
// control-plane tests (tests/router/fleet/): answers are scripted per engine,
// time moves on the shared FakeClock only when a script says so, and every
// call is recorded.
//
// It behaves like the HTTP adapter where the control plane can tell:
//   Prefill - after the script's latency, a fresh PrefillResult bound to the
//             producer and the leg's backend request id, or the scripted
//             failure (phase, iid and evidence_iid filled in as the adapter
//             does);
//   Decode  - handoffs of listed producers are rejected as invalid
//             continuations before any request (B3); then, after the
//             script's latency, the scripted failure, or, when `silent`,
//             the first-token timeout after advancing the clock by that
//             budget; otherwise the scripted payloads are classified with
//             engines::ClassifyEvent and fed to the observer in order:
//             [DONE] ends the leg (a failure before any token, B11), an
//             error object ends it with engines::ClassifyEngineStatus, a
//             payload list without [DONE] ends with "stream ended before
//             the [DONE] terminator"; the stream's `tail_s` passes before
//             it ends;
//   Control - a scripted answer per engine and path (or every path of the
//             engine), for good or until a clock time (an engine still
//             loading); otherwise a healthy engine: /health 200,
//             /version {"version": <version>}, /v1/models listing the
//             served model (with its max_model_len when set), any other
//             POST {"system_fingerprint": "fp"}, anything else
//             404. Each call may cost a fixed clock time.
// Engines without a script of their own get the default prefill and decode
// scripts (no latency, a handoff, one token then [DONE]). A leg never
// suspends: it completes within the co_await that starts it. Thread-safe.
#ifndef NARWHAL_TESTS_FAKES_SCRIPTED_ENGINES_H_
#define NARWHAL_TESTS_FAKES_SCRIPTED_ENGINES_H_

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/api.h"
#include "engines/clock.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/stream_classifier.h"
#include "engines/prefill_result.h"
#include "engines/stream_event.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::testing {

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
  std::optional<engines::EngineFailure> failure = {};  // else a handoff
  double latency_s = 0;                                // advances the clock
};

struct DecodeScript {
  std::vector<std::string> payloads = {TokenChunk("ok"), "[DONE]"};
  bool silent = false;  // no frames: first-token timeout
  // Handoffs of these producers are rejected before any request (B3
  // invalid continuation: evidence against the producer).
  std::vector<std::string> reject_handoffs_from = {};
  double latency_s = 0;  // before the first frame (or the failure)
  // Ends the leg before any frame (after `latency_s`).
  std::optional<engines::EngineFailure> failure = {};
  double tail_s = 0;  // from the first frame to the end of the stream
};

struct Call {
  std::string kind;             // prefill | decode | control
  std::string iid;              // the producer, the consumer or the engine asked
  engines::MonoTime at = {};    // when the call started
  engines::LegOptions options;  // cancel cleared
  nlohmann::json body = {};
  std::string handoff_producer = {};    // decode
  std::string handoff_request_id = {};  // decode
  nlohmann::json descriptor = {};       // decode: the handoff's kv_transfer_params
  std::string path = {};                // control: "GET /health"
  double timeout_s = 0;                 // control
};

class ScriptedEngines : public engines::AsyncEngineClient {
 public:
  // `manual`, when set, is the clock the scripts' latencies advance;
  // `first_token_timeout_s` is what a silent consumer costs.
  ScriptedEngines(engines::Clock& clock, FakeClock* manual, double first_token_timeout_s)
      : clock_(clock), manual_(manual), first_token_timeout_s_(first_token_timeout_s) {}

  void SetPrefill(const std::string& iid, PrefillScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_[iid] = std::move(s);
  }
  void SetDecode(const std::string& iid, DecodeScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    decode_[iid] = std::move(s);
  }
  // The scripts of engines without one of their own.
  void SetDefaultPrefill(PrefillScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    default_prefill_ = std::move(s);
  }
  void SetDefaultDecode(DecodeScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    default_decode_ = std::move(s);
  }
  // `iid` answers `r` to requests for `path` ("": every path). A path's
  // own answer comes before the engine's every-path answer.
  void SetControl(const std::string& iid, const std::string& path, engines::ControlResponse r) {
    std::lock_guard<std::mutex> lock(mu_);
    control_[{iid, path}] = ControlScript{std::move(r), std::nullopt};
  }
  // The same, only while the clock is before `until`; later requests get
  // the healthy answer (an engine that loads until then).
  void SetControlUntil(const std::string& iid, const std::string& path, engines::MonoTime until,
                       engines::ControlResponse r) {
    std::lock_guard<std::mutex> lock(mu_);
    control_[{iid, path}] = ControlScript{std::move(r), until};
  }
  // The healthy answers' identity: /version and /v1/models.
  void set_version(std::string version) {
    std::lock_guard<std::mutex> lock(mu_);
    version_ = std::move(version);
  }
  void SetServedModel(std::string model, std::optional<long long> max_model_len = std::nullopt) {
    std::lock_guard<std::mutex> lock(mu_);
    model_ = std::move(model);
    max_model_len_ = max_model_len;
  }
  // Clock time every control call costs (after its answer is chosen).
  void set_control_latency(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    control_latency_s_ = seconds;
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
  std::vector<Call> calls(const std::string& kind, const std::string& iid) const {
    std::vector<Call> out;
    for (const Call& c : calls(kind)) {
      if (c.iid == iid) out.push_back(c);
    }
    return out;
  }
  void ClearCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }

  engines::Awaitable<engines::PrefillOutcome> Prefill(engines::EngineTarget producer,
                                                      engines::Api api,
                                                      const nlohmann::json& client_body,
                                                      engines::LegOptions options) override {
    co_return PrefillNow(producer, api, client_body, options);
  }
  engines::Awaitable<engines::DecodeOutcome> Decode(engines::EngineTarget consumer,
                                                    const engines::PrefillResult& handoff,
                                                    const nlohmann::json& client_body,
                                                    bool client_streams,
                                                    engines::LegOptions options,
                                                    engines::DecodeObserver& observer) override {
    co_return DecodeNow(consumer, handoff, client_body, client_streams, options, observer);
  }
  engines::Awaitable<engines::ControlResponse> Control(engines::EngineTarget engine,
                                                       std::string method, std::string path,
                                                       std::string body,
                                                       double timeout_s) override {
    co_return ControlNow(engine, method, path, body, timeout_s);
  }

 private:
  engines::PrefillOutcome PrefillNow(const engines::EngineTarget& producer, engines::Api api,
                                     const nlohmann::json& client_body,
                                     const engines::LegOptions& options) {
    PrefillScript s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Record("prefill", producer.iid, options, client_body);
      auto it = prefill_.find(producer.iid);
      s = it != prefill_.end() ? it->second : default_prefill_;
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

  engines::DecodeOutcome DecodeNow(const engines::EngineTarget& consumer,
                                   const engines::PrefillResult& handoff,
                                   const nlohmann::json& client_body, bool /*client_streams*/,
                                   const engines::LegOptions& options,
                                   engines::DecodeObserver& observer) {
    DecodeScript s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Call& c = Record("decode", consumer.iid, options, client_body);
      c.handoff_producer = handoff.producer_iid();
      c.handoff_request_id = handoff.backend_request_id();
      c.descriptor = handoff.parameters();
      auto it = decode_.find(consumer.iid);
      s = it != decode_.end() ? it->second : default_decode_;
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
      std::ostringstream detail;
      detail << "no first token within " << first_token_timeout_s_ << "s: no frames at all";
      out.failure =
          Fill(Failure(engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
                       engines::FailureCause::kFirstTokenTimeout, detail.str()),
               engines::Phase::kDecode, consumer.iid);
      return out;
    }
    if (s.failure) {
      out.failure = Fill(*s.failure, engines::Phase::kDecode, consumer.iid);
      return out;
    }
    out = Stream(consumer.iid, s.payloads, observer);
    if (manual_ != nullptr && s.tail_s > 0) manual_->Advance(s.tail_s);
    return out;
  }

  engines::ControlResponse ControlNow(const engines::EngineTarget& engine, std::string_view method,
                                      std::string_view path, const std::string& body,
                                      double timeout_s) {
    engines::ControlResponse r;
    double latency_s = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Call& c =
          Record("control", engine.iid, engines::LegOptions(),
                 body.empty() ? nlohmann::json() : nlohmann::json::parse(body, nullptr, false));
      c.path = std::string(method) + " " + std::string(path);
      c.timeout_s = timeout_s;
      r = Answer(engine.iid, method, std::string(path), c.at);
      latency_s = control_latency_s_;
    }
    if (manual_ != nullptr && latency_s > 0) manual_->Advance(latency_s);
    return r;
  }

  struct ControlScript {
    engines::ControlResponse response;
    std::optional<engines::MonoTime> until;  // none: for good
  };

  static engines::EngineFailure Fill(engines::EngineFailure f, engines::Phase phase,
                                     const std::string& iid) {
    f.phase = phase;
    f.iid = iid;
    f.evidence_iid = f.breaker_class == engines::BreakerClass::kNone ? "" : iid;
    return f;
  }

  // The scripted payloads, in order, to the observer.
  static engines::DecodeOutcome Stream(const std::string& iid,
                                       const std::vector<std::string>& payloads,
                                       engines::DecodeObserver& observer) {
    engines::DecodeOutcome out;
    bool token = false;
    engines::StreamEvent event;
    for (const std::string& payload : payloads) {
      // As the adapter: the repaired payload is relayed, a malformed one fails.
      const std::string_view data = engines::ClassifyEvent(payload, &event);
      if (event.kind == engines::EventKind::kMalformed) {
        out.failure =
            Fill(Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                         engines::FailureCause::kMalformedStream,
                         "malformed stream: an event is not a JSON object"),
                 engines::Phase::kDecode, iid);
        return out;
      }
      if (event.kind == engines::EventKind::kDone) {
        if (token) return out;
        out.failure =
            Fill(Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                         engines::FailureCause::kEarlyDone,
                         "stream ended with [DONE] before any token arrived"),
                 engines::Phase::kDecode, iid);
        return out;
      }
      if (event.kind == engines::EventKind::kError) {
        out.failure =
            engines::ClassifyEngineStatus(engines::Phase::kDecode, iid, event.error_status,
                                          event.error_message, /*in_stream=*/true);
        return out;
      }
      if (event.kind == engines::EventKind::kToken) token = true;
      if (!observer.OnEvent(data, event)) {
        out.failure = Failure(engines::FailureReason::kCancelled, engines::BreakerClass::kNone,
                              engines::FailureCause::kNone, "client went away");
        out.failure->phase = engines::Phase::kDecode;
        out.failure->iid = iid;
        return out;
      }
    }
    out.failure = Fill(
        Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                engines::FailureCause::kUnterminated, "stream ended before the [DONE] terminator"),
        engines::Phase::kDecode, iid);
    return out;
  }

  // The scripted answer in force at `now`, else a healthy engine's.
  engines::ControlResponse Answer(const std::string& iid, std::string_view method,
                                  const std::string& path, engines::MonoTime now) const {
    for (const std::string& key : {path, std::string()}) {
      auto it = control_.find({iid, key});
      if (it != control_.end() && (!it->second.until || now < *it->second.until)) {
        return it->second.response;
      }
    }
    engines::ControlResponse r;
    r.status = 200;
    if (path == "/health") {
      r.body = "";
    } else if (path == "/version") {
      r.body = nlohmann::json({{"version", version_}}).dump();
    } else if (path == "/v1/models") {
      nlohmann::json card = {{"id", model_}, {"object", "model"}};
      if (max_model_len_) card["max_model_len"] = *max_model_len_;
      r.body = nlohmann::json({{"object", "list"}, {"data", nlohmann::json::array({card})}}).dump();
    } else if (method == "POST") {
      r.body = nlohmann::json({{"system_fingerprint", fingerprint_}}).dump();
    } else {
      r.status = 404;
    }
    return r;
  }

  Call& Record(const std::string& kind, const std::string& iid, engines::LegOptions options,
               const nlohmann::json& body) {
    options.cancel = nullptr;
    Call c;
    c.kind = kind;
    c.iid = iid;
    c.at = clock_.Now();
    c.options = options;
    c.body = body;
    calls_.push_back(std::move(c));
    return calls_.back();
  }

  engines::Clock& clock_;
  FakeClock* manual_;
  const double first_token_timeout_s_;
  mutable std::mutex mu_;
  std::map<std::string, PrefillScript> prefill_;
  std::map<std::string, DecodeScript> decode_;
  PrefillScript default_prefill_;
  DecodeScript default_decode_;
  std::map<std::pair<std::string, std::string>, ControlScript> control_;
  std::string version_ = "0.29.1";
  std::string model_ = "m";
  std::optional<long long> max_model_len_;
  std::string fingerprint_ = "fp";
  double control_latency_s_ = 0;
  std::vector<Call> calls_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_SCRIPTED_ENGINES_H_
