// Incremental Server-Sent Events reader.
//
// Feed() takes transport reads of any size and reports each complete event,
// however the bytes were split or merged: events split across reads, several
// events in one read, CRLF / CR / LF line ends (a CRLF split between two reads
// included), comment lines (": keep-alive"), multi-line `data:` (joined with
// "\n" per the SSE standard), and other fields (`event:`, `id:`, `retry:`),
// which are ignored. An event is dispatched at a blank line when it carried at
// least one `data:` line.
//
// Bounded: an event whose data (as dispatched: its `data:` values joined by
// "\n") exceeds `max_event_bytes` — an event of exactly that many bytes is
// delivered, one byte more is refused — or a line longer
// than `max_event_bytes` plus 64 bytes (room for the field name), puts the
// reader into an error state (error() non-empty) and no further events are
// reported. The verdict is the same however the bytes were split.
//
// Not thread-safe; one reader per stream. Reuses its buffers: steady-state
// reading does not allocate.
#ifndef NARWHAL_ENGINES_HTTP_SSE_READER_H_
#define NARWHAL_ENGINES_HTTP_SSE_READER_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace narwhal::engines {

class SseReader {
 public:
  static constexpr size_t kDefaultMaxEventBytes = 16 * 1024 * 1024;

  explicit SseReader(size_t max_event_bytes = kDefaultMaxEventBytes)
      : max_event_bytes_(max_event_bytes) {}

  // Called with each event's data. The view is valid only during the call.
  // Return false to stop reading (Feed returns false at once).
  using EventFn = std::function<bool(std::string_view data)>;

  // Consumes `bytes`. Returns false if `on_event` asked to stop or the reader
  // is in an error state.
  bool Feed(std::string_view bytes, const EventFn& on_event);

  // Comment lines seen so far (SSE keep-alives).
  size_t comments() const { return comments_; }
  // Bytes of an event that has started but not yet ended (0 at an event boundary).
  bool mid_event() const { return !line_.empty() || has_data_; }
  // Non-empty once the reader has given up (oversized event).
  const std::string& error() const { return error_; }

 private:
  bool EndLine(const EventFn& on_event);

  size_t max_event_bytes_;
  std::string line_;   // current partial line
  std::string data_;   // data of the current event
  bool has_data_ = false;
  bool last_was_cr_ = false;  // previous byte was CR (a following LF is part of it)
  size_t comments_ = 0;
  std::string error_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_SSE_READER_H_
