// Validation of /v1/completions and /v1/chat/completions requests the way
// vLLM validates them, and extraction of what the simulator needs.
//
// Checks, in order: Content-Type application/json; parsable JSON object;
// `prompt` (completions: a string, a one-element list of strings, a list of
// token ids or a one-element list of token-id lists, each id an integer
// 0..2^32-1) or `messages` (chat: a
// non-empty list of objects with a string `role`; content a string, null or
// a list of parts whose "text" fields count); field types (model string,
// stream bool, max_tokens / max_completion_tokens / min_tokens integers or
// null, n == 1, stream_options and kv_transfer_params objects or null,
// return_token_ids a bool or null);
// model (404 NotFoundError when it names another model); stream_options only
// with stream true; max_tokens >= 1; min_tokens <= max_tokens; context
// length (prompt tokens, and prompt plus an explicit max_tokens, within
// max_model_len); no streaming producer requests. Pure.
#ifndef NARWHAL_ENGINES_SIM_OPENAI_REQUEST_H_
#define NARWHAL_ENGINES_SIM_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engines/sim/fault_rules.h"
#include "engines/sim/responses.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

// What a request's kv_transfer_params asks for.
struct KvParams {
  enum class Kind {
    kNone,                // absent, null or neither flag set
    kProducer,            // do_remote_decode true
    kConsumer,            // do_remote_prefill true with every key a pull needs
    kConsumerIncomplete,  // do_remote_prefill true, keys missing
  };
  Kind kind = Kind::kNone;
  std::string remote_engine_id;
  std::string remote_request_id;
  std::string remote_host;
  int remote_port = 0;
  nlohmann::json remote_block_ids;  // as sent
  std::string missing;              // kConsumerIncomplete: the missing keys, comma-separated
};

// Reads kv_transfer_params (any JSON value; non-objects mean kNone).
// Consumer keys: remote_engine_id, remote_request_id and remote_host
// non-empty strings, remote_port an integer (or a decimal string) 1..65535,
// remote_block_ids a non-empty list.
KvParams ParseKvParams(const nlohmann::json& params);

struct InferenceRequest {
  Api api = Api::kCompletions;
  nlohmann::json body;  // the parsed request
  std::string model;    // the served model (requests may omit it)
  // The prompt's text (token-id prompts: the ids joined by " ").
  std::string prompt;
  // The prompt's token ids (engines/sim/text_gen.h): SimTokenize(prompt)
  // for text prompts, the ids as given for token-id prompts.
  std::vector<uint32_t> prompt_ids;
  bool token_id_prompt = false;
  // Text prompts: EstimateTokens(prompt); token-id prompts: their count.
  int prompt_tokens = 1;
  int max_tokens = 16;  // chat: max_completion_tokens wins
  bool stream = false;
  bool include_usage = false;  // stream_options present and include_usage
                               // not false
  bool continuous_usage = false;
  // vLLM's return_token_ids: bodies and chunks carry prompt_token_ids and
  // token_ids.
  bool return_token_ids = false;
  KvParams kv;

  Phase phase() const {
    return kv.kind == KvParams::Kind::kProducer ? Phase::kPrefill : Phase::kDecode;
  }
};

struct ParsedRequest {
  std::optional<ApiError> error;  // set: answer it
  InferenceRequest request;       // valid when !error
};

constexpr int kDefaultMaxTokens = 16;

// `served_model` is the engine's model; `max_model_len` its context length.
ParsedRequest ParseInferenceRequest(Api api, absl::string_view content_type, absl::string_view body,
                                    const std::string& served_model, int max_model_len);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_OPENAI_REQUEST_H_
