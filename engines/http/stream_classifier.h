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

#endif  // NARWHAL_ENGINES_HTTP_STREAM_CLASSIFIER_H_
