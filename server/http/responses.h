// The HTTP door's responses as Beast messages (SPEC §4): JSON bodies, the
// OpenAI error shape through the one status table (server/status_table), and
// the end of a request that streamed nothing.
//
// The connection sets the version, keep-alive and payload size before it
// writes one (FinishForWire).
#ifndef NARWHAL_SERVER_HTTP_RESPONSES_H_
#define NARWHAL_SERVER_HTTP_RESPONSES_H_

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "router/outcome.h"
#include "server/status_table.h"

namespace narwhal::server {

using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

HttpResponse JsonResponse(int status, const nlohmann::json& body);

// {"error": {...}} with `Retry-After: 1` on 429 and 503.
HttpResponse ErrorResponse(int status, ErrorType type, const std::string& message,
                           const std::string& param = "");
HttpResponse ErrorResponse(const router::Outcome& outcome, const std::string& param = "");

// The end of a generation request that streamed nothing: the assembled
// response (200) or the error, with x-narwhal-ttft-s and
// x-narwhal-first-byte-s when measured (B9).
HttpResponse OutcomeResponse(const router::Outcome& outcome);

// Sets what the connection decides: the client's HTTP version, whether the
// connection stays open, Content-Length.
void FinishForWire(HttpResponse& response, unsigned version, bool keep_alive);

// Seconds as the measurement headers carry them ("%.6f").
std::string FormatSeconds(double s);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_RESPONSES_H_
