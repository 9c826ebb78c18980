// The client mistake a consumer engine would refuse only after the producer
// had run the prefill: asking for more tokens than the model's context
// length (max_model_len). The router refuses such a request at admission
// (400 invalid_request_error, journal terminal "invalid", no engine leg and
// so no breaker evidence).
//
// Without a tokenizer the router counts only what it knows for certain: the
// completion budget (max_completion_tokens, else max_tokens) and, for a
// prompt given as token ids, those ids. A text prompt counts as zero tokens
// here; the engine still judges it.
#ifndef NARWHAL_ROUTER_CONTEXT_LIMIT_H_
#define NARWHAL_ROUTER_CONTEXT_LIMIT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "engines/api.h"

namespace narwhal::router {

// Why `body` (a request the front door validated) cannot fit in a context
// of `max_model_len` tokens, or "" when it can or the limit is unknown
// (max_model_len <= 0).
std::string ContextLimitError(const nlohmann::json& body, engines::Api api,
                              long long max_model_len);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_CONTEXT_LIMIT_H_
