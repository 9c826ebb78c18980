#include "engines/sim/openai_request.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engines/json_limits.h"
#include "engines/sim/sim_tokenizer.h"
#include "engines/sim/text_gen.h"

namespace narwhal::sim {

using engines::JsonDepthWithin;
using engines::kMaxJsonDepth;
using engines::ParseJson;
namespace {

// Pydantic-style request validation failures carry the type "Bad Request".
ApiError Invalid(std::string message) {
  return ApiError{400, "Bad Request", std::move(message), std::nullopt};
}

// Engine-side ValueErrors carry "BadRequestError".
ApiError BadRequest(std::string message) {
  return ApiError{400, "BadRequestError", std::move(message), std::nullopt};
}

bool IsNonEmptyString(const nlohmann::json& value) {
  return value.is_string() && !value.get_ref<const std::string&>().empty();
}

// A non-empty list of integers 0..2^32-1.
bool IsTokenIdList(const nlohmann::json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const nlohmann::json& id : value) {
    if (!id.is_number_integer()) return false;
    if (id.is_number_unsigned() ? id.get<uint64_t>() > UINT32_MAX : id.get<int64_t>() < 0) {
      return false;
    }
  }
  return true;
}

// Reads an optional integer field (absent or null leaves `out` unset).
std::optional<ApiError> OptionalInt(const nlohmann::json& body, const char* key,
                                    std::optional<int64_t>* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const nlohmann::json& value = body[key];
  if (!value.is_number_integer()) {
    return Invalid(absl::StrCat(key, ": Input should be a valid integer"));
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Invalid(absl::StrCat(key, ": Input is too large"));
  }
  *out = value.get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> CompletionPrompt(const nlohmann::json& body, InferenceRequest* request) {
  if (!body.contains("prompt") || body["prompt"].is_null()) {
    return Invalid("prompt: Field required");
  }
  const nlohmann::json& prompt = body["prompt"];
  if (prompt.is_string()) {
    request->prompt = prompt.get<std::string>();
    request->prompt_ids = SimTokenize(request->prompt);
    request->prompt_tokens = EstimateTokens(request->prompt);
    return std::nullopt;
  }
  const nlohmann::json* ids = nullptr;
  if (prompt.is_array() && prompt.size() > 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    return BadRequest(absl::StrCat("narwhal-sim serves one prompt per request; got a list of ",
                                   prompt.size(), " prompts"));
  }
  if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    request->prompt = prompt[0].get<std::string>();
    request->prompt_ids = SimTokenize(request->prompt);
    request->prompt_tokens = EstimateTokens(request->prompt);
    return std::nullopt;
  }
  if (IsTokenIdList(prompt)) {
    ids = &prompt;
  } else if (prompt.is_array() && prompt.size() == 1 && IsTokenIdList(prompt[0])) {
    ids = &prompt[0];
  }
  if (ids == nullptr) {
    return Invalid(
        "prompt: Input should be a string, a list of strings, a list of "
        "token ids or a list of token-id lists");
  }
  std::vector<std::string> parts;
  request->prompt_ids.reserve(ids->size());
  for (const nlohmann::json& id : *ids) {
    parts.push_back(id.dump());
    request->prompt_ids.push_back(id.get<uint32_t>());
  }
  request->prompt = absl::StrJoin(parts, " ");
  request->token_id_prompt = true;
  request->prompt_tokens = static_cast<int>(ids->size());
  return std::nullopt;
}

std::optional<ApiError> ChatPrompt(const nlohmann::json& body, InferenceRequest* request) {
  if (!body.contains("messages") || body["messages"].is_null()) {
    return Invalid("messages: Field required");
  }
  const nlohmann::json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) {
    return Invalid("messages: Input should be a non-empty list");
  }
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return Invalid(
          absl::StrCat("messages[", i, "]: Input should be an object with a string role"));
    }
    if (!message.contains("content")) continue;
    const nlohmann::json& content = message["content"];
    if (content.is_string()) {
      text += content.get<std::string>();
    } else if (content.is_array()) {
      for (const nlohmann::json& part : content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    } else if (!content.is_null()) {
      return Invalid(absl::StrCat("messages[", i, "].content: Input should be a string or a list"));
    }
  }
  request->prompt = std::move(text);
  request->prompt_ids = SimTokenize(request->prompt);
  request->prompt_tokens = EstimateTokens(request->prompt);
  return std::nullopt;
}

}  // namespace

KvParams ParseKvParams(const nlohmann::json& params) {
  KvParams kv;
  if (!params.is_object()) return kv;
  auto flag = [&params](const char* key) {
    return params.contains(key) && params[key].is_boolean() && params[key].get<bool>();
  };
  if (flag("do_remote_decode")) {
    kv.kind = KvParams::Kind::kProducer;
    return kv;
  }
  if (!flag("do_remote_prefill")) return kv;

  std::vector<std::string> missing;
  auto text = [&](const char* key, std::string* out) {
    if (params.contains(key) && IsNonEmptyString(params[key])) {
      *out = params[key].get<std::string>();
    } else {
      missing.push_back(key);
    }
  };
  text("remote_engine_id", &kv.remote_engine_id);
  text("remote_request_id", &kv.remote_request_id);
  text("remote_host", &kv.remote_host);
  int64_t port = 0;
  if (params.contains("remote_port")) {
    const nlohmann::json& value = params["remote_port"];
    if (value.is_number_integer()) {
      port = value.is_number_unsigned() && value.get<uint64_t>() > 65535 ? 0 : value.get<int64_t>();
    } else if (value.is_string() && !absl::SimpleAtoi(value.get<std::string>(), &port)) {
      port = 0;
    }
  }
  if (port < 1 || port > 65535) {
    missing.push_back("remote_port");
  } else {
    kv.remote_port = static_cast<int>(port);
  }
  if (params.contains("remote_block_ids") && params["remote_block_ids"].is_array() &&
      !params["remote_block_ids"].empty()) {
    kv.remote_block_ids = params["remote_block_ids"];
  } else {
    missing.push_back("remote_block_ids");
  }
  if (missing.empty()) {
    kv.kind = KvParams::Kind::kConsumer;
  } else {
    kv.kind = KvParams::Kind::kConsumerIncomplete;
    kv.missing = absl::StrJoin(missing, ", ");
  }
  return kv;
}

ParsedRequest ParseInferenceRequest(Api api, absl::string_view content_type, absl::string_view body,
                                    const std::string& served_model, int max_model_len) {
  ParsedRequest parsed;
  InferenceRequest& request = parsed.request;
  request.api = api;
  request.model = served_model;

  const std::string media_type = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';'))));
  if (media_type != "application/json") {
    parsed.error = Invalid("Unsupported Media Type: Only 'application/json' is allowed");
    return parsed;
  }
  const std::string_view text(body.data(), body.size());
  if (!JsonDepthWithin(text)) {
    parsed.error = Invalid(absl::StrCat("JSON nesting deeper than ", kMaxJsonDepth, " levels"));
    return parsed;
  }
  request.body = ParseJson(text);
  if (request.body.is_discarded()) {
    parsed.error = Invalid("JSON decode error");
    return parsed;
  }
  if (!request.body.is_object()) {
    parsed.error = Invalid("body: Input should be a valid dictionary");
    return parsed;
  }
  const nlohmann::json& json = request.body;

  std::optional<ApiError> error =
      api == Api::kChat ? ChatPrompt(json, &request) : CompletionPrompt(json, &request);
  if (error.has_value()) {
    parsed.error = std::move(error);
    return parsed;
  }

  std::string model;
  if (json.contains("model") && !json["model"].is_null()) {
    if (!json["model"].is_string()) {
      parsed.error = Invalid("model: Input should be a valid string");
      return parsed;
    }
    model = json["model"].get<std::string>();
  }
  if (json.contains("stream") && !json["stream"].is_null()) {
    if (!json["stream"].is_boolean()) {
      parsed.error = Invalid("stream: Input should be a valid boolean");
      return parsed;
    }
    request.stream = json["stream"].get<bool>();
  }
  if (json.contains("return_token_ids") && !json["return_token_ids"].is_null()) {
    if (!json["return_token_ids"].is_boolean()) {
      parsed.error = Invalid("return_token_ids: Input should be a valid boolean");
      return parsed;
    }
    request.return_token_ids = json["return_token_ids"].get<bool>();
  }
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> max_completion_tokens;
  std::optional<int64_t> min_tokens;
  std::optional<int64_t> n;
  for (auto [key, out] : {std::pair{"max_tokens", &max_tokens},
                          std::pair{"max_completion_tokens", &max_completion_tokens},
                          std::pair{"min_tokens", &min_tokens}, std::pair{"n", &n}}) {
    if ((error = OptionalInt(json, key, out))) {
      parsed.error = std::move(error);
      return parsed;
    }
  }
  if (n.has_value() && *n != 1) {
    parsed.error = BadRequest("narwhal-sim supports only n=1");
    return parsed;
  }
  const nlohmann::json* stream_options = nullptr;
  if (json.contains("stream_options") && !json["stream_options"].is_null()) {
    if (!json["stream_options"].is_object()) {
      parsed.error = Invalid("stream_options: Input should be an object");
      return parsed;
    }
    stream_options = &json["stream_options"];
  }
  if (json.contains("kv_transfer_params") && !json["kv_transfer_params"].is_null() &&
      !json["kv_transfer_params"].is_object()) {
    parsed.error = Invalid("kv_transfer_params: Input should be an object");
    return parsed;
  }

  if (!model.empty() && model != served_model) {
    parsed.error =
        ApiError{404, "NotFoundError", absl::StrCat("The model `", model, "` does not exist."),
                 std::string("model")};
    return parsed;
  }
  if (stream_options != nullptr && !request.stream) {
    parsed.error = Invalid("Stream options can only be defined when `stream=True`.");
    return parsed;
  }
  if (stream_options != nullptr) {
    const nlohmann::json& include = stream_options->value("include_usage", nlohmann::json());
    request.include_usage = !(include.is_boolean() && !include.get<bool>());
    const nlohmann::json& continuous =
        stream_options->value("continuous_usage_stats", nlohmann::json());
    request.continuous_usage = continuous.is_boolean() && continuous.get<bool>();
  }

  std::optional<int64_t> limit = max_tokens;
  if (api == Api::kChat && max_completion_tokens.has_value()) {
    limit = max_completion_tokens;
  }
  if (limit.has_value() && *limit < 1) {
    parsed.error = BadRequest(absl::StrCat("max_tokens must be at least 1, got ", *limit, "."));
    return parsed;
  }
  if (request.prompt_tokens >= max_model_len) {
    parsed.error =
        BadRequest(absl::StrCat("This model's maximum context length is ", max_model_len,
                                " tokens. However, your request has ", request.prompt_tokens,
                                " input tokens. Please reduce the length of the input messages."));
    return parsed;
  }
  const int64_t room = max_model_len - request.prompt_tokens;
  if (limit.has_value() && *limit > room) {
    parsed.error =
        BadRequest(absl::StrCat("This model's maximum context length is ", max_model_len,
                                " tokens. However, you requested ", request.prompt_tokens + *limit,
                                " tokens (", request.prompt_tokens, " in the messages, ", *limit,
                                " in the completion). Please reduce the length of the messages or "
                                "completion."));
    return parsed;
  }
  request.max_tokens =
      static_cast<int>(limit.has_value() ? *limit : std::min<int64_t>(kDefaultMaxTokens, room));
  if (min_tokens.has_value() && *min_tokens > request.max_tokens) {
    parsed.error = BadRequest(absl::StrCat("min_tokens must be less than or equal to max_tokens=",
                                           request.max_tokens, ", got ", *min_tokens, "."));
    return parsed;
  }

  request.kv = ParseKvParams(json.value("kv_transfer_params", nlohmann::json()));
  if (request.kv.kind == KvParams::Kind::kProducer && request.stream) {
    parsed.error = BadRequest("KV-transfer producer requests are not supported with streaming");
    return parsed;
  }
  return parsed;
}

}  // namespace narwhal::sim
