#include "server/grpc/inference_service.h"

#include <algorithm>
#include <climits>
#include <memory>

#include "google/rpc/status.pb.h"
#include "server/client_request_id.h"
#include "server/grpc/grpc_async_call.h"
#include "server/grpc/grpc_call.h"
#include "server/grpc/grpc_sink.h"
#include "server/grpc/inference_calls.h"
#include "server/grpc/loop_completion_queue.h"
#include "server/status_table.h"

namespace narwhal::server {

grpc::Status GrpcStatusFor(const router::Outcome& outcome, const std::string& request_id) {
  const EdgeStatus edge = StatusFor(outcome);
  const int code = edge.grpc_code;
  narwhal::v1::ErrorInfo info;
  info.set_http_status(edge.http_status);
  info.set_type(std::string(ErrorTypeName(edge.error_type)));
  info.set_message(outcome.message);
  info.set_output_started(outcome.output_started);
  info.set_request_id(request_id);
  info.set_retry_after_s(edge.retry_after_s);
  google::rpc::Status details;
  details.set_code(code);
  details.set_message(outcome.message);
  details.add_details()->PackFrom(info);
  return grpc::Status(static_cast<grpc::StatusCode>(code), outcome.message,
                      details.SerializeAsString());
}

InferenceService::InferenceService(const router::Settings& settings, router::Router& router,
                                   const router::Clock& clock, engines::IoLoops& loops,
                                   std::string api_key)
    : settings_(settings),
      router_(router),
      clock_(clock),
      loops_(loops),
      book_(router),
      admission_(settings, clock, std::move(api_key), book_) {
  for (int i = 0; i < loops_.size(); ++i) {
    queues_.push_back(std::make_shared<LoopCompletionQueue>(loops_.context(i)));
  }
}

InferenceService::~InferenceService() { Stop(); }

void InferenceService::AddTo(grpc::ServerBuilder& builder) {
  builder.RegisterService(this);
  accept_queue_ = builder.AddCompletionQueue();
}

void InferenceService::Start() {
  for (int i = 0; i < loops_.size(); ++i) {
    for (int k = 0; k < kSlotsPerLoop; ++k) {
      OpenInferenceSlot(*this, i, /*stream=*/true);
      OpenInferenceSlot(*this, i, /*stream=*/false);
    }
  }
  acceptor_ = std::thread([this] { Accept(); });
}

void InferenceService::Accept() {
  void* tag = nullptr;
  bool ok = false;
  // Only request slots complete here; a filled one hands its call to its loop.
  while (accept_queue_->Next(&tag, &ok)) GrpcAsyncCall::Complete(tag, ok);
}

void InferenceService::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  if (accept_queue_) {
    accept_queue_->Shutdown();
    if (acceptor_.joinable()) {
      acceptor_.join();
    } else {  // never started: drain the slots here
      void* tag = nullptr;
      bool ok = false;
      while (accept_queue_->Next(&tag, &ok)) GrpcAsyncCall::Complete(tag, ok);
    }
  }
  for (const std::shared_ptr<LoopCompletionQueue>& queue : queues_) queue->Shutdown();
}

std::shared_ptr<GrpcSink> InferenceService::NewSink() { return std::make_shared<GrpcSink>(clock_); }

void InferenceService::Submit(router::Request request, std::shared_ptr<GrpcSink> sink, int loop) {
  router_.Submit(std::move(request), std::move(sink), loops_.executor(loop));
}

AdmissionResult InferenceService::Admit(grpc::ServerContextBase* context,
                                        const grpc::ByteBuffer& message, bool stream) {
  // Decoded first, so that even a refusal for the API key keeps the
  // client's request_id; a message that does not decode is refused after
  // the key check.
  const GrpcCall call = DecodeGrpcCall(message, stream, settings_.serving.max_request_bytes);
  // The gRPC deadline is wall-clock; the time left is converted once.
  const DoorRequest door = GrpcDoorRequest(call, context->client_metadata(), context->deadline(),
                                           std::chrono::system_clock::now());
  AdmissionResult result = admission_.Admit(door, [&](const router::Settings& settings) {
    const bool client_gone = !call.decoded && context->IsCancelled();
    return GrpcDoorBody(call, client_gone, settings);
  });
  context->AddInitialMetadata("x-request-id", result.request.rid);
  if (!result.request.client_rid.empty()) {
    context->AddInitialMetadata(kClientRequestIdHeader, result.request.client_rid);
  }
  return result;
}

int GrpcMaxReceiveBytes(const router::Settings& settings) {
  const long long limit = std::max(0LL, settings.serving.max_request_bytes);
  const long long bound = limit + std::max(limit, 1LL << 20);
  return static_cast<int>(std::min<long long>(bound, INT_MAX));
}

}  // namespace narwhal::server
