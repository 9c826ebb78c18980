// Assembler: folds a decode stream into one non-streaming OpenAI response.
//
// Non-streaming clients get the decode leg as a stream too (B4); the router
// keeps one Assembler per attempt (and its continuations, B29) and discards
// it when the attempt fails.
// Folding: text / content / reasoning_content / refusal concatenated per
// choice, tool_calls merged by index (arguments concatenated), logprobs
// arrays concatenated, token_ids concatenated (prompt_token_ids from the
// first chunk carrying them), finish_reason and stop_reason from the last chunk
// reporting them, usage from the engine. Bounded by max_bytes of retained
// output, by engines::kMaxChoices choices (a choice index outside
// 0..kMaxChoices-1, or a chunk with more choices, is refused) and by
// kMaxToolCalls tool calls per choice (indexes 0..kMaxToolCalls-1), so an
// engine cannot grow the state by inventing indexes. Never throws on any
// input. Not thread-safe (one per attempt).
#ifndef NARWHAL_ROUTER_ASSEMBLER_H_
#define NARWHAL_ROUTER_ASSEMBLER_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engines/api.h"

namespace narwhal::router {

class Assembler {
 public:
  static constexpr size_t kDefaultMaxBytes = 16 * 1024 * 1024;
  static constexpr long long kMaxToolCalls = 128;
  Assembler(engines::Api api, size_t max_bytes = kDefaultMaxBytes)
      : api_(api), max_bytes_(max_bytes) {}

  // Adds one stream event's JSON payload. False when it cannot be assembled
  // (not a JSON object) or the retained output exceeds max_bytes; error()
  // says why and later calls are ignored.
  bool Add(std::string_view data);
  // The assembled response (chat.completion or text_completion object).
  nlohmann::json Build() const;
  const std::string& error() const { return error_; }

 private:
  struct ChoiceState {
    std::string text;       // completions text / chat content
    std::string reasoning;  // chat reasoning_content
    std::string refusal;
    bool has_refusal = false;
    std::map<long long, nlohmann::json> tool_calls;  // by index
    nlohmann::json logprobs;                         // null until seen
    nlohmann::json finish_reason;
    nlohmann::json stop_reason;
    // vLLM's return_token_ids: generated ids concatenated; the prompt's
    // (completions) from the first chunk carrying them. Null until seen.
    nlohmann::json token_ids;
    nlohmann::json prompt_token_ids;
  };
  void MergeLogprobs(ChoiceState& c, const nlohmann::json& lp);
  bool AddChunk(const nlohmann::json& chunk);

  engines::Api api_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::string error_;
  nlohmann::json id_, created_, model_, system_fingerprint_, usage_;
  nlohmann::json prompt_token_ids_;  // chat: top level, from the first chunk carrying it
  std::map<long long, ChoiceState> choices_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_ASSEMBLER_H_
