// AsyncEngineClient: the router's only port to engines (B6).
//
// Prefill() runs the producer leg (B1) and returns a PrefillResult (B2) that
// is passed unchanged to Decode() (B4, B5), which validates it (B3) before any
// HTTP request and streams the consumer's events to a DecodeObserver. Every
// failure comes back as one EngineFailure (B10-B13). Legs are coroutines on
// the caller's event loop and are safe to run concurrently.
#ifndef NARWHAL_ENGINES_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_ENGINE_CLIENT_H_

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/engine_failure.h"
#include "engines/prefill_result.h"
#include "engines/stream_event.h"

namespace narwhal::engines {

template <typename T>
using Awaitable = boost::asio::awaitable<T>;

// One engine as the adapter sees it.
struct EngineTarget {
  std::string iid;
  std::string url;  // "http://host:port"
  // A producer's kv_transfer_config engine_id when configured: its
  // descriptors must name it (engines/descriptor_contract.h); empty = any.
  std::string kv_engine_id = {};
};

// Per-leg options.
struct LegOptions {
  // Fresh per attempt and phase (B8); sent as X-Request-Id.
  std::string backend_request_id;
  // W3C trace context headers for the leg (router/trace_context.h); not
  // sent when empty.
  std::string traceparent;
  std::string tracestate;
  // The original client request's deadline. Passing it ends the leg with
  // FailureReason::kDeadline (no breaker evidence).
  MonoTime request_deadline = MonoTime::max();
  // Prefill only: bound on this leg (serving.prefill_timeout_s); expiry is an
  // engine timeout (kLegTimeout). Ignored when later than request_deadline.
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
  // Event-loop legs (AsyncEngineClient) only: runs after the events of one
  // engine read have been passed to OnEvent, before the next read — the place
  // to hand them to the client in one write. The leg's read timer is paused
  // meanwhile, so a slow client back-pressuring the stream is not engine
  // silence (B13). Return false to stop the leg (kCancelled).
  virtual Awaitable<bool> Flush() { co_return true; }
};

// A control-plane exchange (health, identity, probes): status 0 means no
// HTTP response arrived and `error` says why.
struct ControlResponse {
  int status = 0;
  std::string body;
  std::string error;
  bool timed_out = false;  // no answer within the call's timeout
  bool ok() const { return status >= 200 && status < 300; }
};

struct DecodeOutcome {
  std::optional<EngineFailure> failure;  // empty: generated output, then [DONE]
  // A failed leg of a valid, unused handoff that no consumer took: the
  // request never reached the consumer (cancelled, deadline, connect
  // failure), or the consumer refused it with an HTTP error status before
  // streaming. The producer still pins the blocks: the router releases them
  // (router/handoff_releaser.h). False after a success, when the consumer may
  // own the request (it was sent and no refusal came back), and for handoffs
  // refused before any request (B3, reused).
  bool handoff_left_with_producer = false;
  bool ok() const { return !failure.has_value(); }
};

// The engine port: coroutines on the event loops (engines/http/io_loops.h). A
// leg runs on the executor of the coroutine that awaits it and never blocks
// it; client legs and the control plane's probes use the same port.
// Parameters passed by value live in the coroutine; references must outlive
// the awaited call. RunBlocking (engines/run_blocking.h) waits for one from
// a thread outside the loops (tools, operator actions, tests).
//
// Prefill: a one-token prefill on `producer` that yields the handoff.
// Decode: `client_streams` is whether the client asked for a stream (the
// upstream leg always streams). When `consumer` is the handoff's producer,
// the leg is a same-worker decode (B5).
// Control: a bounded control request to an engine: GET (empty body) or POST
// of a JSON body, at most `timeout_s` in all. Used for /health, /version,
// /v1/models, /metrics and identity checks; never for client traffic.
class AsyncEngineClient {
 public:
  virtual ~AsyncEngineClient() = default;

  virtual Awaitable<PrefillOutcome> Prefill(EngineTarget producer, Api api,
                                            const nlohmann::json& client_body,
                                            LegOptions options) = 0;

  virtual Awaitable<DecodeOutcome> Decode(EngineTarget consumer, const PrefillResult& handoff,
                                          const nlohmann::json& client_body, bool client_streams,
                                          LegOptions options, DecodeObserver& observer) = 0;

  virtual Awaitable<ControlResponse> Control(EngineTarget engine, std::string method,
                                             std::string path, std::string body,
                                             double timeout_s) = 0;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_ENGINE_CLIENT_H_
