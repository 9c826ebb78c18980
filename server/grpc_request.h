// Translation of narwhal.v1.GenerateRequest into the OpenAI body the router
// forwards, validated by the same rules as the HTTP shim (openai_request.h).
#ifndef NARWHAL_SERVER_GRPC_REQUEST_H_
#define NARWHAL_SERVER_GRPC_REQUEST_H_

#include <string>

#include <google/protobuf/struct.pb.h>
#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "narwhal/v1/inference.pb.h"
#include "server/openai_request.h"

namespace narwhal::server {

struct GrpcParsedRequest {
  engines::Api api = engines::Api::kCompletions;
  ParsedRequest parsed;  // parsed.ok, parsed.body or parsed.error
};

// `stream` is whether the router relays chunks (Generate) or assembles
// (Complete).
GrpcParsedRequest TranslateGenerateRequest(const narwhal::v1::GenerateRequest& request,
                                           bool stream, const std::string& served_model);

// google.protobuf.Value / Struct as JSON (numbers stay doubles, except
// integral values, which become integers so engines see `5`, not `5.0`).
nlohmann::json ValueToJson(const google::protobuf::Value& value);
nlohmann::json StructToJson(const google::protobuf::Struct& s);

// True when no struct or list in `s` nests deeper than `max_depth` levels
// (the same measure as engines::JsonDepthWithin on its JSON form). Iterative,
// so it is safe on any input.
bool StructDepthWithin(const google::protobuf::Struct& s, int max_depth);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_REQUEST_H_
