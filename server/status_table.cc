#include "server/status_table.h"

namespace narwhal::server {

using json = nlohmann::json;

json OpenAiErrorBody(int status, router::ErrorType type, const std::string& message,
                     const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", router::ErrorTypeName(type)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}}}};
}

json OpenAiErrorBody(const router::Outcome& outcome) {
  return OpenAiErrorBody(outcome.status, outcome.error_type, outcome.message);
}

json TerminalStreamEvent(const router::Outcome& outcome) {
  const router::ErrorType type = outcome.error_type == router::ErrorType::kRequestExpired
                                     ? router::ErrorType::kRequestExpired
                                     : router::ErrorType::kDecode;
  return {{"error",
           {{"message", outcome.message},
            {"type", router::ErrorTypeName(type)},
            {"code", outcome.status}}}};
}

int GrpcCodeForStatus(int http_status, router::Terminal terminal) {
  // google.rpc.Code values.
  constexpr int kCancelled = 1, kInvalidArgument = 3, kDeadlineExceeded = 4, kNotFound = 5,
                kFailedPrecondition = 9, kResourceExhausted = 8, kInternal = 13,
                kUnavailable = 14, kUnauthenticated = 16, kOk = 0;
  if (terminal == router::Terminal::kCancelled) return kCancelled;
  if (http_status >= 200 && http_status < 300) return kOk;
  switch (http_status) {
    case 400:
    case 413:
      return kInvalidArgument;
    case 401:
      return kUnauthenticated;
    case 404:
      return kNotFound;
    case 409:
    case 412:
      return kFailedPrecondition;
    case 429:
      return kResourceExhausted;
    case 500:
      return kInternal;
    case 502:
    case 503:
      return kUnavailable;
    case 504:
      return kDeadlineExceeded;
    default:
      break;
  }
  if (http_status >= 400 && http_status < 500) return kInvalidArgument;
  return kUnavailable;
}

}  // namespace narwhal::server
