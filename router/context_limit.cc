#include "router/context_limit.h"

#include <algorithm>
#include <optional>

namespace narwhal::router {
namespace {

using json = nlohmann::json;

// The completion budget the client set: max_completion_tokens (chat) wins
// over max_tokens, as in vLLM.
std::optional<long long> Budget(const json& body, engines::Api api, std::string* field) {
  const char* names[] = {"max_completion_tokens", "max_tokens"};
  for (const char* name : names) {
    if (api != engines::Api::kChatCompletions &&
        std::string_view(name) == "max_completion_tokens") {
      continue;
    }
    auto it = body.find(name);
    if (it == body.end() || !it->is_number_integer()) continue;
    *field = name;
    return it->get<long long>();
  }
  return std::nullopt;
}

// Token ids in the longest prompt given as ids (completions), else 0.
long long PromptIds(const json& body, engines::Api api) {
  if (api != engines::Api::kCompletions) return 0;
  auto it = body.find("prompt");
  if (it == body.end() || !it->is_array() || it->empty()) return 0;
  if ((*it)[0].is_number_integer()) return static_cast<long long>(it->size());
  long long longest = 0;
  for (const json& p : *it) {
    if (p.is_array()) longest = std::max(longest, static_cast<long long>(p.size()));
  }
  return longest;
}

}  // namespace

std::string ContextLimitError(const json& body, engines::Api api, long long max_model_len) {
  if (max_model_len <= 0 || !body.is_object()) return "";
  const std::string limit = std::to_string(max_model_len);
  const long long prompt = PromptIds(body, api);
  if (prompt >= max_model_len) {
    return "the prompt has " + std::to_string(prompt) +
           " tokens, which leaves no room in the model's context length (max_model_len " + limit +
           ")";
  }
  std::string field;
  const std::optional<long long> budget = Budget(body, api, &field);
  if (!budget || prompt + *budget <= max_model_len) return "";
  if (prompt == 0) {
    return field + " " + std::to_string(*budget) +
           " exceeds the model's context length (max_model_len " + limit + ")";
  }
  return std::to_string(prompt) + " prompt tokens + " + field + " " + std::to_string(*budget) +
         " = " + std::to_string(prompt + *budget) +
         " exceeds the model's context length (max_model_len " + limit + ")";
}

}  // namespace narwhal::router
