#include "server/config_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engines/json_limits.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using router::Settings;

constexpr double kMaxDurationS = 1e7;
constexpr double kMaxRetryBudget = 1e9;
constexpr long long kMinRequestBytes = 1024;
constexpr long long kMaxRequestBytes = 1LL << 30;
constexpr int kMaxIoThreads = 64;
constexpr int kMaxConnections = 1000000;
constexpr int kMinHeaderBytes = 1024;
constexpr int kMaxHeaderBytes = 1 << 20;
constexpr int kMaxHeaders = 10000;
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

// A bound or a configured value: integers without a fraction, else shortest %g.
std::string FormatNumber(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

bool IsAnnotation(std::string_view key) { return !key.empty() && key.front() == '_'; }

// All violations found so far, in the order found.
class Errors {
 public:
  void Add(std::string message) { messages_.push_back(std::move(message)); }
  bool empty() const { return messages_.empty(); }

  // "<label>: e1; e2; ..." capped at kMaxReportedErrors.
  std::string Join(absl::string_view label) const {
    std::vector<std::string> shown(
        messages_.begin(), messages_.begin() + std::min(messages_.size(), kMaxReportedErrors));
    if (messages_.size() > kMaxReportedErrors) {
      shown.push_back(absl::StrCat("(", messages_.size() - kMaxReportedErrors, " more errors)"));
    }
    return absl::StrCat(label, ": ", absl::StrJoin(shown, "; "));
  }

 private:
  std::vector<std::string> messages_;
};

// ---------------------------------------------------------------------------
// Syntax-level checks: JSON parse errors and duplicate object keys.

// Tracks the path of the value being parsed (through nlohmann's parser
// callback) and remembers every key that repeats within one object.
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
            duplicates_.push_back(CurrentPath() + KeySegment(top.last_key));
          }
        }
        break;
      case json::parse_event_t::value:
        NextChildSegment();
        break;
    }
    return true;  // keep every value
  }

  const std::vector<std::string>& duplicates() const { return duplicates_; }

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
// prefix.
std::string ParseErrorReason(const std::string& what) {
  const size_t at = what.find("parse error");
  const size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  return Printable(colon == std::string::npos ? what : what.substr(colon + 2));
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
    errors->Add("invalid JSON: the document " + engines::DepthLimitText());
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
    errors->Add(absl::StrCat("invalid JSON at line ", line, ", column ", column, ": ",
                             ParseErrorReason(e.what())));
    return std::nullopt;
  } catch (const json::exception& e) {
    // E.g. out_of_range 406 "number overflow parsing '1e999'" (no position).
    errors->Add(absl::StrCat("invalid JSON: ", WithoutExceptionId(e.what())));
    return std::nullopt;
  }
  for (const std::string& path : finder.duplicates()) {
    errors->Add(absl::StrCat(path, ": duplicate key"));
  }
  return root;
}

// ---------------------------------------------------------------------------
// Value-level checks.

enum class Lower { kPositive, kNonNegative };

// Why `text` is not a valid HOST:PORT with a port in [min_port, 65535], or
// nullopt when it is. HOST is a hostname, an IPv4 literal or [IPv6].
std::optional<std::string> HostPortError(std::string_view text, int min_port) {
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
  return std::nullopt;
}

// Why `url` is not "http://host:port" (optionally with a trailing "/"), or
// nullopt when it is; then *normalized is the URL without the trailing "/".
std::optional<std::string> EngineUrlError(const std::string& url, std::string* normalized) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    return "https is not supported (engines are reached over plain http)";
  }
  if (url.rfind(kScheme, 0) != 0) return "must start with http://";
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('@') != std::string_view::npos) return "credentials are not allowed";
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return "a query or fragment is not allowed";
  }
  if (rest.find('/') != std::string_view::npos) return "a path is not allowed";
  if (std::optional<std::string> error = HostPortError(rest, 1)) return error;
  *normalized = std::string(kScheme) + std::string(rest);
  return std::nullopt;
}

bool IsEnvVarName(const std::string& s) {
  if (s.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Reads the keys of one JSON object at `path`, reporting violations into
// `errors`. Every Read* method leaves *out untouched when the key is absent
// and returns false exactly when it reported an error (absent is valid).
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, Errors* errors)
      : object_(object), path_(std::move(path)), errors_(errors) {}

  std::string PathOf(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }

  void Error(absl::string_view key, absl::string_view message) const {
    errors_->Add(absl::StrCat(PathOf(key), " ", message));
  }

  const json* Find(absl::string_view key) const {
    const auto it = object_.find(std::string(key));
    return it == object_.end() ? nullptr : &*it;
  }

  // Reports every key that is neither listed nor an annotation.
  void RejectUnknownKeys(std::initializer_list<absl::string_view> known) const {
    for (const auto& item : object_.items()) {
      const std::string& key = item.key();
      if (IsAnnotation(key)) continue;
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        errors_->Add(absl::StrCat(PathOf(key), ": unknown key"));
      }
    }
  }

  // Reports a missing key; true when present.
  bool Require(absl::string_view key) const {
    if (Find(key) != nullptr) return true;
    Error(key, "is required");
    return false;
  }

  bool String(absl::string_view key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (!v->is_string()) {
      Error(key, absl::StrCat("must be a string (got ", TypeName(*v), ")"));
      return false;
    }
    *out = v->get<std::string>();
    return true;
  }

  bool NonEmptyString(absl::string_view key, std::string* out) const {
    std::string value;
    if (Find(key) == nullptr) return true;
    if (!String(key, &value)) return false;
    if (value.empty()) {
      Error(key, "must not be empty");
      return false;
    }
    *out = std::move(value);
    return true;
  }

  bool OptionalNonEmptyString(absl::string_view key, std::optional<std::string>* out) const {
    std::string value;
    if (Find(key) == nullptr) return true;
    if (!NonEmptyString(key, &value)) return false;
    *out = std::move(value);
    return true;
  }

  // A string that must equal one of `names`; *out gets its index.
  bool Choice(absl::string_view key, std::initializer_list<absl::string_view> names,
              size_t* out) const {
    std::string value;
    if (Find(key) == nullptr) return true;
    if (!String(key, &value)) return false;
    const auto it = std::find(names.begin(), names.end(), value);
    if (it == names.end()) {
      std::vector<std::string> quoted;
      for (absl::string_view n : names) quoted.push_back(absl::StrCat("\"", n, "\""));
      Error(key, absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), " (got ",
                              Quote(value), ")"));
      return false;
    }
    *out = static_cast<size_t>(it - names.begin());
    return true;
  }

  bool EnvVarName(absl::string_view key, std::string* out) const {
    std::string value;
    if (Find(key) == nullptr) return true;
    if (!String(key, &value)) return false;
    if (!value.empty() && !IsEnvVarName(value)) {
      Error(key, absl::StrCat("must be empty or an environment variable name matching "
                              "[A-Za-z_][A-Za-z0-9_]* (got ",
                              Quote(value), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  bool HostPort(absl::string_view key, std::string* out) const {
    std::string value;
    if (Find(key) == nullptr) return true;
    if (!String(key, &value)) return false;
    if (std::optional<std::string> why = HostPortError(value, 0)) {
      Error(key, absl::StrCat("must be HOST:PORT: ", *why, " (got ", Quote(value), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  // A JSON integer in [lo, hi]. "between lo and hi" is said when hi is a real
  // limit rather than the storage type's maximum (`hi_is_cap` false).
  bool Integer(absl::string_view key, long long lo, long long hi, bool hi_is_cap,
               long long* out) const {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (!v->is_number_integer()) {
      Error(key, absl::StrCat("must be an integer (got ", TypeName(*v), " ", Show(*v), ")"));
      return false;
    }
    bool below = false;
    bool above = false;
    long long value = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      above = u > static_cast<uint64_t>(hi);
      value = above ? hi : static_cast<long long>(u);
      below = !above && value < lo;
    } else {
      value = v->get<long long>();
      below = value < lo;
      above = value > hi;
    }
    if (below || above) {
      std::string rule = !hi_is_cap ? absl::StrCat("must be between ", lo, " and ", hi)
                         : below    ? absl::StrCat("must be >= ", lo)
                                    : absl::StrCat("must be <= ", hi);
      Error(key, absl::StrCat(rule, " (got ", Show(*v), ")"));
      return false;
    }
    *out = value;
    return true;
  }

  bool Int(absl::string_view key, int lo, int hi, bool hi_is_cap, int* out) const {
    long long value = 0;
    if (Find(key) == nullptr) return true;
    if (!Integer(key, lo, hi, hi_is_cap, &value)) return false;
    *out = static_cast<int>(value);
    return true;
  }

  // A finite JSON number (integer or not, never boolean) in the range.
  bool Number(absl::string_view key, Lower lower, double hi, absl::string_view kind,
              double* out) const {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (!v->is_number()) {
      Error(key, absl::StrCat("must be ", kind, " (got ", TypeName(*v), ")"));
      return false;
    }
    const double value = v->get<double>();
    std::string rule;
    if (!std::isfinite(value)) {
      rule = "must be finite";
    } else if (lower == Lower::kPositive && !(value > 0)) {
      rule = "must be > 0";
    } else if (lower == Lower::kNonNegative && value < 0) {
      rule = "must be >= 0";
    } else if (value > hi) {
      rule = absl::StrCat("must be <= ", FormatNumber(hi));
    }
    if (!rule.empty()) {
      Error(key, absl::StrCat(rule, " (got ", Show(*v), ")"));
      return false;
    }
    *out = value;
    return true;
  }

  bool Duration(absl::string_view key, Lower lower, double* out) const {
    return Number(key, lower, kMaxDurationS, "a number of seconds", out);
  }

 private:
  const json& object_;
  std::string path_;
  Errors* errors_;
};

// The object under `key`, or nullptr when absent or (reported) not an object.
const json* Section(const ObjectReader& parent, absl::string_view key) {
  const json* v = parent.Find(key);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    parent.Error(key, absl::StrCat("must be an object (got ", TypeName(*v), ")"));
    return nullptr;
  }
  return v;
}

// ---------------------------------------------------------------------------
// Sections.

void ReadListen(const json& node, Errors* errors, router::ListenSettings* out) {
  ObjectReader r(node, "listen", errors);
  r.RejectUnknownKeys({"http", "grpc", "admin"});
  r.HostPort("http", &out->http);
  r.HostPort("grpc", &out->grpc);
  r.HostPort("admin", &out->admin);
}

// Returns false when the entry is not an object or its role is unknown (then
// the fleet-level role check is skipped).
bool ReadEngine(const json& node, const std::string& path, Errors* errors,
                std::map<std::string, std::string>* iid_paths, router::EngineSettings* out) {
  if (!node.is_object()) {
    errors->Add(absl::StrCat(path, " must be an object (got ", TypeName(node), ")"));
    return false;
  }
  ObjectReader r(node, path, errors);
  r.RejectUnknownKeys({"iid", "url", "role"});
  if (r.Require("iid") && r.NonEmptyString("iid", &out->iid)) {
    const bool printable = std::all_of(out->iid.begin(), out->iid.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return u > 0x20 && u != 0x7f;
    });
    if (!printable) {
      r.Error("iid", absl::StrCat("must not contain spaces or control characters (got ",
                                  Quote(out->iid), ")"));
    } else if (const auto [it, inserted] = iid_paths->emplace(out->iid, r.PathOf("iid"));
               !inserted) {
      r.Error("iid", absl::StrCat(Quote(out->iid), " is a duplicate of ", it->second));
    }
  }
  std::string url;
  if (r.Require("url") && r.String("url", &url)) {
    if (std::optional<std::string> why = EngineUrlError(url, &out->url)) {
      r.Error("url", absl::StrCat("must be http://host:port: ", *why, " (got ", Quote(url), ")"));
    }
  }
  size_t role = 2;
  const bool role_ok = r.Choice("role", {"prefill", "decode", "both"}, &role);
  constexpr router::Role kRoles[] = {router::Role::kPrefill, router::Role::kDecode,
                                     router::Role::kBoth};
  out->role = kRoles[role];
  return role_ok;
}

void ReadEngines(const ObjectReader& top, Errors* errors,
                 std::vector<router::EngineSettings>* out) {
  if (!top.Require("engines")) return;
  const json& engines = *top.Find("engines");
  if (!engines.is_array()) {
    top.Error("engines", absl::StrCat("must be an array (got ", TypeName(engines), ")"));
    return;
  }
  if (engines.empty()) {
    top.Error("engines", "must not be empty");
    return;
  }
  std::map<std::string, std::string> iid_paths;
  bool roles_ok = true;
  for (size_t i = 0; i < engines.size(); ++i) {
    router::EngineSettings engine;
    roles_ok &=
        ReadEngine(engines[i], absl::StrCat("engines[", i, "]"), errors, &iid_paths, &engine);
    out->push_back(std::move(engine));
  }
  if (!roles_ok) return;
  const bool can_prefill = std::any_of(out->begin(), out->end(),
                                       [](const auto& e) { return router::CanPrefill(e.role); });
  const bool can_decode = std::any_of(out->begin(), out->end(),
                                      [](const auto& e) { return router::CanDecode(e.role); });
  if (!can_prefill) errors->Add("engines: no engine can serve the prefill role");
  if (!can_decode) errors->Add("engines: no engine can serve the decode role");
}

void ReadEngineContract(const json& node, Errors* errors, router::EngineContract* out) {
  ObjectReader r(node, "engine_contract", errors);
  r.RejectUnknownKeys(
      {"vllm_version", "model", "max_model_len", "connector", "system_fingerprint"});
  if (r.Require("vllm_version")) r.NonEmptyString("vllm_version", &out->vllm_version);
  r.OptionalNonEmptyString("model", &out->model);
  long long max_model_len = 0;
  if (r.Find("max_model_len") != nullptr &&
      r.Integer("max_model_len", 1, LLONG_MAX, /*hi_is_cap=*/true, &max_model_len)) {
    out->max_model_len = max_model_len;
  }
  r.NonEmptyString("connector", &out->connector);
  r.OptionalNonEmptyString("system_fingerprint", &out->system_fingerprint);
}

// Returns whether serving.request_timeout_s is valid (for cross-section rules).
bool ReadServing(const json& node, Errors* errors, router::ServingSettings* out) {
  ObjectReader r(node, "serving", errors);
  r.RejectUnknownKeys({"max_attempts", "request_timeout_s", "prefill_timeout_s",
                       "handoff_timeout_s", "retry_budget", "retry_replenish", "retry_base_s",
                       "retry_cap_s", "max_inflight", "max_request_bytes", "graceful_timeout_s",
                       "api_key_env", "io_threads", "max_connections", "max_header_bytes",
                       "max_headers", "header_timeout_s", "keepalive_timeout_s"});
  r.Int("max_attempts", 1, 3, /*hi_is_cap=*/false, &out->max_attempts);
  const bool request_ok =
      r.Duration("request_timeout_s", Lower::kPositive, &out->request_timeout_s);
  const bool prefill_ok =
      r.Duration("prefill_timeout_s", Lower::kPositive, &out->prefill_timeout_s);
  const bool handoff_ok =
      r.Duration("handoff_timeout_s", Lower::kNonNegative, &out->handoff_timeout_s);
  r.Number("retry_budget", Lower::kNonNegative, kMaxRetryBudget, "a number", &out->retry_budget);
  r.Number("retry_replenish", Lower::kNonNegative, 1, "a number", &out->retry_replenish);
  const bool base_ok = r.Duration("retry_base_s", Lower::kNonNegative, &out->retry_base_s);
  const bool cap_ok = r.Duration("retry_cap_s", Lower::kNonNegative, &out->retry_cap_s);
  r.Int("max_inflight", 1, 100000, /*hi_is_cap=*/false, &out->max_inflight);
  r.Integer("max_request_bytes", kMinRequestBytes, kMaxRequestBytes, /*hi_is_cap=*/false,
            &out->max_request_bytes);
  r.Duration("graceful_timeout_s", Lower::kNonNegative, &out->graceful_timeout_s);
  r.EnvVarName("api_key_env", &out->api_key_env);
  r.Int("io_threads", 0, kMaxIoThreads, /*hi_is_cap=*/false, &out->io_threads);
  r.Int("max_connections", 1, kMaxConnections, /*hi_is_cap=*/false, &out->max_connections);
  r.Int("max_header_bytes", kMinHeaderBytes, kMaxHeaderBytes, /*hi_is_cap=*/false,
        &out->max_header_bytes);
  r.Int("max_headers", 1, kMaxHeaders, /*hi_is_cap=*/false, &out->max_headers);
  r.Duration("header_timeout_s", Lower::kPositive, &out->header_timeout_s);
  r.Duration("keepalive_timeout_s", Lower::kPositive, &out->keepalive_timeout_s);

  const std::string request =
      absl::StrCat("serving.request_timeout_s (", FormatNumber(out->request_timeout_s), ")");
  if (request_ok && prefill_ok && out->prefill_timeout_s > out->request_timeout_s) {
    r.Error("prefill_timeout_s", absl::StrCat("must be <= ", request, " (got ",
                                              FormatNumber(out->prefill_timeout_s), ")"));
  }
  if (request_ok && handoff_ok && out->handoff_timeout_s > out->request_timeout_s) {
    r.Error("handoff_timeout_s", absl::StrCat("must be <= ", request, " (got ",
                                              FormatNumber(out->handoff_timeout_s), ")"));
  }
  if (base_ok && cap_ok && out->retry_cap_s < out->retry_base_s) {
    r.Error("retry_cap_s",
            absl::StrCat("must be >= serving.retry_base_s (", FormatNumber(out->retry_base_s),
                         ") (got ", FormatNumber(out->retry_cap_s), ")"));
  }
  return request_ok;
}

void ReadAdmin(const json& node, Errors* errors, router::AdminSettings* out) {
  ObjectReader r(node, "admin", errors);
  r.RejectUnknownKeys({"token_env"});
  r.EnvVarName("token_env", &out->token_env);
}

// `request_timeout_s` is nullopt when serving.request_timeout_s was invalid.
void ReadEngineIo(const json& node, std::optional<double> request_timeout_s, Errors* errors,
                  router::EngineIoSettings* out) {
  ObjectReader r(node, "engine", errors);
  r.RejectUnknownKeys({"first_token_timeout_s", "decode_read_timeout_s", "connect_timeout_s",
                       "health_timeout_s", "connector", "api_key_env"});
  const bool first_ok =
      r.Duration("first_token_timeout_s", Lower::kPositive, &out->first_token_timeout_s);
  r.Duration("decode_read_timeout_s", Lower::kNonNegative, &out->decode_read_timeout_s);
  r.Duration("connect_timeout_s", Lower::kPositive, &out->connect_timeout_s);
  r.Duration("health_timeout_s", Lower::kPositive, &out->health_timeout_s);
  r.NonEmptyString("connector", &out->connector);
  r.EnvVarName("api_key_env", &out->api_key_env);
  if (first_ok && request_timeout_s && out->first_token_timeout_s > *request_timeout_s) {
    r.Error("first_token_timeout_s",
            absl::StrCat("must be <= serving.request_timeout_s (", FormatNumber(*request_timeout_s),
                         ") (got ", FormatNumber(out->first_token_timeout_s), ")"));
  }
}

void ReadRecovery(const json& node, Errors* errors, router::RecoverySettings* out) {
  ObjectReader r(node, "recovery", errors);
  r.RejectUnknownKeys({"eject_after", "failure_quarantine_s", "readmit_interval_s",
                       "liveness_interval_s", "liveness_misses", "engine_restart_policy"});
  r.Int("eject_after", 1, INT_MAX, /*hi_is_cap=*/true, &out->eject_after);
  r.Duration("failure_quarantine_s", Lower::kNonNegative, &out->failure_quarantine_s);
  r.Duration("readmit_interval_s", Lower::kPositive, &out->readmit_interval_s);
  const bool liveness_ok =
      r.Duration("liveness_interval_s", Lower::kNonNegative, &out->liveness_interval_s);
  r.Int("liveness_misses", 1, INT_MAX, /*hi_is_cap=*/true, &out->liveness_misses);
  size_t policy = 0;
  const bool policy_ok = r.Choice("engine_restart_policy", {"individual", "whole_wave"}, &policy);
  out->engine_restart_policy =
      policy == 1 ? router::RestartPolicy::kWholeWave : router::RestartPolicy::kIndividual;
  if (policy_ok && liveness_ok && out->engine_restart_policy == router::RestartPolicy::kWholeWave &&
      out->liveness_interval_s <= 0) {
    r.Error("engine_restart_policy",
            "\"whole_wave\" requires recovery.liveness_interval_s > 0 (liveness sweeps detect "
            "engine restarts)");
  }
}

void ReadSettings(const json& root, Errors* errors, Settings* out) {
  ObjectReader top(root, "", errors);
  top.RejectUnknownKeys(
      {"model", "listen", "engines", "engine_contract", "serving", "admin", "engine", "recovery"});
  if (top.Require("model")) top.NonEmptyString("model", &out->model);
  if (const json* listen = Section(top, "listen")) ReadListen(*listen, errors, &out->listen);
  ReadEngines(top, errors, &out->engines);
  if (const json* contract = Section(top, "engine_contract")) {
    out->engine_contract.emplace();
    ReadEngineContract(*contract, errors, &*out->engine_contract);
  }
  bool request_ok = true;
  if (const json* serving = Section(top, "serving")) {
    request_ok = ReadServing(*serving, errors, &out->serving);
  }
  if (const json* admin = Section(top, "admin")) ReadAdmin(*admin, errors, &out->admin);
  if (const json* engine = Section(top, "engine")) {
    ReadEngineIo(*engine,
                 request_ok ? std::optional<double>(out->serving.request_timeout_s) : std::nullopt,
                 errors, &out->engine);
  }
  if (const json* recovery = Section(top, "recovery")) {
    ReadRecovery(*recovery, errors, &out->recovery);
  }
}

absl::StatusOr<Settings> Parse(std::string_view text, absl::string_view label) {
  Errors errors;
  std::optional<json> root = ParseJson(text, &errors);
  if (!root) return absl::InvalidArgumentError(errors.Join(label));
  if (!root->is_object()) {
    errors.Add(absl::StrCat("the top level must be a JSON object (got ", TypeName(*root), ")"));
    return absl::InvalidArgumentError(errors.Join(label));
  }
  Settings settings;
  ReadSettings(*root, &errors, &settings);
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

nlohmann::json SettingsToJson(const Settings& s) {
  json engines = json::array();
  for (const router::EngineSettings& e : s.engines) {
    engines.push_back({{"iid", e.iid}, {"url", e.url}, {"role", router::RoleName(e.role)}});
  }
  json out = {
      {"model", s.model},
      {"listen", {{"http", s.listen.http}, {"grpc", s.listen.grpc}, {"admin", s.listen.admin}}},
      {"engines", std::move(engines)},
      {"serving",
       {{"max_attempts", s.serving.max_attempts},
        {"request_timeout_s", s.serving.request_timeout_s},
        {"prefill_timeout_s", s.serving.prefill_timeout_s},
        {"handoff_timeout_s", s.serving.handoff_timeout_s},
        {"retry_budget", s.serving.retry_budget},
        {"retry_replenish", s.serving.retry_replenish},
        {"retry_base_s", s.serving.retry_base_s},
        {"retry_cap_s", s.serving.retry_cap_s},
        {"max_inflight", s.serving.max_inflight},
        {"max_request_bytes", s.serving.max_request_bytes},
        {"graceful_timeout_s", s.serving.graceful_timeout_s},
        {"api_key_env", s.serving.api_key_env},
        {"io_threads", s.serving.io_threads},
        {"max_connections", s.serving.max_connections},
        {"max_header_bytes", s.serving.max_header_bytes},
        {"max_headers", s.serving.max_headers},
        {"header_timeout_s", s.serving.header_timeout_s},
        {"keepalive_timeout_s", s.serving.keepalive_timeout_s}}},
      {"admin", {{"token_env", s.admin.token_env}}},
      {"engine",
       {{"first_token_timeout_s", s.engine.first_token_timeout_s},
        {"decode_read_timeout_s", s.engine.decode_read_timeout_s},
        {"connect_timeout_s", s.engine.connect_timeout_s},
        {"health_timeout_s", s.engine.health_timeout_s},
        {"connector", s.engine.connector},
        {"api_key_env", s.engine.api_key_env}}},
      {"recovery",
       {{"eject_after", s.recovery.eject_after},
        {"failure_quarantine_s", s.recovery.failure_quarantine_s},
        {"readmit_interval_s", s.recovery.readmit_interval_s},
        {"liveness_interval_s", s.recovery.liveness_interval_s},
        {"liveness_misses", s.recovery.liveness_misses},
        {"engine_restart_policy",
         s.recovery.engine_restart_policy == router::RestartPolicy::kWholeWave ? "whole_wave"
                                                                               : "individual"}}},
  };
  if (s.engine_contract) {
    const router::EngineContract& c = *s.engine_contract;
    json contract = {{"vllm_version", c.vllm_version}, {"connector", c.connector}};
    if (c.model) contract["model"] = *c.model;
    if (c.max_model_len) contract["max_model_len"] = *c.max_model_len;
    if (c.system_fingerprint) contract["system_fingerprint"] = *c.system_fingerprint;
    out["engine_contract"] = std::move(contract);
  }
  return out;
}

}  // namespace narwhal::server
