// The one status table (SPEC §4, §6): how an outcome leaves each front door.
//
// The router decides every outcome's HTTP status and error type; this file
// renders them: the OpenAI error body and the terminal SSE event for HTTP,
// the gRPC status code for gRPC. No other file maps statuses.
#ifndef NARWHAL_SERVER_STATUS_TABLE_H_
#define NARWHAL_SERVER_STATUS_TABLE_H_

#include <string>

#include <nlohmann/json.hpp>

#include "router/outcome.h"

namespace narwhal::server {

// {"error": {"message", "type", "param", "code": status}} (SPEC §4).
nlohmann::json OpenAiErrorBody(int status, router::ErrorType type, const std::string& message,
                               const std::string& param = "");
nlohmann::json OpenAiErrorBody(const router::Outcome& outcome);

// The last event of a stream that failed after commit (B16):
// {"error": {"message", "type": "decode"|"request_expired", "code": status}}.
nlohmann::json TerminalStreamEvent(const router::Outcome& outcome);

// SPEC §6: 400/413 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND,
// 429 RESOURCE_EXHAUSTED, 502/503 UNAVAILABLE, 504 DEADLINE_EXCEEDED,
// 500 INTERNAL, client cancel CANCELLED; other 4xx INVALID_ARGUMENT (or
// FAILED_PRECONDITION for 409/412), other 5xx UNAVAILABLE. Returns the
// numeric google.rpc.Code.
int GrpcCodeForStatus(int http_status, router::Terminal terminal);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_STATUS_TABLE_H_
