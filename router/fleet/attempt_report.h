// AttemptReport: what one finished prefill + decode attempt tells the
// fleet's owner (DESIGN "Reports, not calls"). A request posts one per
// attempt (Fleet::Report) without waiting; the owner applies it to the
// breaker, link and recompute books in this order: the prefill's success,
// the end of the crossed decode (silent-recompute evidence), the decode's
// success (and the link's), then the failure (breaker evidence, or the
// liveness an engine's 4xx refusal proves).
#ifndef NARWHAL_ROUTER_FLEET_ATTEMPT_REPORT_H_
#define NARWHAL_ROUTER_FLEET_ATTEMPT_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "engines/engine_failure.h"

namespace narwhal::router {

struct AttemptReport {
  std::string producer;  // the attempt's prefill engine ("" when none was placed)
  std::string consumer;  // its decode engine ("" when no decode leg ran)
  // Which incarnation (EngineRecord::id) of each it was placed on; 0 = not
  // known. An engine that left since — maybe back under its iid as a new
  // incarnation, B21 — is not the engine this attempt tells about: what it
  // says of the one that left is dropped.
  uint64_t producer_incarnation = 0;
  uint64_t consumer_incarnation = 0;
  bool prefill_ok = false;  // the prefill returned a usable handoff
  bool decode_ok = false;   // the decode reached [DONE]
  // A crossed decode (producer != consumer) ran: Fleet::DecodeStarted was
  // reported for it, and its end settles the recompute ledger.
  bool crossed_decode = false;
  // Its usage says the consumer recomputed the prompt (router/fleet/kv_recompute.h).
  bool recompute_suspected = false;
  // It failed after the consumer took the handoff.
  bool decode_failed = false;
  std::string recompute_evidence;
  // The attempt's failure, if it failed (any reason; the owner decides what
  // is evidence).
  std::optional<engines::EngineFailure> failure;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_ATTEMPT_REPORT_H_
