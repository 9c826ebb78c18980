#include "engines/http/stream_classifier.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <system_error>

#include "engines/json_limits.h"
#include "engines/json_text_repair.h"

namespace narwhal::engines {
namespace {

namespace od = simdjson::ondemand;

constexpr size_t kPadding = simdjson::SIMDJSON_PADDING;
// Buffers start at kInitialBytes (ordinary chunks are a few hundred bytes),
// grow to fit larger payloads, and go back to kInitialBytes after a payload
// larger than kRetainBytes.
constexpr size_t kInitialBytes = 1024;
constexpr size_t kRetainBytes = 64 * 1024;

// Keys that matter, identified once per key.
enum class Key : uint8_t {
  kOther,
  kError,
  kChoices,
  kUsage,
  kPromptTokensDetails,
  kCachedTokens,
  kObject,
  kMessage,
  kCode,
  kText,
  kDelta,
  kContent,
  kReasoning,
  kRefusal,
  kToolCalls,
  kTokenIds,
  kPromptTokenIds,
  kFinishReason,
  kCompletionTokens,
  kPromptTokens,
  kIndex,
};

Key IdentifyKey(std::string_view k) {
  switch (k.size()) {
    case 4:
      if (k == "text") return Key::kText;
      if (k == "code") return Key::kCode;
      break;
    case 5:
      if (k == "error") return Key::kError;
      if (k == "delta") return Key::kDelta;
      if (k == "usage") return Key::kUsage;
      if (k == "index") return Key::kIndex;
      break;
    case 6:
      if (k == "object") return Key::kObject;
      break;
    case 7:
      if (k == "choices") return Key::kChoices;
      if (k == "content") return Key::kContent;
      if (k == "message") return Key::kMessage;
      if (k == "refusal") return Key::kRefusal;
      break;
    case 9:
      if (k == "reasoning") return Key::kReasoning;
      if (k == "token_ids") return Key::kTokenIds;
      break;
    case 10:
      if (k == "tool_calls") return Key::kToolCalls;
      break;
    case 13:
      if (k == "finish_reason") return Key::kFinishReason;
      if (k == "prompt_tokens") return Key::kPromptTokens;
      if (k == "cached_tokens") return Key::kCachedTokens;
      break;
    case 16:
      if (k == "prompt_token_ids") return Key::kPromptTokenIds;
      break;
    case 17:
      if (k == "reasoning_content") return Key::kReasoning;
      if (k == "completion_tokens") return Key::kCompletionTokens;
      break;
    case 21:
      if (k == "prompt_tokens_details") return Key::kPromptTokensDetails;
      break;
    default:
      break;
  }
  return Key::kOther;
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A JSON number token, read as nlohmann::json reads one: an integer token that
// fits int64 (negative) or uint64 (non-negative) is an integer (uint64 values
// past INT64_MAX saturate); any other valid number is a float, valid unless it
// overflows a double (underflow is valid).
enum class Number : uint8_t { kInvalid, kInteger, kFloat };

Number ScanNumber(std::string_view token, long long* integer) {
  while (!token.empty() && IsJsonSpace(token.back())) token.remove_suffix(1);
  const char* const begin = token.data();
  const char* const end = begin + token.size();
  const char* p = begin;
  const bool negative = p < end && *p == '-';
  if (negative) ++p;
  const char* const int_begin = p;
  uint64_t magnitude = 0;  // exact while the integer part has at most 18 digits
  if (p < end && *p == '0') {
    ++p;
  } else if (p < end && *p >= '1' && *p <= '9') {
    for (; p < end && IsDigit(*p); ++p)
      magnitude = magnitude * 10 + static_cast<uint64_t>(*p - '0');
  } else {
    return Number::kInvalid;
  }
  const char* const int_end = p;
  bool is_float = false;
  const char* frac_begin = p;
  const char* frac_end = p;
  if (p < end && *p == '.') {
    is_float = true;
    frac_begin = ++p;
    if (p == end || !IsDigit(*p)) return Number::kInvalid;
    while (p < end && IsDigit(*p)) ++p;
    frac_end = p;
  }
  long long exponent = 0;  // saturates: only its sign and rough size matter
  if (p < end && (*p == 'e' || *p == 'E')) {
    is_float = true;
    ++p;
    bool exponent_negative = false;
    if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
    if (p == end || !IsDigit(*p)) return Number::kInvalid;
    for (; p < end && IsDigit(*p); ++p) {
      if (exponent < 1'000'000'000) exponent = exponent * 10 + (*p - '0');
    }
    if (exponent_negative) exponent = -exponent;
  }
  if (p != end) return Number::kInvalid;

  if (!is_float) {
    if (int_end - int_begin <= 18) {
      *integer = negative ? -static_cast<long long>(magnitude) : static_cast<long long>(magnitude);
      return Number::kInteger;
    }
    if (negative) {
      int64_t v = 0;
      const auto r = std::from_chars(begin, end, v);
      if (r.ec == std::errc() && r.ptr == end) {
        *integer = v;
        return Number::kInteger;
      }
    } else {
      uint64_t v = 0;
      const auto r = std::from_chars(begin, end, v);
      if (r.ec == std::errc() && r.ptr == end) {
        constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        *integer = static_cast<long long>(std::min(v, kMax));
        return Number::kInteger;
      }
    }
  }
  double d = 0;
  const auto r = std::from_chars(begin, end, d);
  if (r.ec == std::errc()) return Number::kFloat;
  if (r.ec != std::errc::result_out_of_range) return Number::kInvalid;
  // Out of range: an overflow when |value| >= 1, else an underflow. The
  // value is 0.d1d2... * 10^(lead + exponent), d1 its first non-zero digit.
  long long lead = 0;
  if (int_end - int_begin > 1 || *int_begin != '0') {
    lead = int_end - int_begin;
  } else {
    const char* q = frac_begin;
    while (q < frac_end && *q == '0') ++q;
    if (q == frac_end) return Number::kFloat;  // zero
    lead = -(q - frac_begin);
  }
  return lead + exponent > 0 ? Number::kInvalid : Number::kFloat;
}

// An error `code` as a status candidate: codes outside 0..100000 count as 0.
int CodeOf(long long v) { return static_cast<int>(v < 0 || v > 100000 ? 0 : v); }

// One classification: walks the document once, validating every value and
// copying out what StreamEvent carries. Every function returns false as soon
// as the input proves malformed. `depth` is the nesting level a container
// value would occupy (the root object is level 1).
class Scan {
 public:
  explicit Scan(StreamEvent* event) : event_(event) {}

  bool Document(od::document& doc) {
    od::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS) return false;
    if (!Root(root)) return false;
    // Only whitespace may follow the root object.
    const char* trailing = nullptr;
    return doc.current_location().get(trailing) == simdjson::OUT_OF_BOUNDS;
  }

  void Finish() {
    if (is_error_) {
      event_->kind = EventKind::kError;
      if (event_->error_message.empty()) event_->error_message.assign(root_message_);
      const int code = error_object_ ? error_code_ : root_code_;
      event_->error_status = (code >= 400 && code <= 599 && !error_code_string_) ? code : 500;
      return;
    }
    event_->tokens = tokens_;
    event_->kind = tokens_ > 0 ? EventKind::kToken : EventKind::kMetadata;
  }

 private:
  // Calls fn(key, value) for each member of `object`, in document order.
  template <typename Fn>
  static bool Members(od::object& object, Fn&& fn) {
    for (auto member : object) {
      if (member.error() != simdjson::SUCCESS) return false;
      od::field&& field = std::move(member).value_unsafe();
      std::string_view key;
      if (!KeyOf(field, &key) || !fn(IdentifyKey(key), field.value())) return false;
    }
    return true;
  }

  // Calls fn(value) for each element of `array`, in order.
  template <typename Fn>
  static bool Elements(od::array& array, Fn&& fn) {
    for (auto element : array) {
      if (element.error() != simdjson::SUCCESS) return false;
      od::value&& value = std::move(element).value_unsafe();
      if (!fn(value)) return false;
    }
    return true;
  }

  // A member's key, unescaped. Stage 1 has checked that every string is
  // closed, valid UTF-8 and free of control characters, so a key without a
  // backslash is its own raw bytes, up to the first quote.
  static bool KeyOf(od::field& field, std::string_view* key) {
    const char* const raw = field.key().raw();
    const char* p = raw;
    while (*p != '"' && *p != '\\') ++p;
    if (*p == '"') {
      *key = std::string_view(raw, static_cast<size_t>(p - raw));
      return true;
    }
    return field.unescaped_key().get(*key) == simdjson::SUCCESS;
  }

  // A string value, unescaped (validated the same way as KeyOf). Only
  // strings with escapes are copied (into the parser's string buffer). The
  // value is consumed either way: On-Demand steps over an unconsumed string
  // followed by ':' as if it were a key, which would hide a malformed
  // document.
  static bool StringOf(od::value& v, std::string_view* s) {
    std::string_view token = v.raw_json_token();
    while (!token.empty() && IsJsonSpace(token.back())) token.remove_suffix(1);
    if (token.size() >= 2 && token.back() == '"') {
      const std::string_view body = token.substr(1, token.size() - 2);
      od::raw_json_string raw;
      if (body.find('\\') == std::string_view::npos) {
        *s = body;
        return v.get_raw_json_string().get(raw) == simdjson::SUCCESS;
      }
    }
    return v.get_string().get(*s) == simdjson::SUCCESS;
  }

  static bool Type(od::value& v, od::json_type* type) {
    return v.type().get(*type) == simdjson::SUCCESS;
  }

  // Validates a value nobody needs.
  static bool Skip(od::value& v, int depth) {
    od::json_type type;
    if (!Type(v, &type)) return false;
    switch (type) {
      case od::json_type::object: {
        od::object object;
        if (depth > kMaxJsonDepth || v.get_object().get(object) != simdjson::SUCCESS) return false;
        return Members(object, [depth](Key, od::value& m) { return Skip(m, depth + 1); });
      }
      case od::json_type::array: {
        od::array array;
        if (depth > kMaxJsonDepth || v.get_array().get(array) != simdjson::SUCCESS) return false;
        return Elements(array, [depth](od::value& e) { return Skip(e, depth + 1); });
      }
      case od::json_type::string: {
        std::string_view s;
        return StringOf(v, &s);
      }
      case od::json_type::number: {
        // Read from its token and left unconsumed: the enclosing iteration
        // steps over a non-string scalar as exactly one token.
        long long unused = 0;
        return ScanNumber(v.raw_json_token(), &unused) != Number::kInvalid;
      }
      case od::json_type::boolean: {
        bool b = false;
        return v.get_bool().get(b) == simdjson::SUCCESS;
      }
      case od::json_type::null: {
        bool is_null = false;
        return v.is_null().get(is_null) == simdjson::SUCCESS && is_null;
      }
    }
    return false;
  }

  // A value that matters only when it is a string: *is_string and *s set for
  // a string, *is_string false for any other valid value.
  static bool String(od::value& v, int depth, bool* is_string, std::string_view* s) {
    od::json_type type;
    if (!Type(v, &type)) return false;
    *is_string = type == od::json_type::string;
    if (!*is_string) return Skip(v, depth);
    return StringOf(v, s);
  }

  // A value that matters only when it is an integer: *has_integer and
  // *integer set for an integer, *has_integer false for any other valid value
  // (floats included). Numbers are left unconsumed, as in Skip.
  static bool Integer(od::value& v, int depth, bool* has_integer, long long* integer) {
    od::json_type type;
    if (!Type(v, &type)) return false;
    *has_integer = false;
    if (type != od::json_type::number) return Skip(v, depth);
    const Number n = ScanNumber(v.raw_json_token(), integer);
    *has_integer = n == Number::kInteger;
    return n != Number::kInvalid;
  }

  bool Root(od::object& root) {
    constexpr int kDepth = 2;
    return Members(root, [this](Key key, od::value& v) {
      switch (key) {
        case Key::kError:
          return RootError(v);
        case Key::kObject: {  // the legacy flat error shape
          bool is_string = false;
          std::string_view s;
          if (!String(v, kDepth, &is_string, &s)) return false;
          if (is_string && s == "error") is_error_ = true;
          return true;
        }
        case Key::kMessage: {
          bool is_string = false;
          std::string_view s;
          if (!String(v, kDepth, &is_string, &s)) return false;
          if (is_string) root_message_ = s;
          return true;
        }
        case Key::kCode: {
          bool has_integer = false;
          long long code = 0;
          if (!Integer(v, kDepth, &has_integer, &code)) return false;
          if (has_integer) root_code_ = CodeOf(code);
          return true;
        }
        case Key::kChoices: {
          od::json_type type;
          if (!Type(v, &type)) return false;
          if (type != od::json_type::array) return Skip(v, kDepth);
          od::array choices;
          return v.get_array().get(choices) == simdjson::SUCCESS && Choices(choices);
        }
        case Key::kUsage: {
          od::json_type type;
          if (!Type(v, &type)) return false;
          if (type != od::json_type::object) return Skip(v, kDepth);
          od::object usage;
          return v.get_object().get(usage) == simdjson::SUCCESS && Usage(usage);
        }
        case Key::kPromptTokenIds:
        case Key::kTokenIds:
          event_->token_fields = true;
          if (key == Key::kTokenIds) return Skip(v, kDepth);
          return Ids(v, kDepth, &event_->has_prompt_token_ids, &event_->prompt_token_ids);
        default:
          return Skip(v, kDepth);
      }
    });
  }

  // root.error: an object (nested or legacy-in-nested shape) or a string.
  bool RootError(od::value& v) {
    constexpr int kDepth = 3;
    od::json_type type;
    if (!Type(v, &type)) return false;
    if (type == od::json_type::string) {
      std::string_view s;
      if (!StringOf(v, &s)) return false;
      is_error_ = true;
      event_->error_message.assign(s);
      return true;
    }
    if (type != od::json_type::object) return Skip(v, kDepth - 1);  // null: not an error
    od::object error;
    if (v.get_object().get(error) != simdjson::SUCCESS) return false;
    is_error_ = true;
    error_object_ = true;
    return Members(error, [this](Key key, od::value& m) {
      od::json_type t;
      if (key == Key::kMessage) {
        bool is_string = false;
        std::string_view s;
        if (!String(m, kDepth, &is_string, &s)) return false;
        if (is_string) event_->error_message.assign(s);
        return true;
      }
      if (key == Key::kCode) {
        if (!Type(m, &t)) return false;
        if (t == od::json_type::string) {
          error_code_string_ = true;
          std::string_view s;
          return StringOf(m, &s);
        }
        bool has_integer = false;
        long long code = 0;
        if (!Integer(m, kDepth, &has_integer, &code)) return false;
        if (has_integer) error_code_ = CodeOf(code);
        return true;
      }
      return Skip(m, kDepth);
    });
  }

  // root.choices: each object element is a choice; "choice 0" is the element
  // at position 0, whatever its `index` member says.
  bool Choices(od::array& choices) {
    constexpr int kDepth = 3;
    int position = 0;
    const bool ok = Elements(choices, [this, &position](od::value& v) {
      const int index = position < std::numeric_limits<int>::max() ? position++ : position;
      od::json_type type;
      if (!Type(v, &type)) return false;
      if (type != od::json_type::object) return Skip(v, kDepth);
      od::object choice;
      return v.get_object().get(choice) == simdjson::SUCCESS && Choice(choice, index);
    });
    event_->choices = position;
    return ok;
  }

  bool Choice(od::object& choice, int index) {
    constexpr int kDepth = 4;
    bool output = false;
    int token_ids = -1;
    const bool ok = Members(choice, [&](Key key, od::value& v) {
      switch (key) {
        case Key::kText: {
          bool is_string = false;
          std::string_view s;
          if (!String(v, kDepth, &is_string, &s)) return false;
          if (is_string && !s.empty()) {
            output = true;
            if (index == 0) event_->text.append(s);
          }
          return true;
        }
        case Key::kFinishReason: {
          bool is_string = false;
          std::string_view s;
          if (!String(v, kDepth, &is_string, &s)) return false;
          if (is_string && index == 0) event_->finish_reason.assign(s);
          return true;
        }
        case Key::kDelta:
        case Key::kMessage: {
          od::json_type type;
          if (!Type(v, &type)) return false;
          if (type != od::json_type::object) return Skip(v, kDepth);
          od::object delta;
          return v.get_object().get(delta) == simdjson::SUCCESS && Delta(delta, index, &output);
        }
        case Key::kTokenIds: {
          event_->token_fields = true;
          int count = 0;
          bool is_array = false;
          if (index == 0) {
            if (!Ids(v, kDepth, &event_->has_token_ids, &event_->token_ids, &is_array, &count)) {
              return false;
            }
          } else if (!Count(v, kDepth, &is_array, &count)) {
            return false;
          }
          if (is_array && count > 0) token_ids = count;
          return true;
        }
        case Key::kPromptTokenIds:
          event_->token_fields = true;
          if (index != 0) return Skip(v, kDepth);
          return Ids(v, kDepth, &event_->has_prompt_token_ids, &event_->prompt_token_ids);
        case Key::kIndex: {
          bool has_integer = false;
          long long i = 0;
          if (!Integer(v, kDepth, &has_integer, &i)) return false;
          if (has_integer && (i < 0 || i >= kMaxChoices) && !event_->stray_choice_index) {
            event_->stray_choice_index = i;
          }
          return true;
        }
        default:
          return Skip(v, kDepth);
      }
    });
    if (!ok) return false;
    if (token_ids > 0) {
      tokens_ += token_ids;
    } else if (output) {
      tokens_ += 1;
    }
    return true;
  }

  // choices[i].delta (or .message).
  bool Delta(od::object& delta, int index, bool* output) {
    constexpr int kDepth = 5;
    return Members(delta, [&](Key key, od::value& v) {
      switch (key) {
        case Key::kContent:
        case Key::kReasoning:
        case Key::kRefusal: {
          bool is_string = false;
          std::string_view s;
          if (!String(v, kDepth, &is_string, &s)) return false;
          if (is_string && !s.empty()) {
            *output = true;
            if (key == Key::kContent && index == 0) event_->text.append(s);
          }
          return true;
        }
        case Key::kToolCalls: {
          int count = 0;
          bool is_array = false;
          if (!Count(v, kDepth, &is_array, &count)) return false;
          if (is_array && count > 0) *output = true;
          return true;
        }
        default:
          return Skip(v, kDepth);
      }
    });
  }

  // An array's length (its elements validated); any other value validated.
  static bool Count(od::value& v, int depth, bool* is_array, int* count) {
    od::json_type type;
    if (!Type(v, &type)) return false;
    *is_array = type == od::json_type::array;
    if (!*is_array) return Skip(v, depth);
    od::array array;
    if (depth > kMaxJsonDepth || v.get_array().get(array) != simdjson::SUCCESS) return false;
    return Elements(array, [depth, count](od::value& e) {
      ++*count;
      return Skip(e, depth + 1);
    });
  }

  // A list of token ids: *valid and *ids set when every element is an
  // integer in 0..2^32-1 (else *ids empty); any other value validated.
  // `is_array` and `count` as Count's, when given.
  bool Ids(od::value& v, int depth, bool* valid, std::vector<uint32_t>* ids,
           bool* is_array = nullptr, int* count = nullptr) {
    od::json_type type;
    if (!Type(v, &type)) return false;
    if (is_array != nullptr) *is_array = type == od::json_type::array;
    *valid = false;
    ids->clear();
    if (type != od::json_type::array) return Skip(v, depth);
    od::array array;
    if (depth > kMaxJsonDepth || v.get_array().get(array) != simdjson::SUCCESS) return false;
    bool all = true;
    const bool ok = Elements(array, [&](od::value& e) {
      if (count != nullptr) ++*count;
      bool has_integer = false;
      long long id = 0;
      if (!Integer(e, depth + 1, &has_integer, &id)) return false;
      if (!has_integer || id < 0 || id > std::numeric_limits<uint32_t>::max()) {
        all = false;
      } else if (all) {
        ids->push_back(static_cast<uint32_t>(id));
      }
      return true;
    });
    if (!ok) return false;
    *valid = all;
    if (!all) ids->clear();
    return true;
  }

  bool Usage(od::object& usage) {
    constexpr int kDepth = 3;
    return Members(usage, [this](Key key, od::value& v) {
      if (key == Key::kPromptTokensDetails) {
        od::json_type type;
        if (!Type(v, &type)) return false;
        if (type != od::json_type::object) return Skip(v, kDepth);
        od::object details;
        return v.get_object().get(details) == simdjson::SUCCESS && PromptTokensDetails(details);
      }
      if (key != Key::kCompletionTokens && key != Key::kPromptTokens) return Skip(v, kDepth);
      bool has_integer = false;
      long long n = 0;
      if (!Integer(v, kDepth, &has_integer, &n)) return false;
      if (has_integer) {
        (key == Key::kCompletionTokens ? event_->completion_tokens : event_->prompt_tokens) = n;
      }
      return true;
    });
  }

  // usage.prompt_tokens_details: cached_tokens.
  bool PromptTokensDetails(od::object& details) {
    constexpr int kDepth = 4;
    return Members(details, [this](Key key, od::value& v) {
      if (key != Key::kCachedTokens) return Skip(v, kDepth);
      bool has_integer = false;
      long long n = 0;
      if (!Integer(v, kDepth, &has_integer, &n)) return false;
      if (has_integer) event_->cached_tokens = n;
      return true;
    });
  }

  StreamEvent* event_;
  bool is_error_ = false;
  bool error_object_ = false;
  bool error_code_string_ = false;
  int error_code_ = 0;
  int root_code_ = 0;
  std::string_view root_message_;  // into the payload copy or the parser's string buffer
  int tokens_ = 0;
};

}  // namespace

// The reusable state of a StreamClassifier.
struct StreamClassifier::Parser {
  Parser() { Reserve(kInitialBytes); }

  // Room for `bytes` of payload (plus padding) in both buffers. False when
  // memory is short.
  bool Reserve(size_t bytes) {
    if (bytes > capacity) {
      const size_t want = std::max(bytes, std::min(2 * capacity, bytes + kRetainBytes));
      std::unique_ptr<char[]> grown(new (std::nothrow) char[want + kPadding]);
      if (grown == nullptr) return false;
      copy = std::move(grown);
      capacity = want;
    }
    if (parser.capacity() < bytes &&
        parser.allocate(capacity, static_cast<size_t>(kMaxJsonDepth) + 1) != simdjson::SUCCESS) {
      return false;
    }
    return true;
  }

  // Gives back buffers grown past kRetainBytes.
  void Trim() {
    if (capacity <= kRetainBytes) return;
    copy.reset();
    capacity = 0;
    parser = od::parser();
    Reserve(kInitialBytes);
  }

  od::parser parser;
  std::unique_ptr<char[]> copy;  // capacity + kPadding bytes
  size_t capacity = 0;
};

StreamClassifier::StreamClassifier() : parser_(std::make_unique<Parser>()) {}
StreamClassifier::~StreamClassifier() = default;
StreamClassifier::StreamClassifier(StreamClassifier&&) noexcept = default;
StreamClassifier& StreamClassifier::operator=(StreamClassifier&&) noexcept = default;

bool StreamClassifier::ScanPayload(std::string_view data, StreamEvent* event) {
  bool ok = false;
  try {
    if (parser_ == nullptr) parser_ = std::make_unique<Parser>();  // moved from
    Parser& p = *parser_;
    if (p.Reserve(data.size())) {
      std::memcpy(p.copy.get(), data.data(), data.size());
      std::memset(p.copy.get() + data.size(), 0, kPadding);
      od::document doc;
      if (p.parser.iterate(p.copy.get(), data.size(), data.size() + kPadding).get(doc) ==
          simdjson::SUCCESS) {
        Scan scan(event);
        ok = scan.Document(doc);
        if (ok) scan.Finish();
      }
    }
    p.Trim();
  } catch (...) {  // out of memory copying text out: nothing else throws
    ok = false;
  }
  if (!ok) event->Clear();  // kMalformed, with no partial fields
  return ok;
}

std::string_view StreamClassifier::Classify(std::string_view data, StreamEvent* event) {
  event->Clear();
  // Trim surrounding whitespace for the terminator check only.
  std::string_view trimmed = data;
  while (!trimmed.empty() && (trimmed.front() == ' ' || trimmed.front() == '\t')) {
    trimmed.remove_prefix(1);
  }
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\t')) {
    trimmed.remove_suffix(1);
  }
  if (trimmed == "[DONE]") {
    event->kind = EventKind::kDone;
    return data;
  }
  if (trimmed.empty() || trimmed.front() != '{') return data;  // kMalformed
  if (ScanPayload(data, event)) return data;
  // Text that is not valid Unicode (raw bytes of a cut character, an unpaired
  // surrogate escape) is what engines mean as text: repaired with U+FFFD,
  // and the repaired payload is what the client gets.
  if (!RepairJsonText(data, &repaired_) || !ScanPayload(repaired_, event)) return data;
  TrimRepaired();
  return repaired_;
}

void StreamClassifier::TrimRepaired() {
  if (repaired_.capacity() > kRetainBytes && repaired_.size() <= kRetainBytes) {
    repaired_.shrink_to_fit();
  }
}

std::string_view ClassifyEvent(std::string_view data, StreamEvent* event) {
  thread_local StreamClassifier classifier;
  return classifier.Classify(data, event);
}

}  // namespace narwhal::engines
