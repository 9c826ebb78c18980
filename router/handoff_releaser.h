// HandoffReleaser: frees the KV blocks of handoffs the router will not
// decode (issue 10 point 3).
//
// A producer pins a handoff's blocks until a consumer reads them or its lease
// (handoff.lease_s) ends. When the router holds a valid handoff it will not
// decode — the client went away or the deadline passed after the prefill,
// the handoff outlived serving.handoff_timeout_s, no consumer is placeable,
// or the consumer refused it before admission — Router hands it here, and
// the release tells the producer to free the blocks, by handoff.release:
//   pull   - a one-token, non-streaming decode of the descriptor by a
//            consumer other than the producer; the producer frees the blocks
//            once they are read (every NIXL build; costs one transfer);
//   reject - the descriptor in a request naming a model no engine serves,
//            which the consumer refuses before admission; vLLM builds with
//            the rejection clean-up then notify the producer, which frees;
//   off    - nothing (the blocks stay pinned until the lease ends).
//
// Releases run detached on the caller's event loop and never touch the
// client's request: Release() returns at once. They are bounded: at most
// handoff.release_max_inflight at a time (one more is dropped and counted),
// each leg at most handoff.release_timeout_s. A release leg is never breaker
// evidence — neither failure nor success is recorded against its consumer or
// the producer — so releases cannot eject, hold or readmit an engine; it
// does take a decode reservation on its consumer while it runs (it is real
// load). Counted in narwhal_handoffs_abandoned_total{reason} and
// narwhal_handoff_releases_total{outcome}; each release logs its outcome.
//
// Thread-safe. Cancel() (Router::Drain, the destructor) ends running
// releases and waits for them; the event loops must still run then.
#ifndef NARWHAL_ROUTER_HANDOFF_RELEASER_H_
#define NARWHAL_ROUTER_HANDOFF_RELEASER_H_

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/cancel_token.h"
#include "engines/engine_client.h"
#include "router/common/clock.h"
#include "router/common/handoff_labels.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

// What Release() did, for the journal's handoff_released field.
enum class ReleaseDispatch {
  kStarted,     // a release leg runs in the background
  kNotStarted,  // counted with its outcome (off, dropped, no_consumer, lease_ended)
};

// The model name a `reject` release asks for: no engine serves it, so the
// consumer refuses the request before admission (vLLM's model check runs
// inside its KV-transfer rejection clean-up).
inline constexpr char kReleaseRejectModel[] = "narwhal-handoff-release";

class HandoffReleaser {
 public:
  // `metrics` may be null. References must outlive the releaser.
  HandoffReleaser(const Settings& settings, engines::AsyncEngineClient& engines, Fleet& fleet,
                  const Clock& clock, Metrics* metrics);
  ~HandoffReleaser();  // Cancel()
  HandoffReleaser(const HandoffReleaser&) = delete;
  HandoffReleaser& operator=(const HandoffReleaser&) = delete;

  struct Abandoned {
    const engines::PrefillResult* handoff = nullptr;  // valid; used or not
    AbandonReason reason = AbandonReason::kCancelled;
    nlohmann::json client_body;           // the request body (prompt-shaping fields)
    MonoTime handoff_start{};             // when its prefill was dispatched
    std::vector<std::string> avoid = {};  // consumers to avoid when another exists
    std::string rid = {};                 // for the log and the backend request id
    // The handoff settings of the request's config generation (null: the
    // releaser's own).
    const HandoffSettings* settings = nullptr;
  };

  // Counts the abandoned handoff and starts its release on `executor`.
  ReleaseDispatch Release(const Abandoned& abandoned, const engines::Executor& executor);

  // Ends running releases (counted `cancelled`) and waits for them, at most
  // about 10 s of real time. Later Release() calls count `off`.
  void Cancel();

  int inflight() const;

 private:
  struct Job;
  engines::Awaitable<void> Run(std::shared_ptr<Job> job);
  void Count(ReleaseOutcome outcome);
  void Done();

  const Settings& settings_;
  engines::AsyncEngineClient& engines_;
  Fleet& fleet_;
  const Clock& clock_;
  Metrics* metrics_;
  engines::CancelToken shutdown_;

  mutable std::mutex mu_;
  std::condition_variable idle_;
  int inflight_ = 0;
  bool closed_ = false;
};

// The body of a release leg: `client_body` with at most one generated token,
// not streamed (the adapter streams every leg upstream), no minimum; for
// `reject` also the unserved model name. Pure.
nlohmann::json ReleaseBody(const nlohmann::json& client_body, bool reject);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_HANDOFF_RELEASER_H_
