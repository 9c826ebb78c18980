#include "engines/http/sse_reader.h"

#include <cstring>

namespace narwhal::engines {
namespace {

// Room for a line's field name ("data: ") past the event bound.
constexpr size_t kLineSlack = 64;

// Position of the first CR or LF in [p, end), or end.
const char* FindLineEnd(const char* p, const char* end) {
  for (; p < end; ++p) {
    if (*p == '\n' || *p == '\r') return p;
  }
  return end;
}

}  // namespace

bool SseReader::Feed(std::string_view bytes, const EventFn& on_event) {
  if (!error_.empty()) return false;
  if (bytes.empty()) return true;  // keeps a pending CR of a split CRLF
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (last_was_cr_ && p < end && *p == '\n') ++p;  // the LF of a CRLF split across reads
  last_was_cr_ = false;
  while (p < end) {
    const char* eol = FindLineEnd(p, end);
    // One bound on a line however it arrives (split or whole), so the
    // verdict does not depend on how the transport cut the stream.
    const size_t line_bytes = line_.size() + static_cast<size_t>(eol - p);
    if (line_bytes > max_event_bytes_ + kLineSlack) {
      error_ = "SSE event exceeds " + std::to_string(max_event_bytes_) + " bytes";
      return false;
    }
    if (eol == end) {  // partial line: keep it for the next read
      line_.append(p, end - p);
      return true;
    }
    line_.append(p, eol - p);
    if (*eol == '\r') {
      if (eol + 1 < end) {
        if (eol[1] == '\n') ++eol;
      } else {
        last_was_cr_ = true;
      }
    }
    p = eol + 1;
    if (!EndLine(on_event)) return false;
  }
  return true;
}

bool SseReader::EndLine(const EventFn& on_event) {
  std::string_view line(line_);
  if (line.empty()) {  // blank line: dispatch
    if (!has_data_) return true;
    has_data_ = false;
    const bool keep_going = on_event(data_);
    data_.clear();
    return keep_going;
  }
  if (line.front() == ':') {
    ++comments_;
    line_.clear();
    return true;
  }
  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    // The event's data as dispatched: its lines joined by "\n".
    if (data_.size() + (has_data_ ? 1 : 0) + value.size() > max_event_bytes_) {
      error_ = "SSE event exceeds " + std::to_string(max_event_bytes_) + " bytes";
      return false;
    }
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }
  // Other fields (event, id, retry, unknown) carry nothing the router uses.
  line_.clear();
  return true;
}

}  // namespace narwhal::engines
