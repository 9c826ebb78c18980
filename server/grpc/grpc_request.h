// Decoding of a narwhal.v1.GenerateRequest received as bytes, and its
// translation into the OpenAI body the router forwards, validated by the
// same rules as the HTTP shim (openai_request.h).
#ifndef NARWHAL_SERVER_GRPC_GRPC_REQUEST_H_
#define NARWHAL_SERVER_GRPC_GRPC_REQUEST_H_

#include <google/protobuf/struct.pb.h>
#include <grpcpp/support/byte_buffer.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engines/api.h"
#include "engines/json_limits.h"
#include "narwhal/v1/inference.pb.h"
#include "router/outcome.h"
#include "server/openai_request.h"

namespace narwhal::server {

// Why a received message is refused before translation: 413 (over the
// limit) or 400 (not a GenerateRequest), with the journal reason and the
// client's message.
struct DecodeError {
  // kMalformedMessage or kTooLarge (statuses from server/status_table).
  router::Reason reason = router::Reason::kMalformedMessage;
  std::string message;
};

// Parses `bytes` into `out`. False, with `error` set, when the message is
// larger than `max_bytes` (serving.max_request_bytes; checked before any
// parsing), missing, malformed or truncated protobuf, or not a
// GenerateRequest (a string field that is not valid UTF-8, a field of the
// wrong wire type, nesting past protobuf's recursion limit).
// `bytes` null: the call carried no message.
bool DecodeGenerateRequest(const std::string* bytes, long long max_bytes,
                           narwhal::v1::GenerateRequest* out, DecodeError* error);
// The same for a grpc::ByteBuffer (invalid: no message).
bool DecodeGenerateRequest(const grpc::ByteBuffer& bytes, long long max_bytes,
                           narwhal::v1::GenerateRequest* out, DecodeError* error);

struct GrpcParsedRequest {
  engines::Api api = engines::Api::kCompletions;
  ParsedRequest parsed;  // parsed.ok, parsed.body or parsed.error
};

// `stream` is whether the router relays chunks (Generate) or assembles
// (Complete). Refused (400) besides what ValidateOpenAiBody refuses under
// `limits`: a request without input or model, `extra` nesting too deeply or
// setting a router-owned field, and a number that is not finite (NaN or an
// infinity, in a typed field or anywhere in `extra`: JSON cannot carry it,
// and an engine would read null).
GrpcParsedRequest TranslateGenerateRequest(
    const narwhal::v1::GenerateRequest& request, bool stream, const std::string& served_model,
    const router::LimitSettings& limits = router::LimitSettings());

// google.protobuf.Value / Struct as JSON (numbers stay doubles, except
// integral values, which become integers so engines see `5`, not `5.0`).
nlohmann::json ValueToJson(const google::protobuf::Value& value);
nlohmann::json StructToJson(const google::protobuf::Struct& s);

// `s` against the bounds of its JSON form (engines/json_limits.h): its
// depth, and the memory StructToJson would take (`bounds.max_cost`, 0 = no
// bound). `*cost`, when given, receives the estimate as far as the walk went.
// Iterative, so it is safe on any input.
engines::JsonVerdict CheckStruct(const google::protobuf::Struct& s,
                                 const engines::JsonBounds& bounds, size_t* cost = nullptr);

// True when no struct or list in `s` nests deeper than `max_depth` levels
// (the same measure as engines::JsonDepthWithin on its JSON form). Iterative,
// so it is safe on any input.
bool StructDepthWithin(const google::protobuf::Struct& s, int max_depth);

// The path of a number in `s` that is NaN or infinite ("a.b[2]", at most
// about 64 bytes, cut on a character boundary), or "" when every number is
// finite. Iterative.
std::string NonFiniteNumberPath(const google::protobuf::Struct& s);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_REQUEST_H_
