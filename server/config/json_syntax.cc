#include "server/config/json_syntax.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

#include <nlohmann/json.hpp>

#include "engines/json_limits.h"
#include "server/config/error_report.h"

namespace narwhal::server::config_file {

using json = nlohmann::json;

namespace {

// Tracks the path of the value being parsed (through nlohmann's parser
// callback) and remembers the keys that repeat within one object: the paths
// of the first kMaxKeptDuplicates, and how many more there were (a file may
// repeat a key a million times; the report stays one short line).
class DuplicateKeyFinder {
 public:
  bool OnEvent(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        Frame frame;
        frame.is_array = event == json::parse_event_t::array_start;
        frame.segment = NextChildSegment();
        frames_.push_back(std::move(frame));
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& top = frames_.back();
          top.last_key = parsed.get<std::string>();
          if (!IsAnnotation(top.last_key) && !top.keys.insert(top.last_key).second) {
            if (duplicates_.size() < kMaxKeptDuplicates) {
              duplicates_.push_back(CurrentPath() + KeySegment(top.last_key));
            } else {
              ++more_duplicates_;
            }
          }
        }
        break;
      case json::parse_event_t::value:
        NextChildSegment();
        break;
    }
    return true;  // keep every value
  }

  // Below kMaxReportedErrors, so that the count of the rest is reported too.
  static constexpr size_t kMaxKeptDuplicates = 16;

  const std::vector<std::string>& duplicates() const { return duplicates_; }
  // Duplicates found beyond the kept ones.
  size_t more_duplicates() const { return more_duplicates_; }

 private:
  struct Frame {
    bool is_array = false;
    std::string segment;  // how this container is named inside its parent
    size_t next_index = 0;
    std::string last_key;
    std::set<std::string> keys;
  };

  std::string KeySegment(const std::string& key) const {
    return frames_.size() == 1 ? key : "." + key;
  }

  // The segment naming the child that starts now; advances array indices.
  std::string NextChildSegment() {
    if (frames_.empty()) return "";
    Frame& top = frames_.back();
    if (top.is_array) return absl::StrCat("[", top.next_index++, "]");
    return KeySegment(top.last_key);
  }

  std::string CurrentPath() const {
    std::string path;
    for (const Frame& f : frames_) path += f.segment;
    return path;
  }

  std::vector<Frame> frames_;
  std::vector<std::string> duplicates_;
  size_t more_duplicates_ = 0;
};

// 1-based line and column of the 1-based byte position nlohmann reports.
std::pair<size_t, size_t> LineAndColumn(std::string_view text, size_t byte) {
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, end - line_start + 1};
}

// nlohmann's explanation without its "[json.exception...] parse error at ...: "
// prefix, and without credentials in the text it last read.
std::string ParseErrorReason(const std::string& what) {
  const size_t at = what.find("parse error");
  const size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
  constexpr std::string_view kLastRead = "last read: ";
  if (const size_t read = reason.find(kLastRead); read != std::string::npos) {
    const size_t from = read + kLastRead.size();
    reason = reason.substr(0, from) + WithoutUserinfo(absl::string_view(reason).substr(from));
  }
  return Printable(reason);
}

// nlohmann's message without its "[json.exception.<kind>.<id>] " prefix.
std::string WithoutExceptionId(const std::string& what) {
  const size_t end = what.find("] ");
  return Printable(what.empty() || what.front() != '[' || end == std::string::npos
                       ? what
                       : what.substr(end + 2));
}

}  // namespace

// Parses `text`; on a syntax error (or a number too large for a double)
// reports it and returns nullopt.
std::optional<json> ParseJson(std::string_view text, Errors* errors) {
  // A deep document is refused unparsed: copying or printing it would
  // overflow the stack.
  if (!engines::JsonDepthWithin(text)) {
    errors->Add(0, "invalid JSON: the document " + engines::DepthLimitText());
    return std::nullopt;
  }
  DuplicateKeyFinder finder;
  json::parser_callback_t callback = [&finder](int /*depth*/, json::parse_event_t event,
                                               json& parsed) {
    return finder.OnEvent(event, parsed);
  };
  std::optional<json> root;
  // nlohmann reports syntax errors only by exception; it is caught right here.
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    const auto [line, column] = LineAndColumn(text, e.byte);
    errors->Add(0, absl::StrCat("invalid JSON at line ", line, ", column ", column, ": ",
                                ParseErrorReason(e.what())));
    return std::nullopt;
  } catch (const json::exception& e) {
    // E.g. out_of_range 406 "number overflow parsing '1e999'" (no position).
    errors->Add(0, absl::StrCat("invalid JSON: ", WithoutExceptionId(e.what())));
    return std::nullopt;
  }
  for (const std::string& path : finder.duplicates()) {
    errors->Add(0, absl::StrCat(path, ": duplicate key"));
  }
  if (finder.more_duplicates() > 0) {
    errors->Add(0, absl::StrCat("... and ", finder.more_duplicates(), " more duplicate keys"));
  }
  return root;
}

}  // namespace narwhal::server::config_file
