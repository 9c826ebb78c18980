// router::Request: one client request as both front doors hand it to the core.
#ifndef NARWHAL_ROUTER_REQUEST_H_
#define NARWHAL_ROUTER_REQUEST_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engines/api.h"
#include "router/common/live_settings.h"
#include "router/trace_context.h"

namespace narwhal::router {

enum class Door { kHttp, kGrpc };

// What an admitted request holds of a limit outside the router core (its
// tenant's in-flight place, router/tenant_limits): given back once, by
// Release() when the request ends (Router::Finish) or by the destructor
// when the request is dropped unserved.
class AdmissionHold {
 public:
  virtual ~AdmissionHold() = default;
  virtual void Release() = 0;
};
std::string_view DoorName(Door door);  // "http" / "grpc"

struct Request {
  std::string rid;         // router-generated; the x-request-id sent to the client
  std::string client_rid;  // the client's own X-Request-Id, if any
  // The client's W3C trace context, or one the router started.
  TraceContext trace;
  Door door = Door::kHttp;
  engines::Api api = engines::Api::kCompletions;
  bool stream = false;  // the client reads a stream (else the router assembles)
  // The validated client body, with any client kv_transfer_params removed.
  nlohmann::json body;
  engines::MonoTime arrived{};
  double arrived_wall = 0;  // unix seconds
  // The original request's deadline: arrival + serving.request_timeout_s, or
  // earlier when the client set one (gRPC deadline).
  engines::MonoTime deadline = engines::MonoTime::max();
  // The config generation the request was admitted under: it keeps these
  // settings for its whole life (B20). Null: the router's current one.
  std::shared_ptr<const ConfigGeneration> config;
  // The tenant whose API key the request carries (serving.api_keys[].name;
  // "" = none), and its hold on the tenant's limits.
  std::string tenant = {};
  std::shared_ptr<AdmissionHold> tenant_hold = {};
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_REQUEST_H_
