// The gRPC door's side of admission (server/admission.h): a Generate or
// Complete call — its raw message, metadata and deadline — decoded into the
// DoorRequest admission reads (the `authorization` metadata, the client's
// request id, the API its input selects, the time its deadline leaves) and
// the DoorBody of its message (decode refusals, then TranslateGenerateRequest).
// Pure; no channel or server involved.
#ifndef NARWHAL_SERVER_GRPC_GRPC_CALL_H_
#define NARWHAL_SERVER_GRPC_GRPC_CALL_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/string_ref.h>

#include <chrono>
#include <map>

#include "narwhal/v1/inference.pb.h"
#include "router/common/settings.h"
#include "server/admission.h"
#include "server/grpc/grpc_request.h"

namespace narwhal::server {

// What grpc::ServerContextBase::client_metadata() returns.
using GrpcMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// A call's message, decoded under serving.max_request_bytes, or why not.
struct GrpcCall {
  bool stream = false;  // Generate (the client reads a stream) or Complete
  bool decoded = false;
  narwhal::v1::GenerateRequest message;  // when decoded
  DecodeError error;                     // when not
};

// `bytes` null: the call carried no message.
GrpcCall DecodeGrpcCall(const std::string* bytes, bool stream, long long max_bytes);
GrpcCall DecodeGrpcCall(const grpc::ByteBuffer& bytes, bool stream, long long max_bytes);

// The call as admission reads it; views into `call` and `metadata`.
// `deadline` is the call's (time_point::max() when none), `now` the wall
// time it is measured from. The client's id is the message's request_id,
// else the x-request-id metadata.
DoorRequest GrpcDoorRequest(const GrpcCall& call, const GrpcMetadata& metadata,
                            std::chrono::system_clock::time_point deadline,
                            std::chrono::system_clock::time_point now);

// The call's body: a message that did not decode is refused — as cancelled
// when `client_gone` (the client went away before its message arrived;
// nothing was wrong with what it sent, B19) — else the translated and
// validated OpenAI body under `settings` (model, limits).
DoorBody GrpcDoorBody(const GrpcCall& call, bool client_gone, const router::Settings& settings);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_CALL_H_
