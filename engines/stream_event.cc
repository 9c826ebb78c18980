#include "engines/stream_event.h"

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace narwhal::engines {
namespace {

using json = nlohmann::json;

// What a container is, as far as classification cares.
enum class Ctx : uint8_t {
  kRoot,       // the top-level object
  kError,      // root.error (object)
  kChoices,    // root.choices (array)
  kChoice,     // root.choices[i]
  kDelta,      // root.choices[i].delta (or .message)
  kUsage,      // root.usage
  kCountable,  // an array whose non-emptiness means output (tool_calls, token_ids)
  kOther,      // anything else: skipped
};

// Keys that matter, identified once per key event.
enum class Key : uint8_t {
  kOther,
  kError,
  kChoices,
  kUsage,
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
  kFinishReason,
  kCompletionTokens,
  kPromptTokens,
};

Key IdentifyKey(const std::string& k) {
  switch (k.size()) {
    case 4:
      if (k == "text") return Key::kText;
      if (k == "code") return Key::kCode;
      break;
    case 5:
      if (k == "error") return Key::kError;
      if (k == "delta") return Key::kDelta;
      if (k == "usage") return Key::kUsage;
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
      break;
    case 17:
      if (k == "reasoning_content") return Key::kReasoning;
      if (k == "completion_tokens") return Key::kCompletionTokens;
      break;
    default:
      break;
  }
  return Key::kOther;
}

struct Frame {
  Ctx ctx;
  bool is_array;
  Key key = Key::kOther;  // last key seen (objects)
  int index = 0;          // next element index (arrays)
  int count = 0;          // elements seen (kCountable arrays)
};

class Classifier : public nlohmann::json_sax<json> {
 public:
  explicit Classifier(StreamEvent* event) : event_(event) { stack_.reserve(8); }

  bool null() override {
    Consume();
    return true;
  }
  bool boolean(bool) override {
    Consume();
    return true;
  }
  bool number_integer(number_integer_t v) override {
    Integer(static_cast<long long>(v));
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    Integer(v > static_cast<number_unsigned_t>(INT64_MAX) ? INT64_MAX : static_cast<long long>(v));
    return true;
  }
  bool number_float(number_float_t, const string_t&) override {
    Consume();
    return true;
  }
  bool binary(binary_t&) override {
    Consume();
    return true;
  }
  bool string(string_t& s) override {
    if (stack_.empty()) return true;
    Frame& f = stack_.back();
    if (f.is_array) {
      Count(f);
      return true;
    }
    const Key key = f.key;
    switch (f.ctx) {
      case Ctx::kRoot:
        if (key == Key::kError) {  // "error": "some text"
          is_error_ = true;
          event_->error_message = s;
        } else if (key == Key::kObject && s == "error") {
          is_error_ = true;  // legacy flat error shape
        } else if (key == Key::kMessage) {
          root_message_ = s;
        }
        break;
      case Ctx::kError:
        if (key == Key::kMessage) event_->error_message = s;
        if (key == Key::kCode) error_code_string_ = true;
        break;
      case Ctx::kChoice:
        if (key == Key::kText && !s.empty()) {
          choice_output_ = true;
          if (choice_index_ == 0) event_->text.append(s);
        } else if (key == Key::kFinishReason && choice_index_ == 0) {
          event_->finish_reason = s;
        }
        break;
      case Ctx::kDelta:
        if (!s.empty() &&
            (key == Key::kContent || key == Key::kReasoning || key == Key::kRefusal)) {
          choice_output_ = true;
          if (key == Key::kContent && choice_index_ == 0) event_->text.append(s);
        }
        break;
      default:
        break;
    }
    return true;
  }

  bool start_object(std::size_t) override {
    Ctx ctx = Ctx::kOther;
    if (stack_.empty()) {
      ctx = Ctx::kRoot;
    } else {
      Frame& f = stack_.back();
      if (f.is_array) {
        if (f.ctx == Ctx::kChoices) {
          ctx = Ctx::kChoice;
          choice_index_ = f.index;
          choice_output_ = false;
          choice_token_ids_ = -1;
        }
        Count(f);
      } else if (f.ctx == Ctx::kRoot && f.key == Key::kError) {
        ctx = Ctx::kError;
        is_error_ = true;
        error_object_ = true;
      } else if (f.ctx == Ctx::kRoot && f.key == Key::kUsage) {
        ctx = Ctx::kUsage;
      } else if (f.ctx == Ctx::kChoice && (f.key == Key::kDelta || f.key == Key::kMessage)) {
        ctx = Ctx::kDelta;
      }
    }
    stack_.push_back(Frame{ctx, false});
    return true;
  }

  bool end_object() override {
    const Ctx ctx = stack_.back().ctx;
    stack_.pop_back();
    if (ctx == Ctx::kChoice) {
      if (choice_token_ids_ > 0) {
        tokens_ += choice_token_ids_;
      } else if (choice_output_) {
        tokens_ += 1;
      }
    }
    return true;
  }

  bool start_array(std::size_t) override {
    Ctx ctx = Ctx::kOther;
    if (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.is_array) {
        Count(f);
      } else if (f.ctx == Ctx::kRoot && f.key == Key::kChoices) {
        ctx = Ctx::kChoices;
      } else if ((f.ctx == Ctx::kChoice && f.key == Key::kTokenIds) ||
                 (f.ctx == Ctx::kDelta && f.key == Key::kToolCalls)) {
        ctx = Ctx::kCountable;
      }
    }
    stack_.push_back(Frame{ctx, true});
    return true;
  }

  bool end_array() override {
    const Frame f = stack_.back();
    stack_.pop_back();
    if (f.ctx == Ctx::kCountable && f.count > 0 && !stack_.empty()) {
      const Frame& parent = stack_.back();
      if (parent.ctx == Ctx::kChoice) {
        choice_token_ids_ = f.count;  // token_ids
      } else {
        choice_output_ = true;  // tool_calls
      }
    }
    return true;
  }

  bool key(string_t& k) override {
    stack_.back().key = IdentifyKey(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    malformed_ = true;
    return false;
  }

  void Finish(bool parsed) {
    if (!parsed || malformed_ || !root_is_object_) {
      event_->kind = EventKind::kMalformed;
      return;
    }
    if (is_error_) {
      event_->kind = EventKind::kError;
      if (event_->error_message.empty()) event_->error_message = root_message_;
      const int code = error_object_ ? error_code_ : root_code_;
      event_->error_status = (code >= 400 && code <= 599 && !error_code_string_) ? code : 500;
      return;
    }
    event_->tokens = tokens_;
    event_->kind = tokens_ > 0 ? EventKind::kToken : EventKind::kMetadata;
  }

  void MarkRoot(bool is_object) { root_is_object_ = is_object; }

 private:
  void Count(Frame& f) {
    ++f.index;
    ++f.count;
  }
  // A scalar value: counts as an array element, otherwise nothing to do.
  void Consume() {
    if (!stack_.empty() && stack_.back().is_array) Count(stack_.back());
  }
  void Integer(long long v) {
    if (stack_.empty()) return;
    Frame& f = stack_.back();
    if (f.is_array) {
      Count(f);
      return;
    }
    if ((f.ctx == Ctx::kError || f.ctx == Ctx::kRoot) && f.key == Key::kCode) {
      const int code = static_cast<int>(v < 0 || v > 100000 ? 0 : v);
      (f.ctx == Ctx::kError ? error_code_ : root_code_) = code;
    } else if (f.ctx == Ctx::kUsage) {
      if (f.key == Key::kCompletionTokens) event_->completion_tokens = v;
      if (f.key == Key::kPromptTokens) event_->prompt_tokens = v;
    }
  }

  StreamEvent* event_;
  std::vector<Frame> stack_;
  bool malformed_ = false;
  bool root_is_object_ = false;
  bool is_error_ = false;
  bool error_code_string_ = false;
  bool error_object_ = false;
  int error_code_ = 0;
  int root_code_ = 0;
  std::string root_message_;
  int tokens_ = 0;
  int choice_index_ = 0;
  bool choice_output_ = false;
  int choice_token_ids_ = -1;
};

}  // namespace

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kToken:
      return "token";
    case EventKind::kMetadata:
      return "metadata";
    case EventKind::kError:
      return "error";
    case EventKind::kDone:
      return "done";
    case EventKind::kMalformed:
      return "malformed";
  }
  return "malformed";
}

void StreamEvent::Clear() {
  kind = EventKind::kMalformed;
  tokens = 0;
  text.clear();
  finish_reason.clear();
  completion_tokens = -1;
  prompt_tokens = -1;
  error_status = 0;
  error_message.clear();
}

void ClassifyEvent(std::string_view data, StreamEvent* event) {
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
    return;
  }
  if (trimmed.empty() || trimmed.front() != '{') {
    event->kind = EventKind::kMalformed;
    return;
  }
  Classifier classifier(event);
  classifier.MarkRoot(true);
  const bool parsed =
      json::sax_parse(data.begin(), data.end(), &classifier, json::input_format_t::json, true);
  classifier.Finish(parsed);
}

}  // namespace narwhal::engines
