#include "router/fleet/fleet_event.h"

namespace narwhal::router {

std::string_view FleetEventKindName(FleetEventKind kind) {
  switch (kind) {
    case FleetEventKind::kEngineHoldStarted:
      return "engine_hold_started";
    case FleetEventKind::kEngineHoldEnded:
      return "engine_hold_ended";
    case FleetEventKind::kEngineHoldSuppressed:
      return "engine_hold_suppressed";
    case FleetEventKind::kEngineEjected:
      return "engine_ejected";
    case FleetEventKind::kEngineReadmitted:
      return "engine_readmitted";
    case FleetEventKind::kEngineProbe:
      return "engine_probe";
    case FleetEventKind::kEngineDrained:
      return "engine_drained";
    case FleetEventKind::kEngineReadmitRefused:
      return "engine_readmit_refused";
    case FleetEventKind::kLinkHeld:
      return "link_held";
    case FleetEventKind::kLinkProbe:
      return "link_probe";
    case FleetEventKind::kLinkReadmitted:
      return "link_readmitted";
    case FleetEventKind::kPreflight:
      return "preflight";
    case FleetEventKind::kEngineJoined:
      return "engine_joined";
    case FleetEventKind::kEngineJoinFailed:
      return "engine_join_failed";
    case FleetEventKind::kEngineLeft:
      return "engine_left";
  }
  return "engine_probe";
}

std::string_view HoldKindName(HoldKind kind) {
  switch (kind) {
    case HoldKind::kTimed:
      return "timed";
    case HoldKind::kInference:
      return "inference";
    case HoldKind::kNone:
      break;
  }
  return "";
}

FleetEvent FromBreakerEvent(const BreakerEvent& e) {
  FleetEvent out;
  out.kind = e.kind;
  out.iid = e.iid;
  out.hold_kind = e.hold_kind;
  out.cause = e.cause;
  out.evidence = e.evidence;
  out.probe_kind = e.probe_kind;
  out.outcome = e.outcome;
  out.producer = e.producer;
  out.detail = e.detail;
  return out;
}

FleetEvent FromLinkEvent(const LinkEvent& e) {
  FleetEvent out;
  out.kind = e.kind;
  out.iid = e.consumer;  // the engine a held link keeps decodes away from
  out.producer = e.producer;
  out.consumer = e.consumer;
  out.cause = e.cause;
  out.link_outcome = e.outcome;
  out.detail = e.detail;
  return out;
}

FleetEvent PreflightEvent(const PreflightReport& r, const std::string& trigger) {
  PreflightSummary summary;
  summary.passed = r.passed;
  summary.trigger = trigger;
  summary.pairs = r.pairs;
  summary.duration_s = r.duration_s;
  std::string first_failure;
  for (const PreflightGate& g : r.gates) {
    summary.gates[g.name] = g.skipped ? "skipped" : g.passed ? "passed" : "failed";
    if (!g.passed && !g.skipped && first_failure.empty()) {
      first_failure = "gate " + g.name + " failed: " + g.detail;
    }
  }
  summary.transfers = r.transfers.size();
  for (const PreflightPair& t : r.transfers) summary.transfers_passed += t.outcome == "passed";
  FleetEvent e;
  e.kind = FleetEventKind::kPreflight;
  e.detail = first_failure;
  if (e.detail.empty()) {
    e.detail = r.passed ? "every gate passed (" + std::to_string(summary.transfers_passed) + "/" +
                              std::to_string(summary.transfers) + " transfers)"
                        : "preflight failed";
  }
  e.preflight = std::move(summary);
  return e;
}

nlohmann::json FleetEventJson(const FleetEvent& e, double at) {
  nlohmann::json j = {{"event", FleetEventKindName(e.kind)}, {"at", at}};
  auto put = [&j](const char* key, std::string_view value) {
    if (!value.empty()) j[key] = value;
  };
  if (e.preflight) {
    const PreflightSummary& p = *e.preflight;
    j["outcome"] = p.passed ? "passed" : "failed";
    j["trigger"] = p.trigger;
    j["pairs"] = p.pairs == PairMode::kRing ? "ring" : "mesh";
    j["duration_s"] = p.duration_s;
    j["gates"] = nlohmann::json::object();
    for (const auto& [gate, result] : p.gates) j["gates"][gate] = result;
    j["transfers"] = p.transfers;
    j["transfers_passed"] = p.transfers_passed;
    j["detail"] = e.detail;
    return j;
  }
  j["iid"] = e.iid;
  const bool link = e.kind == FleetEventKind::kLinkHeld || e.kind == FleetEventKind::kLinkProbe ||
                    e.kind == FleetEventKind::kLinkReadmitted;
  if (link) {
    j["producer"] = e.producer;
    j["consumer"] = e.consumer;
  }
  put("hold_kind", HoldKindName(e.hold_kind));
  put("cause", e.cause);
  put("evidence", e.evidence);
  if (e.probe_kind) put("probe_kind", ProbeKindName(*e.probe_kind));
  if (e.outcome) put("outcome", ProbeOutcomeName(*e.outcome));
  if (e.link_outcome) put("outcome", LinkProbeOutcomeName(*e.link_outcome));
  if (!link) put("producer", e.producer);
  put("source", e.source);
  put("url", e.url);
  // A refused readmission always says what its validation found.
  if (e.kind == FleetEventKind::kEngineReadmitRefused) {
    j["detail"] = e.detail;
  } else {
    put("detail", e.detail);
  }
  return j;
}

bool IsRoutineFleetEvent(const FleetEvent& e) {
  return e.kind == FleetEventKind::kEngineProbe && e.outcome == ProbeOutcome::kPassed &&
         e.probe_kind == ProbeKind::kLiveness;
}

LogLevel FleetEventLogLevel(const FleetEvent& e) {
  const bool failed = (e.outcome && *e.outcome == ProbeOutcome::kFailed) ||
                      (e.link_outcome && *e.link_outcome == LinkProbeOutcome::kFailed) ||
                      (e.preflight && !e.preflight->passed);
  if (IsRoutineFleetEvent(e)) return LogLevel::kDebug;
  if (e.kind == FleetEventKind::kEngineEjected || e.kind == FleetEventKind::kEngineHoldStarted ||
      e.kind == FleetEventKind::kEngineReadmitRefused ||
      e.kind == FleetEventKind::kEngineJoinFailed || failed) {
    return LogLevel::kWarning;
  }
  return LogLevel::kInfo;
}

}  // namespace narwhal::router
