#include "server/grpc/inference_service.h"

#include <algorithm>
#include <climits>
#include <memory>

#include "google/rpc/status.pb.h"
#include "server/client_request_id.h"
#include "server/grpc/grpc_call.h"
#include "server/grpc/grpc_sink.h"
#include "server/grpc/inference_calls.h"
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
                                   const router::Clock& clock, std::string api_key)
    : settings_(settings),
      router_(router),
      clock_(clock),
      book_(router),
      admission_(settings, clock, std::move(api_key), book_) {}

std::unique_ptr<H2CallHandler> InferenceService::NewCall(std::string_view path,
                                                         const std::shared_ptr<H2Call>& call) {
  if (path == "/narwhal.v1.Inference/Generate") return NewInferenceCall(*this, call, true);
  if (path == "/narwhal.v1.Inference/Complete") return NewInferenceCall(*this, call, false);
  return nullptr;
}

std::shared_ptr<GrpcSink> InferenceService::NewSink() { return std::make_shared<GrpcSink>(clock_); }

void InferenceService::Submit(router::Request request, std::shared_ptr<GrpcSink> sink,
                              engines::Executor loop) {
  router_.Submit(std::move(request), std::move(sink), std::move(loop));
}

AdmissionResult InferenceService::Admit(H2Call& h2, const std::string* message, bool stream) {
  // Decoded first, so that even a refusal for the API key keeps the
  // client's request_id; a message that does not decode is refused after
  // the key check.
  const GrpcCall call = DecodeGrpcCall(message, stream, settings_.serving.max_request_bytes);
  // The gRPC deadline is wall-clock; the time left is converted once.
  const DoorRequest door =
      GrpcDoorRequest(call, h2.metadata(), h2.deadline(), std::chrono::system_clock::now());
  AdmissionResult result = admission_.Admit(door, [&](const router::Settings& settings) {
    const bool client_gone = !call.decoded && h2.cancelled();
    return GrpcDoorBody(call, client_gone, settings);
  });
  h2.AddInitialMetadata("x-request-id", result.request.rid);
  if (!result.request.client_rid.empty()) {
    h2.AddInitialMetadata(kClientRequestIdHeader, result.request.client_rid);
  }
  return result;
}

int GrpcMaxReceiveBytes(const router::Settings& settings) {
  const long long limit = std::max(0LL, settings.serving.max_request_bytes);
  const long long bound = limit + std::max(limit, 1LL << 20);
  return static_cast<int>(std::min<long long>(bound, INT_MAX));
}

}  // namespace narwhal::server
