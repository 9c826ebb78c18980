// ResponseChannel: the bounded worker → front-door queue and the request's
// cancellation token.
#include "router/response_channel.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace narwhal::router {
namespace {

using namespace std::chrono_literals;
using Pop = ResponseChannel::Pop;

bool PushText(ResponseChannel& ch, const std::string& s,
              engines::MonoTime deadline = engines::MonoTime::max()) {
  return ch.Push("{\"t\":\"" + s + "\"}", 1, s, "", deadline);
}

TEST(ResponseChannelTest, ChunksThenOutcomeInOrder) {
  ResponseChannel ch(4);
  ASSERT_TRUE(ch.Push("d1", 1, "a", "", engines::MonoTime::max()));
  ASSERT_TRUE(ch.Push("d2", 2, "b", "stop", engines::MonoTime::max()));
  Outcome o;
  o.terminal = Terminal::kCompleted;
  o.status = 200;
  ch.Finish(o);
  Chunk c;
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.data, "d1");
  EXPECT_EQ(c.tokens, 1);
  EXPECT_EQ(c.text, "a");
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.data, "d2");
  EXPECT_EQ(c.tokens, 2);
  EXPECT_EQ(c.finish_reason, "stop");
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kEnd);
  EXPECT_EQ(ch.outcome().terminal, Terminal::kCompleted);
  EXPECT_EQ(ch.Next(&c, 1s), Pop::kEnd);  // the end is sticky
}

TEST(ResponseChannelTest, NextTimesOutEmpty) {
  ResponseChannel ch;
  Chunk c;
  EXPECT_EQ(ch.Next(&c, 1ms), Pop::kEmpty);
}

TEST(ResponseChannelTest, WrapsAroundItsSlots) {
  ResponseChannel ch(3);
  Chunk c;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(PushText(ch, std::to_string(i)));
    ASSERT_TRUE(PushText(ch, std::to_string(i) + "b"));
    ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
    EXPECT_EQ(c.text, std::to_string(i));
    ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
    EXPECT_EQ(c.text, std::to_string(i) + "b");
  }
}

TEST(ResponseChannelTest, FullChannelBlocksTheProducerUntilTheConsumerPops) {
  ResponseChannel ch(2);
  std::atomic<int> pushed{0};
  std::thread producer([&] {
    for (int i = 0; i < 3; ++i) {
      if (PushText(ch, std::to_string(i))) ++pushed;
    }
  });
  // The first two fit; the third waits for room.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (pushed.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(pushed.load(), 2);
  std::this_thread::sleep_for(50ms);  // a generous window for a wrong third push
  EXPECT_EQ(pushed.load(), 2);
  Chunk c;
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.text, "0");
  producer.join();  // the pop made room
  EXPECT_EQ(pushed.load(), 3);
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.text, "1");
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.text, "2");
}

TEST(ResponseChannelTest, CancelWakesABlockedProducerAndFiresTheToken) {
  ResponseChannel ch(1);
  ASSERT_TRUE(PushText(ch, "0"));
  bool token_fired = false;
  engines::CancelToken::Registration hook(&ch.cancel_token(), [&] { token_fired = true; });
  auto blocked = std::async(std::launch::async, [&] { return PushText(ch, "1"); });
  EXPECT_EQ(blocked.wait_for(20ms), std::future_status::timeout);
  ch.Cancel();
  ASSERT_EQ(blocked.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(blocked.get());
  EXPECT_TRUE(ch.cancelled());
  EXPECT_TRUE(token_fired);
  EXPECT_FALSE(PushText(ch, "2"));  // every later push fails
  ch.Cancel();                      // idempotent
}

TEST(ResponseChannelTest, PushDeadlineEndsAWaitForRoom) {
  ResponseChannel ch(1);
  ASSERT_TRUE(PushText(ch, "0"));
  // Full, and the deadline already passed: false at once.
  EXPECT_FALSE(PushText(ch, "1", engines::MonoClock::now() - 1ms));
  // A deadline in the future is met when the consumer makes room.
  auto later = std::async(std::launch::async,
                          [&] { return PushText(ch, "2", engines::MonoClock::now() + 10s); });
  Chunk c;
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_TRUE(later.get());
  ASSERT_EQ(ch.Next(&c, 1s), Pop::kChunk);
  EXPECT_EQ(c.text, "2");
}

TEST(ResponseChannelTest, PushDeadlineIsIgnoredWhileThereIsRoom) {
  ResponseChannel ch(2);
  EXPECT_TRUE(PushText(ch, "0", engines::MonoClock::now() - 1s));
}

TEST(ResponseChannelTest, TryNextArmsTheReadyCallbackForTheNextPush) {
  ResponseChannel ch(4);
  int fired = 0;
  ch.SetReadyCallback([&] { ++fired; });
  Chunk c;
  ASSERT_TRUE(PushText(ch, "0"));
  EXPECT_EQ(fired, 0);  // nobody was waiting
  ASSERT_EQ(ch.TryNext(&c), Pop::kChunk);
  ASSERT_EQ(ch.TryNext(&c), Pop::kEmpty);
  ASSERT_TRUE(PushText(ch, "1"));
  EXPECT_EQ(fired, 1);
  ASSERT_TRUE(PushText(ch, "2"));
  EXPECT_EQ(fired, 1);  // one callback per kEmpty
  ASSERT_EQ(ch.TryNext(&c), Pop::kChunk);
  ASSERT_EQ(ch.TryNext(&c), Pop::kChunk);
  ASSERT_EQ(ch.TryNext(&c), Pop::kEmpty);
  ch.Finish(Outcome{});
  EXPECT_EQ(fired, 2);  // Finish wakes a waiting consumer too
  EXPECT_EQ(ch.TryNext(&c), Pop::kEnd);
}

TEST(ResponseChannelTest, ReadyCallbackRunsOutsideTheLock) {
  ResponseChannel ch(4);
  Chunk c;
  Pop seen = Pop::kEmpty;
  ch.SetReadyCallback([&] { seen = ch.TryNext(&c); });  // would deadlock under the lock
  ASSERT_EQ(ch.TryNext(&c), Pop::kEmpty);
  ASSERT_TRUE(PushText(ch, "x"));
  EXPECT_EQ(seen, Pop::kChunk);
  EXPECT_EQ(c.text, "x");
}

}  // namespace
}  // namespace narwhal::router
