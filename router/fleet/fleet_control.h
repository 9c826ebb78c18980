// FleetControl: the fleet as the control plane sees it. The monitor, the
// prober and the start-up checks run on the owner's loop against this side
// of Fleet (Fleet::control()): what is due (engine probes, link probes,
// recompute scrapes, join checks), what each found, and evidence gathered
// outside client legs. Every call runs under the owner's mutex, which no
// request takes; reports queued by requests are applied first.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_CONTROL_H_
#define NARWHAL_ROUTER_FLEET_FLEET_CONTROL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/engine_snapshot.h"
#include "router/fleet/link_book.h"
#include "router/fleet/membership.h"

namespace narwhal::router {

// A scrape of one consumer's /metrics the monitor should run now (its
// failed-transfer counter, router/fleet/kv_recompute.h).
struct RecomputeScrapeTask {
  std::string iid;
};

class FleetControl {
 public:
  static constexpr double kRecomputeScrapeIntervalS = 1;

  virtual ~FleetControl() = default;

  // --- what the owner follows and knows ---
  // The settings of the latest applied generation.
  virtual std::shared_ptr<const Settings> settings() const = 0;
  // The engines in the fleet, in order.
  virtual std::vector<EngineSettings> engines() const = 0;
  // The engine's target (nullopt: not in the fleet).
  virtual std::optional<engines::EngineTarget> Target(const std::string& iid) const = 0;
  virtual std::optional<EngineSnapshot> Snapshot(const std::string& iid) const = 0;
  // Whether engine `iid` passed a check since start (counts for Ready).
  virtual bool Checked(const std::string& iid) const = 0;
  // The members that publish KV-cache events, in order (leaving engines
  // excluded: their index goes when they leave).
  virtual std::vector<KvEndpoint> KvEndpoints() const = 0;

  // --- evidence from outside the request path ---
  // Breaker evidence from a failed leg (uses failure.evidence_iid and
  // breaker_class; no-op for kNone). `producer`: the attempt's producer.
  virtual void RecordFailure(const engines::EngineFailure& failure,
                             const std::string& producer) = 0;
  virtual void RecordSuccess(const std::string& iid, Success kind) = 0;
  // A crossed decode producer→consumer reached [DONE].
  virtual void RecordLinkSuccess(const std::string& producer, const std::string& consumer) = 0;
  // max_model_len as engine `iid` reports it on /v1/models; the fleet keeps
  // the smallest reported (or the pinned engine_contract.max_model_len).
  virtual void RecordMaxModelLen(const std::string& iid, long long max_model_len) = 0;

  // --- engine probes (router/fleet/prober.h) ---
  // Probes due now (marked running), and timed holds that expired.
  virtual std::vector<ProbeTask> TakeDueProbes() = 0;
  virtual void CompleteProbe(const ProbeTask& task, ProbeOutcome outcome, const std::string& detail,
                             const std::string& producer) = 0;
  // A probe attempt that did not settle the probe (a producer that failed).
  virtual void RecordProbeAttempt(const ProbeTask& task, ProbeOutcome outcome,
                                  const std::string& producer, const std::string& detail) = 0;
  // What an inference probe of `iid` exercises: the phase of the failures
  // that held it, and (decode side) the producer of the failed transfer.
  virtual Phase ProbeSide(const std::string& iid) const = 0;
  virtual std::string RecordedProducer(const std::string& iid) const = 0;
  // Live engines able to prefill, fewest prefill legs in flight first, then
  // by iid, excluding `except`; and one live consumer.
  virtual std::vector<engines::EngineTarget> LiveProducers(const std::string& except) const = 0;
  virtual std::optional<engines::EngineTarget> LiveConsumer(const std::string& except) const = 0;

  // --- link probes (router/fleet/link_book.h) ---
  virtual std::vector<LinkProbeTask> TakeDueLinkProbes() = 0;
  virtual void CompleteLinkProbe(const LinkProbeTask& task, LinkProbeOutcome outcome,
                                 const std::string& detail) = 0;

  // --- silent-recompute detection (router/fleet/kv_recompute.h) ---
  // A crossed decode producer→consumer was sent.
  virtual void RecomputeDecodeStarted(const std::string& producer, const std::string& consumer) = 0;
  // It ended: `suspected` when its usage says the consumer recomputed the
  // prompt (rule (a); counted on the consumer, logged with `evidence`, and a
  // failure of the link), `failed` when the decode failed.
  virtual void RecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                                    bool suspected, bool failed, const std::string& evidence) = 0;
  // A link probe's decode ended; `explained`: it recomputed (rule (a)) or
  // failed. Never counted (the probe's outcome records it), but it explains
  // a failed transfer on the consumer. Pair with RecomputeDecodeStarted.
  virtual void RecomputeProbeEnded(const std::string& producer, const std::string& consumer,
                                   bool explained) = 0;
  // Consumers whose /metrics are due (every kRecomputeScrapeIntervalS),
  // marked running; then the scrape's failed-transfer counter (nullopt:
  // none, or no answer).
  virtual std::vector<RecomputeScrapeTask> TakeDueRecomputeScrapes() = 0;
  virtual void CompleteRecomputeScrape(const RecomputeScrapeTask& task,
                                       std::optional<double> failed_transfers) = 0;

  // --- joins and leaves (B22, B23) ---
  // Join checks due now (running from now on).
  virtual std::vector<JoinTask> TakeDueJoinChecks() = 0;
  virtual void CompleteJoinCheck(const JoinTask& task, bool passed, const std::string& detail) = 0;
  // Engines joining and able to serve `phase` whose health passed (peers for
  // each other's join probes when nothing else serves).
  virtual std::vector<engines::EngineTarget> JoiningPeers(Phase phase,
                                                          const std::string& except) const = 0;
  // Leaving engines whose legs have ended go; those past the drain timeout
  // have the rest cancelled.
  virtual void SweepLeaving() = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_CONTROL_H_
