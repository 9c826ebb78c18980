// The classifier of decode-stream events: reads one OpenAI/vLLM SSE `data:`
// payload into an engines::StreamEvent (engines/stream_event.h says what each
// kind means).
//
// The classifier scans the payload once with simdjson On-Demand (no DOM),
// validating all of it but copying out only what is listed in StreamEvent, and
// reuses the caller's StreamEvent buffers: this runs for every relayed chunk.
#ifndef NARWHAL_ENGINES_HTTP_STREAM_CLASSIFIER_H_
#define NARWHAL_ENGINES_HTTP_STREAM_CLASSIFIER_H_

#include <memory>
#include <string>
#include <string_view>

#include "engines/stream_event.h"

namespace narwhal::engines {

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

  // Classifies `data` (one SSE event's payload) into `*event` (cleared first)
  // and returns the payload to relay: `data` itself, or — when `data` is a
  // JSON object only but for strings that are not valid Unicode (raw bytes
  // that are not UTF-8, unpaired surrogate escapes) — a copy repaired with
  // U+FFFD (engines/json_text_repair.h), classified as such and valid until
  // the next call. Never throws; any input, however hostile, yields one of
  // the kinds above.
  std::string_view Classify(std::string_view data, StreamEvent* event);

 private:
  struct Parser;
  bool ScanPayload(std::string_view data, StreamEvent* event);
  void TrimRepaired();
  std::unique_ptr<Parser> parser_;
  std::string repaired_;
};

// Classifies `data` into `*event` with a classifier owned by the calling
// thread, as StreamClassifier::Classify (the returned payload is valid until
// the thread's next call). Thread-safe; a stream that owns a StreamClassifier
// should use it.
std::string_view ClassifyEvent(std::string_view data, StreamEvent* event);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_STREAM_CLASSIFIER_H_
