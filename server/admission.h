// RequestAdmission: the one admission path of both front doors (SPEC §4,
// §6, §12). A door translates its wire format into a DoorRequest (who sends,
// for which API, the client's id and deadline) and its body into a DoorBody
// (the validated OpenAI body of server/openai_request, or why there is
// none); admission applies the rules in one order —
//
//   1. the API key, compared in constant time (server/api_key): with
//      serving.api_keys, the tenant whose key the request carries (every
//      key is compared, whichever matches) and then that tenant's own
//      limits (router/tenant_limits: in flight, token bucket; 429 with
//      Retry-After beyond either); else serving.api_key_env's one key;
//   2. the door's body: its size and framing refusals, and the validation
//      every body meets (server/openai_request: shape, the served model —
//      an unknown one is refused as router::Reason::kModelNotFound — and
//      the `limits`);
//
// The model's own limit (max_tokens against max_model_len) is checked once
// the fleet is known, in Router::Serve (router/context_limit), which both
// doors reach.
//
// and returns the router::Request for the core, or a typed Refusal that is
// already journaled (Router::RecordRefused) and counted. Each door renders
// the outcome on its own wire (server/http/responses, GrpcStatusFor).
//
// Every refusal becomes an outcome through RefusalOutcome, the one table of
// refusal kinds. Thread-safe: const after construction, called from every
// loop and reactor.
#ifndef NARWHAL_SERVER_ADMISSION_H_
#define NARWHAL_SERVER_ADMISSION_H_

#include <absl/functional/function_ref.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engines/api.h"
#include "engines/clock.h"
#include "router/common/live_settings.h"
#include "router/common/settings.h"
#include "router/outcome.h"
#include "router/request.h"
#include "router/tenant_limits.h"
#include "server/openai_request.h"

namespace narwhal::router {
class Router;
}  // namespace narwhal::router

namespace narwhal::server {

// Why a request is refused before the router core: one of the router's
// reasons that a door or admission decides —
//   kUnauthorized       missing or wrong API key
//   kTenantInflightLimit / kTenantRateLimit   the tenant's own limits
//   kModelNotFound      the body names a model not served
//   kInvalidRequest     the body breaks a request rule
//   kTooLarge           over serving.max_request_bytes, or too costly to parse
//   kMalformedHttp      HTTP framing the door does not take
//   kMalformedMessage   a gRPC message that does not decode
//   kHeadersTooLarge    over serving.max_header_bytes or max_headers
//   kHeaderTimeout      headers not in within serving.header_timeout_s
//   kCancelled          the client went away before its request arrived
struct Refusal {
  router::Reason reason = router::Reason::kInvalidRequest;
  std::string message;    // what the client reads
  std::string param;      // the OpenAI error `param` (HTTP body), "" when none
  int retry_after_s = 0;  // seconds before a retry when known (0 = the table's default)
};

// A refusal as an outcome: its journal terminal (cancelled, rejected for a
// missing key, else invalid), reason and message (its HTTP status, error
// type and gRPC code come from server/status_table, like every outcome's).
router::Outcome RefusalOutcome(const Refusal& refusal);

// A validation error of server/openai_request as a refusal.
Refusal RefusalFor(const ClientError& error);

// What admission needs of the router core: request ids, and the journal and
// metrics for refused requests. RouterBook is the real one.
class AdmissionBook {
 public:
  virtual ~AdmissionBook() = default;
  virtual std::string NewRequestId() = 0;
  virtual void RecordRefused(const router::Request& request, const router::Outcome& outcome) = 0;
  // The configuration generation a request admitted now keeps to its end
  // (B20); nullptr = the settings admission was built with.
  virtual std::shared_ptr<const router::ConfigGeneration> CurrentConfig() { return nullptr; }
  // Admits one request of `tenant` under its own limits, or refuses it.
  // The default admits without bounds.
  virtual router::TenantGrant AcquireTenant(const router::TenantSettings& tenant) {
    (void)tenant;
    return {};
  }
};

class RouterBook final : public AdmissionBook {
 public:
  explicit RouterBook(router::Router& router) : router_(router) {}
  std::string NewRequestId() override;
  void RecordRefused(const router::Request& request, const router::Outcome& outcome) override;
  std::shared_ptr<const router::ConfigGeneration> CurrentConfig() override;
  router::TenantGrant AcquireTenant(const router::TenantSettings& tenant) override;

 private:
  router::Router& router_;
};

// A generation request as a door received it, in no door's wire format.
// The views must outlive the Admit call.
struct DoorRequest {
  router::Door door = router::Door::kHttp;
  // The API as known before the body (the journal's `api` for a refusal
  // that comes before it) and whether the client reads a stream.
  engines::Api api = engines::Api::kCompletions;
  bool stream = false;
  // The Authorization header or `authorization` metadata; nullopt if absent.
  std::optional<std::string_view> authorization;
  // The client's own request id as sent ("" when none); kept when sane.
  std::string_view client_request_id;
  // The W3C trace context headers (or metadata), if sent.
  std::optional<std::string_view> traceparent;
  std::optional<std::string_view> tracestate;
  // Time the client allows from arrival (the gRPC deadline), if it set one.
  std::optional<engines::MonoClock::duration> client_time_left;
};

// A door's body: the validated OpenAI body, or why there is none.
struct DoorBody {
  engines::Api api = engines::Api::kCompletions;
  bool stream = false;
  nlohmann::json body;  // for a refusal: what the journal may show of it, if anything
  std::optional<Refusal> refusal;
};

// `parsed` (from ParseOpenAiRequest or ValidateOpenAiBody) for `api`.
DoorBody DoorBodyFrom(engines::Api api, ParsedRequest parsed);

struct AdmissionResult {
  // Always set: ids, door, API, arrival and deadline; the body when admitted.
  router::Request request;
  std::optional<Refusal> refusal;  // set when refused
  router::Outcome outcome;         // RefusalOutcome(*refusal) when refused, journaled
  bool admitted() const { return !refusal.has_value(); }
};

class RequestAdmission {
 public:
  // `api_key` empty = no client authentication.
  RequestAdmission(const router::Settings& settings, const engines::Clock& clock,
                   std::string api_key, AdmissionBook& book);

  // Whether `authorization` carries an API key of the current
  // configuration (always true without keys).
  bool Authorized(std::optional<std::string_view> authorization) const;

  // Admits `door`: `body` runs only once the key matched, so an
  // unauthenticated client never has its body parsed.
  AdmissionResult Admit(const DoorRequest& door, absl::FunctionRef<DoorBody()> body) const;
  // The same, with the body read under the request's own configuration
  // generation (its limits), which the request keeps to its end.
  AdmissionResult Admit(const DoorRequest& door,
                        absl::FunctionRef<DoorBody(const router::Settings&)> body) const;

  // Refuses `door` for a reason the door found before admission (framing,
  // size, headers): journaled like every refusal.
  AdmissionResult Refuse(const DoorRequest& door, Refusal refusal) const;

 private:
  router::Request NewRequest(const DoorRequest& door) const;
  // Whether `authorization` carries a key of `serving`; sets *tenant to the
  // tenant whose key it is (nullptr for serving.api_key_env's key or none).
  bool Authorized(const router::ServingSettings& serving,
                  std::optional<std::string_view> authorization,
                  const router::TenantSettings** tenant) const;
  AdmissionResult Refused(router::Request request, Refusal refusal) const;

  // The settings `request` is admitted under: its generation's, else the
  // ones admission was built with.
  const router::Settings& SettingsOf(const router::Request& request) const;

  const router::Settings& settings_;
  const engines::Clock& clock_;
  const std::string api_key_;
  AdmissionBook& book_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMISSION_H_
