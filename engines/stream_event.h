// Classification of one decode-stream event (B11, B12).
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
//
// The classifier scans the payload once with simdjson On-Demand (no DOM),
// validating all of it but copying out only what is listed in StreamEvent, and
// reuses the caller's StreamEvent buffers: this runs for every relayed chunk.
#ifndef NARWHAL_ENGINES_STREAM_EVENT_H_
#define NARWHAL_ENGINES_STREAM_EVENT_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

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

  void Clear();
};

// Why `event` breaks the choice bounds (kMaxChoices), or "" when it does not.
std::string ChoiceBoundError(const StreamEvent& event);

// A reusable classifier: one per stream (or leg), used for each of its events.
// It owns a simdjson On-Demand parser and a padded copy of the payload (simdjson
// reads up to 64 bytes past the input), both sized to the largest payload seen
// and kept, so steady-state classification does not allocate. Buffers grown
// past 64 KiB by an unusually large payload are released after it.
//
// Not thread-safe: use one classifier per thread at a time.
class StreamClassifier {
 public:
  StreamClassifier();
  ~StreamClassifier();
  StreamClassifier(StreamClassifier&&) noexcept;
  StreamClassifier& operator=(StreamClassifier&&) noexcept;
  StreamClassifier(const StreamClassifier&) = delete;
  StreamClassifier& operator=(const StreamClassifier&) = delete;

  // Classifies `data` (one SSE event's payload) into `*event` (cleared first).
  // Never throws; any input, however hostile, yields one of the kinds above.
  void Classify(std::string_view data, StreamEvent* event);

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
};

// Classifies `data` into `*event` with a classifier owned by the calling
// thread. Thread-safe; a stream that owns a StreamClassifier should use it.
void ClassifyEvent(std::string_view data, StreamEvent* event);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_STREAM_EVENT_H_
