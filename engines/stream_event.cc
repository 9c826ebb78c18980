#include "engines/stream_event.h"

#include <string>

namespace narwhal::engines {

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kToken:
      return "token";
    case EventKind::kMetadata:
      return "metadata";
    case EventKind::kError:
      return "error";
    case EventKind::kDone:
      return "done";
    case EventKind::kMalformed:
      return "malformed";
  }
  return "malformed";
}

void StreamEvent::Clear() {
  kind = EventKind::kMalformed;
  tokens = 0;
  text.clear();
  finish_reason.clear();
  completion_tokens = -1;
  prompt_tokens = -1;
  cached_tokens = -1;
  error_status = 0;
  error_message.clear();
  choices = 0;
  stray_choice_index.reset();
  has_token_ids = false;
  token_ids.clear();
  has_prompt_token_ids = false;
  prompt_token_ids.clear();
  token_fields = false;
}

std::string ChoiceBoundError(const StreamEvent& event) {
  if (event.choices > kMaxChoices) {
    return "decode chunk carries " + std::to_string(event.choices) + " choices; at most " +
           std::to_string(kMaxChoices) + " are accepted";
  }
  if (event.stray_choice_index) {
    return "decode chunk has choice index " + std::to_string(*event.stray_choice_index) +
           "; choice indexes must be in 0.." + std::to_string(kMaxChoices - 1);
  }
  return "";
}

}  // namespace narwhal::engines
