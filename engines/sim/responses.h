// The JSON shapes a vLLM engine answers with: error bodies, in-stream error
// frames, completion and chat bodies, stream chunks, usage chunks and the
// model list. Output keys keep vLLM's order (nlohmann::ordered_json).
#ifndef NARWHAL_ENGINES_SIM_RESPONSES_H_
#define NARWHAL_ENGINES_SIM_RESPONSES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

using OrderedJson = nlohmann::ordered_json;

enum class Api { kCompletions, kChat };

// An error answered with an HTTP status and a vLLM error body.
struct ApiError {
  int status = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::optional<std::string> param;  // null when unset
};

// vLLM's `type` for an HTTP status: 400 BadRequestError, 404 NotFoundError,
// 500 InternalServerError, 501 NotImplementedError, otherwise the status
// phrase ("Service Unavailable", ...).
std::string ErrorTypeForStatus(int status);

// Compact JSON, invalid UTF-8 replaced (never throws).
std::string Dump(const nlohmann::json& json);
std::string Dump(const OrderedJson& json);

// {"error":{"message":…,"type":…,"param":…,"code":<status>}} (compact).
std::string ErrorBody(const ApiError& error);

// One SSE event carrying an error object with Python json.dumps spacing:
// data: {"error": {"message": M, "type": T, "param": null, "code": C}}\n\n
std::string ErrorFrame(absl::string_view message, absl::string_view type,
                       const nlohmann::json& code);

// "data: <compact json>\n\n"
std::string SseEvent(const OrderedJson& json);
// "data: [DONE]\n\n"
const std::string& DoneEvent();

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Prompt tokens served from the prefix cache; set only when the cache is
  // on (then prompt_tokens_details.cached_tokens is reported).
  std::optional<int> cached_tokens = std::nullopt;
  // prompt_tokens, total_tokens, completion_tokens[, prompt_tokens_details]
  OrderedJson ToJson() const;
};

// What every body and chunk of one response shares.
struct ResponseContext {
  Api api = Api::kCompletions;
  std::string id;  // cmpl-<request id> or chatcmpl-<request id>
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

// What vLLM's return_token_ids adds to a body or chunk; a field left unset
// is left out. Completions put both in choices[0] (a body: token_ids after
// stop_reason, prompt_token_ids last; a chunk: prompt_token_ids, then
// token_ids, after stop_reason). Chat puts token_ids in choices[0] (after
// finish_reason / stop_reason) and prompt_token_ids at the top level (a
// body: before kv_transfer_params; a chunk: last).
struct TokenIds {
  std::optional<std::vector<uint32_t>> prompt;     // prompt_token_ids
  std::optional<std::vector<uint32_t>> generated;  // token_ids
};

// Chat only: delta {"role":"assistant","content":""}.
OrderedJson RoleChunk(const ResponseContext& ctx, const TokenIds& ids = {});
// A chunk without generated text: the role chunk for chat, text "" for
// completions.
OrderedJson MetadataChunk(const ResponseContext& ctx, const TokenIds& ids = {});
// One generated token. `finish_reason` set marks the last content chunk,
// which also carries stop_reason and system_fingerprint. `usage` (continuous
// usage stats) is added when given.
OrderedJson TokenChunk(const ResponseContext& ctx, absl::string_view text,
                       const std::optional<std::string>& finish_reason,
                       const std::optional<Usage>& usage = std::nullopt, const TokenIds& ids = {});
// {"choices": [], "usage": {...}, "system_fingerprint"}.
OrderedJson UsageChunk(const ResponseContext& ctx, const Usage& usage);

// The non-streaming body; `kv_transfer_params` is emitted as given (null
// when the request was not a producer request).
OrderedJson FullBody(const ResponseContext& ctx, absl::string_view text,
                     absl::string_view finish_reason, const Usage& usage,
                     const OrderedJson& kv_transfer_params, const TokenIds& ids = {});

// GET /v1/models.
OrderedJson ModelList(absl::string_view model, int max_model_len, int64_t created);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_RESPONSES_H_
