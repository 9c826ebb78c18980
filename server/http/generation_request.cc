#include "server/http/generation_request.h"

#include <boost/beast/http/field.hpp>

namespace narwhal::server {

namespace http = boost::beast::http;

engines::Api ApiForPath(std::string_view path) {
  return path.find("/chat/") != std::string_view::npos ? engines::Api::kChatCompletions
                                                       : engines::Api::kCompletions;
}

std::optional<std::string_view> AuthorizationHeader(const HttpRequest& request) {
  auto it = request.find(http::field::authorization);
  if (it == request.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

namespace {

// The one value of header `name`; nullopt when absent or repeated (a
// repeated traceparent is invalid, and repeated tracestates would have to be
// joined: both are dropped).
std::optional<std::string_view> SingleHeader(const HttpRequest& request, std::string_view name) {
  if (request.count(name) != 1) return std::nullopt;
  auto it = request.find(name);
  return std::string_view(it->value().data(), it->value().size());
}

}  // namespace

DoorRequest HttpDoorRequest(const HttpRequest& request, std::string_view path) {
  DoorRequest door;
  door.door = router::Door::kHttp;
  door.api = ApiForPath(path);
  door.authorization = AuthorizationHeader(request);
  const auto client_rid = request["X-Request-Id"];
  door.client_request_id = std::string_view(client_rid.data(), client_rid.size());
  door.traceparent = SingleHeader(request, "traceparent");
  door.tracestate = SingleHeader(request, "tracestate");
  return door;
}

DoorBody HttpDoorBody(const HttpRequest& request, std::string_view path,
                      const router::Settings& settings) {
  const engines::Api api = ApiForPath(path);
  return DoorBodyFrom(api,
                      ParseOpenAiRequest(request.body(), api, settings.model, settings.limits));
}

}  // namespace narwhal::server
