#include "router/assembler.h"

#include <exception>

#include "engines/json_limits.h"
#include "engines/stream_event.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

void AppendString(const json& obj, const char* key, std::string* out, size_t* bytes) {
  auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    out->append(s);
    *bytes += s.size();
  }
}

}  // namespace

void Assembler::MergeLogprobs(ChoiceState& c, const json& lp) {
  if (!lp.is_object()) return;
  if (c.logprobs.is_null()) c.logprobs = json::object();
  for (auto it = lp.begin(); it != lp.end(); ++it) {
    json& dst = c.logprobs[it.key()];
    if (it->is_array()) {
      if (!dst.is_array()) dst = json::array();
      for (const json& v : *it) dst.push_back(v);
    } else {
      dst = *it;
    }
  }
  bytes_ += lp.dump().size();
}

bool Assembler::Add(std::string_view data) {
  if (!error_.empty()) return false;
  if (const engines::JsonVerdict v = engines::CheckJson(data); v != engines::JsonVerdict::kWithin) {
    error_ = "decode stream carried an event that " + engines::JsonLimitText(v, data.size());
    return false;
  }
  json chunk = engines::ParseCheckedJson(data);
  if (!chunk.is_object()) {
    error_ = "decode stream carried an event that is not a JSON object";
    return false;
  }
  bool ok = false;
  try {
    ok = AddChunk(chunk);
  } catch (const std::exception&) {  // out of memory: no exception text leaves
    error_ = "decode chunk could not be assembled";
    return false;
  }
  if (ok && bytes_ > max_bytes_) {
    error_ = "assembled response exceeds " + std::to_string(max_bytes_) + " bytes";
    ok = false;
  }
  return ok;
}

bool Assembler::AddChunk(const json& chunk) {
  constexpr long long kMaxChoices = engines::kMaxChoices;
  if (id_.is_null() && chunk.contains("id")) id_ = chunk["id"];
  if (created_.is_null() && chunk.contains("created")) created_ = chunk["created"];
  if (model_.is_null() && chunk.contains("model")) model_ = chunk["model"];
  if (auto fp = chunk.find("system_fingerprint"); fp != chunk.end() && !fp->is_null()) {
    system_fingerprint_ = *fp;
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage_ = *u;
  if (auto p = chunk.find("prompt_token_ids");
      p != chunk.end() && p->is_array() && prompt_token_ids_.is_null()) {
    prompt_token_ids_ = *p;
    bytes_ += p->size() * 8;
  }
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return true;
  if (choices->size() > static_cast<size_t>(kMaxChoices)) {
    error_ = "decode chunk carries " + std::to_string(choices->size()) + " choices; at most " +
             std::to_string(kMaxChoices) + " are accepted";
    return false;
  }
  long long position = 0;
  for (const json& choice : *choices) {
    if (!choice.is_object()) continue;
    long long index = position++;
    const auto i = choice.find("index");
    if (i != choice.end() && i->is_number_integer()) {
      index = i->is_number_unsigned() && i->get<unsigned long long>() > kMaxChoices
                  ? kMaxChoices
                  : i->get<long long>();
      if (index < 0 || index >= kMaxChoices) {
        error_ = "decode chunk has choice index " + i->dump() + "; choice indexes must be in 0.." +
                 std::to_string(kMaxChoices - 1);
        return false;
      }
    }
    ChoiceState& c = choices_[index];
    AppendString(choice, "text", &c.text, &bytes_);
    if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
      AppendString(*d, "content", &c.text, &bytes_);
      AppendString(*d, "reasoning_content", &c.reasoning, &bytes_);
      AppendString(*d, "reasoning", &c.reasoning, &bytes_);
      if (d->contains("refusal") && (*d)["refusal"].is_string()) {
        c.has_refusal = true;
        AppendString(*d, "refusal", &c.refusal, &bytes_);
      }
      if (auto tc = d->find("tool_calls"); tc != d->end() && tc->is_array()) {
        for (const json& call : *tc) {
          if (!call.is_object()) continue;
          long long ti = 0;
          if (auto t = call.find("index"); t != call.end() && t->is_number_integer()) {
            ti = t->is_number_unsigned() && t->get<unsigned long long>() > kMaxToolCalls
                     ? kMaxToolCalls
                     : t->get<long long>();
            if (ti < 0 || ti >= kMaxToolCalls) {
              error_ = "decode chunk has tool call index " + t->dump() +
                       "; tool call indexes must be in 0.." + std::to_string(kMaxToolCalls - 1);
              return false;
            }
          }
          json& merged = c.tool_calls[ti];
          if (merged.is_null()) merged = json{{"function", {{"arguments", ""}}}};
          for (const char* key : {"id", "type"}) {
            if (auto v = call.find(key); v != call.end() && !v->is_null()) merged[key] = *v;
          }
          if (auto fn = call.find("function"); fn != call.end() && fn->is_object()) {
            if (auto name = fn->find("name"); name != fn->end() && name->is_string()) {
              merged["function"]["name"] = *name;
            }
            if (auto args = fn->find("arguments"); args != fn->end() && args->is_string()) {
              const std::string& a = args->get_ref<const std::string&>();
              merged["function"]["arguments"].get_ref<std::string&>() += a;
              bytes_ += a.size();
            }
          }
        }
      }
    }
    if (auto ids = choice.find("token_ids"); ids != choice.end() && ids->is_array()) {
      if (!c.token_ids.is_array()) c.token_ids = json::array();
      for (const json& id : *ids) c.token_ids.push_back(id);
      bytes_ += ids->size() * 8;
    }
    if (auto p = choice.find("prompt_token_ids");
        p != choice.end() && p->is_array() && c.prompt_token_ids.is_null()) {
      c.prompt_token_ids = *p;
      bytes_ += p->size() * 8;
    }
    if (auto lp = choice.find("logprobs"); lp != choice.end() && !lp->is_null()) {
      MergeLogprobs(c, *lp);
    }
    if (auto fr = choice.find("finish_reason"); fr != choice.end() && !fr->is_null()) {
      c.finish_reason = *fr;
    }
    if (auto sr = choice.find("stop_reason"); sr != choice.end() && !sr->is_null()) {
      c.stop_reason = *sr;
    }
  }
  return true;
}

json Assembler::Build() const {
  const bool chat = api_ == engines::Api::kChatCompletions;
  json out = json::object();
  out["id"] = id_;
  out["object"] = chat ? "chat.completion" : "text_completion";
  out["created"] = created_;
  out["model"] = model_;
  json choices = json::array();
  for (const auto& [index, c] : choices_) {
    json choice = json::object();
    choice["index"] = index;
    if (chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (c.has_refusal) message["refusal"] = c.refusal;
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& [ti, call] : c.tool_calls) {
          json merged = call;
          merged["index"] = ti;
          calls.push_back(std::move(merged));
        }
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = c.stop_reason;
    if (!c.prompt_token_ids.is_null()) choice["prompt_token_ids"] = c.prompt_token_ids;
    if (!c.token_ids.is_null()) choice["token_ids"] = c.token_ids;
    choices.push_back(std::move(choice));
  }
  out["choices"] = std::move(choices);
  if (!system_fingerprint_.is_null()) out["system_fingerprint"] = system_fingerprint_;
  if (!prompt_token_ids_.is_null()) out["prompt_token_ids"] = prompt_token_ids_;
  out["usage"] = usage_;
  return out;
}

}  // namespace narwhal::router
