// The decode stream as the engine adapter reads it: engines::SseReader fed
// arbitrary bytes, split at fuzzer-chosen points, and every event classified
// by engines::StreamClassifier (and by ClassifyEvent, the thread's own).
//
// Input: byte 0 selects the reader's event bound (bits 0-1) and the number of
// split points (bits 2-5); that many bytes follow, each the distance to the
// next split; the rest is the stream.
//
// Checked:
//  - Segmentation does not matter: the stream fed whole, split at the chosen
//    points, and one byte at a time (short streams) yields the same events,
//    the same comment count, the same error state and the same mid_event().
//  - Feed() returns false exactly when the reader is in its error state, and
//    a refused stream carries a message; no event exceeds the bound; the
//    reader refuses a stream exactly when a line is longer than the bound
//    plus 64 bytes or an event's data (its values joined by "\n") is longer
//    than the bound (an event of exactly the bound is delivered).
//  - Classification: every field is consistent with the kind (kMalformed
//    carries nothing, only kToken counts tokens, kError has a 4xx/5xx
//    status), copied-out text is no longer than the payload,
//    ChoiceBoundError() names exactly the chunks past kMaxChoices, a reused
//    classifier agrees with a fresh one and with ClassifyEvent.
//  - Against a reference: for a payload that nlohmann (through the project's
//    bounded engines::ParseJson) reads as a JSON object, the classifier must
//    not call it malformed, and the reverse; when the object has no repeated
//    key, kind, tokens, text, finish_reason, usage, error fields, the choice
//    count and the first stray choice index must match
//    the rules of engines/stream_event.h evaluated on the DOM below. (The
//    project no longer has a DOM classifier: the SAX one it replaced is gone,
//    so the reference is written from the header's contract.)
//  - Stream continuation's rewrites (router/continuation.h): for a payload
//    that is a JSON object without repeated keys, StripTokenFields either
//    declines or yields exactly the object without its token_ids and
//    prompt_token_ids members (at any depth); a StreamLedger on a first leg
//    and on a continuation leg passes every event without throwing, and
//    what it rewrites is a JSON object.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engines/engine_failure.h"
#include "engines/http/sse_reader.h"
#include "engines/http/stream_classifier.h"
#include "engines/json_limits.h"
#include "engines/json_text_repair.h"
#include "engines/stream_event.h"
#include "router/continuation.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using narwhal::engines::ClassifyEvent;
using narwhal::engines::EventKind;
using narwhal::engines::EventKindName;
using narwhal::engines::SseReader;
using narwhal::engines::StreamClassifier;
using narwhal::engines::StreamEvent;
using narwhal::fuzz::Printable;
using ordered_json = nlohmann::ordered_json;

constexpr size_t kEventBounds[] = {SseReader::kDefaultMaxEventBytes, 64, 1024, 17};

struct ReadResult {
  std::vector<std::string> events;
  size_t comments = 0;
  bool failed = false;
  std::string error;
  bool mid_event = false;
};

// Feeds `stream` in pieces ending at `cuts` (increasing offsets).
ReadResult Read(std::string_view stream, const std::vector<size_t>& cuts, size_t bound) {
  SseReader reader(bound);
  ReadResult r;
  const SseReader::EventFn on_event = [&r, bound](std::string_view data) {
    FUZZ_CHECK_MSG(data.size() <= bound, std::to_string(data.size()));
    r.events.emplace_back(data);
    return true;
  };
  size_t at = 0;
  bool ok = true;
  for (size_t cut : cuts) {
    if (cut <= at || cut > stream.size()) continue;
    ok = reader.Feed(stream.substr(at, cut - at), on_event);
    at = cut;
    if (!ok) break;
  }
  if (ok && at < stream.size()) ok = reader.Feed(stream.substr(at), on_event);
  if (ok) ok = reader.Feed("", on_event);  // an empty read changes nothing
  r.failed = !ok;
  r.error = reader.error();
  FUZZ_CHECK_MSG(r.failed == !r.error.empty(), r.error);
  r.comments = reader.comments();
  r.mid_event = reader.mid_event();
  return r;
}

// Whether the reader must refuse `stream` (engines/http/sse_reader.h),
// from the SSE grammar alone: a line (complete or not) longer than the bound
// plus 64 bytes, or an event whose data is longer than the bound.
bool OverBound(std::string_view stream, size_t bound) {
  size_t data = 0;
  bool has_data = false;
  for (size_t at = 0;;) {
    const size_t eol = stream.find_first_of("\r\n", at);
    const std::string_view line =
        stream.substr(at, (eol == std::string_view::npos ? stream.size() : eol) - at);
    if (line.size() > bound + 64) return true;
    if (eol == std::string_view::npos) return false;
    at = eol + 1;
    if (stream[eol] == '\r' && at < stream.size() && stream[at] == '\n') ++at;
    if (line.empty()) {
      data = 0;
      has_data = false;
      continue;
    }
    if (line.front() == ':') continue;
    const size_t colon = line.find(':');
    std::string_view value;
    if (colon != std::string_view::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (line.substr(0, colon) != "data") continue;
    data += (has_data ? 1 : 0) + value.size();
    has_data = true;
    if (data > bound) return true;
  }
}

void CheckSame(const ReadResult& a, const ReadResult& b, const char* what) {
  FUZZ_CHECK_MSG(a.failed == b.failed,
                 std::string(what) + ": whole " + a.error + " / split " + b.error);
  FUZZ_CHECK_MSG(a.events.size() == b.events.size(),
                 std::string(what) + ": " + std::to_string(a.events.size()) + " vs " +
                     std::to_string(b.events.size()) + " events");
  for (size_t i = 0; i < a.events.size(); ++i) {
    FUZZ_CHECK_MSG(a.events[i] == b.events[i], std::string(what) + ": event " + std::to_string(i) +
                                                   ": " + Printable(a.events[i]) + " vs " +
                                                   Printable(b.events[i]));
  }
  if (a.failed) return;  // after an error the counters stop where it struck
  FUZZ_CHECK_MSG(a.comments == b.comments, what);
  FUZZ_CHECK_MSG(a.mid_event == b.mid_event, what);
}

// --- The reference: engines/stream_event.h's rules on a DOM. ---

// Repeated keys within one object (the classifier walks both occurrences in
// document order; a DOM keeps one), found while parsing.
bool HasRepeatedKey(std::string_view text) {
  std::vector<std::vector<std::string>> keys;
  bool repeated = false;
  auto callback = [&](int, ordered_json::parse_event_t event, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      for (const std::string& seen : keys.back()) repeated = repeated || seen == k;
      keys.back().push_back(k);
    }
    return true;
  };
  const ordered_json parsed_all =
      ordered_json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  (void)parsed_all;
  return repeated;
}

bool IsInteger(const ordered_json& v) { return v.is_number_integer(); }  // signed or unsigned

long long IntegerOf(const ordered_json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<long long>(u);
  }
  return v.get<long long>();
}

int CodeOf(long long v) { return static_cast<int>(v < 0 || v > 100000 ? 0 : v); }

bool NonEmptyString(const ordered_json& v) {
  return v.is_string() && !v.get_ref<const std::string&>().empty();
}

StreamEvent Reference(const ordered_json& root) {
  StreamEvent e;
  e.Clear();
  bool is_error = false;
  bool error_object = false;
  bool code_string = false;
  int error_code = 0;
  int root_code = 0;
  std::string root_message;
  int tokens = 0;
  for (const auto& [key, v] : root.items()) {
    if (key == "error") {
      if (v.is_string()) {
        is_error = true;
        e.error_message = v.get<std::string>();
      } else if (v.is_object()) {
        is_error = true;
        error_object = true;
        for (const auto& [k, m] : v.items()) {
          if (k == "message" && m.is_string()) e.error_message = m.get<std::string>();
          if (k == "code" && m.is_string()) code_string = true;
          if (k == "code" && IsInteger(m)) error_code = CodeOf(IntegerOf(m));
        }
      }
    } else if (key == "object") {
      if (v.is_string() && v.get_ref<const std::string&>() == "error") is_error = true;
    } else if (key == "message") {
      if (v.is_string()) root_message = v.get<std::string>();
    } else if (key == "code") {
      if (IsInteger(v)) root_code = CodeOf(IntegerOf(v));
    } else if (key == "choices" && v.is_array()) {
      e.choices = static_cast<int>(v.size());
      int index = 0;
      for (const ordered_json& choice : v) {
        const int position = index++;
        if (!choice.is_object()) continue;
        bool output = false;
        int token_ids = -1;
        for (const auto& [k, c] : choice.items()) {
          if (k == "index" && IsInteger(c)) {
            const long long i = IntegerOf(c);
            if ((i < 0 || i >= narwhal::engines::kMaxChoices) && !e.stray_choice_index) {
              e.stray_choice_index = i;
            }
          } else if (k == "text" && NonEmptyString(c)) {
            output = true;
            if (position == 0) e.text += c.get<std::string>();
          } else if (k == "finish_reason" && c.is_string() && position == 0) {
            e.finish_reason = c.get<std::string>();
          } else if ((k == "delta" || k == "message") && c.is_object()) {
            for (const auto& [dk, d] : c.items()) {
              if ((dk == "content" || dk == "reasoning" || dk == "reasoning_content" ||
                   dk == "refusal") &&
                  NonEmptyString(d)) {
                output = true;
                if (dk == "content" && position == 0) e.text += d.get<std::string>();
              } else if (dk == "tool_calls" && d.is_array() && !d.empty()) {
                output = true;
              }
            }
          } else if (k == "token_ids" && c.is_array() && !c.empty()) {
            token_ids = static_cast<int>(c.size());
          }
        }
        if (token_ids > 0) {
          tokens += token_ids;
        } else if (output) {
          tokens += 1;
        }
      }
    } else if (key == "usage" && v.is_object()) {
      for (const auto& [k, u] : v.items()) {
        if (k == "completion_tokens" && IsInteger(u)) e.completion_tokens = IntegerOf(u);
        if (k == "prompt_tokens" && IsInteger(u)) e.prompt_tokens = IntegerOf(u);
      }
    }
  }
  if (is_error) {
    e.kind = EventKind::kError;
    if (e.error_message.empty()) e.error_message = root_message;
    const int code = error_object ? error_code : root_code;
    e.error_status = (code >= 400 && code <= 599 && !code_string) ? code : 500;
  } else {
    e.tokens = tokens;
    e.kind = tokens > 0 ? EventKind::kToken : EventKind::kMetadata;
  }
  return e;
}

std::string Describe(const StreamEvent& e) {
  return std::string(EventKindName(e.kind)) + " tokens=" + std::to_string(e.tokens) +
         " text=" + Printable(e.text, 80) + " finish=" + Printable(e.finish_reason, 40) +
         " usage=" + std::to_string(e.completion_tokens) + "/" + std::to_string(e.prompt_tokens) +
         " error=" + std::to_string(e.error_status) + " " + Printable(e.error_message, 80) +
         " choices=" + std::to_string(e.choices) +
         " stray=" + (e.stray_choice_index ? std::to_string(*e.stray_choice_index) : "none");
}

bool Same(const StreamEvent& a, const StreamEvent& b) {
  return a.kind == b.kind && a.tokens == b.tokens && a.text == b.text &&
         a.finish_reason == b.finish_reason && a.completion_tokens == b.completion_tokens &&
         a.prompt_tokens == b.prompt_tokens && a.error_status == b.error_status &&
         a.error_message == b.error_message && a.choices == b.choices &&
         a.stray_choice_index == b.stray_choice_index;
}

std::string_view TrimSpaceTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void CheckEvent(std::string_view data, const StreamEvent& e) {
  const std::string payload = Printable(data);
  FUZZ_CHECK(!EventKindName(e.kind).empty());
  switch (e.kind) {
    case EventKind::kMalformed:
    case EventKind::kDone: {
      StreamEvent empty;
      empty.Clear();
      empty.kind = e.kind;
      FUZZ_CHECK_MSG(Same(e, empty), Describe(e) + " for " + payload);
      if (e.kind == EventKind::kDone) FUZZ_CHECK_MSG(TrimSpaceTab(data) == "[DONE]", payload);
      break;
    }
    case EventKind::kToken:
      FUZZ_CHECK_MSG(e.tokens > 0, payload);
      break;
    case EventKind::kMetadata:
      FUZZ_CHECK_MSG(e.tokens == 0, payload);
      break;
    case EventKind::kError:
      FUZZ_CHECK_MSG(e.tokens == 0 && e.error_status >= 400 && e.error_status <= 599,
                     Describe(e) + " for " + payload);
      break;
  }
  // Text repaired with U+FFFD (three bytes for each byte it replaces) may
  // be up to three times the payload.
  FUZZ_CHECK_MSG(e.text.size() <= 3 * data.size() && e.finish_reason.size() <= 3 * data.size() &&
                     e.error_message.size() <= 3 * data.size(),
                 Describe(e) + " for " + payload);
  FUZZ_CHECK_MSG(static_cast<size_t>(e.tokens) <= data.size(), payload);
  FUZZ_CHECK_MSG(e.choices >= 0 && static_cast<size_t>(e.choices) <= data.size(), payload);
  const bool out_of_bounds =
      e.choices > narwhal::engines::kMaxChoices || e.stray_choice_index.has_value();
  FUZZ_CHECK_MSG(narwhal::engines::ChoiceBoundError(e).empty() == !out_of_bounds, Describe(e));
}

void CheckAgainstReference(std::string_view data, const StreamEvent& e) {
  const std::string_view trimmed = TrimSpaceTab(data);
  if (trimmed == "[DONE]") return;
  // nlohmann stops at a NUL byte and skips a leading byte-order mark or
  // newline, where the classifier (deliberately) calls the payload malformed.
  if (data.find('\0') != std::string_view::npos) return;
  if (trimmed.empty() || trimmed.front() != '{') {
    FUZZ_CHECK_MSG(e.kind == EventKind::kMalformed, Printable(data));
    return;
  }
  const nlohmann::json dom = narwhal::engines::ParseJson(data);
  const bool object = !dom.is_discarded() && dom.is_object();
  FUZZ_CHECK_MSG(object == (e.kind != EventKind::kMalformed),
                 std::string("reference ") + (object ? "object" : "not an object") +
                     ", classifier " + Describe(e) + " for " + Printable(data));
  if (!object || HasRepeatedKey(data)) return;
  const ordered_json ordered = ordered_json::parse(data.begin(), data.end(), nullptr, false);
  FUZZ_CHECK(ordered.is_object());
  const StreamEvent expected = Reference(ordered);
  FUZZ_CHECK_MSG(Same(e, expected), "classifier " + Describe(e) + "\n  reference  " +
                                        Describe(expected) + "\n  for " + Printable(data));
}

// `v` without token_ids and prompt_token_ids members at any depth.
void EraseTokenFields(nlohmann::json& v) {
  if (v.is_object()) {
    v.erase("token_ids");
    v.erase("prompt_token_ids");
    for (auto& [key, member] : v.items()) EraseTokenFields(member);
  } else if (v.is_array()) {
    for (auto& element : v) EraseTokenFields(element);
  }
}

void CheckContinuationRewrites(std::string_view data, const StreamEvent& e,
                               narwhal::router::StreamLedger& first,
                               narwhal::router::StreamLedger& continuing) {
  std::string stripped;
  if (e.kind != EventKind::kMalformed && data.find('\0') == std::string_view::npos &&
      !HasRepeatedKey(data) && narwhal::router::StripTokenFields(data, &stripped)) {
    nlohmann::json want = narwhal::engines::ParseJson(data);
    if (!want.is_discarded() && want.is_object()) {
      EraseTokenFields(want);
      const nlohmann::json got = narwhal::engines::ParseJson(stripped);
      FUZZ_CHECK_MSG(!got.is_discarded() && got == want,
                     Printable(data) + " -> " + Printable(stripped));
    }
  }
  for (narwhal::router::StreamLedger* ledger : {&first, &continuing}) {
    StreamEvent copy = e;
    const std::string_view out = ledger->Pass(data, &copy);
    if (out != data) {
      const nlohmann::json parsed = narwhal::engines::ParseJson(out);
      FUZZ_CHECK_MSG(!parsed.is_discarded() && parsed.is_object(), Printable(out));
    }
  }
}

// The relayed payload is the engine's own unless its text was not valid
// Unicode: then it is the repair (engines/json_text_repair.h) of it, valid
// UTF-8, and an event that is no longer malformed.
void CheckRelayed(std::string_view data, std::string_view relayed, const StreamEvent& e) {
  if (relayed == data) return;
  FUZZ_CHECK_MSG(e.kind != EventKind::kMalformed, Printable(data));
  FUZZ_CHECK_MSG(narwhal::engines::IsValidUtf8(relayed), Printable(relayed));
  std::string repaired;
  narwhal::engines::RepairJsonText(data, &repaired);
  FUZZ_CHECK(repaired == relayed);
}

void Run(const uint8_t* bytes, size_t size) {
  if (size == 0) return;
  const uint8_t control = bytes[0];
  const size_t bound = kEventBounds[control & 3];
  const size_t splits = (control >> 2) & 15;
  size_t pos = 1;
  std::vector<size_t> deltas;
  for (; deltas.size() < splits && pos < size; ++pos) deltas.push_back(bytes[pos]);
  const std::string_view stream(reinterpret_cast<const char*>(bytes) + pos, size - pos);

  std::vector<size_t> cuts;
  size_t at = 0;
  for (size_t d : deltas) cuts.push_back(at += d);

  const ReadResult whole = Read(stream, {}, bound);
  FUZZ_CHECK_MSG(whole.failed == OverBound(stream, bound),
                 "bound " + std::to_string(bound) + ": " +
                     (whole.failed ? whole.error : std::string("accepted")));
  CheckSame(whole, Read(stream, cuts, bound), "split");
  if (stream.size() <= 4096) {
    std::vector<size_t> every;
    for (size_t i = 1; i < stream.size(); ++i) every.push_back(i);
    CheckSame(whole, Read(stream, every, bound), "byte at a time");
  }

  // One classifier per stream, reused for all its events (as a leg does).
  StreamClassifier reused;
  const auto api = (control & 64) ? narwhal::engines::Api::kChatCompletions
                                  : narwhal::engines::Api::kCompletions;
  narwhal::router::StreamLedger first(api, /*client_wants_ids=*/false);
  narwhal::router::StreamLedger continuing(api, (control & 128) != 0);
  continuing.StartContinuation();
  StreamEvent event;
  StreamEvent fresh_event;
  StreamEvent thread_event;
  for (const std::string& data : whole.events) {
    const std::string relayed(reused.Classify(data, &event));
    CheckEvent(data, event);
    CheckRelayed(data, relayed, event);
    StreamClassifier fresh;
    FUZZ_CHECK(fresh.Classify(data, &fresh_event) == relayed);
    FUZZ_CHECK_MSG(Same(event, fresh_event),
                   "reused " + Describe(event) + " / fresh " + Describe(fresh_event));
    FUZZ_CHECK(ClassifyEvent(data, &thread_event) == relayed);
    FUZZ_CHECK_MSG(Same(event, thread_event),
                   "reused " + Describe(event) + " / thread " + Describe(thread_event));
    CheckAgainstReference(relayed, event);
    CheckContinuationRewrites(relayed, event, first, continuing);
  }
  // The whole stream as one payload too (the bytes need not be SSE).
  const std::string relayed(reused.Classify(stream, &event));
  CheckEvent(stream, event);
  CheckRelayed(stream, relayed, event);
  CheckAgainstReference(relayed, event);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Run(data, size);
  } catch (const std::exception& e) {
    narwhal::fuzz::CheckFailed(__FILE__, __LINE__, "no exception escapes", e.what());
  }
  return 0;
}
