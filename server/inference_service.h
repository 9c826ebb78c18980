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
#ifndef NARWHAL_SERVER_INFERENCE_SERVICE_H_
#define NARWHAL_SERVER_INFERENCE_SERVICE_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "engines/io_loops.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/clock.h"
#include "router/outcome.h"
#include "router/router.h"
#include "router/settings.h"

namespace narwhal::server {

class GrpcSink;

class InferenceService final : public narwhal::v1::Inference::CallbackService {
 public:
  // `api_key` empty = no client authentication (else metadata
  // "authorization: Bearer <key>" is required).
  InferenceService(const router::Settings& settings, router::Router& router,
                   const router::Clock& clock, engines::IoLoops& loops, std::string api_key);

  grpc::ServerWriteReactor<narwhal::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const narwhal::v1::GenerateRequest* request) override;

  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context,
                                     const narwhal::v1::GenerateRequest* request,
                                     narwhal::v1::CompleteResponse* response) override;

  // Shared by both reactors: a router::Request for this call, or an outcome
  // refusing it (bad request, wrong model, bad API key) already journaled.
  struct Admission {
    bool ok = false;
    router::Request request;
    router::Outcome refusal;
  };
  Admission Admit(grpc::CallbackServerContext* context, const narwhal::v1::GenerateRequest& req,
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
  const std::string api_key_;
};

// The gRPC status for an outcome: code from the status table, message, and
// a google.rpc.Status carrying narwhal.v1.ErrorInfo as details.
grpc::Status GrpcStatusFor(const router::Outcome& outcome, const std::string& request_id);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_INFERENCE_SERVICE_H_
