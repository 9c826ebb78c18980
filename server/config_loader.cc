#include "server/config_loader.h"

#include <fcntl.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engines/json_limits.h"
#include "server/tls_files.h"

namespace narwhal::server {
namespace {

namespace pb = ::narwhal::config::v1;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using json = nlohmann::json;
using router::Settings;

constexpr size_t kMaxReportedErrors = 20;
constexpr off_t kMaxConfigFileBytes = 16 << 20;
constexpr size_t kMaxShownChars = 80;

// ---------------------------------------------------------------------------
// Message helpers.

// A JSON value as it would appear in the file, ASCII-only and truncated, so it
// is safe to put in a one-line log message.
std::string Show(const json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (text.size() > kMaxShownChars) text = text.substr(0, kMaxShownChars - 3) + "...";
  return text;
}

std::string Quote(const std::string& s) { return Show(json(s)); }

// `text` with everything between its scheme ("http://", if any) and its last
// '@' replaced by "***": a URL or address shown without its credentials.
std::string WithoutUserinfo(absl::string_view text) {
  const size_t at = text.rfind('@');
  if (at == absl::string_view::npos) return std::string(text);
  size_t start = text.find("://");
  start = start == absl::string_view::npos || start > at ? 0 : start + 3;
  return absl::StrCat(text.substr(0, start), "***", text.substr(at));
}

// A bound or a configured value: integers without a fraction, else the
// shortest text that reads back as the same double.
std::string FormatNumber(double v) {
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (const int digits : {6, 15, 17}) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

bool IsAnnotation(std::string_view key) { return !key.empty() && key.front() == '_'; }

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// All violations found so far. Each carries the rank of the top-level key it
// is about (0: the document itself), and Join() lists them by rank, in the
// order found within one rank.
class Errors {
 public:
  void Add(int rank, std::string message) { messages_.push_back({rank, std::move(message)}); }
  bool empty() const { return messages_.empty(); }

  // "<label>: e1; e2; ..." capped at kMaxReportedErrors.
  std::string Join(absl::string_view label) const {
    std::vector<std::pair<int, std::string>> sorted = messages_;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> shown;
    for (size_t i = 0; i < sorted.size() && i < kMaxReportedErrors; ++i) {
      shown.push_back(sorted[i].second);
    }
    if (sorted.size() > kMaxReportedErrors) {
      shown.push_back(absl::StrCat("(", sorted.size() - kMaxReportedErrors, " more errors)"));
    }
    return absl::StrCat(label, ": ", absl::StrJoin(shown, "; "));
  }

 private:
  std::vector<std::pair<int, std::string>> messages_;
};

// ---------------------------------------------------------------------------
// Step 1, syntax: JSON parse errors and duplicate object keys.

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

// `text` made safe for a one-line log message: bytes outside printable ASCII
// (nlohmann echoes the bytes it last read, which may be anything) become
// \xHH, and the result is truncated.
std::string Printable(const std::string& text) {
  constexpr size_t kMaxChars = 200;
  std::string out;
  for (const char c : text) {
    if (out.size() >= kMaxChars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", u);
      out += hex;
    }
  }
  return out;
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

// ---------------------------------------------------------------------------
// The schema's options.

const pb::Doc& DocOf(const FieldDescriptor& f) { return f.options().GetExtension(pb::doc); }

bool IsRequired(const FieldDescriptor& f) { return DocOf(f).default_value() == "required"; }

bool IsDuration(const FieldDescriptor& f) {
  return f.type() == FieldDescriptor::TYPE_DOUBLE && absl::EndsWith(f.name(), "_s");
}

// An int32 field's accepted range. Without a (doc).max the type caps it, and
// a message says "must be >= lo" or "must be <= hi" rather than "between".
struct IntRange {
  long long lo = INT32_MIN;
  long long hi = INT32_MAX;
  bool hi_is_cap = true;
};

IntRange IntRangeOf(const FieldDescriptor& f) {
  const pb::Doc& doc = DocOf(f);
  IntRange r;
  if (doc.has_min()) r.lo = static_cast<long long>(doc.min());
  if (doc.has_max()) {
    r.hi = static_cast<long long>(doc.max());
    r.hi_is_cap = false;
  }
  return r;
}

std::string IntRule(const IntRange& r, bool below) {
  if (!r.hi_is_cap) return absl::StrCat("must be between ", r.lo, " and ", r.hi);
  return below ? absl::StrCat("must be >= ", r.lo) : absl::StrCat("must be <= ", r.hi);
}

// ---------------------------------------------------------------------------
// Step 2, schema: what protobuf's JSON parser would accept too loosely
// (camelCase names, null, 3.0 or "3" for an integer, "NaN" for a number) or
// report only one at a time.

class SchemaCheck {
 public:
  explicit SchemaCheck(Errors* errors) : errors_(errors) {}

  // `object` as the message `type` at `path`, without annotations and without
  // every key reported here; `rank` is the rank of the top-level key it is
  // under (its own, for fields of the top level).
  json Object(const json& object, const Descriptor& type, const std::string& path, int rank) {
    json out = json::object();
    for (const auto& item : object.items()) {
      if (IsAnnotation(item.key()) || type.FindFieldByName(item.key()) != nullptr) continue;
      errors_->Add(rank, absl::StrCat(JoinPath(path, item.key()), ": unknown key"));
    }
    for (int i = 0; i < type.field_count(); ++i) {
      const FieldDescriptor& field = *type.field(i);
      const std::string key_path = JoinPath(path, field.name());
      const int key_rank = path.empty() ? i + 1 : rank;
      const auto it = object.find(field.name());
      if (it == object.end()) {
        if (IsRequired(field)) Report(key_rank, key_path, "is required");
        continue;
      }
      if (std::optional<json> value = Value(*it, field, key_path, key_rank)) {
        out[field.name()] = std::move(*value);
      } else {
        reported_.insert(key_path);
      }
    }
    return out;
  }

  // Paths of the keys (and array entries) reported here: the validation pass
  // says nothing more about them and treats them as invalid.
  const std::set<std::string>& reported() const { return reported_; }

 private:
  void Report(int rank, const std::string& path, absl::string_view message) {
    errors_->Add(rank, absl::StrCat(path, " ", message));
    reported_.insert(path);
  }

  std::optional<json> Value(const json& v, const FieldDescriptor& field, const std::string& path,
                            int rank) {
    if (field.is_repeated()) {
      if (!v.is_array()) {
        errors_->Add(rank, absl::StrCat(path, " must be an array (got ", TypeName(v), ")"));
        return std::nullopt;
      }
      json out = json::array();
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string entry_path = absl::StrCat(path, "[", i, "]");
        if (!v[i].is_object()) {
          Report(rank, entry_path, absl::StrCat("must be an object (got ", TypeName(v[i]), ")"));
          out.push_back(json::object());  // keeps the indices of the entries after it
        } else {
          out.push_back(Object(v[i], *field.message_type(), entry_path, rank));
        }
      }
      return out;
    }
    std::string wrong;
    switch (field.cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (v.is_object()) return Object(v, *field.message_type(), path, rank);
        wrong = absl::StrCat("must be an object (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        if (v.is_string()) return v;
        wrong = absl::StrCat("must be a string (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        if (v.is_number()) return v;
        wrong = absl::StrCat("must be ", IsDuration(field) ? "a number of seconds" : "a number",
                             " (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_INT32: {
        if (!v.is_number_integer()) {
          wrong = absl::StrCat("must be an integer (got ", TypeName(v),
                               v.is_null() ? "" : " " + Show(v), ")");
          break;
        }
        // A value beyond int32 breaks the field's range: said here, with the
        // validation pass's words.
        const bool below = !v.is_number_unsigned() && v.get<long long>() < INT32_MIN;
        const bool above =
            v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX : v.get<long long>() > INT32_MAX;
        if (!below && !above) return v;
        wrong = absl::StrCat(IntRule(IntRangeOf(field), below), " (got ", Show(v), ")");
        break;
      }
      default:
        wrong = "has a type the loader does not read";
        break;
    }
    errors_->Add(rank, absl::StrCat(path, " ", wrong));
    return std::nullopt;
  }

  Errors* errors_;
  std::set<std::string> reported_;
};

// protobuf's "(serving.max_attempts): invalid value ..." as
// "serving.max_attempts: invalid value ...". The schema check leaves protobuf
// nothing to refuse; this is the fallback.
std::string ProtoJsonError(const std::string& message) {
  const size_t close = message.find("):");
  if (message.empty() || message.front() != '(' || close == std::string::npos) {
    return Printable(message);
  }
  return Printable(absl::StrCat(message.substr(1, close - 1), message.substr(close + 1)));
}

// ---------------------------------------------------------------------------
// Step 3, validation: values into Settings.

// Why `text` is not a valid HOST:PORT with a port in [min_port, 65535], or
// nullopt when it is. HOST is a hostname, an IPv4 literal or [IPv6]. On
// success *host and *port (when given) are set.
std::optional<std::string> HostPortError(std::string_view text, int min_port,
                                         std::string_view* host_out = nullptr,
                                         int* port_out = nullptr) {
  if (text.find('@') != std::string_view::npos) return "credentials are not allowed";
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return "unterminated [IPv6] host";
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return "missing :PORT";
    port = rest.substr(1);
    if (host.empty() || host.find(':') == std::string_view::npos ||
        host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos) {
      return "invalid IPv6 address";
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return "missing :PORT";
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return "IPv6 hosts must be in [brackets]";
    if (host.empty()) return "missing host";
    if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789.-_") != std::string_view::npos) {
      return "invalid host";
    }
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos) {
    return "PORT must be a number";
  }
  const int value = std::stoi(std::string(port));
  if (value < min_port || value > 65535) {
    return absl::StrCat("PORT must be ", min_port, "..65535");
  }
  if (host_out != nullptr) *host_out = host;
  if (port_out != nullptr) *port_out = value;
  return std::nullopt;
}

// Why `url` is not "http://host:port" (optionally with a trailing "/"), or
// nullopt when it is; then *normalized is the URL without the trailing "/"
// and *identity names its host (lower case) and port, for duplicates.
std::optional<std::string> EngineUrlError(const std::string& url, std::string* normalized,
                                          std::string* identity) {
  constexpr std::string_view kScheme = "http://";
  if (url.find('@') != std::string::npos) return "credentials are not allowed";
  if (url.rfind("https://", 0) == 0) {
    return "https is not supported (engines are reached over plain http)";
  }
  if (url.rfind(kScheme, 0) != 0) return "must start with http://";
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return "a query or fragment is not allowed";
  }
  if (rest.find('/') != std::string_view::npos) return "a path is not allowed";
  std::string_view host;
  int port = 0;
  if (std::optional<std::string> error = HostPortError(rest, 1, &host, &port)) return error;
  *normalized = std::string(kScheme) + std::string(rest);
  std::string lower(host);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  *identity = absl::StrCat(lower, " ", port);
  return std::nullopt;
}

bool IsEnvVarName(const std::string& s) {
  if (s.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsIidChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// The fields of one message of the parsed config at `path`, checked against
// the schema's options. Every reader leaves *out untouched when the key is
// absent and returns false exactly when the value is invalid: reported now,
// or already by the schema check (then nothing more is said).
class Fields {
 public:
  Fields(const Message& message, std::string path, int rank, Errors* errors,
         const std::set<std::string>& reported)
      : message_(message),
        path_(std::move(path)),
        rank_(rank),
        errors_(errors),
        reported_(reported) {}

  const FieldDescriptor& Field(int number) const {
    return *message_.GetDescriptor()->FindFieldByNumber(number);
  }
  std::string PathOf(int number) const { return JoinPath(path_, Field(number).name()); }
  // Top-level fields rank by their position; nested ones by their section's.
  int RankOf(int number) const { return path_.empty() ? Field(number).index() + 1 : rank_; }

  // "<path> <message>".
  void Error(int number, absl::string_view message) const {
    errors_->Add(RankOf(number), absl::StrCat(PathOf(number), " ", message));
  }

  // Present and valid so far.
  bool Present(int number) const {
    return !reported_.count(PathOf(number)) &&
           message_.GetReflection()->HasField(message_, &Field(number));
  }
  // Reported by the schema check.
  bool Reported(int number) const { return reported_.count(PathOf(number)) > 0; }

  template <typename T>
  bool Int(int number, T* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    const long long v = message_.GetReflection()->GetInt32(message_, &Field(number));
    const IntRange r = IntRangeOf(Field(number));
    if (v < r.lo || v > r.hi) {
      Error(number, absl::StrCat(IntRule(r, v < r.lo), " (got ", v, ")"));
      return false;
    }
    *out = static_cast<T>(v);
    return true;
  }

  // A finite number within the (doc) bounds.
  bool Number(int number, double* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    const double v = message_.GetReflection()->GetDouble(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    std::string rule;
    if (!std::isfinite(v)) {
      rule = "must be finite";
    } else if (doc.has_min() && doc.min_exclusive() && !(v > doc.min())) {
      rule = absl::StrCat("must be > ", FormatNumber(doc.min()));
    } else if (doc.has_min() && v < doc.min()) {
      rule = absl::StrCat("must be >= ", FormatNumber(doc.min()));
    } else if (doc.has_max() && v > doc.max()) {
      rule = absl::StrCat("must be <= ", FormatNumber(doc.max()));
    }
    if (!rule.empty()) {
      Error(number, absl::StrCat(rule, " (got ", FormatNumber(v), ")"));
      return false;
    }
    *out = v;
    return true;
  }

  // A string within the (doc) length bounds and, when the schema lists
  // choices, one of them.
  bool String(int number, std::string* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    std::string v = message_.GetReflection()->GetString(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    if (doc.has_min() && v.size() < doc.min()) {
      Error(number, doc.min() <= 1 ? std::string("must not be empty")
                                   : absl::StrCat("must be at least ", doc.min(), " characters"));
      return false;
    }
    if (doc.has_max() && v.size() > doc.max()) {
      Error(number, absl::StrCat("must be at most ", FormatNumber(doc.max()), " characters (got ",
                                 v.size(), ")"));
      return false;
    }
    if (doc.choices_size() > 0 &&
        std::find(doc.choices().begin(), doc.choices().end(), v) == doc.choices().end()) {
      std::vector<std::string> quoted;
      for (const std::string& c : doc.choices()) quoted.push_back(absl::StrCat("\"", c, "\""));
      Error(number,
            absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), " (got ", Quote(v), ")"));
      return false;
    }
    *out = std::move(v);
    return true;
  }

  bool OptionalString(int number, std::optional<std::string>* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    *out = std::move(value);
    return true;
  }

  bool EnvVarName(int number, std::string* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    if (!value.empty() && !IsEnvVarName(value)) {
      Error(number, absl::StrCat("must be empty or an environment variable name matching "
                                 "[A-Za-z_][A-Za-z0-9_]* (got ",
                                 Quote(value), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  bool HostPort(int number, std::string* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    if (std::optional<std::string> why = HostPortError(value, 0)) {
      Error(number, absl::StrCat("must be HOST:PORT: ", *why, " (got ",
                                 Quote(WithoutUserinfo(value)), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  // The number of entries of a repeated field within the (doc) bounds.
  bool Entries(int number) const {
    if (Reported(number)) return false;
    const int size = message_.GetReflection()->FieldSize(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    if (doc.has_min() && size < doc.min()) {
      Error(number, doc.min() <= 1 ? std::string("must not be empty")
                                   : absl::StrCat("must have at least ", doc.min(), " entries"));
      return false;
    }
    if (doc.has_max() && size > doc.max()) {
      Error(number, absl::StrCat("must have at most ", FormatNumber(doc.max()), " entries (got ",
                                 size, ")"));
      return false;
    }
    return true;
  }

  Errors* errors() const { return errors_; }
  const std::set<std::string>& reported() const { return reported_; }

 private:
  const Message& message_;
  std::string path_;
  int rank_;
  Errors* errors_;
  const std::set<std::string>& reported_;
};

void ValidateListen(const Fields& f, router::ListenSettings* out) {
  f.HostPort(pb::Listen::kHttpFieldNumber, &out->http);
  f.HostPort(pb::Listen::kGrpcFieldNumber, &out->grpc);
  f.HostPort(pb::Listen::kAdminFieldNumber, &out->admin);
}

router::Role RoleNamed(const std::string& name) {
  if (name == "prefill") return router::Role::kPrefill;
  if (name == "decode") return router::Role::kDecode;
  return router::Role::kBoth;
}

// Where each engine id and URL was first seen.
struct EngineIndex {
  std::map<std::string, std::string> iid_paths;
  std::map<std::string, std::string> url_paths;
};

// Returns false when the entry's role is invalid (then the fleet-level role
// check is skipped).
bool ValidateEngine(const Fields& f, EngineIndex* seen, router::EngineSettings* out) {
  using E = pb::Engine;
  if (f.String(E::kIidFieldNumber, &out->iid) && f.Present(E::kIidFieldNumber)) {
    if (!std::all_of(out->iid.begin(), out->iid.end(), IsIidChar)) {
      f.Error(E::kIidFieldNumber,
              absl::StrCat("must contain only [A-Za-z0-9._-] (got ", Quote(out->iid), ")"));
    } else if (const auto [it, inserted] =
                   seen->iid_paths.emplace(out->iid, f.PathOf(E::kIidFieldNumber));
               !inserted) {
      f.Error(E::kIidFieldNumber, absl::StrCat(Quote(out->iid), " is a duplicate of ", it->second));
    }
  }
  std::string url;
  if (f.String(E::kUrlFieldNumber, &url) && f.Present(E::kUrlFieldNumber)) {
    std::string identity;
    if (std::optional<std::string> why = EngineUrlError(url, &out->url, &identity)) {
      f.Error(E::kUrlFieldNumber, absl::StrCat("must be http://host:port: ", *why, " (got ",
                                               Quote(WithoutUserinfo(url)), ")"));
    } else if (const auto [it, inserted] =
                   seen->url_paths.emplace(identity, f.PathOf(E::kUrlFieldNumber));
               !inserted) {
      f.Error(E::kUrlFieldNumber, absl::StrCat(Quote(out->url), " is a duplicate of ", it->second));
    }
  }
  f.String(E::kKvEngineIdFieldNumber, &out->kv_engine_id);
  std::string role = "both";
  const bool role_ok = f.String(E::kRoleFieldNumber, &role);
  out->role = RoleNamed(role);
  return role_ok;
}

void ValidateEngines(const pb::FleetConfig& config, const Fields& top,
                     std::vector<router::EngineSettings>* out) {
  if (!top.Entries(pb::FleetConfig::kEnginesFieldNumber)) return;
  const int rank = top.RankOf(pb::FleetConfig::kEnginesFieldNumber);
  EngineIndex seen;
  bool roles_ok = true;
  for (int i = 0; i < config.engines_size(); ++i) {
    const std::string path = absl::StrCat("engines[", i, "]");
    router::EngineSettings engine;
    if (top.reported().count(path)) {
      roles_ok = false;
    } else {
      roles_ok &= ValidateEngine(
          Fields(config.engines(i), path, rank, top.errors(), top.reported()), &seen, &engine);
    }
    out->push_back(std::move(engine));
  }
  if (!roles_ok) return;
  const bool can_prefill = std::any_of(out->begin(), out->end(),
                                       [](const auto& e) { return router::CanPrefill(e.role); });
  const bool can_decode = std::any_of(out->begin(), out->end(),
                                      [](const auto& e) { return router::CanDecode(e.role); });
  if (!can_prefill) top.errors()->Add(rank, "engines: no engine can serve the prefill role");
  if (!can_decode) top.errors()->Add(rank, "engines: no engine can serve the decode role");
}

void ValidateEngineContract(const Fields& f, router::EngineContract* out) {
  using C = pb::EngineContract;
  f.String(C::kVllmVersionFieldNumber, &out->vllm_version);
  f.OptionalString(C::kModelFieldNumber, &out->model);
  long long max_model_len = 0;
  if (f.Present(C::kMaxModelLenFieldNumber) && f.Int(C::kMaxModelLenFieldNumber, &max_model_len)) {
    out->max_model_len = max_model_len;
  }
  f.String(C::kConnectorFieldNumber, &out->connector);
  f.OptionalString(C::kSystemFingerprintFieldNumber, &out->system_fingerprint);
}

// Returns whether serving.request_timeout_s is valid (for cross-section rules).
bool ValidateServing(const Fields& f, router::ServingSettings* out) {
  using S = pb::Serving;
  f.Int(S::kMaxAttemptsFieldNumber, &out->max_attempts);
  const bool request_ok = f.Number(S::kRequestTimeoutSFieldNumber, &out->request_timeout_s);
  const bool prefill_ok = f.Number(S::kPrefillTimeoutSFieldNumber, &out->prefill_timeout_s);
  const bool handoff_ok = f.Number(S::kHandoffTimeoutSFieldNumber, &out->handoff_timeout_s);
  f.Number(S::kRetryBudgetFieldNumber, &out->retry_budget);
  f.Number(S::kRetryReplenishFieldNumber, &out->retry_replenish);
  const bool base_ok = f.Number(S::kRetryBaseSFieldNumber, &out->retry_base_s);
  const bool cap_ok = f.Number(S::kRetryCapSFieldNumber, &out->retry_cap_s);
  f.Int(S::kMaxInflightFieldNumber, &out->max_inflight);
  f.Int(S::kMaxRequestBytesFieldNumber, &out->max_request_bytes);
  f.Number(S::kGracefulTimeoutSFieldNumber, &out->graceful_timeout_s);
  f.EnvVarName(S::kApiKeyEnvFieldNumber, &out->api_key_env);
  f.Int(S::kIoThreadsFieldNumber, &out->io_threads);
  f.Int(S::kMaxConnectionsFieldNumber, &out->max_connections);
  f.Int(S::kMaxHeaderBytesFieldNumber, &out->max_header_bytes);
  f.Int(S::kMaxHeadersFieldNumber, &out->max_headers);
  f.Number(S::kHeaderTimeoutSFieldNumber, &out->header_timeout_s);
  f.Number(S::kKeepaliveTimeoutSFieldNumber, &out->keepalive_timeout_s);

  const std::string request =
      absl::StrCat("serving.request_timeout_s (", FormatNumber(out->request_timeout_s), ")");
  if (request_ok && prefill_ok && out->prefill_timeout_s > out->request_timeout_s) {
    f.Error(
        S::kPrefillTimeoutSFieldNumber,
        absl::StrCat("must be <= ", request, " (got ", FormatNumber(out->prefill_timeout_s), ")"));
  }
  if (request_ok && handoff_ok && out->handoff_timeout_s > out->request_timeout_s) {
    f.Error(
        S::kHandoffTimeoutSFieldNumber,
        absl::StrCat("must be <= ", request, " (got ", FormatNumber(out->handoff_timeout_s), ")"));
  }
  if (base_ok && cap_ok && out->retry_cap_s < out->retry_base_s) {
    f.Error(S::kRetryCapSFieldNumber,
            absl::StrCat("must be >= serving.retry_base_s (", FormatNumber(out->retry_base_s),
                         ") (got ", FormatNumber(out->retry_cap_s), ")"));
  }
  return request_ok;
}

void ValidateAdmin(const Fields& f, router::AdminSettings* out) {
  using A = pb::Admin;
  f.EnvVarName(A::kTokenEnvFieldNumber, &out->token_env);
  f.Int(A::kMaxWatchersFieldNumber, &out->max_watchers);
  f.Int(A::kWatchBufferBytesFieldNumber, &out->watch_buffer_bytes);
  f.Int(A::kWatchQueueFieldNumber, &out->watch_queue);
  f.Number(A::kWatchStallTimeoutSFieldNumber, &out->watch_stall_timeout_s);
}

// `request_timeout_s` is nullopt when serving.request_timeout_s was invalid.
void ValidateEngineIo(const Fields& f, std::optional<double> request_timeout_s,
                      router::EngineIoSettings* out) {
  using E = pb::EngineIo;
  const bool first_ok = f.Number(E::kFirstTokenTimeoutSFieldNumber, &out->first_token_timeout_s);
  f.Number(E::kDecodeReadTimeoutSFieldNumber, &out->decode_read_timeout_s);
  f.Number(E::kConnectTimeoutSFieldNumber, &out->connect_timeout_s);
  f.Number(E::kHealthTimeoutSFieldNumber, &out->health_timeout_s);
  f.String(E::kConnectorFieldNumber, &out->connector);
  f.EnvVarName(E::kApiKeyEnvFieldNumber, &out->api_key_env);
  if (first_ok && request_timeout_s && out->first_token_timeout_s > *request_timeout_s) {
    f.Error(E::kFirstTokenTimeoutSFieldNumber,
            absl::StrCat("must be <= serving.request_timeout_s (", FormatNumber(*request_timeout_s),
                         ") (got ", FormatNumber(out->first_token_timeout_s), ")"));
  }
}

void ValidateRecovery(const Fields& f, router::RecoverySettings* out) {
  using R = pb::Recovery;
  f.Int(R::kEjectAfterFieldNumber, &out->eject_after);
  f.Number(R::kFailureQuarantineSFieldNumber, &out->failure_quarantine_s);
  f.Number(R::kReadmitIntervalSFieldNumber, &out->readmit_interval_s);
  const bool liveness_ok = f.Number(R::kLivenessIntervalSFieldNumber, &out->liveness_interval_s);
  f.Int(R::kLivenessMissesFieldNumber, &out->liveness_misses);
  std::string policy = "individual";
  const bool policy_ok = f.String(R::kEngineRestartPolicyFieldNumber, &policy);
  out->engine_restart_policy = policy == "whole_wave" ? router::RestartPolicy::kWholeWave
                                                      : router::RestartPolicy::kIndividual;
  if (policy_ok && liveness_ok && out->engine_restart_policy == router::RestartPolicy::kWholeWave &&
      out->liveness_interval_s <= 0) {
    f.Error(R::kEngineRestartPolicyFieldNumber,
            "\"whole_wave\" requires recovery.liveness_interval_s > 0 (liveness sweeps detect "
            "engine restarts)");
  }
}

void ValidateLimits(const Fields& f, router::LimitSettings* out) {
  using L = pb::Limits;
  f.Int(L::kMaxTokensFieldNumber, &out->max_tokens);
  f.Int(L::kMaxMessagesFieldNumber, &out->max_messages);
  f.Int(L::kMaxPromptsFieldNumber, &out->max_prompts);
}

// Both files or neither. The pair is read and checked here
// (server/tls_files), so a bad one stops narwhal-serve before anything is
// bound, and narwhal-check reports it.
void ValidateTls(const Fields& f, router::TlsSettings* out) {
  using T = pb::Tls;
  std::string cert;
  std::string key;
  const bool cert_ok = f.String(T::kCertFileFieldNumber, &cert);
  const bool key_ok = f.String(T::kKeyFileFieldNumber, &key);
  if (!cert_ok || !key_ok) return;
  if (cert.empty() != key.empty()) {
    const int missing = cert.empty() ? T::kCertFileFieldNumber : T::kKeyFileFieldNumber;
    const int given = cert.empty() ? T::kKeyFileFieldNumber : T::kCertFileFieldNumber;
    f.Error(missing, absl::StrCat("is required with ", f.PathOf(given), " (both or neither)"));
    return;
  }
  if (cert.empty()) return;
  if (absl::StatusOr<TlsPem> pem = LoadTlsFiles(cert, key); !pem.ok()) {
    f.errors()->Add(f.RankOf(T::kCertFileFieldNumber), std::string(pem.status().message()));
    return;
  }
  out->cert_file = std::move(cert);
  out->key_file = std::move(key);
}

// Returns whether handoff.lease_s is valid (for the age rule).
bool ValidateHandoff(const Fields& f, router::HandoffSettings* out) {
  using H = pb::Handoff;
  f.String(H::kRemoteHostFieldNumber, &out->remote_host);
  f.String(H::kReleaseFieldNumber, &out->release);
  f.Int(H::kReleaseMaxInflightFieldNumber, &out->release_max_inflight);
  f.Number(H::kReleaseTimeoutSFieldNumber, &out->release_timeout_s);
  return f.Number(H::kLeaseSFieldNumber, &out->lease_s);
}

void ValidatePlacement(const Fields& f, router::PlacementSettings* out) {
  using P = pb::Placement;
  f.String(P::kPrefillFieldNumber, &out->prefill);
  f.Int(P::kIndexChunksFieldNumber, &out->index_chunks);
  f.Int(P::kImbalanceAbsFieldNumber, &out->imbalance_abs);
  f.Number(P::kImbalanceRelFieldNumber, &out->imbalance_rel);
}

void ValidateLinks(const Fields& f, router::LinkSettings* out) {
  using L = pb::Links;
  f.Int(L::kHoldAfterFieldNumber, &out->hold_after);
  f.Number(L::kWindowSFieldNumber, &out->window_s);
}

// A handoff older than the producer's lease has lost its blocks, so the
// router's age limit is below the lease: an explicit one must be, and 0
// (the default) becomes 80% of the lease, capped by the request deadline.
void ApplyHandoffAge(const Fields* serving, router::Settings* s) {
  double& age = s->serving.handoff_timeout_s;
  if (age == 0) {
    age = std::min(0.8 * s->handoff.lease_s, s->serving.request_timeout_s);
  } else if (age >= s->handoff.lease_s && serving != nullptr) {
    serving->Error(pb::Serving::kHandoffTimeoutSFieldNumber,
                   absl::StrCat("must be < handoff.lease_s (", FormatNumber(s->handoff.lease_s),
                                ") (got ", FormatNumber(age), ")"));
  }
}

// The one validation pass. A section's rules run only when the section is in
// the file (absent sections keep Settings' defaults).
Settings Validate(const pb::FleetConfig& config, const std::set<std::string>& reported,
                  Errors* errors) {
  using F = pb::FleetConfig;
  Settings s;
  const Fields top(config, "", 0, errors, reported);
  auto section = [&](int number, const Message& message) {
    return Fields(message, top.PathOf(number), top.RankOf(number), errors, reported);
  };
  top.String(F::kModelFieldNumber, &s.model);
  if (config.has_listen())
    ValidateListen(section(F::kListenFieldNumber, config.listen()), &s.listen);
  ValidateEngines(config, top, &s.engines);
  if (config.has_engine_contract()) {
    ValidateEngineContract(section(F::kEngineContractFieldNumber, config.engine_contract()),
                           &s.engine_contract.emplace());
  }
  bool request_ok = true;
  if (config.has_serving()) {
    request_ok = ValidateServing(section(F::kServingFieldNumber, config.serving()), &s.serving);
  }
  if (config.has_admin()) ValidateAdmin(section(F::kAdminFieldNumber, config.admin()), &s.admin);
  if (config.has_engine()) {
    ValidateEngineIo(section(F::kEngineFieldNumber, config.engine()),
                     request_ok ? std::optional<double>(s.serving.request_timeout_s) : std::nullopt,
                     &s.engine);
  }
  if (config.has_recovery()) {
    ValidateRecovery(section(F::kRecoveryFieldNumber, config.recovery()), &s.recovery);
  }
  if (config.has_limits()) {
    ValidateLimits(section(F::kLimitsFieldNumber, config.limits()), &s.limits);
  }
  if (config.has_tls()) ValidateTls(section(F::kTlsFieldNumber, config.tls()), &s.tls);
  if (config.has_links()) {
    ValidateLinks(section(F::kLinksFieldNumber, config.links()), &s.links);
  }
  bool lease_ok = true;
  if (config.has_handoff()) {
    lease_ok = ValidateHandoff(section(F::kHandoffFieldNumber, config.handoff()), &s.handoff);
  }
  if (config.has_placement()) {
    ValidatePlacement(section(F::kPlacementFieldNumber, config.placement()), &s.placement);
  }
  if (request_ok && lease_ok) {
    const std::optional<Fields> serving =
        config.has_serving()
            ? std::optional<Fields>(section(F::kServingFieldNumber, config.serving()))
            : std::nullopt;
    ApplyHandoffAge(serving ? &*serving : nullptr, &s);
  }
  return s;
}

absl::StatusOr<Settings> Parse(std::string_view text, absl::string_view label) {
  Errors errors;
  std::optional<json> root = ParseJson(text, &errors);
  if (!root) return absl::InvalidArgumentError(errors.Join(label));
  if (!root->is_object()) {
    errors.Add(0, absl::StrCat("the top level must be a JSON object (got ", TypeName(*root), ")"));
    return absl::InvalidArgumentError(errors.Join(label));
  }
  SchemaCheck schema(&errors);
  const json checked = schema.Object(*root, *pb::FleetConfig::descriptor(), "", 0);
  pb::FleetConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (const auto status =
          google::protobuf::util::JsonStringToMessage(checked.dump(), &config, options);
      !status.ok()) {
    errors.Add(0, ProtoJsonError(status.message().as_string()));
    return absl::InvalidArgumentError(errors.Join(label));
  }
  Settings settings = Validate(config, schema.reported(), &errors);
  if (!errors.empty()) return absl::InvalidArgumentError(errors.Join(label));
  return settings;
}

absl::Status ReadFileError(int error_number, absl::string_view label, absl::string_view why) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(label, ": cannot read: ", why));
}

// Reads a whole regular file of at most kMaxConfigFileBytes.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view label) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadFileError(errno, label, std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ReadFileError(errno, label, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": cannot read: not a regular file"));
  }
  if (st.st_size > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": cannot read: larger than ", kMaxConfigFileBytes, " bytes"));
  }
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadFileError(errno, label, std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > static_cast<size_t>(kMaxConfigFileBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": cannot read: larger than ", kMaxConfigFileBytes, " bytes"));
    }
  }
  return text;
}

std::string SettingsToJsonText(const Settings& s) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  // Printing a message without Any fields cannot fail.
  (void)google::protobuf::util::MessageToJsonString(SettingsToProto(s), &text, options);
  return text;
}

}  // namespace

absl::StatusOr<Settings> ParseFleetConfig(std::string_view json_text) {
  return Parse(json_text, "config");
}

absl::StatusOr<Settings> LoadFleetConfig(const std::string& path) {
  const std::string label = absl::StrCat("config ", path);
  absl::StatusOr<std::string> text = ReadConfigFile(path, label);
  if (!text.ok()) return text.status();
  return Parse(*text, label);
}

pb::FleetConfig SettingsToProto(const Settings& s) {
  pb::FleetConfig c;
  c.set_model(s.model);
  c.mutable_listen()->set_http(s.listen.http);
  c.mutable_listen()->set_grpc(s.listen.grpc);
  c.mutable_listen()->set_admin(s.listen.admin);
  for (const router::EngineSettings& e : s.engines) {
    pb::Engine* engine = c.add_engines();
    engine->set_iid(e.iid);
    engine->set_url(e.url);
    engine->set_role(router::RoleName(e.role));
    if (!e.kv_engine_id.empty()) engine->set_kv_engine_id(e.kv_engine_id);
  }
  if (s.engine_contract) {
    const router::EngineContract& in = *s.engine_contract;
    pb::EngineContract* out = c.mutable_engine_contract();
    out->set_vllm_version(in.vllm_version);
    if (in.model) out->set_model(*in.model);
    if (in.max_model_len) out->set_max_model_len(static_cast<int32_t>(*in.max_model_len));
    out->set_connector(in.connector);
    if (in.system_fingerprint) out->set_system_fingerprint(*in.system_fingerprint);
  }
  const router::ServingSettings& sv = s.serving;
  pb::Serving* serving = c.mutable_serving();
  serving->set_max_attempts(sv.max_attempts);
  serving->set_request_timeout_s(sv.request_timeout_s);
  serving->set_prefill_timeout_s(sv.prefill_timeout_s);
  serving->set_handoff_timeout_s(sv.handoff_timeout_s);
  serving->set_retry_budget(sv.retry_budget);
  serving->set_retry_replenish(sv.retry_replenish);
  serving->set_retry_base_s(sv.retry_base_s);
  serving->set_retry_cap_s(sv.retry_cap_s);
  serving->set_max_inflight(sv.max_inflight);
  serving->set_max_request_bytes(static_cast<int32_t>(sv.max_request_bytes));
  serving->set_graceful_timeout_s(sv.graceful_timeout_s);
  serving->set_api_key_env(sv.api_key_env);
  serving->set_io_threads(sv.io_threads);
  serving->set_max_connections(sv.max_connections);
  serving->set_max_header_bytes(sv.max_header_bytes);
  serving->set_max_headers(sv.max_headers);
  serving->set_header_timeout_s(sv.header_timeout_s);
  serving->set_keepalive_timeout_s(sv.keepalive_timeout_s);
  c.mutable_admin()->set_token_env(s.admin.token_env);
  c.mutable_admin()->set_max_watchers(s.admin.max_watchers);
  c.mutable_admin()->set_watch_buffer_bytes(s.admin.watch_buffer_bytes);
  c.mutable_admin()->set_watch_queue(s.admin.watch_queue);
  c.mutable_admin()->set_watch_stall_timeout_s(s.admin.watch_stall_timeout_s);
  pb::EngineIo* engine = c.mutable_engine();
  engine->set_first_token_timeout_s(s.engine.first_token_timeout_s);
  engine->set_decode_read_timeout_s(s.engine.decode_read_timeout_s);
  engine->set_connect_timeout_s(s.engine.connect_timeout_s);
  engine->set_health_timeout_s(s.engine.health_timeout_s);
  engine->set_connector(s.engine.connector);
  engine->set_api_key_env(s.engine.api_key_env);
  pb::Recovery* recovery = c.mutable_recovery();
  recovery->set_eject_after(s.recovery.eject_after);
  recovery->set_failure_quarantine_s(s.recovery.failure_quarantine_s);
  recovery->set_readmit_interval_s(s.recovery.readmit_interval_s);
  recovery->set_liveness_interval_s(s.recovery.liveness_interval_s);
  recovery->set_liveness_misses(s.recovery.liveness_misses);
  recovery->set_engine_restart_policy(
      s.recovery.engine_restart_policy == router::RestartPolicy::kWholeWave ? "whole_wave"
                                                                            : "individual");
  pb::Limits* limits = c.mutable_limits();
  limits->set_max_tokens(s.limits.max_tokens);
  limits->set_max_messages(s.limits.max_messages);
  limits->set_max_prompts(s.limits.max_prompts);
  pb::Tls* tls = c.mutable_tls();  // empty: plaintext
  if (s.tls.enabled()) {
    tls->set_cert_file(s.tls.cert_file);
    tls->set_key_file(s.tls.key_file);
  }
  c.mutable_handoff()->set_remote_host(s.handoff.remote_host);
  c.mutable_handoff()->set_lease_s(s.handoff.lease_s);
  c.mutable_handoff()->set_release(s.handoff.release);
  c.mutable_handoff()->set_release_max_inflight(s.handoff.release_max_inflight);
  c.mutable_handoff()->set_release_timeout_s(s.handoff.release_timeout_s);
  pb::Placement* placement = c.mutable_placement();
  placement->set_prefill(s.placement.prefill);
  placement->set_index_chunks(s.placement.index_chunks);
  placement->set_imbalance_abs(s.placement.imbalance_abs);
  placement->set_imbalance_rel(s.placement.imbalance_rel);
  c.mutable_links()->set_hold_after(s.links.hold_after);
  c.mutable_links()->set_window_s(s.links.window_s);
  return c;
}

nlohmann::json SettingsToJson(const Settings& s) {
  return json::parse(SettingsToJsonText(s), nullptr, /*allow_exceptions=*/false);
}

absl::Status SettingsToStruct(const Settings& s, google::protobuf::Struct* out) {
  const auto status = google::protobuf::util::JsonStringToMessage(SettingsToJsonText(s), out);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("config as Struct: ", status.message().as_string()));
}

}  // namespace narwhal::server
