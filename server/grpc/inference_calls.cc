#include "server/grpc/inference_calls.h"

#include <grpcpp/grpcpp.h>

#include <boost/asio/post.hpp>
#include <memory>
#include <string>
#include <utility>

#include "server/grpc/grpc_async_call.h"
#include "server/grpc/grpc_sink.h"
#include "server/grpc/grpc_typed_fields.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/loop_completion_queue.h"

namespace narwhal::server {
namespace {

using Op = GrpcAsyncCall::Op;

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

// What both methods share: the slot, the hand-over to the loop, admission,
// the sink, the cancel and the reactions other than a write's.
class InferenceCall : public GrpcAsyncCall {
 protected:
  InferenceCall(InferenceService& service, int loop, bool stream)
      : service_(service), loop_(loop), stream_(stream), queue_(service.queue(loop)) {}

  // Starts `op` on the loop's queue: its tag, counted there.
  void* Start(Op op) {
    queue_.Started(op == Op::kDone);
    return Hold(op);
  }

  // Registers the done notification and returns the request slot's tag.
  void* SlotTag() {
    // Counted once the call arrived (a slot the shutdown closes never sees it).
    context_.AsyncNotifyWhenDone(Hold(Op::kDone));
    return Hold(Op::kRequest);
  }

  // Writes what the sink has for the client (on the loop).
  virtual void Pump() = 0;
  // Ends the call with `status`, refusing it (on the loop).
  virtual void Refuse(const grpc::Status& status) = 0;
  // A write completed (Generate only).
  virtual void Written(bool /*ok*/) {}

  InferenceService& service_;
  const int loop_;
  const bool stream_;
  LoopCompletionQueue& queue_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  std::string rid_;
  std::shared_ptr<GrpcSink> channel_;
  bool finished_ = false;  // the finish was started

 private:
  void React(Op op, bool ok) final {
    switch (op) {
      case Op::kRequest:
        Arrived(ok);
        return;
      case Op::kWrite:
        Written(ok);
        return;
      case Op::kFinish:
        return;
      case Op::kDone:  // the call is over, ended by its finish or by the client (B19)
        done_ = true;
        if (channel_ && context_.IsCancelled()) channel_->Cancel();
        return;
    }
  }

  // The request slot was filled (acceptor thread) or closed by a shutdown.
  void Arrived(bool ok) {
    if (!ok) {  // the server is shutting down: the call never started
      Release(Op::kDone);
      return;
    }
    if (!service_.stopping()) OpenInferenceSlot(service_, loop_, stream_);
    boost::asio::post(
        service_.executor(loop_),
        [self = std::static_pointer_cast<InferenceCall>(shared_from_this())] { self->Begin(); });
  }

  // On the loop: admits the call and, if admitted, runs its request.
  void Begin() {
    queue_.Started(/*done=*/true);  // the done notification is in flight now
    AdmissionResult admission = service_.Admit(&context_, request_, stream_);
    request_.Clear();
    if (!admission.admitted()) {
      finished_ = true;
      Refuse(GrpcStatusFor(admission.outcome, admission.request.rid));
      return;
    }
    rid_ = admission.request.rid;
    channel_ = service_.NewSink();
    // The router writes on this loop, so the wake-up runs the pump inline;
    // from anywhere else it is posted here.
    channel_->SetReadyCallback([weak = weak_from_this(), loop = &queue_.loop()] {
      const auto pump = [weak] {
        if (std::shared_ptr<GrpcAsyncCall> call = weak.lock()) {
          static_cast<InferenceCall*>(call.get())->Pump();
        }
      };
      if (loop->get_executor().running_in_this_thread()) {
        pump();
      } else {
        boost::asio::post(*loop, pump);
      }
    });
    service_.Submit(std::move(admission.request), channel_, loop_);
    // The client may have gone before the call reached this loop.
    if (done_ && context_.IsCancelled()) channel_->Cancel();
    Pump();
  }

  bool done_ = false;  // the done notification came
};

class GenerateCall final : public InferenceCall {
 public:
  GenerateCall(InferenceService& service, int loop) : InferenceCall(service, loop, true) {}

  void Open() {
    void* tag = SlotTag();
    service_.RequestGenerate(&context_, &request_, &writer_, queue_.cq(), service_.accept_queue(),
                             tag);
  }

 private:
  void Refuse(const grpc::Status& status) override { writer_.Finish(status, Start(Op::kFinish)); }

  // Writes the next message if none is in flight.
  void Pump() override {
    if (writing_ || finished_) return;
    GrpcChunk chunk;
    while (true) {
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
          Serialize(response_, &wire_);
          writing_ = true;
          writer_.Write(wire_, Start(Op::kWrite));
          return;
        }
        case GrpcSink::Pop::kEnd: {
          const router::Outcome& o = channel_->outcome();
          finished_ = true;
          if (!o.ok()) {
            writer_.Finish(GrpcStatusFor(o, rid_), Start(Op::kFinish));
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
          writer_.WriteAndFinish(wire_, grpc::WriteOptions(), grpc::Status::OK, Start(Op::kFinish));
          return;
        }
      }
    }
  }

  void Written(bool ok) override {
    writing_ = false;
    if (!ok) {  // the stream broke: the client is gone
      channel_->Cancel();
      if (finished_) return;
      finished_ = true;
      writer_.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"),
                     Start(Op::kFinish));
      return;
    }
    Pump();
  }

  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_{&context_};
  bool writing_ = false;
  long long tokens_ = 0;
  narwhal::v1::GenerateResponse response_;
  grpc::ByteBuffer wire_;  // response_ serialized, held until its write is done
};

class CompleteCall final : public InferenceCall {
 public:
  CompleteCall(InferenceService& service, int loop) : InferenceCall(service, loop, false) {}

  void Open() {
    void* tag = SlotTag();
    service_.RequestComplete(&context_, &request_, &responder_, queue_.cq(),
                             service_.accept_queue(), tag);
  }

 private:
  void Refuse(const grpc::Status& status) override {
    responder_.FinishWithError(status, Start(Op::kFinish));
  }

  void Pump() override {
    if (finished_) return;
    GrpcChunk ignored;
    GrpcSink::Pop pop;
    while ((pop = channel_->TryNext(&ignored)) == GrpcSink::Pop::kChunk) {
    }
    if (pop != GrpcSink::Pop::kEnd) return;
    finished_ = true;
    const router::Outcome& o = channel_->outcome();
    if (!o.ok()) {
      responder_.FinishWithError(GrpcStatusFor(o, rid_), Start(Op::kFinish));
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
    Serialize(response, &wire_);
    responder_.Finish(wire_, grpc::Status::OK, Start(Op::kFinish));
  }

  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_{&context_};
  grpc::ByteBuffer wire_;
};

}  // namespace

void OpenInferenceSlot(InferenceService& service, int loop, bool stream) {
  if (stream) {
    std::make_shared<GenerateCall>(service, loop)->Open();
  } else {
    std::make_shared<CompleteCall>(service, loop)->Open();
  }
}

}  // namespace narwhal::server
