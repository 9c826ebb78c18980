// TenantLimits: each tenant's own admission bounds (SPEC §16, tenants) —
// serving.api_keys[].max_inflight and a token bucket of
// serving.api_keys[].requests_per_s with room for `burst` requests.
//
// A tenant's state (its requests in flight, its bucket) is kept by name, so
// a reload that changes its limits keeps what it holds: the new limits apply
// to its next request, and a bucket larger than the new burst is cut down to
// it. An admitted request holds an AdmissionHold (router/request.h) that
// gives its in-flight place back once, when the request ends
// (Router::Finish) or when it is dropped unserved.
//
// The bucket runs on the injected clock: it starts full, gains
// requests_per_s tokens per second up to `burst`, and a request takes one.
// A request refused for the rate is told, in whole seconds rounded up (at
// least 1), when the next token is there (`Retry-After`); one refused for
// in-flight requests is told 1 second.
//
// Metrics: narwhal_tenant_inflight{tenant} and
// narwhal_tenant_throttled_total{tenant, limit="inflight"|"rate"}; the
// outcomes are counted by the router (narwhal_tenant_requests_total). The
// labels are tenant names from the configuration: bounded. Thread-safe.
#ifndef NARWHAL_ROUTER_TENANT_LIMITS_H_
#define NARWHAL_ROUTER_TENANT_LIMITS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/outcome.h"
#include "router/request.h"

namespace narwhal::router {

// The answer for one request: admitted with its hold, or refused.
struct TenantGrant {
  std::shared_ptr<AdmissionHold> hold;  // set when admitted
  Reason refused = Reason::kNone;       // kTenantInflightLimit or kTenantRateLimit
  std::string message;                  // for the client, when refused
  int retry_after_s = 0;                // when refused: seconds to wait
  bool admitted() const { return refused == Reason::kNone; }
};

class TenantLimits {
 public:
  // `metrics` may be null.
  TenantLimits(const engines::Clock& clock, Metrics* metrics);
  ~TenantLimits();
  TenantLimits(const TenantLimits&) = delete;
  TenantLimits& operator=(const TenantLimits&) = delete;

  // Admits one request of `tenant` (its limits as of the request's
  // configuration generation), or refuses it.
  TenantGrant Acquire(const TenantSettings& tenant);

  // The tenant's requests in flight (0 for one never seen).
  int InFlight(std::string_view tenant) const;

  struct State;

 private:
  std::shared_ptr<State> StateOf(const std::string& tenant);

  const engines::Clock& clock_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<State>, std::less<>> states_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_TENANT_LIMITS_H_
