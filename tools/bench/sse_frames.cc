#include "tools/bench/sse_frames.h"

namespace narwhal::bench {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// True when some `"key":` in the payload is followed by a non-empty string.
bool HasNonEmptyString(std::string_view payload, std::string_view key) {
  for (size_t at = payload.find(key); at != std::string_view::npos;
       at = payload.find(key, at + 1)) {
    size_t i = at + key.size();
    while (i < payload.size() && IsSpace(payload[i])) ++i;
    if (i + 1 < payload.size() && payload[i] == '"' && payload[i + 1] != '"') return true;
  }
  return false;
}

}  // namespace

FrameKind ClassifyFrame(std::string_view payload) {
  while (!payload.empty() && IsSpace(payload.front())) payload.remove_prefix(1);
  if (payload.substr(0, 6) == "[DONE]") return FrameKind::kDone;
  if (!payload.empty() && payload.front() == '{') {
    std::string_view rest = payload.substr(1);
    while (!rest.empty() && IsSpace(rest.front())) rest.remove_prefix(1);
    if (rest.substr(0, 7) == "\"error\"") return FrameKind::kError;
  }
  if (HasNonEmptyString(payload, "\"text\":") || HasNonEmptyString(payload, "\"content\":") ||
      HasNonEmptyString(payload, "\"reasoning\":") ||
      HasNonEmptyString(payload, "\"reasoning_content\":")) {
    return FrameKind::kToken;
  }
  return FrameKind::kMeta;
}

}  // namespace narwhal::bench
