#include "server/grpc/grpc_call.h"

#include <string_view>
#include <utility>

namespace narwhal::server {
namespace {

std::optional<std::string_view> Metadata(const GrpcMetadata& metadata, std::string_view key) {
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

}  // namespace

GrpcCall DecodeGrpcCall(const std::string* bytes, bool stream, long long max_bytes) {
  GrpcCall call;
  call.stream = stream;
  call.decoded = DecodeGenerateRequest(bytes, max_bytes, &call.message, &call.error);
  return call;
}

GrpcCall DecodeGrpcCall(const grpc::ByteBuffer& bytes, bool stream, long long max_bytes) {
  GrpcCall call;
  call.stream = stream;
  call.decoded = DecodeGenerateRequest(bytes, max_bytes, &call.message, &call.error);
  return call;
}

DoorRequest GrpcDoorRequest(const GrpcCall& call, const GrpcMetadata& metadata,
                            std::chrono::system_clock::time_point deadline,
                            std::chrono::system_clock::time_point now) {
  DoorRequest door;
  door.door = router::Door::kGrpc;
  door.stream = call.stream;
  if (call.decoded && call.message.input_case() == narwhal::v1::GenerateRequest::kMessages) {
    door.api = engines::Api::kChatCompletions;
  }
  door.authorization = Metadata(metadata, "authorization");
  if (metadata.count(grpc::string_ref("traceparent")) == 1) {
    door.traceparent = Metadata(metadata, "traceparent");
  }
  if (metadata.count(grpc::string_ref("tracestate")) == 1) {
    door.tracestate = Metadata(metadata, "tracestate");
  }
  // The message's id when it carries one (even one that is not sane: then
  // the client has none), else the metadata's.
  if (call.decoded && !call.message.request_id().empty()) {
    door.client_request_id = call.message.request_id();
  } else {
    door.client_request_id = Metadata(metadata, "x-request-id").value_or("");
  }
  if (deadline != std::chrono::system_clock::time_point::max()) {
    door.client_time_left =
        std::chrono::duration_cast<engines::MonoClock::duration>(deadline - now);
  }
  return door;
}

DoorBody GrpcDoorBody(const GrpcCall& call, bool client_gone, const router::Settings& settings) {
  DoorBody out;
  out.stream = call.stream;
  if (!call.decoded) {
    Refusal refusal;
    if (client_gone) {
      refusal.reason = router::Reason::kCancelled;
      refusal.message = "client went away before its request arrived";
    } else {
      refusal.reason = call.error.reason;
      refusal.message = call.error.message;
    }
    out.refusal = std::move(refusal);
    return out;
  }
  GrpcParsedRequest parsed =
      TranslateGenerateRequest(call.message, call.stream, settings.model, settings.limits);
  return DoorBodyFrom(parsed.api, std::move(parsed.parsed));
}

}  // namespace narwhal::server
