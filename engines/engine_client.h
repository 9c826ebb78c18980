// EngineClient: the router's only port to engines (B6).
//
// Prefill() runs the producer leg (B1) and returns a PrefillResult (B2) that
// is passed unchanged to Decode() (B4, B5), which validates it (B3) before any
// HTTP request and streams the consumer's events to a DecodeObserver. Every
// failure comes back as one EngineFailure (B10-B13). Both calls block the
// calling thread for the leg's duration and are safe to call concurrently.
#ifndef NARWHAL_ENGINES_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_ENGINE_CLIENT_H_

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/engine_failure.h"
#include "engines/prefill_result.h"
#include "engines/stream_event.h"

namespace narwhal::engines {

// One engine as the adapter sees it.
struct EngineTarget {
  std::string iid;
  std::string url;  // "http://host:port"
};

// Per-leg options.
struct LegOptions {
  // Fresh per attempt and phase (B8); sent as X-Request-Id.
  std::string backend_request_id;
  // The original client request's deadline. Passing it ends the leg with
  // FailureReason::kDeadline (504, no breaker evidence).
  MonoTime request_deadline = MonoTime::max();
  // Prefill only: bound on this leg (serving.prefill_timeout_s); expiry is an
  // engine timeout (504). Ignored when later than request_deadline.
  std::optional<MonoTime> leg_deadline;
  // Cancelled when the client goes away; the leg then ends with
  // FailureReason::kCancelled promptly. May be null.
  CancelToken* cancel = nullptr;
};

struct PrefillOutcome {
  std::optional<PrefillResult> result;   // set on success
  std::optional<EngineFailure> failure;  // set on failure
  bool ok() const { return result.has_value(); }
};

// Receives decode events in arrival order on the leg's thread.
class DecodeObserver {
 public:
  virtual ~DecodeObserver() = default;
  // Every classified event, kDone excluded (it ends the leg). `data` is the
  // event's raw payload. Return false to stop the leg; it then ends with
  // FailureReason::kCancelled. Time spent in this call (a slow client
  // back-pressuring the stream) does not count against the read timeout.
  virtual bool OnEvent(std::string_view data, const StreamEvent& event) = 0;
};

// A control-plane exchange (health, identity, probes): status 0 means no
// HTTP response arrived and `error` says why.
struct ControlResponse {
  int status = 0;
  std::string body;
  std::string error;
  bool ok() const { return status >= 200 && status < 300; }
};

struct DecodeOutcome {
  std::optional<EngineFailure> failure;  // empty: generated output, then [DONE]
  bool ok() const { return !failure.has_value(); }
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  virtual PrefillOutcome Prefill(const EngineTarget& producer, Api api,
                                 const nlohmann::json& client_body, const LegOptions& options) = 0;

  // `client_streams` is whether the client asked for a stream (the upstream
  // leg always streams). When `consumer` is the handoff's producer, the leg
  // is a same-worker decode (B5).
  virtual DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                               const nlohmann::json& client_body, bool client_streams,
                               const LegOptions& options, DecodeObserver& observer) = 0;

  // A bounded control request to an engine: GET (empty body) or POST of a
  // JSON body, at most `timeout_s` in all. Used for /health, /version,
  // /v1/models and identity checks; never for client traffic.
  virtual ControlResponse Control(const EngineTarget& engine, std::string_view method,
                                  std::string_view path, const std::string& body,
                                  double timeout_s) = 0;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_ENGINE_CLIENT_H_
