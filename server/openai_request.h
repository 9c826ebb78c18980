// Validation of OpenAI request bodies at the HTTP front door (SPEC §4).
//
// Pure: takes the raw body, returns the validated JSON the router forwards or
// a client error (its reason, message, param). Every field the router
// does not own passes through unchanged; a client `kv_transfer_params` is
// removed (it would let a client point an engine at an arbitrary host, §12).
// The bounds of router::LimitSettings (the `limits` config section) apply to
// both doors here: max_tokens and max_completion_tokens, the number of chat
// messages and of completion prompts.
#ifndef NARWHAL_SERVER_OPENAI_REQUEST_H_
#define NARWHAL_SERVER_OPENAI_REQUEST_H_

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "router/common/settings.h"
#include "router/outcome.h"

namespace narwhal::server {

struct ClientError {
  // kInvalidRequest; kModelNotFound when the body names a model other than
  // the served one; kTooLarge when the body would take too much memory once
  // parsed (engines/json_limits.h). Its status: server/status_table.
  router::Reason reason = router::Reason::kInvalidRequest;
  std::string message;  // e.g. "max_tokens must be an integer >= 1"
  std::string param;    // the offending field, "" when none
};

struct ParsedRequest {
  bool ok = false;
  ClientError error;     // when !ok
  nlohmann::json body;   // when ok: the body to forward; for an unknown model
                         // only {"model": <the client's name>}
  bool stream = false;
};

ParsedRequest ParseOpenAiRequest(std::string_view raw, engines::Api api,
                                 const std::string& served_model,
                                 const router::LimitSettings& limits = router::LimitSettings());

// The same validation of an already parsed body (the gRPC door builds the
// OpenAI body from typed fields and validates it here, so both doors apply
// one set of rules).
ParsedRequest ValidateOpenAiBody(nlohmann::json body, engines::Api api,
                                 const std::string& served_model,
                                 const router::LimitSettings& limits = router::LimitSettings());

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_OPENAI_REQUEST_H_
