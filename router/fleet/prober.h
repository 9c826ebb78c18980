// Prober: runs the probes the breaker asks for (B17) and reports each result
// to the Fleet.
//   health    - GET /health within engine.health_timeout_s (plus lifecycle
//               validation when readmitting with an engine_contract);
//   liveness  - the same check, as an idle sweep;
//   inference - a prefill leg plus a decode leg, each bounded by
//               engine.first_token_timeout_s. For a decode engine held after
//               a crossed-decode failure the handoff is a new one from the
//               original producer, then another live producer, then the
//               engine itself (standalone); a producer whose prefill fails,
//               or whose handoff the decode leg blames on it, is reported
//               `producer_failed` and the next one is tried. For a
//               prefill-side hold the engine produces and a live consumer
//               decodes. With engine_contract configured a passed probe also
//               runs lifecycle validation.
//   link      - a held producer->consumer link (router/fleet/link_book.h): a
//               one-token prefill on the producer whose handoff the
//               consumer decodes; a failed prefill (or a handoff the decode
//               blames on the producer) is inconclusive; a decode whose
//               usage shows the prompt recomputed fails it.
//   scrape    - GET /metrics of a consumer for its failed-transfer counter.
// Every check is a coroutine on the caller's loop (the fleet monitor's, the
// start-up checks'), over the same async engine port as client legs; tasks
// and targets are taken by value, so a spawned probe owns what it reads.
#ifndef NARWHAL_ROUTER_FLEET_PROBER_H_
#define NARWHAL_ROUTER_FLEET_PROBER_H_

#include <atomic>
#include <string>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "router/common/clock.h"
#include "router/common/settings.h"
#include "router/fleet/fleet_control.h"

namespace narwhal::router {

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kInconclusive;
  std::string detail;
  std::string producer;
};

class Prober {
 public:
  // The settings are the fleet's (Fleet::settings(): a reload changes them).
  Prober(engines::AsyncEngineClient& client, FleetControl& fleet, const Clock& clock)
      : client_(client), fleet_(fleet), clock_(clock) {}

  // Runs `task` and reports the result to the fleet.
  engines::Awaitable<void> Run(ProbeTask task);

  // Runs a link probe and reports the result to the fleet.
  engines::Awaitable<void> RunLink(LinkProbeTask task);

  // GET /metrics of a consumer: its failed-transfer counter
  // (router/fleet/kv_recompute.h), reported to the fleet.
  engines::Awaitable<void> ScrapeRecompute(RecomputeScrapeTask task);

  // Runs the join checks of a joining engine (B22) and reports the result
  // to the fleet: GET /health and the served model (the pinned engine
  // contract when configured), then a one-token inference through the real
  // data path — a prefill on a producer whose handoff a consumer decodes,
  // one of them the joiner: live engines first, then other joiners, then
  // the joiner alone when its role is both. The fleet's max_model_len
  // learns the joiner's.
  engines::Awaitable<void> RunJoin(JoinTask task);
  engines::Awaitable<ProbeResult> JoinCheck(JoinTask task);

  // The checks themselves (exposed for tests and operator readmission).
  engines::Awaitable<ProbeResult> ProbeLink(LinkProbeTask task);
  engines::Awaitable<ProbeResult> Health(engines::EngineTarget target, bool lifecycle);
  engines::Awaitable<ProbeResult> Inference(ProbeTask task, bool lifecycle);
  // The fleet's model's max_model_len from GET /v1/models (within
  // engine.health_timeout_s), or 0 when the engine does not say.
  engines::Awaitable<long long> MaxModelLen(engines::EngineTarget target);

  // The clock the probes read (the fleet's).
  const Clock& clock() const { return clock_; }

 private:
  engines::LegOptions ProbeLeg(const std::string& suffix);

  engines::AsyncEngineClient& client_;
  FleetControl& fleet_;
  const Clock& clock_;
  std::atomic<long long> counter_{0};
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_PROBER_H_
