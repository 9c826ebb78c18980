#include "server/grpc/inference_service.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>

#include "google/rpc/status.pb.h"
#include "server/client_request_id.h"
#include "server/grpc/grpc_call.h"
#include "server/grpc/grpc_sink.h"
#include "server/grpc/grpc_typed_fields.h"
#include "server/status_table.h"
#include "server/wake_link.h"

namespace narwhal::server {
namespace {

using Sink = GrpcSink;

// `message` serialized into `out` (which it replaces).
template <typename Message>
void Serialize(const Message& message, grpc::ByteBuffer* out) {
  out->Clear();
  bool own = false;
  grpc::SerializationTraits<Message>::Serialize(message, out, &own);
}

void FillUsage(const router::Outcome& o, narwhal::v1::Usage* usage) {
  const long long prompt = o.prompt_tokens >= 0 ? o.prompt_tokens : 0;
  usage->set_prompt_tokens(static_cast<uint32_t>(prompt));
  usage->set_completion_tokens(static_cast<uint32_t>(o.output_tokens));
  usage->set_total_tokens(static_cast<uint32_t>(prompt + o.output_tokens));
  if (o.cached_tokens >= 0) usage->set_cached_tokens(static_cast<uint32_t>(o.cached_tokens));
}

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(InferenceService& service, grpc::CallbackServerContext* context,
                  const grpc::ByteBuffer& request)
      : link_(std::make_shared<WakeLink<GenerateReactor>>(this)) {
    AdmissionResult admission = service.Admit(context, request, /*stream=*/true);
    if (!admission.admitted()) {
      Finish(GrpcStatusFor(admission.outcome, admission.request.rid));
      return;
    }
    rid_ = admission.request.rid;
    channel_ = service.NewSink();
    channel_->SetReadyCallback(WakeLink<GenerateReactor>::Callback(link_));
    service.Submit(std::move(admission.request), channel_);
    Pump();
  }

  // Writes the next message if none is in flight. Called from gRPC
  // reactions and from router workers (through the wake link).
  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (writing_ || finished_) return;
    while (true) {
      switch (channel_->TryNext(&chunk_)) {
        case Sink::Pop::kEmpty:
          return;  // the channel calls back on the next chunk
        case Sink::Pop::kChunk: {
          const uint32_t index = static_cast<uint32_t>(tokens_);
          tokens_ += chunk_.tokens;
          response_.Clear();
          auto* delta = response_.mutable_delta();
          if (!chunk_.typed.empty()) FillDeltaTypedFields(chunk_.typed, delta);
          if (chunk_.text.empty() && chunk_.finish_reason.empty() &&
              delta->tool_calls_size() == 0 && delta->reasoning_content().empty() &&
              delta->logprobs_size() == 0) {
            continue;  // metadata
          }
          delta->set_text(chunk_.text);
          delta->set_token_index(index);
          delta->set_finish_reason(chunk_.finish_reason);
          Serialize(response_, &wire_);
          writing_ = true;
          lock.unlock();
          StartWrite(&wire_);
          return;
        }
        case Sink::Pop::kEnd: {
          const router::Outcome& o = channel_->outcome();
          finished_ = true;
          if (!o.ok()) {
            lock.unlock();
            Finish(GrpcStatusFor(o, rid_));
            return;
          }
          response_.Clear();
          auto* final = response_.mutable_final();
          final->set_finish_reason(o.finish_reason);
          FillUsage(o, final->mutable_usage());
          final->set_ttft_s(o.ttft_s.value_or(0));
          final->set_first_byte_s(o.first_byte_s.value_or(0));
          final->set_request_id(rid_);
          Serialize(response_, &wire_);
          lock.unlock();
          StartWriteAndFinish(&wire_, grpc::WriteOptions(), grpc::Status::OK);
          return;
        }
      }
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // the stream broke: the client is gone
      channel_->Cancel();
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
    }
    Pump();
  }

  void OnCancel() override {
    if (channel_) channel_->Cancel();  // B19; the router then ends the request
  }

  void OnDone() override { link_->Done(); }

 private:
  std::shared_ptr<WakeLink<GenerateReactor>> link_;
  std::shared_ptr<Sink> channel_;
  std::string rid_;
  std::mutex mu_;
  bool writing_ = false;
  bool finished_ = false;
  long long tokens_ = 0;
  GrpcChunk chunk_;
  narwhal::v1::GenerateResponse response_;
  grpc::ByteBuffer wire_;  // response_ serialized, held until its write is done
};

class CompleteReactor : public grpc::ServerUnaryReactor {
 public:
  CompleteReactor(InferenceService& service, grpc::CallbackServerContext* context,
                  const grpc::ByteBuffer& request, grpc::ByteBuffer* response)
      : link_(std::make_shared<WakeLink<CompleteReactor>>(this)), response_(response) {
    AdmissionResult admission = service.Admit(context, request, /*stream=*/false);
    if (!admission.admitted()) {
      finished_ = true;
      Finish(GrpcStatusFor(admission.outcome, admission.request.rid));
      return;
    }
    rid_ = admission.request.rid;
    channel_ = service.NewSink();
    channel_->SetReadyCallback(WakeLink<CompleteReactor>::Callback(link_));
    service.Submit(std::move(admission.request), channel_);
    Pump();
  }

  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return;
    GrpcChunk ignored;
    Sink::Pop pop;
    while ((pop = channel_->TryNext(&ignored)) == Sink::Pop::kChunk) {
    }
    if (pop != Sink::Pop::kEnd) return;
    finished_ = true;
    const router::Outcome& o = channel_->outcome();
    lock.unlock();
    if (!o.ok()) {
      Finish(GrpcStatusFor(o, rid_));
      return;
    }
    // The assembled OpenAI response: choice 0's text or message content.
    const nlohmann::json& body = o.body;
    std::string text;
    if (body.contains("choices") && body["choices"].is_array() && !body["choices"].empty()) {
      const nlohmann::json& c = body["choices"][0];
      if (c.contains("text") && c["text"].is_string()) {
        text = c["text"].get<std::string>();
      } else if (c.contains("message") && c["message"].contains("content") &&
                 c["message"]["content"].is_string()) {
        text = c["message"]["content"].get<std::string>();
      }
    }
    narwhal::v1::CompleteResponse response;
    response.set_text(text);
    response.set_finish_reason(o.finish_reason);
    FillUsage(o, response.mutable_usage());
    FillCompleteTypedFields(body, &response);
    response.set_ttft_s(o.ttft_s.value_or(0));
    response.set_first_byte_s(o.first_byte_s.value_or(0));
    response.set_request_id(rid_);
    Serialize(response, response_);
    Finish(grpc::Status::OK);
  }

  void OnCancel() override {
    if (channel_) channel_->Cancel();
  }

  void OnDone() override { link_->Done(); }

 private:
  std::shared_ptr<WakeLink<CompleteReactor>> link_;
  grpc::ByteBuffer* response_;
  std::shared_ptr<Sink> channel_;
  std::string rid_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace

grpc::Status GrpcStatusFor(const router::Outcome& outcome, const std::string& request_id) {
  const EdgeStatus edge = StatusFor(outcome);
  const int code = edge.grpc_code;
  narwhal::v1::ErrorInfo info;
  info.set_http_status(edge.http_status);
  info.set_type(std::string(ErrorTypeName(edge.error_type)));
  info.set_message(outcome.message);
  info.set_output_started(outcome.output_started);
  info.set_request_id(request_id);
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
      admission_(settings, clock, std::move(api_key), book_) {}

std::shared_ptr<GrpcSink> InferenceService::NewSink() { return std::make_shared<GrpcSink>(clock_); }

void InferenceService::Submit(router::Request request, std::shared_ptr<GrpcSink> sink) {
  // Reactors must not run requests: each goes to the next event loop.
  router_.Submit(std::move(request), std::move(sink), loops_.Next());
}

AdmissionResult InferenceService::Admit(grpc::CallbackServerContext* context,
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateReactor(*this, context, *request);
}

grpc::ServerUnaryReactor* InferenceService::Complete(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return new CompleteReactor(*this, context, *request, response);
}

int GrpcMaxReceiveBytes(const router::Settings& settings) {
  const long long limit = std::max(0LL, settings.serving.max_request_bytes);
  const long long bound = limit + std::max(limit, 1LL << 20);
  return static_cast<int>(std::min<long long>(bound, INT_MAX));
}

}  // namespace narwhal::server
