#include "server/admission.h"

#include <algorithm>
#include <utility>

#include "router/router.h"
#include "server/api_key.h"
#include "server/client_request_id.h"

namespace narwhal::server {
namespace {

using router::Reason;
using router::Terminal;

// The journal terminal of a refusal.
Terminal RefusalTerminal(Reason reason) {
  switch (reason) {
    case Reason::kCancelled:
      return Terminal::kCancelled;
    case Reason::kUnauthorized:
    case Reason::kTenantInflightLimit:
    case Reason::kTenantRateLimit:
      return Terminal::kRejected;
    default:
      return Terminal::kInvalid;
  }
}

}  // namespace

router::Outcome RefusalOutcome(const Refusal& refusal) {
  router::Outcome outcome =
      router::RefusalOutcome(RefusalTerminal(refusal.reason), refusal.reason, refusal.message);
  outcome.retry_after_s = refusal.retry_after_s;
  return outcome;
}

Refusal RefusalFor(const ClientError& error) {
  Refusal r;
  r.reason = error.reason;
  r.message = error.message;
  r.param = error.param;
  return r;
}

std::string RouterBook::NewRequestId() { return router_.NewRequestId(); }

std::shared_ptr<const router::ConfigGeneration> RouterBook::CurrentConfig() {
  return router_.CurrentConfig();
}

router::TenantGrant RouterBook::AcquireTenant(const router::TenantSettings& tenant) {
  return router_.tenant_limits().Acquire(tenant);
}

void RouterBook::RecordRefused(const router::Request& request, const router::Outcome& outcome) {
  router_.RecordRefused(request, outcome);
}

DoorBody DoorBodyFrom(engines::Api api, ParsedRequest parsed) {
  DoorBody out;
  out.api = api;
  if (!parsed.ok) {
    out.refusal = RefusalFor(parsed.error);
    out.body = std::move(parsed.body);
    return out;
  }
  out.stream = parsed.stream;
  out.body = std::move(parsed.body);
  return out;
}

RequestAdmission::RequestAdmission(const router::Settings& settings, const engines::Clock& clock,
                                   std::string api_key, AdmissionBook& book)
    : settings_(settings), clock_(clock), api_key_(std::move(api_key)), book_(book) {}

bool RequestAdmission::Authorized(std::optional<std::string_view> authorization) const {
  const std::shared_ptr<const router::ConfigGeneration> current = book_.CurrentConfig();
  const router::TenantSettings* tenant = nullptr;
  return Authorized(current != nullptr ? current->settings.serving : settings_.serving,
                    authorization, &tenant);
}

bool RequestAdmission::Authorized(const router::ServingSettings& serving,
                                  std::optional<std::string_view> authorization,
                                  const router::TenantSettings** tenant) const {
  *tenant = nullptr;
  if (serving.api_keys.empty()) {
    if (api_key_.empty()) return true;
    return authorization.has_value() && BearerMatches(*authorization, api_key_);
  }
  if (!authorization.has_value()) return false;
  // Every key is compared, so the time taken does not tell which matched
  // (keys are distinct: at most one does).
  for (const router::TenantSettings& t : serving.api_keys) {
    if (BearerMatches(*authorization, t.key)) *tenant = &t;
  }
  return *tenant != nullptr;
}

const router::Settings& RequestAdmission::SettingsOf(const router::Request& request) const {
  return request.config != nullptr ? request.config->settings : settings_;
}

router::Request RequestAdmission::NewRequest(const DoorRequest& door) const {
  router::Request r;
  r.config = book_.CurrentConfig();
  r.rid = book_.NewRequestId();
  r.client_rid = SaneClientRequestId(door.client_request_id);
  // The client's trace is continued; without a valid one the router starts
  // one whose id is the request's own (32 random hex digits).
  std::optional<router::TraceContext> continued =
      router::ParseTraceparent(door.traceparent.value_or(""), door.tracestate.value_or(""));
  if (continued) {
    r.trace = std::move(*continued);
  } else {
    r.trace = router::NewTrace(r.rid);
    // Exported spans are sampled: a trace the router starts is, when the
    // router exports (a client's trace keeps the client's decision).
    if (SettingsOf(r).tracing.enabled()) r.trace.flags |= 0x01;
  }
  r.door = door.door;
  r.api = door.api;
  r.stream = door.stream;
  r.arrived = clock_.Now();
  r.arrived_wall = clock_.WallNow();
  r.deadline = r.arrived + engines::FromSeconds(SettingsOf(r).serving.request_timeout_s);
  if (door.client_time_left) r.deadline = std::min(r.deadline, r.arrived + *door.client_time_left);
  return r;
}

AdmissionResult RequestAdmission::Refused(router::Request request, Refusal refusal) const {
  AdmissionResult result;
  result.outcome = RefusalOutcome(refusal);
  result.refusal = std::move(refusal);
  result.request = std::move(request);
  book_.RecordRefused(result.request, result.outcome);
  return result;
}

AdmissionResult RequestAdmission::Refuse(const DoorRequest& door, Refusal refusal) const {
  return Refused(NewRequest(door), std::move(refusal));
}

AdmissionResult RequestAdmission::Admit(const DoorRequest& door,
                                        absl::FunctionRef<DoorBody()> body) const {
  return Admit(door, [&body](const router::Settings&) { return body(); });
}

AdmissionResult RequestAdmission::Admit(
    const DoorRequest& door, absl::FunctionRef<DoorBody(const router::Settings&)> body) const {
  router::Request r = NewRequest(door);
  const router::TenantSettings* tenant = nullptr;
  if (!Authorized(SettingsOf(r).serving, door.authorization, &tenant)) {
    Refusal refusal;
    refusal.reason = Reason::kUnauthorized;
    refusal.message = "invalid or missing API key";
    return Refused(std::move(r), std::move(refusal));
  }
  if (tenant != nullptr) {
    r.tenant = tenant->name;
    router::TenantGrant grant = book_.AcquireTenant(*tenant);
    if (!grant.admitted()) {
      Refusal refusal;
      refusal.reason = grant.refused;
      refusal.message = std::move(grant.message);
      refusal.retry_after_s = grant.retry_after_s;
      return Refused(std::move(r), std::move(refusal));
    }
    r.tenant_hold = std::move(grant.hold);
  }
  DoorBody translated = body(SettingsOf(r));
  r.api = translated.api;
  if (translated.refusal) {
    r.body = std::move(translated.body);  // an unknown model's name, for the access log
    return Refused(std::move(r), std::move(*translated.refusal));
  }
  r.stream = translated.stream;
  r.body = std::move(translated.body);
  AdmissionResult result;
  result.request = std::move(r);
  return result;
}

}  // namespace narwhal::server
