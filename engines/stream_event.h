// What one decode-stream event is (B11, B12): the engine port's view of a
// chunk. engines/http/stream_classifier.h reads one off the wire.
//
// Every `data:` payload of an upstream OpenAI/vLLM stream is exactly one of:
//   kDone      - the literal `[DONE]` terminator;
//   kError     - a JSON object with a top-level "error" member (in-stream error,
//                current nested or legacy flat shape, or a plain string);
//   kToken     - a chunk carrying generated output: a choice with non-empty
//                `text`, or a `delta` with non-empty `content`, `reasoning`,
//                `reasoning_content`, `refusal` or `tool_calls`, or non-empty
//                `token_ids`;
//   kMetadata  - any other JSON object (role-only delta, empty text, usage-only
//                chunk with `choices: []`);
//   kMalformed - not JSON, or JSON nesting deeper than kMaxJsonDepth
//                (engines/json_limits.h) (relayed as-is after the first token,
//                counts no tokens, never stops the first-token clock). A
//                kMalformed event carries no other field.
//
// Bounded: a decode chunk may carry at most kMaxChoices choices, each with an
// integer `index` (when it has one) in 0..kMaxChoices-1 (the router serves
// n = 1). The classifier reports what it saw (StreamEvent::choices,
// stray_choice_index); ChoiceBoundError() names a violation, which fails the
// leg (kResponseBound) before the chunk reaches anyone.
#ifndef NARWHAL_ENGINES_STREAM_EVENT_H_
#define NARWHAL_ENGINES_STREAM_EVENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace narwhal::engines {

// The most choices one decode chunk may carry, and the bound on their indexes.
inline constexpr int kMaxChoices = 16;

enum class EventKind { kToken, kMetadata, kError, kDone, kMalformed };
std::string_view EventKindName(EventKind kind);

struct StreamEvent {
  EventKind kind = EventKind::kMalformed;
  // Output tokens this event carries: number of choices with output, or the
  // length of `token_ids` when present. 0 unless kind == kToken.
  int tokens = 0;
  // Generated text of choice 0 (`text`, or delta `content`), unescaped.
  std::string text;
  // finish_reason of choice 0 when non-null, else empty.
  std::string finish_reason;
  // usage.completion_tokens / usage.prompt_tokens when the event has usage, else -1.
  long long completion_tokens = -1;
  long long prompt_tokens = -1;
  // usage.prompt_tokens_details.cached_tokens when reported (vLLM with
  // --enable-prompt-tokens-details), else -1.
  long long cached_tokens = -1;
  // kError only: the error object's status (its integer `code` when in
  // 400..599, else 500) and message.
  int error_status = 0;
  std::string error_message;
  // Elements of the `choices` array (0 when there is none).
  int choices = 0;
  // The first integer choice `index` outside 0..kMaxChoices-1, if any.
  std::optional<long long> stray_choice_index;
  // vLLM's return_token_ids fields. token_ids: choice 0's `token_ids` when it
  // is a list of integers in 0..2^32-1 (has_token_ids), else empty.
  // prompt_token_ids: the top-level member (chat) or choice 0's (completions),
  // under the same rule. token_fields: any `token_ids` or `prompt_token_ids`
  // member was seen, valid or not (what the router strips for a client that
  // did not ask for them).
  bool has_token_ids = false;
  std::vector<uint32_t> token_ids;
  bool has_prompt_token_ids = false;
  std::vector<uint32_t> prompt_token_ids;
  bool token_fields = false;

  void Clear();
};

// Why `event` breaks the choice bounds (kMaxChoices), or "" when it does not.
std::string ChoiceBoundError(const StreamEvent& event);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_STREAM_EVENT_H_
