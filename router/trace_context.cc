#include "router/trace_context.h"

#include <cstdio>
#include <functional>

namespace narwhal::router {
namespace {

bool LowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

int HexValue(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

bool PrintableAscii(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

std::string TraceContext::ChildTraceparent(std::string_view span_id) const {
  if (trace_id.empty()) return "";
  char flags_hex[3];
  std::snprintf(flags_hex, sizeof(flags_hex), "%02x", flags);
  std::string out = "00-";
  out += trace_id;
  out += '-';
  out += span_id;
  out += '-';
  out += flags_hex;
  return out;
}

std::optional<TraceContext> ParseTraceparent(std::string_view traceparent,
                                             std::string_view tracestate) {
  constexpr size_t kLength = 55;
  if (traceparent.size() < kLength) return std::nullopt;
  const std::string_view version = traceparent.substr(0, 2);
  if (!LowerHex(version) || version == "ff") return std::nullopt;
  if (version == "00" && traceparent.size() != kLength) return std::nullopt;
  if (traceparent.size() > kLength && traceparent[kLength] != '-') return std::nullopt;
  if (traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-') {
    return std::nullopt;
  }
  const std::string_view trace_id = traceparent.substr(3, 32);
  const std::string_view parent_id = traceparent.substr(36, 16);
  const std::string_view flags = traceparent.substr(53, 2);
  if (!LowerHex(trace_id) || AllZero(trace_id)) return std::nullopt;
  if (!LowerHex(parent_id) || AllZero(parent_id)) return std::nullopt;
  if (!LowerHex(flags)) return std::nullopt;
  TraceContext trace;
  trace.trace_id = std::string(trace_id);
  trace.parent_id = std::string(parent_id);
  trace.flags = static_cast<uint8_t>(HexValue(flags[0]) * 16 + HexValue(flags[1]));
  // A later version's flags may use bits 00 does not define: only sampled
  // is passed on.
  if (version != "00") trace.flags &= 0x01;
  if (tracestate.size() <= TraceContext::kMaxTracestateBytes && PrintableAscii(tracestate)) {
    trace.tracestate = std::string(tracestate);
  }
  return trace;
}

TraceContext NewTrace(std::string random_hex) {
  TraceContext trace;
  if (random_hex.size() == 32 && LowerHex(random_hex) && !AllZero(random_hex)) {
    trace.trace_id = std::move(random_hex);
  } else {  // not 32 hex digits: 32 derived from it
    const uint64_t a = std::hash<std::string>{}(random_hex);
    const uint64_t b = std::hash<std::string>{}(random_hex + "#") | 1;  // never all zero
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    trace.trace_id = buf;
  }
  return trace;
}

}  // namespace narwhal::router
