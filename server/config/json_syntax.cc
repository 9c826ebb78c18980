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

// Builds the document from nlohmann's SAX events and notes the keys that
// repeat within one object: the paths of the first kMaxKeptDuplicates, and
// how many more there were (a file may repeat a key a million times; the
// report stays one short line).
//
// Linear in the document: each value is placed once, a key is looked up in
// its own object's members only, and a path is spelled out only for a
// duplicate. (nlohmann's callback parser, used before, scans the parent
// container for discarded values at the end of every object: quadratic in
// the number of objects in one array, 17 s for 320k empty objects.)
class DocumentBuilder : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Place(json(nullptr)); }
  bool boolean(bool value) override { return Place(json(value)); }
  bool number_integer(number_integer_t value) override { return Place(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return Place(json(value)); }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return Place(json(value));
  }
  bool string(string_t& value) override { return Place(json(std::move(value))); }
  bool binary(binary_t& value) override { return Place(json::binary(std::move(value))); }

  bool start_object(std::size_t /*elements*/) override { return Open(json::object()); }
  bool start_array(std::size_t /*elements*/) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& key) override {
    json::object_t& members = frames_.back().value->get_ref<json::object_t&>();
    if (!IsAnnotation(key) && members.count(key) > 0) {
      if (duplicates_.size() < kMaxKeptDuplicates) {
        duplicates_.push_back(ChildPath(frames_.size(), &key, 0));
      } else {
        ++more_duplicates_;
      }
    }
    pending_key_ = std::move(key);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const json::exception& error) override {
    error_position_ = position;
    error_what_ = error.what();
    syntax_error_ = dynamic_cast<const json::parse_error*>(&error) != nullptr;
    return false;
  }

  // Below kMaxReportedErrors, so that the count of the rest is reported too.
  static constexpr size_t kMaxKeptDuplicates = 16;

  json& root() { return root_; }
  const std::vector<std::string>& duplicates() const { return duplicates_; }
  // Duplicates found beyond the kept ones.
  size_t more_duplicates() const { return more_duplicates_; }

  // The error that stopped the parse: a syntax error at a byte position, or
  // another (a number too large for a double) without one.
  bool syntax_error() const { return syntax_error_; }
  size_t error_position() const { return error_position_; }
  const std::string& error_what() const { return error_what_; }

 private:
  // An open container, and how its parent names it.
  struct Frame {
    json* value;
    const std::string* key;  // its key in the parent object; null in an array or at the top
    size_t index;            // its index in the parent array
  };

  // Puts `value` where the parser is: the top, the next array entry or the
  // pending key's member (a repeated key's later value replaces the earlier
  // one; the repeat is reported). Returns where it was put.
  json* Put(json&& value, const std::string** key, size_t* index) {
    *key = nullptr;
    *index = 0;
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *frames_.back().value;
    if (parent.is_array()) {
      json::array_t& entries = parent.get_ref<json::array_t&>();
      *index = entries.size();
      entries.push_back(std::move(value));
      return &entries.back();
    }
    json::object_t& members = parent.get_ref<json::object_t&>();
    auto [it, inserted] = members.insert_or_assign(std::move(pending_key_), std::move(value));
    *key = &it->first;
    return &it->second;
  }

  bool Place(json&& value) {
    const std::string* key;
    size_t index;
    Put(std::move(value), &key, &index);
    return true;
  }

  bool Open(json&& container) {
    Frame frame{};
    frame.value = Put(std::move(container), &frame.key, &frame.index);
    frames_.push_back(frame);
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return true;
  }

  // The path of a child of frames_[depth - 1]: its member `key` or, when
  // `key` is null, its entry `index`. Only called for a duplicate.
  std::string ChildPath(size_t depth, const std::string* key, size_t index) const {
    std::string path;
    // frames_[0] is the top-level value, which has no name.
    for (size_t i = 1; i < depth; ++i) AppendSegment(i, frames_[i].key, frames_[i].index, &path);
    AppendSegment(depth, key, index, &path);
    return path;
  }

  // Appends how the child of frames_[level - 1] is named.
  static void AppendSegment(size_t level, const std::string* key, size_t index, std::string* path) {
    if (key == nullptr) {
      absl::StrAppend(path, "[", index, "]");
    } else {
      absl::StrAppend(path, level == 1 ? "" : ".", *key);
    }
  }

  json root_;
  std::vector<Frame> frames_;
  std::string pending_key_;
  std::vector<std::string> duplicates_;
  size_t more_duplicates_ = 0;
  bool syntax_error_ = false;
  size_t error_position_ = 0;
  std::string error_what_;
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
  // So is one that would take many times its size once parsed.
  if (const engines::JsonVerdict v = engines::CheckJson(text); v != engines::JsonVerdict::kWithin) {
    errors->Add(0, "invalid JSON: the document " + engines::JsonLimitText(v, text.size()));
    return std::nullopt;
  }
  DocumentBuilder builder;
  // Errors come back through builder.parse_error(), not as exceptions.
  if (!json::sax_parse(text.begin(), text.end(), &builder)) {
    if (builder.syntax_error()) {
      const auto [line, column] = LineAndColumn(text, builder.error_position());
      errors->Add(0, absl::StrCat("invalid JSON at line ", line, ", column ", column, ": ",
                                  ParseErrorReason(builder.error_what())));
    } else {
      // E.g. out_of_range 406 "number overflow parsing '1e999'" (no position).
      errors->Add(0, absl::StrCat("invalid JSON: ", WithoutExceptionId(builder.error_what())));
    }
    return std::nullopt;
  }
  for (const std::string& path : builder.duplicates()) {
    errors->Add(0, absl::StrCat(path, ": duplicate key"));
  }
  if (builder.more_duplicates() > 0) {
    errors->Add(0, absl::StrCat("... and ", builder.more_duplicates(), " more duplicate keys"));
  }
  return std::move(builder.root());
}

}  // namespace narwhal::server::config_file
