// The prompt's token ids for KV-event placement and conditional
// disaggregation (SPEC §14, B27/B28): POST /tokenize on a serving engine or
// on a tokenize-only instance (kv_events.tokenizer), in the request's own
// form (completion or chat, with its template fields) so the ids are the
// ones the engine will compute. A prompt given as token ids needs no call.
// Anything that goes wrong is a reason to place without tokens, never a
// reason to fail the request.
#ifndef NARWHAL_ROUTER_PROMPT_TOKENS_H_
#define NARWHAL_ROUTER_PROMPT_TOKENS_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"
#include "engines/engine_client.h"
#include "router/common/clock.h"
#include "router/common/placement_reason.h"
#include "router/common/settings.h"
#include "router/fleet/placement_view.h"

namespace narwhal::router {

struct PromptTokens {
  std::vector<uint32_t> ids;  // empty when `failure` is set
  std::optional<TokenizeFailure> failure;
  std::string detail;      // what went wrong, for the journal
  bool no_answer = false;  // the tokenizer gave no HTTP answer, not for lack of time
};

// What to ask for a request's prompt: the /tokenize body, or the ids
// themselves when the prompt is token ids, or a failure (kUnsupported).
struct TokenizeQuery {
  std::optional<nlohmann::json> body;
  PromptTokens direct;  // used when `body` is empty
};
TokenizeQuery MakeTokenizeQuery(engines::Api api, const nlohmann::json& client_body);

// Reads a /tokenize answer ({count, max_model_len, tokens: [ids]}): at most
// `max_tokens` ids, each a 32-bit unsigned. False with *why otherwise.
bool ParseTokenizeAnswer(std::string_view body, size_t max_tokens, std::vector<uint32_t>* ids,
                         std::string* why);

// One tokenize call on `target`, bounded by `timeout_s`.
engines::Awaitable<PromptTokens> Tokenize(engines::AsyncEngineClient& client,
                                          engines::EngineTarget target, nlohmann::json body,
                                          size_t max_tokens, double timeout_s);

// Where to tokenize, in the order to try: the kv_events.tokenizer URL, or
// ("engine") the engines in placement for either phase, starting at
// `rotation` so that they take turns. Empty when no engine is.
std::vector<engines::EngineTarget> TokenizerTargets(const std::string& tokenizer,
                                                    const PlacementView& view,
                                                    engines::MonoTime now, size_t rotation);

// A request's prompt tokens as placement wants them: MakeTokenizeQuery, then
// a Tokenize call on the first of TokenizerTargets within
// kv_events.tokenize_timeout_s and what is left before `deadline`; when no
// connection could be made to it (a dead engine still in placement), once
// more on the next, within what is left of the same bound.
engines::Awaitable<PromptTokens> TokenizePrompt(engines::AsyncEngineClient& client,
                                                const Clock& clock, const Settings& settings,
                                                const PlacementView& view, engines::Api api,
                                                const nlohmann::json& client_body,
                                                engines::MonoTime deadline, size_t rotation);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_PROMPT_TOKENS_H_
