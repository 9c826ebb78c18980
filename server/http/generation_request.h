// The HTTP door's side of admission (server/admission.h): a Beast request
// for POST /v1/completions or /v1/chat/completions as a DoorRequest (the
// Authorization header, X-Request-Id, the API its path names) and its body
// as a DoorBody (server/openai_request's parse and validation). Pure; no
// socket involved.
#ifndef NARWHAL_SERVER_HTTP_GENERATION_REQUEST_H_
#define NARWHAL_SERVER_HTTP_GENERATION_REQUEST_H_

#include <optional>
#include <string_view>

#include "engines/api.h"
#include "router/common/settings.h"
#include "server/admission.h"
#include "server/http/routes.h"

namespace narwhal::server {

// Chat completions for a path with "/chat/", else completions.
engines::Api ApiForPath(std::string_view path);

// The Authorization header (the first, if several), or nullopt when absent.
std::optional<std::string_view> AuthorizationHeader(const HttpRequest& request);

// The request's head as admission reads it; views into `request`.
DoorRequest HttpDoorRequest(const HttpRequest& request, std::string_view path);

// The request's body, parsed and validated under `settings` (model, limits).
DoorBody HttpDoorBody(const HttpRequest& request, std::string_view path,
                      const router::Settings& settings);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_GENERATION_REQUEST_H_
