// InferenceService: narwhal.v1.Inference (SPEC §6) on the gRPC door
// (server/grpc/grpc_door.h) — admission and the router for Generate and
// Complete, whose calls (server/grpc/inference_calls.h) run on the loop of
// their client connection: admitted there, their router::Request run there,
// their messages written there as the request's GrpcSink takes them — so a
// relayed message costs no thread handoff, as on the HTTP door. The call
// keeps at most a few messages queued for a client that reads slowly, so a
// slow reader back-pressures the engine read through the sink's bounded
// queue (B13). The gRPC deadline is converted once into the router's
// monotonic deadline; a client cancel cancels the request (B19). Errors end
// the RPC with the status of server/status_table and a narwhal.v1.ErrorInfo
// in the rich status details.
//
// Generate and Complete decode their request here, so a message that is
// over serving.max_request_bytes (413) or does not decode (400: malformed or
// truncated protobuf, invalid UTF-8 in a string field) is refused like any
// other bad request — INVALID_ARGUMENT with ErrorInfo, and a journal row
// `terminal: invalid`. For that the door's own receive bound
// (GrpcMaxReceiveBytes) sits above the project's limit.
#ifndef NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_
#define NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "router/common/clock.h"
#include "router/common/settings.h"
#include "router/outcome.h"
#include "router/router.h"
#include "server/admission.h"
#include "server/grpc/h2_call.h"

namespace narwhal::server {

class GrpcSink;

class InferenceService {
 public:
  // `api_key` empty = no client authentication (else metadata
  // "authorization: Bearer <key>" is required).
  InferenceService(const router::Settings& settings, router::Router& router,
                   const router::Clock& clock, std::string api_key);

  // The handler of a Generate or Complete call (by `path`), or null for
  // another path.
  std::unique_ptr<H2CallHandler> NewCall(std::string_view path,
                                         const std::shared_ptr<H2Call>& call);

  // Shared by both methods: the call through server/admission — a
  // router::Request for it, or an outcome refusing it (bad API key,
  // oversized or undecodable message, bad request, wrong model) already
  // journaled. `message` null: the call carried none. Adds x-request-id (and
  // a sane client id) to the call's initial metadata.
  AdmissionResult Admit(H2Call& call, const std::string* message, bool stream);

  std::shared_ptr<GrpcSink> NewSink();
  // Runs `request` on `loop` (the call's), writing to `sink`.
  void Submit(router::Request request, std::shared_ptr<GrpcSink> sink, engines::Executor loop);

 private:
  const router::Settings& settings_;
  router::Router& router_;
  const router::Clock& clock_;
  RouterBook book_;
  const RequestAdmission admission_;
};

// The gRPC status for an outcome: code from the status table, message, and
// a google.rpc.Status carrying narwhal.v1.ErrorInfo as details.
grpc::Status GrpcStatusFor(const router::Outcome& outcome, const std::string& request_id);

// The door's bound on a received message: serving.max_request_bytes plus as
// much again (at least 1 MiB), so a message somewhat over the limit reaches
// the service, which refuses and journals it; only one past this bound too
// is refused by the connection itself (RESOURCE_EXHAUSTED, no journal row).
int GrpcMaxReceiveBytes(const router::Settings& settings);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_
