// InferenceService: the gRPC front door, narwhal.v1.Inference (SPEC §6).
//
// A callback-API service: reactors never block. Each RPC becomes one
// router::Request run by the same router core as the HTTP door, on the next
// event loop; the request's GrpcSink wakes the reactor when a chunk or the
// outcome is ready, and the reactor keeps one write in flight, so a slow
// reader back-pressures the engine read through the sink's bounded queue. The gRPC
// deadline is converted once into the router's monotonic deadline; a client
// cancel cancels the request (B19). Errors end the RPC with the status of
// server/status_table and a narwhal.v1.ErrorInfo in the rich status details.
//
// Generate and Complete take their request as raw bytes and decode it here,
// so a message that is over serving.max_request_bytes (413) or does not
// decode (400: malformed or truncated protobuf, invalid UTF-8 in a string
// field) is refused like any other bad request — INVALID_ARGUMENT with
// ErrorInfo, and a journal row `terminal: invalid` — instead of by gRPC
// before any of this code runs. For that the server's own receive bound
// (GrpcMaxReceiveBytes) sits above the project's limit.
#ifndef NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_
#define NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "engines/http/io_loops.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/common/clock.h"
#include "router/common/settings.h"
#include "router/outcome.h"
#include "router/router.h"
#include "server/admission.h"

namespace narwhal::server {

class GrpcSink;

// Both methods with raw (undecoded) request and response messages; the
// wire format is narwhal.v1's all the same.
using RawInferenceService = narwhal::v1::Inference::WithRawCallbackMethod_Generate<
    narwhal::v1::Inference::WithRawCallbackMethod_Complete<narwhal::v1::Inference::Service>>;

class InferenceService final : public RawInferenceService {
 public:
  // `api_key` empty = no client authentication (else metadata
  // "authorization: Bearer <key>" is required).
  InferenceService(const router::Settings& settings, router::Router& router,
                   const router::Clock& clock, engines::IoLoops& loops, std::string api_key);

  // Generate(GenerateRequest) returns (stream GenerateResponse).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;

  // Complete(GenerateRequest) returns (CompleteResponse).
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;

  // Shared by both reactors: the call through server/admission — a
  // router::Request for it, or an outcome refusing it (bad API key,
  // oversized or undecodable message, bad request, wrong model) already
  // journaled. Sends x-request-id (and a sane client id) as metadata.
  AdmissionResult Admit(grpc::CallbackServerContext* context, const grpc::ByteBuffer& message,
                        bool stream);

  router::Router& router() { return router_; }
  std::shared_ptr<GrpcSink> NewSink();
  // Runs `request` on the next event loop, writing to `sink`.
  void Submit(router::Request request, std::shared_ptr<GrpcSink> sink);

 private:
  const router::Settings& settings_;
  router::Router& router_;
  const router::Clock& clock_;
  engines::IoLoops& loops_;
  RouterBook book_;
  const RequestAdmission admission_;
};

// The gRPC status for an outcome: code from the status table, message, and
// a google.rpc.Status carrying narwhal.v1.ErrorInfo as details.
grpc::Status GrpcStatusFor(const router::Outcome& outcome, const std::string& request_id);

// The receive bound to give the gRPC server that carries the service
// (ServerBuilder::SetMaxReceiveMessageSize): serving.max_request_bytes plus
// as much again (at least 1 MiB), so a message somewhat over the limit
// reaches the service, which refuses and journals it; only one past this
// bound too is refused by gRPC itself (RESOURCE_EXHAUSTED, no journal row).
int GrpcMaxReceiveBytes(const router::Settings& settings);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_
