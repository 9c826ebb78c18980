#include "server/grpc/inference_calls.h"

#include <boost/asio/dispatch.hpp>
#include <memory>
#include <string>
#include <utility>

#include "server/grpc/grpc_sink.h"
#include "server/grpc/grpc_typed_fields.h"
#include "server/grpc/inference_service.h"

namespace narwhal::server {
namespace {

// A client this far behind (bytes queued on its call) gets no more chunks
// from the sink until it is down to the low mark; the sink then fills and
// pauses the engine read (B13).
constexpr size_t kHighMark = 64 * 1024;
constexpr size_t kLowMark = 16 * 1024;

void FillUsage(const router::Outcome& o, narwhal::v1::Usage* usage) {
  const long long prompt = o.prompt_tokens >= 0 ? o.prompt_tokens : 0;
  usage->set_prompt_tokens(static_cast<uint32_t>(prompt));
  usage->set_completion_tokens(static_cast<uint32_t>(o.output_tokens));
  usage->set_total_tokens(static_cast<uint32_t>(prompt + o.output_tokens));
  if (o.cached_tokens >= 0) usage->set_cached_tokens(static_cast<uint32_t>(o.cached_tokens));
}

// What both methods share: the one request message, admission, the sink
// and the cancel.
class InferenceCall : public H2CallHandler {
 public:
  InferenceCall(InferenceService& service, std::weak_ptr<H2Call> call, bool stream)
      : service_(service), call_(std::move(call)), stream_(stream) {}

  void OnMessage(std::string message) override {
    ++messages_;
    message_ = std::move(message);
  }

  void OnHalfClose() override {
    std::shared_ptr<H2Call> call = call_.lock();
    if (!call) return;
    if (messages_ > 1) {
      call->Finish(static_cast<int>(grpc::StatusCode::INTERNAL),
                   "more than one request message for a method that takes one");
      return;
    }
    AdmissionResult admission =
        service_.Admit(*call, messages_ == 1 ? &message_ : nullptr, stream_);
    message_ = std::string();
    if (!admission.admitted()) {
      Finish(*call, GrpcStatusFor(admission.outcome, admission.request.rid));
      return;
    }
    rid_ = admission.request.rid;
    channel_ = service_.NewSink();
    // The router writes on this loop, so the wake-up runs the pump inline
    // (dispatch); from anywhere else it is posted here.
    channel_->SetReadyCallback([weak = call_, executor = call->executor()] {
      const auto pump = [weak] {
        if (std::shared_ptr<H2Call> c = weak.lock()) {
          if (auto* self = static_cast<InferenceCall*>(c->handler())) self->Pump(*c);
        }
      };
      boost::asio::dispatch(executor, pump);
    });
    service_.Submit(std::move(admission.request), channel_, call->executor());
    Pump(*call);
  }

  void OnCancel() override {
    if (channel_) channel_->Cancel();
  }

  void OnWritable() override {
    if (std::shared_ptr<H2Call> call = call_.lock()) Pump(*call);
  }

 protected:
  // Writes what the sink has for the client.
  virtual void Pump(H2Call& call) = 0;

  static void Finish(H2Call& call, const grpc::Status& status) {
    call.Finish(static_cast<int>(status.error_code()), status.error_message(),
                status.error_details());
  }

  InferenceService& service_;
  const std::weak_ptr<H2Call> call_;
  const bool stream_;
  int messages_ = 0;
  std::string message_;
  std::string rid_;
  std::shared_ptr<GrpcSink> channel_;
  std::string wire_;  // a serialized response, reused
};

class GenerateCall final : public InferenceCall {
 public:
  GenerateCall(InferenceService& service, std::weak_ptr<H2Call> call)
      : InferenceCall(service, std::move(call), true) {}

 private:
  void Pump(H2Call& call) override {
    if (call.finished()) return;
    GrpcChunk chunk;
    while (true) {
      if (call.queued() > kHighMark) {
        call.WantWritable(kLowMark);  // OnWritable pumps again
        return;
      }
      switch (channel_->TryNext(&chunk)) {
        case GrpcSink::Pop::kEmpty:
          return;  // the sink calls back on the next chunk
        case GrpcSink::Pop::kChunk: {
          const uint32_t index = static_cast<uint32_t>(tokens_);
          tokens_ += chunk.tokens;
          response_.Clear();
          auto* delta = response_.mutable_delta();
          if (!chunk.typed.empty()) FillDeltaTypedFields(chunk.typed, delta);
          if (chunk.text.empty() && chunk.finish_reason.empty() && delta->tool_calls_size() == 0 &&
              delta->reasoning_content().empty() && delta->logprobs_size() == 0) {
            continue;  // metadata
          }
          delta->set_text(chunk.text);
          delta->set_token_index(index);
          delta->set_finish_reason(chunk.finish_reason);
          response_.SerializeToString(&wire_);
          call.Write(wire_);
          continue;
        }
        case GrpcSink::Pop::kEnd: {
          const router::Outcome& o = channel_->outcome();
          if (!o.ok()) {
            Finish(call, GrpcStatusFor(o, rid_));
            return;
          }
          response_.Clear();
          auto* final = response_.mutable_final();
          final->set_finish_reason(o.finish_reason);
          FillUsage(o, final->mutable_usage());
          final->set_ttft_s(o.ttft_s.value_or(0));
          final->set_first_byte_s(o.first_byte_s.value_or(0));
          final->set_request_id(rid_);
          response_.SerializeToString(&wire_);
          call.Write(wire_);
          call.Finish(0, "");
          return;
        }
      }
    }
  }

  long long tokens_ = 0;
  narwhal::v1::GenerateResponse response_;
};

class CompleteCall final : public InferenceCall {
 public:
  CompleteCall(InferenceService& service, std::weak_ptr<H2Call> call)
      : InferenceCall(service, std::move(call), false) {}

 private:
  void Pump(H2Call& call) override {
    if (call.finished()) return;
    GrpcChunk ignored;
    GrpcSink::Pop pop;
    while ((pop = channel_->TryNext(&ignored)) == GrpcSink::Pop::kChunk) {
    }
    if (pop != GrpcSink::Pop::kEnd) return;
    const router::Outcome& o = channel_->outcome();
    if (!o.ok()) {
      Finish(call, GrpcStatusFor(o, rid_));
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
    response.SerializeToString(&wire_);
    call.Write(wire_);
    call.Finish(0, "");
  }
};

}  // namespace

std::unique_ptr<H2CallHandler> NewInferenceCall(InferenceService& service,
                                                const std::shared_ptr<H2Call>& call, bool stream) {
  if (stream) return std::make_unique<GenerateCall>(service, call);
  return std::make_unique<CompleteCall>(service, call);
}

}  // namespace narwhal::server
