// The spans of one request (SPEC §16, span export): the request's own span
// and one child per phase — admission, each prefill leg, each handoff check,
// each decode leg, and a span around each retry or continuation whose legs
// are its children. Router::Run records them while the request runs (only
// when a SpanSink is set, and only for a sampled trace); Router::Finish
// hands them to the sink with the request's span. A leg's span id is the one
// its engine received in `traceparent`, so the engine's own spans (vLLM
// continues the trace) hang under the router's leg.
//
// The sink (server/tracing/otlp_exporter) must never block: it queues, or
// drops and counts.
#ifndef NARWHAL_ROUTER_REQUEST_SPANS_H_
#define NARWHAL_ROUTER_REQUEST_SPANS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/clock.h"
#include "router/trace_context.h"

namespace narwhal::router {

// OpenTelemetry's SpanKind values.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

struct PhaseSpan {
  std::string name;       // admission, prefill, handoff_check, decode, retry, continuation
  std::string span_id;    // 16 hex digits
  std::string parent_id;  // "" = the request's span
  SpanKind kind = SpanKind::kInternal;
  double start_unix_s = 0;
  double end_unix_s = 0;
  nlohmann::json attributes = nlohmann::json::object();  // name -> string, int, double or bool
  std::string error;  // the status message of a span that failed; "" = unset status
};

// One finished request's spans.
struct RequestSpans {
  TraceContext trace;  // trace_id, the client's span (parent_id) when continued
  PhaseSpan request;   // the request's own span (kind server)
  std::vector<PhaseSpan> phases;
};

class SpanSink {
 public:
  virtual ~SpanSink() = default;
  // Takes one request's spans; never blocks.
  virtual void Export(RequestSpans spans) = 0;
};

// Whether a request's spans are recorded: a sink is set and the trace is
// sampled (a trace the router starts is sampled when spans are exported).
inline bool Sampled(const TraceContext& trace) { return (trace.flags & 0x01) != 0; }

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_REQUEST_SPANS_H_
