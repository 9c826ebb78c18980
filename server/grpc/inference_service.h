// InferenceService: the gRPC front door, narwhal.v1.Inference (SPEC §6).
//
// An async-API service driven by the data plane's event loops: each loop has
// its own completion queue (server/grpc/loop_completion_queue.h) and request
// slots for both methods; a call that arrives in a slot of loop i is admitted
// on loop i, its router::Request runs there, and its messages are written
// there as the request's GrpcSink takes them — so a relayed message costs no
// thread handoff, as on the HTTP door. One acceptor thread waits for new
// calls (the only thing gRPC reports on the server's completion queue) and
// hands each to its loop. The call keeps one write in flight, so a slow
// reader back-pressures the engine read through the sink's bounded queue.
// The gRPC deadline is converted once into the router's monotonic deadline;
// a client cancel cancels the request (B19). Errors end the RPC with the
// status of server/status_table and a narwhal.v1.ErrorInfo in the rich
// status details.
//
// Generate and Complete take their request as raw bytes and decode it here,
// so a message that is over serving.max_request_bytes (413) or does not
// decode (400: malformed or truncated protobuf, invalid UTF-8 in a string
// field) is refused like any other bad request — INVALID_ARGUMENT with
// ErrorInfo, and a journal row `terminal: invalid` — instead of by gRPC
// before any of this code runs. For that the server's own receive bound
// (GrpcMaxReceiveBytes) sits above the project's limit.
//
// Life cycle: AddTo(builder) instead of RegisterService, Start() once the
// server is built, Stop() once it has shut down (the loops still running);
// the destructor stops too.
#ifndef NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_
#define NARWHAL_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/common/clock.h"
#include "router/common/settings.h"
#include "router/outcome.h"
#include "router/router.h"
#include "server/admission.h"

namespace narwhal::server {

class GrpcSink;

class LoopCompletionQueue;

// Both methods async, with raw (undecoded) request and response messages;
// the wire format is narwhal.v1's all the same.
using RawInferenceService = narwhal::v1::Inference::WithRawMethod_Generate<
    narwhal::v1::Inference::WithRawMethod_Complete<narwhal::v1::Inference::Service>>;

class InferenceService final : public RawInferenceService {
 public:
  // `api_key` empty = no client authentication (else metadata
  // "authorization: Bearer <key>" is required).
  InferenceService(const router::Settings& settings, router::Router& router,
                   const router::Clock& clock, engines::IoLoops& loops, std::string api_key);

  ~InferenceService() override;

  // Registers the service on `builder`, with the completion queue new calls
  // are reported on.
  void AddTo(grpc::ServerBuilder& builder);
  // After the server is built: opens the request slots of every loop and
  // starts the acceptor.
  void Start();
  // After the server has shut down (every call ended): ends the acceptor and
  // drains the queues. Idempotent.
  void Stop();

  // Shared by both methods: the call through server/admission — a
  // router::Request for it, or an outcome refusing it (bad API key,
  // oversized or undecodable message, bad request, wrong model) already
  // journaled. Sends x-request-id (and a sane client id) as metadata.
  AdmissionResult Admit(grpc::ServerContextBase* context, const grpc::ByteBuffer& message,
                        bool stream);

  router::Router& router() { return router_; }
  std::shared_ptr<GrpcSink> NewSink();
  // Runs `request` on loop `loop`, writing to `sink`.
  void Submit(router::Request request, std::shared_ptr<GrpcSink> sink, int loop);

  // For the calls (server/grpc/inference_calls.h).
  LoopCompletionQueue& queue(int loop) { return *queues_[loop]; }
  grpc::ServerCompletionQueue* accept_queue() { return accept_queue_.get(); }
  engines::Executor executor(int loop) const { return loops_.executor(loop); }
  bool stopping() const { return stopping_.load(); }

  // Request slots open per method and loop.
  static constexpr int kSlotsPerLoop = 16;

 private:
  void Accept();

  const router::Settings& settings_;
  router::Router& router_;
  const router::Clock& clock_;
  engines::IoLoops& loops_;
  RouterBook book_;
  const RequestAdmission admission_;
  std::unique_ptr<grpc::ServerCompletionQueue> accept_queue_;
  std::vector<std::shared_ptr<LoopCompletionQueue>> queues_;  // one per loop
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
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
