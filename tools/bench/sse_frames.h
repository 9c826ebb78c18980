// SSE framing for narwhal-bench: splits a response body into events and
// tells generated-token frames from metadata, [DONE] and error events.
//
// Deliberately small and allocation-light (it runs once per relayed frame on
// the load driver): no JSON parse, only a scan for a non-empty "text",
// "content" or "reasoning" string value.
#ifndef NARWHAL_TOOLS_BENCH_SSE_FRAMES_H_
#define NARWHAL_TOOLS_BENCH_SSE_FRAMES_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace narwhal::bench {

enum class FrameKind {
  kToken,  // carries generated text
  kMeta,   // role-only delta, empty text, usage-only chunk, ...
  kDone,   // data: [DONE]
  kError,  // data: {"error": ...}
};

FrameKind ClassifyFrame(std::string_view payload);

// Accumulates body bytes and calls on_event(payload) once per complete event
// (the data lines of one event joined with '\n'; comment and other fields
// are skipped). LF and CRLF line ends are accepted.
class SseSplitter {
 public:
  // Longest line kept while waiting for its end; beyond it Feed fails.
  static constexpr size_t kMaxLine = 1 << 20;

  // Returns false when a line grew past kMaxLine.
  template <typename OnEvent>
  bool Feed(std::string_view bytes, OnEvent&& on_event) {
    while (!bytes.empty()) {
      const size_t nl = bytes.find('\n');
      if (nl == std::string_view::npos) {
        partial_.append(bytes);
        return partial_.size() <= kMaxLine;
      }
      std::string_view line = bytes.substr(0, nl);
      bytes.remove_prefix(nl + 1);
      if (!partial_.empty()) {
        partial_.append(line);
        line = partial_;
      }
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) {
        if (has_data_) on_event(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      } else if (line.substr(0, 5) == "data:") {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (has_data_) data_.push_back('\n');
        data_.append(line);
        has_data_ = true;
      }
      partial_.clear();
    }
    return true;
  }

 private:
  std::string partial_;  // an incomplete line
  std::string data_;     // the current event's data
  bool has_data_ = false;
};

}  // namespace narwhal::bench

#endif  // NARWHAL_TOOLS_BENCH_SSE_FRAMES_H_
