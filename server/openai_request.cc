#include "server/openai_request.h"

#include <cmath>

#include "engines/json_limits.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

ParsedRequest Fail(std::string message, std::string param = "",
                   router::Reason reason = router::Reason::kInvalidRequest) {
  ParsedRequest p;
  p.error.reason = reason;
  p.error.message = std::move(message);
  p.error.param = std::move(param);
  return p;
}

bool IsIntArray(const json& v) {
  if (!v.is_array()) return false;
  for (const json& x : v) {
    if (!x.is_number_integer()) return false;
  }
  return true;
}

// A completions prompt: a string, a list of strings, a list of token ids or a
// list of token-id lists (non-empty in every case).
bool ValidPrompt(const json& p) {
  if (p.is_string()) return true;
  if (!p.is_array() || p.empty()) return false;
  if (IsIntArray(p)) return true;
  for (const json& item : p) {
    if (!item.is_string() && !(IsIntArray(item) && !item.empty())) return false;
  }
  return true;
}

// Optional typed fields: absent or null is fine; anything else must match.
enum class Kind { kNumber, kInteger, kBool, kObject, kStop };

const char* Describe(Kind k) {
  switch (k) {
    case Kind::kNumber:
      return "a number";
    case Kind::kInteger:
      return "an integer";
    case Kind::kBool:
      return "a boolean";
    case Kind::kObject:
      return "an object";
    case Kind::kStop:
      return "a string or a list of strings";
  }
  return "valid";
}

bool Matches(const json& v, Kind k) {
  switch (k) {
    case Kind::kNumber:
      return v.is_number();
    case Kind::kInteger:
      return v.is_number_integer();
    case Kind::kBool:
      return v.is_boolean();
    case Kind::kObject:
      return v.is_object();
    case Kind::kStop:
      if (v.is_string()) return true;
      if (!v.is_array()) return false;
      for (const json& s : v) {
        if (!s.is_string()) return false;
      }
      return true;
  }
  return false;
}

// Why `v` (present, not null) is not an output-token limit in
// [1, max], or "" when it is. Says exactly what is wrong: a value of
// another type, one with a fraction, one too small or too large — including
// integers past any machine type, which JSON can carry (2^64 reads as a
// double, as does 1e30).
std::string TokenLimitError(const std::string& name, const json& v, int max) {
  const std::string at_most = name + " must be at most " + std::to_string(max);
  if (v.is_number_unsigned()) {  // nlohmann reads every non-negative integer so
    const unsigned long long n = v.get<unsigned long long>();
    if (n < 1) return name + " must be >= 1 (got " + v.dump() + ")";
    return n > static_cast<unsigned long long>(max) ? at_most + " (got " + v.dump() + ")" : "";
  }
  if (v.is_number_integer()) {
    const long long n = v.get<long long>();
    if (n < 1) return name + " must be >= 1 (got " + v.dump() + ")";
    return n > max ? at_most + " (got " + v.dump() + ")" : "";
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // Beyond every integer type: too large or too small, not fractional.
    if (std::isfinite(d) && std::fabs(d) >= 9.2e18) {
      return d > 0 ? at_most + " (got " + v.dump() + ")"
                   : name + " must be >= 1 (got " + v.dump() + ")";
    }
    return name + " must be an integer (got " + v.dump() + ")";
  }
  return name + " must be an integer (got " + std::string(v.type_name()) + ")";
}

// How many prompts a valid completions `prompt` holds: a string or a list of
// token ids is one; a list of strings or of token-id lists one per entry.
size_t PromptCount(const json& p) {
  if (p.is_string() || IsIntArray(p)) return 1;
  return p.size();
}

struct FieldRule {
  const char* name;
  Kind kind;
};

constexpr FieldRule kFieldRules[] = {
    {"stream", Kind::kBool},
    {"min_tokens", Kind::kInteger},
    {"temperature", Kind::kNumber},
    {"top_p", Kind::kNumber},
    {"top_k", Kind::kInteger},
    {"min_p", Kind::kNumber},
    {"presence_penalty", Kind::kNumber},
    {"frequency_penalty", Kind::kNumber},
    {"repetition_penalty", Kind::kNumber},
    {"seed", Kind::kInteger},
    {"n", Kind::kInteger},
    {"best_of", Kind::kInteger},
    {"ignore_eos", Kind::kBool},
    {"stop", Kind::kStop},
    {"stream_options", Kind::kObject},
    {"logprobs", Kind::kNumber},  // completions: int; chat: bool (checked below)
};

}  // namespace

ParsedRequest ParseOpenAiRequest(std::string_view raw, engines::Api api,
                                 const std::string& served_model,
                                 const router::LimitSettings& limits) {
  // Bounds first: a deeply nested body must never be parsed, copied or
  // dumped, and one that would take many times its size once parsed is
  // refused as too large (413).
  switch (engines::CheckJson(raw)) {
    case engines::JsonVerdict::kWithin:
      break;
    case engines::JsonVerdict::kTooDeep:
      return Fail("request body " + engines::DepthLimitText());
    case engines::JsonVerdict::kTooCostly: {
      return Fail("request body " + engines::CostLimitText(raw.size()), "",
                  router::Reason::kTooLarge);
    }
  }
  json body = engines::ParseCheckedJson(raw);
  if (body.is_discarded()) return Fail("request body is not valid JSON");
  return ValidateOpenAiBody(std::move(body), api, served_model, limits);
}

ParsedRequest ValidateOpenAiBody(json body, engines::Api api, const std::string& served_model,
                                 const router::LimitSettings& limits) {
  if (!body.is_object()) return Fail("request body must be a JSON object");

  auto model = body.find("model");
  if (model == body.end() || model->is_null()) return Fail("model is required", "model");
  if (!model->is_string()) return Fail("model must be a string", "model");
  if (model->get_ref<const std::string&>() != served_model) {
    ParsedRequest unknown = Fail("The model `" + model->get<std::string>() + "` does not exist.",
                                 "model", router::Reason::kModelNotFound);
    unknown.body = json{{"model", *model}};  // for the journal and access log
    return unknown;
  }

  if (api == engines::Api::kCompletions) {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || prompt->is_null()) return Fail("prompt is required", "prompt");
    if (!ValidPrompt(*prompt)) {
      return Fail("prompt must be a string, a list of strings, a list of token ids or a list of "
                  "token-id lists",
                  "prompt");
    }
    if (const size_t n = PromptCount(*prompt); n > static_cast<size_t>(limits.max_prompts)) {
      return Fail("prompt must hold at most " + std::to_string(limits.max_prompts) +
                      " prompts (got " + std::to_string(n) + ")",
                  "prompt");
    }
  } else {
    auto messages = body.find("messages");
    if (messages == body.end() || messages->is_null()) {
      return Fail("messages is required", "messages");
    }
    if (!messages->is_array() || messages->empty()) {
      return Fail("messages must be a non-empty list", "messages");
    }
    if (messages->size() > static_cast<size_t>(limits.max_messages)) {
      return Fail("messages must have at most " + std::to_string(limits.max_messages) +
                      " entries (got " + std::to_string(messages->size()) + ")",
                  "messages");
    }
    for (size_t i = 0; i < messages->size(); ++i) {
      const json& m = (*messages)[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Fail("messages[" + std::to_string(i) + "] must be an object with a string role",
                    "messages");
      }
    }
  }

  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    if (std::string error = TokenLimitError(name, *it, limits.max_tokens); !error.empty()) {
      return Fail(std::move(error), name);
    }
  }
  for (const FieldRule& rule : kFieldRules) {
    auto it = body.find(rule.name);
    if (it == body.end() || it->is_null()) continue;
    if (std::string_view(rule.name) == "logprobs") {
      const bool ok = api == engines::Api::kChatCompletions ? it->is_boolean()
                                                             : it->is_number_integer();
      if (!ok) {
        return Fail(std::string("logprobs must be ") +
                        (api == engines::Api::kChatCompletions ? "a boolean" : "an integer"),
                    "logprobs");
      }
      continue;
    }
    if (!Matches(*it, rule.kind)) {
      return Fail(std::string(rule.name) + " must be " + Describe(rule.kind), rule.name);
    }
  }
  for (const char* key : {"n", "best_of"}) {
    if (body.contains(key) && body[key].is_number_integer() && body[key].get<long long>() != 1) {
      return Fail(std::string(key) + " must be 1: a KV handoff serves exactly one decode",
                  key);
    }
  }

  ParsedRequest p;
  p.ok = true;
  auto stream = body.find("stream");
  p.stream = stream != body.end() && stream->is_boolean() && stream->get<bool>();
  if (!p.stream && body.contains("stream_options") && !body["stream_options"].is_null()) {
    return Fail("stream_options can only be set when stream is true", "stream_options");
  }
  body.erase("kv_transfer_params");  // never forwarded to any engine (SPEC §4, §12)
  p.body = std::move(body);
  return p;
}

}  // namespace narwhal::server
