#include "engines/sim/responses.h"

#include "absl/strings/str_cat.h"

namespace narwhal::sim {
namespace {

std::string PyString(absl::string_view s) {
  // json.dumps escapes non-ASCII as \uXXXX (ensure_ascii).
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

const char* ObjectName(Api api, bool chunk) {
  if (api == Api::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

OrderedJson ChunkHead(const ResponseContext& ctx) {
  return {{"id", ctx.id},
          {"object", ObjectName(ctx.api, true)},
          {"created", ctx.created},
          {"model", ctx.model}};
}

}  // namespace

std::string ErrorTypeForStatus(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFoundError";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "InternalServerError";
    case 501:
      return "NotImplementedError";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      break;
  }
  return status >= 500 ? "InternalServerError" : "BadRequestError";
}

std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Dump(const OrderedJson& json) {
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ErrorBody(const ApiError& error) {
  OrderedJson body = {
      {"error",
       {{"message", error.message},
        {"type", error.type},
        {"param", error.param.has_value() ? OrderedJson(*error.param) : OrderedJson(nullptr)},
        {"code", error.status}}}};
  return Dump(body);
}

std::string ErrorFrame(absl::string_view message, absl::string_view type,
                       const nlohmann::json& code) {
  const std::string code_text = code.is_string() ? PyString(code.get<std::string>()) : Dump(code);
  return absl::StrCat("data: {\"error\": {\"message\": ", PyString(message),
                      ", \"type\": ", PyString(type), ", \"param\": null, \"code\": ", code_text,
                      "}}\n\n");
}

std::string SseEvent(const OrderedJson& json) { return absl::StrCat("data: ", Dump(json), "\n\n"); }

const std::string& DoneEvent() {
  static const auto* const kDone = new std::string("data: [DONE]\n\n");
  return *kDone;
}

OrderedJson Usage::ToJson() const {
  return {{"prompt_tokens", prompt_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"completion_tokens", completion_tokens}};
}

namespace {
OrderedJson UsageJson(const Usage& usage) {
  OrderedJson j = usage.ToJson();
  if (usage.cached_tokens.has_value()) {
    j["prompt_tokens_details"] = {{"cached_tokens", *usage.cached_tokens}};
  }
  return j;
}

// Completions: a chunk's choice carries prompt_token_ids then token_ids.
void AddStreamChoiceIds(const TokenIds& ids, OrderedJson* choice) {
  if (ids.prompt.has_value()) (*choice)["prompt_token_ids"] = *ids.prompt;
  if (ids.generated.has_value()) (*choice)["token_ids"] = *ids.generated;
}

// Chat: token_ids in the choice, prompt_token_ids at the top level.
void AddChatChunkIds(const TokenIds& ids, OrderedJson* chunk) {
  if (ids.generated.has_value()) (*chunk)["choices"][0]["token_ids"] = *ids.generated;
  if (ids.prompt.has_value()) (*chunk)["prompt_token_ids"] = *ids.prompt;
}

}  // namespace

OrderedJson RoleChunk(const ResponseContext& ctx, const TokenIds& ids) {
  OrderedJson chunk = ChunkHead(ctx);
  chunk["choices"] = OrderedJson::array({{{"index", 0},
                                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                                          {"logprobs", nullptr},
                                          {"finish_reason", nullptr}}});
  AddChatChunkIds(ids, &chunk);
  return chunk;
}

OrderedJson MetadataChunk(const ResponseContext& ctx, const TokenIds& ids) {
  if (ctx.api == Api::kChat) return RoleChunk(ctx, ids);
  OrderedJson chunk = ChunkHead(ctx);
  OrderedJson choice = {{"index", 0},
                        {"text", ""},
                        {"logprobs", nullptr},
                        {"finish_reason", nullptr},
                        {"stop_reason", nullptr}};
  AddStreamChoiceIds(ids, &choice);
  chunk["choices"] = OrderedJson::array({std::move(choice)});
  return chunk;
}

OrderedJson TokenChunk(const ResponseContext& ctx, absl::string_view text,
                       const std::optional<std::string>& finish_reason,
                       const std::optional<Usage>& usage, const TokenIds& ids) {
  OrderedJson chunk = ChunkHead(ctx);
  OrderedJson choice = {{"index", 0}};
  if (ctx.api == Api::kChat) {
    choice["delta"] = {{"content", std::string(text)}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason.has_value() ? OrderedJson(*finish_reason) : nullptr;
    if (finish_reason.has_value()) choice["stop_reason"] = nullptr;
  } else {
    choice["text"] = std::string(text);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason.has_value() ? OrderedJson(*finish_reason) : nullptr;
    choice["stop_reason"] = nullptr;
    AddStreamChoiceIds(ids, &choice);
  }
  chunk["choices"] = OrderedJson::array({std::move(choice)});
  if (usage.has_value()) chunk["usage"] = UsageJson(*usage);
  if (finish_reason.has_value()) {
    chunk["system_fingerprint"] = ctx.system_fingerprint;
  }
  if (ctx.api == Api::kChat) AddChatChunkIds(ids, &chunk);
  return chunk;
}

OrderedJson UsageChunk(const ResponseContext& ctx, const Usage& usage) {
  OrderedJson chunk = ChunkHead(ctx);
  chunk["choices"] = OrderedJson::array();
  chunk["usage"] = UsageJson(usage);
  chunk["system_fingerprint"] = ctx.system_fingerprint;
  return chunk;
}

OrderedJson FullBody(const ResponseContext& ctx, absl::string_view text,
                     absl::string_view finish_reason, const Usage& usage,
                     const OrderedJson& kv_transfer_params, const TokenIds& ids) {
  OrderedJson choice = {{"index", 0}};
  if (ctx.api == Api::kChat) {
    choice["message"] = {{"role", "assistant"},
                         {"content", std::string(text)},
                         {"refusal", nullptr},
                         {"tool_calls", OrderedJson::array()}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = std::string(finish_reason);
    choice["stop_reason"] = nullptr;
    if (ids.generated.has_value()) choice["token_ids"] = *ids.generated;
  } else {
    choice["text"] = std::string(text);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = std::string(finish_reason);
    choice["stop_reason"] = nullptr;
    if (ids.generated.has_value()) choice["token_ids"] = *ids.generated;
    choice["prompt_logprobs"] = nullptr;
    if (ids.prompt.has_value()) choice["prompt_token_ids"] = *ids.prompt;
  }
  OrderedJson usage_json = UsageJson(usage);
  if (!usage.cached_tokens.has_value()) usage_json["prompt_tokens_details"] = nullptr;
  OrderedJson body = {{"id", ctx.id},
                      {"object", ObjectName(ctx.api, false)},
                      {"created", ctx.created},
                      {"model", ctx.model},
                      {"choices", OrderedJson::array({std::move(choice)})},
                      {"service_tier", nullptr},
                      {"system_fingerprint", ctx.system_fingerprint},
                      {"usage", std::move(usage_json)}};
  if (ctx.api == Api::kChat && ids.prompt.has_value()) body["prompt_token_ids"] = *ids.prompt;
  body["kv_transfer_params"] = kv_transfer_params;
  return body;
}

OrderedJson ModelList(absl::string_view model, int max_model_len, int64_t created) {
  OrderedJson permission = {{"id", absl::StrCat("modelperm-", created)},
                            {"object", "model_permission"},
                            {"created", created},
                            {"allow_create_engine", false},
                            {"allow_sampling", true},
                            {"allow_logprobs", true},
                            {"allow_search_indices", false},
                            {"allow_view", true},
                            {"allow_fine_tuning", false},
                            {"organization", "*"},
                            {"group", nullptr},
                            {"is_blocking", false}};
  OrderedJson card = {{"id", std::string(model)},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "vllm"},
                      {"root", std::string(model)},
                      {"parent", nullptr},
                      {"max_model_len", max_model_len},
                      {"permission", OrderedJson::array({permission})}};
  return {{"object", "list"}, {"data", OrderedJson::array({card})}};
}

}  // namespace narwhal::sim
