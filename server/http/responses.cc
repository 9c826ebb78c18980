#include "server/http/responses.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "server/status_table.h"

namespace narwhal::server {

namespace http = boost::beast::http;

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", s);
  return buf;
}

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse res;
  res.result(static_cast<unsigned>(status));
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return res;
}

HttpResponse ErrorResponse(int status, ErrorType type, const std::string& message,
                           const std::string& param) {
  HttpResponse res = JsonResponse(status, OpenAiErrorBody(status, type, message, param));
  if (RetryAfterFor(status)) res.set(http::field::retry_after, "1");
  return res;
}

HttpResponse ErrorResponse(const router::Outcome& outcome, const std::string& param) {
  const EdgeStatus edge = StatusFor(outcome);
  HttpResponse res = JsonResponse(
      edge.http_status, OpenAiErrorBody(edge.http_status, edge.error_type, outcome.message, param));
  if (edge.retry_after_s > 0) res.set(http::field::retry_after, std::to_string(edge.retry_after_s));
  return res;
}

HttpResponse OutcomeResponse(const router::Outcome& outcome) {
  if (!outcome.ok()) return ErrorResponse(outcome, outcome.param);  // timings: in the journal row
  HttpResponse res = JsonResponse(200, outcome.body);
  if (outcome.ttft_s) res.set("x-narwhal-ttft-s", FormatSeconds(*outcome.ttft_s));
  if (outcome.first_byte_s) res.set("x-narwhal-first-byte-s", FormatSeconds(*outcome.first_byte_s));
  return res;
}

void FinishForWire(HttpResponse& response, unsigned version, bool keep_alive) {
  response.version(version);
  response.keep_alive(keep_alive);
  response.prepare_payload();
}

}  // namespace narwhal::server
