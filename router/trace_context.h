// TraceContext: the W3C Trace Context (traceparent, tracestate) of a client
// request, continued when the client sent a valid one and started by the
// router otherwise; every engine leg gets a child traceparent of its own.
//
// https://www.w3.org/TR/trace-context/ — `traceparent` is
// `VERSION-TRACEID-PARENTID-FLAGS`: version 00 is exactly 55 characters; a
// later version is read as 00 from its first 55 characters (which must be
// followed by `-` if there are more); ff is invalid; TRACEID is 32 and
// PARENTID 16 lowercase hex digits, neither all zeros; FLAGS 2 hex digits.
// An invalid traceparent is ignored (the router starts a new trace) and so
// is its tracestate. A tracestate is passed on as received when it is at
// most kMaxTracestateBytes of printable ASCII, else dropped.
#ifndef NARWHAL_ROUTER_TRACE_CONTEXT_H_
#define NARWHAL_ROUTER_TRACE_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace narwhal::router {

struct TraceContext {
  static constexpr size_t kMaxTracestateBytes = 512;

  std::string trace_id;    // 32 lowercase hex digits; empty: no trace
  std::string parent_id;   // the client's span (16 hex digits); empty when started here
  uint8_t flags = 0;       // trace-flags; bit 0 = sampled
  std::string tracestate;  // as received, or empty

  bool continued() const { return !parent_id.empty(); }
  // "00-<trace_id>-<span_id>-<flags>" for a leg whose span is `span_id`
  // (16 hex digits); empty when there is no trace.
  std::string ChildTraceparent(std::string_view span_id) const;
};

// The client's trace context, or nullopt when `traceparent` is absent or
// invalid.
std::optional<TraceContext> ParseTraceparent(std::string_view traceparent,
                                             std::string_view tracestate);

// A trace the router starts: `random_hex` supplies 32 random lowercase hex
// digits (the request's id; anything else is hashed into 32); not sampled.
TraceContext NewTrace(std::string random_hex);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_TRACE_CONTEXT_H_
