#include "router/prompt_tokens.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;
namespace od = simdjson::ondemand;

// Fields of a chat request that change what its template renders (vLLM's
// chat form of /tokenize).
constexpr std::string_view kChatFields[] = {"model",
                                            "messages",
                                            "add_generation_prompt",
                                            "continue_final_message",
                                            "add_special_tokens",
                                            "chat_template",
                                            "chat_template_kwargs",
                                            "mm_processor_kwargs",
                                            "tools",
                                            "documents"};

// A completion prompt given as token ids: [1, 2, 3] or [[1, 2, 3]].
bool TokenIds(const json& prompt, std::vector<uint32_t>* ids) {
  const json* list = &prompt;
  if (prompt.size() == 1 && prompt[0].is_array()) list = &prompt[0];
  if (list->empty()) return false;
  ids->reserve(list->size());
  constexpr double kMaxId = std::numeric_limits<uint32_t>::max();
  for (const json& id : *list) {
    // Parsed text gives unsigned integers; a body built another way (the
    // gRPC door) may hold signed or integral floating-point ones.
    double value = -1;
    if (id.is_number_unsigned()) {
      value = id.get<uint64_t>() > kMaxId ? -1 : static_cast<double>(id.get<uint64_t>());
    } else if (id.is_number_integer()) {
      value = static_cast<double>(id.get<int64_t>());
    } else if (id.is_number_float()) {
      value = id.get<double>();
      if (value != std::floor(value)) value = -1;
    }
    if (!(value >= 0 && value <= kMaxId)) {
      ids->clear();
      return false;
    }
    ids->push_back(static_cast<uint32_t>(value));
  }
  return true;
}

PromptTokens Failed(TokenizeFailure failure, std::string detail) {
  PromptTokens out;
  out.failure = failure;
  out.detail = std::move(detail);
  return out;
}

}  // namespace

TokenizeQuery MakeTokenizeQuery(engines::Api api, const json& client_body) {
  TokenizeQuery q;
  if (api == engines::Api::kChatCompletions) {
    json body = json::object();
    for (std::string_view field : kChatFields) {
      if (auto it = client_body.find(field); it != client_body.end()) body[field] = *it;
    }
    q.body = std::move(body);
    return q;
  }
  const auto prompt = client_body.find("prompt");
  if (prompt == client_body.end()) {
    q.direct = Failed(TokenizeFailure::kUnsupported, "the request has no prompt");
    return q;
  }
  if (prompt->is_array()) {
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
      json body = {{"prompt", (*prompt)[0]}};
      if (auto it = client_body.find("model"); it != client_body.end()) body["model"] = *it;
      if (auto it = client_body.find("add_special_tokens"); it != client_body.end()) {
        body["add_special_tokens"] = *it;
      }
      q.body = std::move(body);
      return q;
    }
    if (!TokenIds(*prompt, &q.direct.ids)) {
      q.direct = Failed(TokenizeFailure::kUnsupported,
                        "the prompt is a list of several prompts: no one prompt to place by");
    }
    return q;
  }
  json body = {{"prompt", *prompt}};
  if (auto it = client_body.find("model"); it != client_body.end()) body["model"] = *it;
  if (auto it = client_body.find("add_special_tokens"); it != client_body.end()) {
    body["add_special_tokens"] = *it;
  }
  q.body = std::move(body);
  return q;
}

bool ParseTokenizeAnswer(std::string_view body, size_t max_tokens, std::vector<uint32_t>* ids,
                         std::string* why) {
  ids->clear();
  const simdjson::padded_string text(body);
  od::parser parser;
  od::document doc;
  od::object root;
  if (parser.iterate(text).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    *why = "the answer is not a JSON object";
    return false;
  }
  od::array tokens;
  if (root.find_field_unordered("tokens").get_array().get(tokens) != simdjson::SUCCESS) {
    *why = "the answer has no \"tokens\" array";
    return false;
  }
  for (auto element : tokens) {
    uint64_t id = 0;
    if (element.get_uint64().get(id) != simdjson::SUCCESS ||
        id > std::numeric_limits<uint32_t>::max()) {
      *why = "\"tokens\" holds something that is not a token id";
      ids->clear();
      return false;
    }
    if (ids->size() == max_tokens) {
      *why = absl::StrCat("\"tokens\" holds more than ", max_tokens, " ids");
      ids->clear();
      return false;
    }
    ids->push_back(static_cast<uint32_t>(id));
  }
  if (ids->empty()) {
    *why = "\"tokens\" is empty";
    return false;
  }
  return true;
}

engines::Awaitable<PromptTokens> Tokenize(engines::AsyncEngineClient& client,
                                          engines::EngineTarget target, json body,
                                          size_t max_tokens, double timeout_s) {
  const engines::ControlResponse answer =
      co_await client.Control(target, "POST", "/tokenize", body.dump(), timeout_s);
  if (answer.status == 0) {
    PromptTokens out =
        Failed(answer.timed_out ? TokenizeFailure::kTimeout : TokenizeFailure::kError,
               absl::StrCat("tokenize on ", target.iid, ": ", answer.error));
    out.no_answer = !answer.timed_out;
    co_return out;
  }
  if (!answer.ok()) {
    co_return Failed(TokenizeFailure::kError,
                     absl::StrCat("tokenize on ", target.iid, ": HTTP ", answer.status));
  }
  PromptTokens out;
  std::string why;
  if (!ParseTokenizeAnswer(answer.body, max_tokens, &out.ids, &why)) {
    co_return Failed(TokenizeFailure::kError, absl::StrCat("tokenize on ", target.iid, ": ", why));
  }
  co_return out;
}

std::vector<engines::EngineTarget> TokenizerTargets(const std::string& tokenizer,
                                                    const PlacementView& view,
                                                    engines::MonoTime now, size_t rotation) {
  if (tokenizer != "engine") return {engines::EngineTarget{"tokenizer", tokenizer}};
  std::vector<engines::EngineTarget> serving;
  for (const ViewEngine& e : view.engines) {
    if (view.Eligible(e, engines::Phase::kPrefill, now) ||
        view.Eligible(e, engines::Phase::kDecode, now)) {
      serving.push_back(e.engine->target());
    }
  }
  if (!serving.empty()) {
    std::rotate(serving.begin(), serving.begin() + static_cast<long>(rotation % serving.size()),
                serving.end());
  }
  return serving;
}

engines::Awaitable<PromptTokens> TokenizePrompt(engines::AsyncEngineClient& client,
                                                const Clock& clock, const Settings& settings,
                                                const PlacementView& view, engines::Api api,
                                                const json& client_body, engines::MonoTime deadline,
                                                size_t rotation) {
  const engines::MonoTime now = clock.Now();
  TokenizeQuery query = MakeTokenizeQuery(api, client_body);
  if (!query.body) co_return std::move(query.direct);
  const std::vector<engines::EngineTarget> targets =
      TokenizerTargets(settings.kv_events.tokenizer, view, now, rotation);
  if (targets.empty()) {
    co_return Failed(TokenizeFailure::kNoEngine, "no engine in placement to tokenize on");
  }
  engines::MonoTime until = now + engines::FromSeconds(settings.kv_events.tokenize_timeout_s);
  if (deadline < until) until = deadline;
  if (until <= now) co_return Failed(TokenizeFailure::kTimeout, "the request deadline passed");
  // No prompt the engines accept is longer than the model's context (or, while
  // that is unknown, than a million tokens).
  constexpr size_t kMaxPromptTokens = 1 << 20;
  PromptTokens out;
  for (size_t i = 0; i < std::min<size_t>(targets.size(), 2); ++i) {
    const engines::MonoTime at = i == 0 ? now : clock.Now();
    if (at >= until) break;
    out = co_await Tokenize(client, targets[i], *query.body, kMaxPromptTokens,
                            engines::Seconds(until - at));
    if (!out.failure || !out.no_answer) break;
  }
  co_return out;
}

}  // namespace narwhal::router
