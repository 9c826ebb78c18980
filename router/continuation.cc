#include "router/continuation.h"

#include <algorithm>
#include <exception>
#include <optional>

#include "engines/json_limits.h"

namespace narwhal::router {
namespace {

using engines::Api;
using json = nlohmann::json;

// Completions' max_tokens when the client sets none (OpenAI's and vLLM's).
constexpr long long kCompletionsDefaultMaxTokens = 16;

const json* Member(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool True(const json& body, const char* key) {
  const json* v = Member(body, key);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

bool IntegerAbove(const json& body, const char* key, long long limit) {
  const json* v = Member(body, key);
  return v != nullptr && v->is_number_integer() && v->get<long long>() > limit;
}

bool NonZero(const json& body, const char* key) {
  const json* v = Member(body, key);
  return v != nullptr && v->is_number() && v->get<double>() != 0;
}

std::optional<long long> Integer(const json& body, const char* key) {
  const json* v = Member(body, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  return v->get<long long>();
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The end of the JSON string whose opening quote is at `p`, or npos.
size_t StringEnd(std::string_view s, size_t p) {
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// The end of the JSON value that starts at `p` (no leading space), or npos.
size_t ValueEnd(std::string_view s, size_t p) {
  if (p >= s.size()) return std::string_view::npos;
  if (s[p] == '"') return StringEnd(s, p);
  if (s[p] == '[' || s[p] == '{') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '"') {
        const size_t end = StringEnd(s, i);
        if (end == std::string_view::npos) return end;
        i = end - 1;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        if (--depth == 0) return i + 1;
      }
    }
    return std::string_view::npos;
  }
  size_t i = p;
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !IsSpace(s[i])) ++i;
  return i == p ? std::string_view::npos : i;
}

}  // namespace

bool StripTokenFields(std::string_view data, std::string* out) {
  out->clear();
  size_t copied = 0;  // data[0, copied) is decided
  size_t at = 0;
  while (true) {
    // The next key among the two (a raw quote always delimits a string, so
    // a match followed by ':' is a member's key).
    size_t q = std::string_view::npos;
    size_t key_len = 0;
    for (std::string_view key :
         {std::string_view("\"token_ids\""), std::string_view("\"prompt_token_ids\"")}) {
      const size_t f = data.find(key, at);
      if (f < q) {
        q = f;
        key_len = key.size();
      }
    }
    if (q == std::string_view::npos) break;
    size_t colon = q + key_len;
    while (colon < data.size() && IsSpace(data[colon])) ++colon;
    if (colon >= data.size() || data[colon] != ':') {
      at = q + key_len;  // a string value, not a key
      continue;
    }
    size_t value = colon + 1;
    while (value < data.size() && IsSpace(data[value])) ++value;
    const size_t value_end = ValueEnd(data, value);
    if (value_end == std::string_view::npos) return false;
    size_t before = q;  // the member's start, after the separator before it
    while (before > 0 && IsSpace(data[before - 1])) --before;
    if (before == 0 || before <= copied) return false;
    size_t after = value_end;
    while (after < data.size() && IsSpace(data[after])) ++after;
    if (after >= data.size()) return false;
    size_t cut_from = 0;
    size_t cut_to = 0;
    if (data[after] == ',') {  // "key": v,  -> drop through the comma
      cut_from = q;
      cut_to = after + 1;
    } else if (data[before - 1] == ',') {  // , "key": v}  -> drop from the comma
      cut_from = before - 1;
      cut_to = value_end;
    } else if (data[before - 1] == '{') {  // {"key": v}
      cut_from = q;
      cut_to = value_end;
    } else {
      return false;
    }
    if (cut_from < copied) return false;
    out->append(data.substr(copied, cut_from - copied));
    copied = cut_to;
    at = cut_to;
  }
  out->append(data.substr(copied));
  return true;
}

std::string_view ContinuationOutcomeName(ContinuationOutcome o) {
  switch (o) {
    case ContinuationOutcome::kContinued:
      return "continued";
    case ContinuationOutcome::kRefused:
      return "refused";
    case ContinuationOutcome::kFailed:
      return "failed";
    case ContinuationOutcome::kNoBudget:
      return "no_budget";
  }
  return "failed";
}

std::string_view ContinuationRefusal(const json& body) {
  if (!body.is_object()) return "request";
  if (IntegerAbove(body, "n", 1)) return "n";
  if (IntegerAbove(body, "best_of", 1)) return "best_of";
  if (True(body, "echo")) return "echo";
  if (const json* rf = Member(body, "response_format"); rf != nullptr && rf->is_object()) {
    const json* type = Member(*rf, "type");
    if (type != nullptr && type->is_string() &&
        (*type == "json_schema" || *type == "json_object" || *type == "structural_tag")) {
      return "structured_output";
    }
  }
  if (Member(body, "structured_outputs") != nullptr) return "structured_output";
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it.key().rfind("guided_", 0) == 0 && !it->is_null()) return "structured_output";
  }
  if (const json* tools = Member(body, "tools");
      tools != nullptr && (!tools->is_array() || !tools->empty())) {
    return "tools";
  }
  if (Member(body, "functions") != nullptr) return "tools";
  if (const json* stop = Member(body, "stop");
      stop != nullptr && !(stop->is_array() && stop->empty()) &&
      !(stop->is_string() && stop->get_ref<const std::string&>().empty())) {
    return "stop";
  }
  if (Member(body, "prompt_logprobs") != nullptr || Member(body, "top_logprobs") != nullptr) {
    return "logprobs";
  }
  if (const json* lp = Member(body, "logprobs");
      lp != nullptr && !(lp->is_boolean() && !lp->get<bool>())) {
    return "logprobs";
  }
  if (NonZero(body, "presence_penalty") || NonZero(body, "frequency_penalty")) return "penalties";
  return "";
}

bool ClientAsksTokenIds(const json& body) {
  return body.is_object() && True(body, "return_token_ids");
}

bool ContinuableFailure(const engines::EngineFailure& f) {
  switch (f.reason) {
    case engines::FailureReason::kCancelled:
    case engines::FailureReason::kDeadline:
    case engines::FailureReason::kHandoffExpired:
    case engines::FailureReason::kEngineRejected:
      return false;
    default:
      break;
  }
  return f.cause != engines::FailureCause::kClientTooSlow &&
         f.cause != engines::FailureCause::kUnassemblable;
}

long long RemainingBudget(Api api, const json& body, long long sent, long long total,
                          long long max_model_len) {
  std::optional<long long> limit;
  if (api == Api::kChatCompletions) limit = Integer(body, "max_completion_tokens");
  if (!limit) limit = Integer(body, "max_tokens");
  if (!limit && api == Api::kCompletions) limit = kCompletionsDefaultMaxTokens;
  if (limit) return std::max(0LL, *limit - sent);
  if (max_model_len > 0) return std::max(0LL, max_model_len - total);
  return -1;
}

json ContinuationBody(const json& body, const std::vector<uint32_t>& ids, long long sent,
                      long long max_tokens) {
  json out = body;
  for (const char* key : {"messages",
                          "chat_template",
                          "chat_template_kwargs",
                          "add_generation_prompt",
                          "continue_final_message",
                          "documents",
                          "tools",
                          "tool_choice",
                          "parallel_tool_calls",
                          "mm_processor_kwargs",
                          "max_completion_tokens",
                          "response_format",
                          "echo",
                          "logprobs",
                          "top_logprobs",
                          "prompt_logprobs",
                          "suffix",
                          "add_special_tokens",
                          "prompt",
                          "kv_transfer_params",
                          "n",
                          "best_of"}) {
    out.erase(key);
  }
  out["prompt"] = ids;
  out["max_tokens"] = max_tokens;
  if (std::optional<long long> min = Integer(body, "min_tokens")) {
    if (*min - sent > 0) {
      out["min_tokens"] = *min - sent;
    } else {
      out.erase("min_tokens");
    }
  }
  out["return_token_ids"] = true;
  return out;
}

std::vector<uint32_t> StreamLedger::ContinuationPrompt() const {
  std::vector<uint32_t> ids;
  ids.reserve(prompt_ids_.size() + generated_.size());
  ids.insert(ids.end(), prompt_ids_.begin(), prompt_ids_.end());
  ids.insert(ids.end(), generated_.begin(), generated_.end());
  return ids;
}

void StreamLedger::StartContinuation() {
  continuing_ = true;
  base_ = generated_.size();
}

std::string_view StreamLedger::Pass(std::string_view data, engines::StreamEvent* event) {
  using engines::EventKind;
  if (event->kind != EventKind::kToken && event->kind != EventKind::kMetadata) return data;
  if (!continuing_) {
    if (!identity_seen_) NoteIdentity(data);
    if (event->has_prompt_token_ids && !has_prompt_ids_) {
      prompt_ids_ = event->prompt_token_ids;
      has_prompt_ids_ = true;
    }
  }
  if (event->kind == EventKind::kToken) {
    if (event->has_token_ids && event->token_ids.size() == static_cast<size_t>(event->tokens) &&
        generated_.size() + event->token_ids.size() <= kMaxIds) {
      generated_.insert(generated_.end(), event->token_ids.begin(), event->token_ids.end());
    } else {
      ids_ok_ = false;
    }
  }
  if (continuing_) return Rewrite(data, event) ? std::string_view(out_) : data;
  if (!event->token_fields || client_wants_ids_) return data;
  // The first leg: the engine's bytes, without the ids the client did not
  // ask for.
  if (StripTokenFields(data, &out_) || Rewrite(data, event)) return out_;
  return data;
}

void StreamLedger::NoteIdentity(std::string_view data) {
  if (engines::CheckJson(data) != engines::JsonVerdict::kWithin) return;
  const json chunk = engines::ParseCheckedJson(data);
  if (!chunk.is_object()) return;
  identity_seen_ = true;
  identity_ = json::object();
  for (const char* key : {"id", "created", "model", "system_fingerprint"}) {
    if (auto it = chunk.find(key); it != chunk.end()) identity_[key] = *it;
  }
}

bool StreamLedger::Rewrite(std::string_view data, engines::StreamEvent* event) {
  try {
    if (engines::CheckJson(data) != engines::JsonVerdict::kWithin) return false;
    json chunk = engines::ParseCheckedJson(data);
    if (!chunk.is_object()) return false;
    // A continuation leg's prompt ids are the continuation prompt's: never
    // the client's.
    const bool drop_ids = !client_wants_ids_;
    if (drop_ids || continuing_) chunk.erase("prompt_token_ids");
    json* choices = nullptr;
    if (auto it = chunk.find("choices"); it != chunk.end() && it->is_array()) choices = &*it;
    if (choices != nullptr) {
      for (json& choice : *choices) {
        if (!choice.is_object()) continue;
        if (drop_ids || continuing_) choice.erase("prompt_token_ids");
        if (drop_ids) choice.erase("token_ids");
      }
    }
    if (continuing_) {
      for (auto it = identity_.begin(); it != identity_.end(); ++it) chunk[it.key()] = *it;
      if (api_ == Api::kChatCompletions) {
        chunk["object"] = "chat.completion.chunk";
        if (choices != nullptr) {
          for (json& choice : *choices) {
            if (!choice.is_object()) continue;
            json delta = json::object();
            if (auto text = choice.find("text"); text != choice.end()) {
              delta["content"] = *text;
              choice.erase(text);
            }
            choice["delta"] = std::move(delta);
          }
        }
      }
      if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
        const auto prompt = static_cast<long long>(prompt_ids_.size());
        long long completion = static_cast<long long>(base_);
        if (auto c = usage->find("completion_tokens");
            c != usage->end() && c->is_number_integer()) {
          completion += c->get<long long>();
        }
        (*usage)["prompt_tokens"] = prompt;
        (*usage)["completion_tokens"] = completion;
        (*usage)["total_tokens"] = prompt + completion;
        event->prompt_tokens = prompt;
        event->completion_tokens = completion;
        if (auto d = usage->find("prompt_tokens_details"); d != usage->end() && d->is_object()) {
          if (auto c = d->find("cached_tokens"); c != d->end() && c->is_number_integer()) {
            const long long cached = std::min(c->get<long long>(), prompt);
            *c = cached;
            event->cached_tokens = cached;
          }
        }
      }
    }
    out_ = chunk.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace narwhal::router
