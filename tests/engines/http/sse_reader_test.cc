// SseReader: event framing must not depend on how the transport split or
// merged the bytes.
#include "engines/http/sse_reader.h"

#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace narwhal::engines {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A realistic vLLM chat stream, with the irregularities a transport and an
// engine may produce: a keep-alive comment, CRLF line ends in part, a
// multi-line `data:` event, `event:`/`id:`/`retry:` fields and the terminator.
constexpr std::string_view kTranscript =
    "data: {\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"created\":1754400001,"
    "\"model\":\"Qwen/Qwen3-0.6B\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
    "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n"
    "\n"
    ": keep-alive\n"
    "\n"
    "data: {\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"created\":1754400001,"
    "\"model\":\"Qwen/Qwen3-0.6B\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" Paris\"},"
    "\"logprobs\":null,\"finish_reason\":null}]}\r\n"
    "\r\n"
    "event: message\r\n"
    "id: 42\r\n"
    "data: {\"multi\":\r\n"
    "data: 1}\r\n"
    "\r\n"
    "data:{\"id\":\"chatcmpl-7f3c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\".\"},"
    "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n"
    "\n"
    "retry: 1000\n"
    "data: {\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
    "\"usage\":{\"prompt_tokens\":14,\"total_tokens\":16,\"completion_tokens\":2}}\r\n"
    "\r\n"
    "data: [DONE]\n"
    "\n";

const std::vector<std::string>& ExpectedEvents() {
  static const std::vector<std::string> kEvents = {
      "{\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"created\":1754400001,"
      "\"model\":\"Qwen/Qwen3-0.6B\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
      "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
      "{\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"created\":1754400001,"
      "\"model\":\"Qwen/Qwen3-0.6B\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" Paris\"},"
      "\"logprobs\":null,\"finish_reason\":null}]}",
      "{\"multi\":\n1}",
      "{\"id\":\"chatcmpl-7f3c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\".\"},"
      "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}",
      "{\"id\":\"chatcmpl-7f3c\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
      "\"usage\":{\"prompt_tokens\":14,\"total_tokens\":16,\"completion_tokens\":2}}",
      "[DONE]",
  };
  return kEvents;
}

// Feeds `reads` in order and returns every event reported.
std::vector<std::string> FeedAll(SseReader& reader, const std::vector<std::string_view>& reads) {
  std::vector<std::string> events;
  for (std::string_view read : reads) {
    reader.Feed(read, [&](std::string_view data) {
      events.emplace_back(data);
      return true;
    });
  }
  return events;
}

TEST(SseReaderTest, WholeTranscriptInOneRead) {
  SseReader reader;
  EXPECT_EQ(FeedAll(reader, {kTranscript}), ExpectedEvents());
  EXPECT_EQ(reader.comments(), 1u);
  EXPECT_FALSE(reader.mid_event());
  EXPECT_TRUE(reader.error().empty());
}

TEST(SseReaderTest, TwoReadsAtEverySplitPoint) {
  for (size_t split = 0; split <= kTranscript.size(); ++split) {
    SseReader reader;
    const std::vector<std::string> events =
        FeedAll(reader, {kTranscript.substr(0, split), kTranscript.substr(split)});
    ASSERT_EQ(events, ExpectedEvents()) << "split at byte " << split;
    EXPECT_EQ(reader.comments(), 1u) << "split at byte " << split;
  }
}

TEST(SseReaderTest, OneBytePerRead) {
  std::vector<std::string_view> reads;
  for (size_t i = 0; i < kTranscript.size(); ++i) reads.push_back(kTranscript.substr(i, 1));
  SseReader reader;
  EXPECT_EQ(FeedAll(reader, reads), ExpectedEvents());
  EXPECT_EQ(reader.comments(), 1u);
}

// An empty transport read carries no bytes and must change nothing, even
// when it falls between the CR and the LF of a CRLF.
TEST(SseReaderTest, EmptyReadBetweenAnyTwoBytesChangesNothing) {
  for (size_t split = 0; split <= kTranscript.size(); ++split) {
    SseReader reader;
    const std::vector<std::string> events =
        FeedAll(reader, {kTranscript.substr(0, split), "", kTranscript.substr(split)});
    ASSERT_EQ(events, ExpectedEvents()) << "empty read at byte " << split;
  }
}

TEST(SseReaderTest, CrOnlyLineEnds) {
  SseReader reader;
  const std::vector<std::string> events = FeedAll(
      reader, {"data: {\"a\":1}\r\r: ping\r\rdata: first\rdata: second\r\rdata: [DONE]\r\r"});
  EXPECT_THAT(events, ElementsAre("{\"a\":1}", "first\nsecond", "[DONE]"));
  EXPECT_EQ(reader.comments(), 1u);
}

TEST(SseReaderTest, CrlfSplitAcrossReadsIsOneLineEnd) {
  SseReader reader;
  // If the LF after a read-ending CR were taken as a second line end, the
  // first data line would be dispatched on its own.
  const std::vector<std::string> events =
      FeedAll(reader, {"data: one\r", "\ndata: two\r", "\n\r", "\n"});
  EXPECT_THAT(events, ElementsAre("one\ntwo"));
}

TEST(SseReaderTest, LoneCrAtEndOfReadThenNonLfStartsNewLine) {
  SseReader reader;
  const std::vector<std::string> events = FeedAll(reader, {"data: one\r", "\r", "data: two\n\n"});
  EXPECT_THAT(events, ElementsAre("one", "two"));
}

TEST(SseReaderTest, DataFieldValueRules) {
  SseReader reader;
  // One leading space is removed, a second one is kept; no colon means an
  // empty value; unknown fields are ignored.
  const std::vector<std::string> events =
      FeedAll(reader, {"data:no-space\n\n", "data:  two-spaces\n\n", "data\n\n",
                       "foo: bar\ndata: x\n\n"});
  EXPECT_THAT(events, ElementsAre("no-space", " two-spaces", "", "x"));
}

TEST(SseReaderTest, EventWithoutDataIsNotDispatched) {
  SseReader reader;
  const std::vector<std::string> events =
      FeedAll(reader, {"event: ping\nid: 7\n\n", "retry: 10\n\n", "\n\n\n", "data: y\n\n"});
  EXPECT_THAT(events, ElementsAre("y"));
}

TEST(SseReaderTest, IncompleteEventIsHeldUntilItsBlankLine) {
  SseReader reader;
  EXPECT_THAT(FeedAll(reader, {"data: partial"}), IsEmpty());
  EXPECT_TRUE(reader.mid_event());
  EXPECT_THAT(FeedAll(reader, {"\n"}), IsEmpty());
  EXPECT_TRUE(reader.mid_event());
  EXPECT_THAT(FeedAll(reader, {"\n"}), ElementsAre("partial"));
  EXPECT_FALSE(reader.mid_event());
}

TEST(SseReaderTest, OversizedEventInOneReadIsAnError) {
  SseReader reader(/*max_event_bytes=*/64);
  const std::string big = "data: " + std::string(100, 'x') + "\n\n";
  bool ok = true;
  std::vector<std::string> events;
  ok = reader.Feed(big, [&](std::string_view d) {
    events.emplace_back(d);
    return true;
  });
  EXPECT_FALSE(ok);
  EXPECT_FALSE(reader.error().empty());
  EXPECT_THAT(events, IsEmpty());
  // No further events once in the error state.
  ok = reader.Feed("data: small\n\n", [&](std::string_view d) {
    events.emplace_back(d);
    return true;
  });
  EXPECT_FALSE(ok);
  EXPECT_THAT(events, IsEmpty());
}

TEST(SseReaderTest, OversizedEventAcrossManyReadsIsAnError) {
  SseReader reader(/*max_event_bytes=*/64);
  std::vector<std::string> events;
  bool ok = true;
  // A single unterminated line growing read by read.
  ok = reader.Feed("data: ", [&](std::string_view d) {
    events.emplace_back(d);
    return true;
  });
  for (int i = 0; i < 20 && ok; ++i) {
    ok = reader.Feed("xxxxxxxx", [&](std::string_view d) {
      events.emplace_back(d);
      return true;
    });
  }
  EXPECT_FALSE(ok);
  EXPECT_FALSE(reader.error().empty());
  EXPECT_THAT(FeedAll(reader, {"\n\ndata: later\n\n"}), IsEmpty());
  EXPECT_THAT(events, IsEmpty());
}

TEST(SseReaderTest, OversizedMultiLineEventIsAnError) {
  SseReader reader(/*max_event_bytes=*/64);
  std::string many;
  for (int i = 0; i < 20; ++i) many += "data: 0123456789\n";  // each line small, total large
  many += "\n";
  EXPECT_THAT(FeedAll(reader, {many}), IsEmpty());
  EXPECT_FALSE(reader.error().empty());
}

TEST(SseReaderTest, VerdictDoesNotDependOnHowTheBytesAreSplit) {
  // A long line of another field, then a data line near the limit: whole or
  // one byte per read, the reader reaches the same verdict.
  const std::vector<std::string> streams = {
      "event: " + std::string(200, 'e') + "\ndata: ok\n\n",
      "data: " + std::string(60, 'y') + "\n\n",
      "data: " + std::string(100, 'z') + "\n\n",
      ": " + std::string(120, 'c') + "\r\ndata: after\r\n\r\n",
  };
  for (const std::string& stream : streams) {
    SseReader whole(/*max_event_bytes=*/64);
    SseReader bytewise(/*max_event_bytes=*/64);
    const std::vector<std::string> whole_events = FeedAll(whole, {stream});
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < stream.size(); ++i) bytes.push_back(std::string_view(stream).substr(i, 1));
    const std::vector<std::string> bytewise_events = FeedAll(bytewise, bytes);
    EXPECT_EQ(whole_events, bytewise_events) << stream;
    EXPECT_EQ(whole.error().empty(), bytewise.error().empty()) << stream;
  }
}

TEST(SseReaderTest, EventJustUnderTheLimitIsDelivered) {
  SseReader reader(/*max_event_bytes=*/64);
  const std::string payload(60, 'y');
  EXPECT_THAT(FeedAll(reader, {"data: " + payload + "\n\n"}), ElementsAre(payload));
  EXPECT_TRUE(reader.error().empty());
}

// The bound is the event's size: exactly max_event_bytes is delivered, one
// byte more is refused — in one line, and in several lines joined by "\n".
TEST(SseReaderTest, EventOfExactlyTheLimitIsDeliveredAndOneByteMoreIsRefused) {
  {
    SseReader reader(/*max_event_bytes=*/64);
    const std::string payload(64, 'y');
    EXPECT_THAT(FeedAll(reader, {"data: " + payload + "\n\n"}), ElementsAre(payload));
    EXPECT_TRUE(reader.error().empty()) << reader.error();
  }
  {
    SseReader reader(/*max_event_bytes=*/64);
    EXPECT_THAT(FeedAll(reader, {"data: " + std::string(65, 'y') + "\n\n"}), IsEmpty());
    EXPECT_EQ(reader.error(), "SSE event exceeds 64 bytes");
  }
  {
    SseReader reader(/*max_event_bytes=*/64);
    const std::string a(31, 'a');
    const std::string b(32, 'b');  // 31 + "\n" + 32 = 64
    EXPECT_THAT(FeedAll(reader, {"data: " + a + "\ndata: " + b + "\n\n"}),
                ElementsAre(a + "\n" + b));
    EXPECT_TRUE(reader.error().empty()) << reader.error();
  }
  {
    SseReader reader(/*max_event_bytes=*/64);
    const std::string a(31, 'a');
    const std::string b(33, 'b');
    EXPECT_THAT(FeedAll(reader, {"data: " + a + "\ndata: " + b + "\n\n"}), IsEmpty());
    EXPECT_FALSE(reader.error().empty());
  }
}

// The default bound, 16 MiB: an event of exactly 16,777,216 bytes is
// delivered, in one read and split across reads.
TEST(SseReaderTest, DefaultBoundEventOfExactly16MiBIsDelivered) {
  const std::string payload(SseReader::kDefaultMaxEventBytes, 'x');
  const std::string stream = "data: " + payload + "\n\n";
  {
    SseReader reader;
    size_t delivered = 0;
    EXPECT_TRUE(reader.Feed(stream, [&](std::string_view d) {
      delivered = d.size();
      return true;
    }));
    EXPECT_EQ(delivered, payload.size());
    EXPECT_TRUE(reader.error().empty()) << reader.error();
  }
  {
    SseReader reader;
    size_t delivered = 0;
    bool ok = true;
    for (size_t at = 0; at < stream.size() && ok; at += 16 * 1024) {
      ok = reader.Feed(std::string_view(stream).substr(at, 16 * 1024), [&](std::string_view d) {
        delivered = d.size();
        return true;
      });
    }
    EXPECT_TRUE(ok) << reader.error();
    EXPECT_EQ(delivered, payload.size());
  }
  {
    SseReader reader;
    EXPECT_FALSE(reader.Feed("data: " + payload + "x\n\n", [](std::string_view) { return true; }));
    EXPECT_EQ(reader.error(), "SSE event exceeds 16777216 bytes");
  }
}

TEST(SseReaderTest, StopsWhenCallbackReturnsFalse) {
  SseReader reader;
  std::vector<std::string> events;
  const bool ok = reader.Feed("data: 1\n\ndata: 2\n\ndata: 3\n\n", [&](std::string_view d) {
    events.emplace_back(d);
    return false;
  });
  EXPECT_FALSE(ok);
  EXPECT_THAT(events, ElementsAre("1"));
  EXPECT_TRUE(reader.error().empty());
}

}  // namespace
}  // namespace narwhal::engines
