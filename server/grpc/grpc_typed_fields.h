// The typed fields of the gRPC API that have an OpenAI JSON form beyond
// text: chat messages with content parts, tool calls and reasoning; tools,
// tool_choice and response_format; logprobs. In one direction they become
// the engine request's JSON, exactly what a client of the HTTP shim would
// send for the same request; in the other, the fields of a decode chunk or
// an assembled response become Delta and CompleteResponse fields, so that
// both doors give a client the same answer.
#ifndef NARWHAL_SERVER_GRPC_GRPC_TYPED_FIELDS_H_
#define NARWHAL_SERVER_GRPC_GRPC_TYPED_FIELDS_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engines/api.h"
#include "narwhal/v1/inference.pb.h"

namespace narwhal::server {

// A typed field that cannot be sent: 400 (413 when `too_large`) with the
// message and the field (`param`) at fault.
struct TypedFieldError {
  std::string message;
  std::string param;
  bool too_large = false;
};

// The chat message as OpenAI JSON ({"role", "content" string or parts
// array, "name", "tool_calls", "tool_call_id", "reasoning_content"}), or
// the error of message `index`.
std::optional<TypedFieldError> ChatMessageJson(const narwhal::v1::ChatMessage& message, int index,
                                               nlohmann::json* out);

// Adds tools, tool_choice, parallel_tool_calls, response_format, logprobs
// and top_logprobs to `body` (the chat form; for a completion, logprobs is
// the number of alternatives). Tools and tool_choice need chat.
std::optional<TypedFieldError> AddTypedRequestFields(const narwhal::v1::GenerateRequest& request,
                                                     engines::Api api, nlohmann::json* body);

// Whether a decode chunk's bytes may carry tool calls, reasoning text or
// logprobs (a byte scan: most chunks carry only text and are not parsed
// again).
bool MayCarryTypedFields(std::string_view chunk);

// Fills `delta`'s tool_calls, reasoning_content and logprobs from choice 0
// of a decode chunk (chat or completion). Ignores a chunk that does not
// parse (the text path has classified it already).
void FillDeltaTypedFields(std::string_view chunk, narwhal::v1::Delta* delta);

// Fills `response`'s tool_calls, reasoning_content and logprobs from
// choice 0 of an assembled OpenAI response.
void FillCompleteTypedFields(const nlohmann::json& body, narwhal::v1::CompleteResponse* response);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_TYPED_FIELDS_H_
