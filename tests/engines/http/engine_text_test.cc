// Engine text made safe for failure details and JSON (engines/engine_failure.h:
// IsValidUtf8, ToValidUtf8, EngineText, EngineErrorMessage, MakeFailure,
// ClassifyEngineStatus) and the choice bounds the stream classifier reports
// (engines/stream_event.h). Pure functions: no sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engines/engine_failure.h"
#include "engines/http/stream_classifier.h"
#include "engines/stream_event.h"
#include "tests/fakes/edge_status.h"

namespace narwhal::engines {
namespace {

namespace nt = ::narwhal::testing;

using json = nlohmann::json;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kFffd = "\xEF\xBF\xBD";       // U+FFFD
const std::string kEacute = "\xC3\xA9";         // U+00E9, two bytes
const std::string kEuro = "\xE2\x82\xAC";       // U+20AC, three bytes
const std::string kEmoji = "\xF0\x9F\x98\x80";  // U+1F600, four bytes

// Strict serialisation: throws on ill-formed UTF-8.
bool Serialises(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// --- IsValidUtf8 ----------------------------------------------------------------

TEST(Utf8Test, WellFormedTextIsValid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii\n\t\x01"));
  EXPECT_TRUE(IsValidUtf8(kEacute + kEuro + kEmoji));
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));      // U+D7FF, just below the surrogates
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
}

TEST(Utf8Test, IllFormedTextIsInvalid) {
  for (const std::string& bad : {
           std::string("\x80"),              // lone continuation byte
           std::string("\xC0\xAF"),          // overlong '/'
           std::string("\xC1\xBF"),          // overlong
           std::string("\xE0\x80\xAF"),      // overlong three-byte
           std::string("\xF0\x80\x80\xAF"),  // overlong four-byte
           std::string("\xED\xA0\x80"),      // surrogate U+D800
           std::string("\xF4\x90\x80\x80"),  // past U+10FFFF
           std::string("\xF5\x80\x80\x80"),  // F5 is never valid
           std::string("\xFF"),              //
           std::string("\xC3"),              // cut two-byte character
           std::string("\xE2\x82"),          // cut three-byte character
           std::string("\xF0\x9F\x98"),      // cut four-byte character
           std::string("\xC3\x28"),          // bad continuation
       }) {
    EXPECT_FALSE(IsValidUtf8(bad)) << json(bad).dump(-1, ' ', true,
                                                     json::error_handler_t::replace);
    EXPECT_FALSE(IsValidUtf8("ok " + bad + " ok"));
  }
}

// --- ToValidUtf8 ----------------------------------------------------------------

TEST(Utf8Test, ValidInputComesBackUnchanged) {
  const std::string text = "caf" + kEacute + " " + kEuro + kEmoji;
  EXPECT_EQ(ToValidUtf8(text), text);
  bool truncated = true;
  EXPECT_EQ(ToValidUtf8(text, text.size(), &truncated), text);
  EXPECT_FALSE(truncated);
}

TEST(Utf8Test, EachMaximalSubpartBecomesOneReplacementCharacter) {
  EXPECT_EQ(ToValidUtf8("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(ToValidUtf8("\xFF\xFE"), kFffd + kFffd);
  // A cut three-byte character is one maximal subpart: one U+FFFD.
  EXPECT_EQ(ToValidUtf8("\xE2\x82" "x"), kFffd + "x");
  // A cut four-byte character at the very end.
  EXPECT_EQ(ToValidUtf8("x\xF0\x9F\x98"), "x" + kFffd);
  // Overlong and surrogate lead bytes: the second byte is out of range, so
  // each byte is replaced on its own (Unicode's recommended practice).
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  // A valid character right after a broken one survives.
  EXPECT_EQ(ToValidUtf8("\xC3" + kEuro), kFffd + kEuro);
  EXPECT_TRUE(Serialises(ToValidUtf8("\xC3\x28\xA0\xA1\xE2\x28\xA1\xF0\x28\x8C\xBC")));
}

TEST(Utf8Test, TruncationStopsAtACharacterBoundary) {
  const std::string text = "ab" + kEuro + kEuro;  // 8 bytes
  bool truncated = false;
  EXPECT_EQ(ToValidUtf8(text, 4, &truncated), "ab");
  EXPECT_TRUE(truncated);
  EXPECT_EQ(ToValidUtf8(text, 5, &truncated), "ab" + kEuro);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(ToValidUtf8(text, 8, &truncated), text);
  EXPECT_FALSE(truncated);
  EXPECT_EQ(ToValidUtf8(text, 0, &truncated), "");
  EXPECT_TRUE(truncated);
  // A replacement character counts three bytes against the bound.
  EXPECT_EQ(ToValidUtf8("a\xFF", 3, &truncated), "a");
  EXPECT_TRUE(truncated);
  EXPECT_EQ(ToValidUtf8("a\xFF", 4, &truncated), "a" + kFffd);
  EXPECT_FALSE(truncated);
}

TEST(Utf8Test, EveryByteStringBecomesSerialisableText) {
  // Every one- and two-byte string, and every byte after a lead byte of
  // each length: the output is always well-formed.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      const std::string out = ToValidUtf8(s);
      ASSERT_TRUE(IsValidUtf8(out)) << a << " " << b;
      ASSERT_EQ(IsValidUtf8(s), out == s) << a << " " << b;
    }
  }
  for (const char lead : {'\xE1', '\xF1'}) {
    for (int b = 0; b < 256; ++b) {
      const std::string s{lead, '\x80', static_cast<char>(b), 'z'};
      ASSERT_TRUE(IsValidUtf8(ToValidUtf8(s))) << b;
      ASSERT_TRUE(Serialises(ToValidUtf8(s, 3)));
    }
  }
}

// --- EngineText and EngineErrorMessage ------------------------------------------

TEST(EngineTextTest, ShortValidTextIsKept) {
  EXPECT_EQ(EngineText("prompt too long"), "prompt too long");
  const std::string exact(kMaxEngineTextBytes, 'x');
  EXPECT_EQ(EngineText(exact), exact);
}

TEST(EngineTextTest, LongTextIsCutAtACharacterAndMarked) {
  std::string text;
  while (text.size() < 4 * kMaxEngineTextBytes) text += kEuro;
  const std::string out = EngineText(text);
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_LE(out.size(), kMaxEngineTextBytes);
  EXPECT_GE(out.size(), kMaxEngineTextBytes - 5);
  EXPECT_THAT(out, EndsWith("..."));
  EXPECT_THAT(text, StartsWith(out.substr(0, out.size() - 3)));
}

TEST(EngineTextTest, IsIdempotent) {
  for (const std::string& raw : {std::string(5000, 'm'), std::string(600, '\xFF'),
                                 std::string(kMaxEngineTextBytes - 1, 'a') + kEmoji,
                                 std::string("short \xC3")}) {
    const std::string once = EngineText(raw);
    EXPECT_EQ(EngineText(once), once);
    EXPECT_TRUE(Serialises(once));
  }
}

TEST(EngineTextTest, ErrorMessageFromInvalidTextBodyIsValid) {
  const std::string message = EngineErrorMessage("Bad \xFF request \xE2\x82");
  EXPECT_EQ(message, "Bad " + kFffd + " request " + kFffd);
}

TEST(EngineTextTest, ErrorMessageCutInsideACharacterStaysValid) {
  // A JSON message of two-byte characters, long enough to be cut.
  std::string text;
  for (int i = 0; i < 400; ++i) text += kEacute;
  const std::string message =
      EngineErrorMessage(json{{"error", {{"message", "x" + text}}}}.dump());
  EXPECT_TRUE(IsValidUtf8(message));
  EXPECT_LE(message.size(), kMaxEngineTextBytes);
  EXPECT_THAT(message, StartsWith("x" + kEacute));
  EXPECT_THAT(message, EndsWith(kEacute + "..."));
}

TEST(EngineTextTest, OversizedErrorBodyIsTakenAsText) {
  // Past 64 KiB no document is parsed: the message is the body's start.
  const std::string body = R"({"error":{"message":"m"},"pad":")" + std::string(70000, 'p') + "\"}";
  const std::string message = EngineErrorMessage(body);
  EXPECT_THAT(message, StartsWith(R"({"error":{"message":"m"})"));
  EXPECT_LE(message.size(), kMaxEngineTextBytes);
}

// --- Failure records ------------------------------------------------------------

TEST(EngineTextTest, FailureDetailsAreAlwaysValid) {
  const EngineFailure f =
      MakeFailure(Phase::kDecode, "d0", FailureReason::kEngineError, BreakerClass::kStream,
                  FailureCause::kMalformedStream, "bad \xC3 detail", true);
  EXPECT_EQ(f.detail, "bad " + kFffd + " detail");
}

TEST(EngineTextTest, ClassifiedEngineStatusHasBoundedValidText) {
  std::string raw(3000, 'r');
  raw += "\xFF";
  for (const int status : {400, 413, 429, 500, 503}) {
    for (const bool in_stream : {false, true}) {
      const EngineFailure f = ClassifyEngineStatus(Phase::kPrefill, "p0", status, raw, in_stream);
      EXPECT_TRUE(IsValidUtf8(f.detail)) << status;
      EXPECT_LE(f.detail.size(), kMaxEngineTextBytes + 40) << status;
      EXPECT_TRUE(Serialises(f.detail));
    }
  }
  // The engine's 4xx keeps its status and carries only the engine's text.
  const EngineFailure rejected =
      ClassifyEngineStatus(Phase::kPrefill, "p0", 400, "too \xFF long", false);
  EXPECT_EQ(nt::HttpStatus(rejected), 400);
  EXPECT_EQ(rejected.detail, "too " + kFffd + " long");
}

// --- Choice bounds of the stream classifier -------------------------------------

StreamEvent Classified(const std::string& payload) {
  StreamEvent e;
  ClassifyEvent(payload, &e);
  return e;
}

json Choices(int n, int first_index = 0) {
  json choices = json::array();
  for (int i = 0; i < n; ++i) choices.push_back({{"index", first_index + i}, {"text", "a"}});
  return choices;
}

TEST(ChoiceBoundsTest, ChunksWithinTheBoundPass) {
  const StreamEvent e = Classified(json{{"choices", Choices(kMaxChoices)}}.dump());
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.choices, kMaxChoices);
  EXPECT_FALSE(e.stray_choice_index);
  EXPECT_EQ(ChoiceBoundError(e), "");
  const StreamEvent usage = Classified(R"({"choices":[],"usage":{"completion_tokens":3}})");
  EXPECT_EQ(usage.choices, 0);
  EXPECT_EQ(ChoiceBoundError(usage), "");
}

TEST(ChoiceBoundsTest, TooManyChoicesAreNamed) {
  const StreamEvent e = Classified(json{{"choices", Choices(kMaxChoices + 1)}}.dump());
  EXPECT_EQ(e.choices, kMaxChoices + 1);
  EXPECT_EQ(ChoiceBoundError(e), "decode chunk carries 17 choices; at most 16 are accepted");
  // Elements that are not objects count too.
  json numbers = json::array();
  for (int i = 0; i < 40; ++i) numbers.push_back(i);
  const StreamEvent ints = Classified(json{{"choices", numbers}}.dump());
  EXPECT_EQ(ints.choices, 40);
  EXPECT_THAT(ChoiceBoundError(ints), HasSubstr("carries 40 choices"));
}

TEST(ChoiceBoundsTest, StrayIndexesAreNamed) {
  const StreamEvent big = Classified(R"({"choices":[{"index":100000,"text":"a"}]})");
  EXPECT_EQ(big.stray_choice_index, 100000);
  EXPECT_EQ(ChoiceBoundError(big),
            "decode chunk has choice index 100000; choice indexes must be in 0..15");
  const StreamEvent negative = Classified(R"({"choices":[{"index":-1,"delta":{"content":"a"}}]})");
  EXPECT_EQ(negative.stray_choice_index, -1);
  EXPECT_THAT(ChoiceBoundError(negative), HasSubstr("choice index -1"));
  const StreamEvent edge = Classified(R"({"choices":[{"index":16,"text":""}]})");
  EXPECT_EQ(edge.kind, EventKind::kMetadata);
  EXPECT_EQ(edge.stray_choice_index, 16);
  // Only integers are indexes; "index" elsewhere is not a choice index.
  const StreamEvent other = Classified(
      R"({"index":99,"choices":[{"index":"7","text":"a","delta":{"tool_calls":[{"index":500}]}}]})");
  EXPECT_FALSE(other.stray_choice_index);
  EXPECT_EQ(ChoiceBoundError(other), "");
}

TEST(ChoiceBoundsTest, ClearResetsTheChoiceFields) {
  StreamEvent e = Classified(R"({"choices":[{"index":100,"text":"a"},{"text":"b"}]})");
  EXPECT_EQ(e.choices, 2);
  e.Clear();
  EXPECT_EQ(e.choices, 0);
  EXPECT_FALSE(e.stray_choice_index);
  // A malformed payload reports no choices.
  const StreamEvent bad = Classified(R"({"choices":[{"index":100,"text":"a"}],)");
  EXPECT_EQ(bad.kind, EventKind::kMalformed);
  EXPECT_EQ(bad.choices, 0);
  EXPECT_FALSE(bad.stray_choice_index);
}

}  // namespace
}  // namespace narwhal::engines
