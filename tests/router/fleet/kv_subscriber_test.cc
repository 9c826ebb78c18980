// The KV-event subscriber (router/fleet/kv_subscriber.h) against real ZeroMQ
// sockets on loopback, written the way vLLM's publisher writes them: a PUB
// sending [topic, seq, payload] and a ROUTER answering replay requests.
// Blocks published reach the engine's index; a gap is replayed through the
// ROUTER from the first missing batch; an unanswered replay makes the
// engine cold when the injected clock passes the timeout; a publisher that
// restarts (its connection lost) makes it cold; a source removed drops its
// index; the metrics count what happened.
#include "router/fleet/kv_subscriber.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/fakes/fake_clock.h"
#include "tests/fakes/kv_batch_writer.h"

namespace narwhal::router::kv {
namespace {

using namespace std::chrono_literals;
using testing::EncodeBatch;
using testing::RemovedSpec;
using testing::StoredSpec;

constexpr char kTopic[] = "kv@p0@model";

// Tokens of block b (block size 4).
std::vector<uint32_t> Block(uint32_t b) {
  return {100 * b + 1, 100 * b + 2, 100 * b + 3, 100 * b + 4};
}
std::vector<uint32_t> Prompt(uint32_t blocks) {
  std::vector<uint32_t> t;
  for (uint32_t b = 0; b < blocks; ++b) {
    for (uint32_t v : Block(b)) t.push_back(v);
  }
  return t;
}
// Stores block b, hash 1000 + b, after block b - 1.
std::string StoreBlock(uint32_t b, testing::EventForm form = testing::EventForm::kMap) {
  StoredSpec s{.hashes = {1000u + b}, .parent = std::nullopt, .tokens = Block(b), .block_size = 4};
  if (b > 0) s.parent = 1000u + b - 1;
  return EncodeBatch({s}, form);
}
std::string Nothing() { return EncodeBatch({RemovedSpec{{1}}}); }  // an unknown removal

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// One engine's publisher: a PUB, and a ROUTER for replays.
class Publisher {
 public:
  explicit Publisher(zmq::context_t& ctx, const std::string& pub_endpoint = "tcp://127.0.0.1:*")
      : pub_(ctx, zmq::socket_type::pub), router_(ctx, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::linger, 0);
    pub_.bind(pub_endpoint);
    router_.bind("tcp://127.0.0.1:*");
  }
  std::string endpoint() { return pub_.get(zmq::sockopt::last_endpoint); }
  std::string replay_endpoint() { return router_.get(zmq::sockopt::last_endpoint); }
  void Send(uint64_t seq, const std::string& payload) {
    const std::string seq_frame = EncodeSeq(seq);  // outlives the send
    std::vector<zmq::const_buffer> frames = {zmq::buffer(std::string_view(kTopic)),
                                             zmq::buffer(seq_frame), zmq::buffer(payload)};
    zmq::send_multipart(pub_, frames);
  }
  // Any frames at all (a publisher that is not vLLM, or a broken one).
  void SendRaw(const std::vector<std::string>& frames) {
    std::vector<zmq::const_buffer> b;
    for (const std::string& f : frames) b.push_back(zmq::buffer(f));
    zmq::send_multipart(pub_, b);
  }
  // Waits for a replay request; returns [identity, "", start_seq].
  std::vector<std::string> ReplayRequest(std::chrono::milliseconds limit = 5s) {
    std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, limit);
    std::vector<std::string> out;
    if ((items[0].revents & ZMQ_POLLIN) == 0) return out;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(router_, std::back_inserter(frames));
    for (const zmq::message_t& f : frames) out.push_back(f.to_string());
    return out;
  }
  void Reply(const std::string& identity, std::vector<std::string> frames) {
    frames.insert(frames.begin(), {identity, ""});
    std::vector<zmq::const_buffer> b;
    for (const std::string& f : frames) b.push_back(zmq::buffer(f));
    zmq::send_multipart(router_, b);
  }

 private:
  zmq::socket_t pub_;
  zmq::socket_t router_;
};

class KvSubscriberTest : public ::testing::Test {
 protected:
  KvSubscriberTest() : metrics_(registry_) {}

  void Subscribe(Publisher& p, bool replay = true) {
    source_ = KvSource{"p0", p.endpoint(), replay ? p.replay_endpoint() : ""};
    subscriber_.SetSources({source_});
  }
  // Sends no-op batches until the subscription is live (a SUB misses what
  // a PUB sends before the subscription reaches it); returns the next seq.
  uint64_t WarmUp(Publisher& p, uint64_t seq = 0) {
    EXPECT_TRUE(WaitFor([&] {
      p.Send(seq++, Nothing());
      std::this_thread::sleep_for(10ms);
      std::optional<KvSourceStatus> s = subscriber_.Status("p0");
      return s && s->last_seq.has_value();
    }));
    // Whatever reached the index last is the last one sent.
    EXPECT_TRUE(WaitFor([&] { return subscriber_.Status("p0")->last_seq == seq - 1; }));
    return seq;
  }
  size_t Held(uint32_t blocks) { return subscriber_.LeadingBlocks("p0", Prompt(blocks)); }
  double Metric(const std::string& name, const std::string& labels) {
    const std::string text = prometheus::TextSerializer().Serialize(registry_.Collect());
    const std::string key = name + "{" + labels + "}";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
      if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + key.size() + 1));
    }
    return 0;
  }

  zmq::context_t ctx_{1};
  testing::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_;
  // The warm-up's first batches are lost to the subscription's start (a
  // SUB joins late): these tests are about a stream under way, so its start
  // is not rebuilt (KvSubscriberRebuildTest is).
  KvSubscriber subscriber_{clock_,
                           KvSubscriberOptions{.topic = "kv@p0",
                                               .index = {.block_size = 4, .max_blocks = 1000},
                                               .replay_timeout = 2s,
                                               .rebuild = false,
                                               .max_held = 64,
                                               .decode = {},
                                               .poll_interval = 5ms},
                           &metrics_};
  KvSource source_;
};

TEST_F(KvSubscriberTest, PublishedBlocksReachTheIndexInBothEncodings) {
  Publisher p(ctx_);
  Subscribe(p);
  uint64_t seq = WarmUp(p);
  p.Send(seq++, StoreBlock(0, testing::EventForm::kArray));
  p.Send(seq++, StoreBlock(1, testing::EventForm::kMap));
  p.Send(seq++, StoreBlock(2, testing::EventForm::kArray));
  ASSERT_TRUE(WaitFor([&] { return Held(4) == 3; })) << Held(4);
  EXPECT_EQ(subscriber_.Status("p0")->blocks, 3u);
  EXPECT_TRUE(subscriber_.Status("p0")->connected);
  EXPECT_EQ(Metric("narwhal_kv_events_total", "iid=\"p0\",kind=\"stored\""), 3);
  EXPECT_EQ(Metric("narwhal_kv_index_blocks", "iid=\"p0\""), 3);

  // An eviction ends the run where the engine lost the block.
  p.Send(seq++, EncodeBatch({RemovedSpec{{1001}}}));
  ASSERT_TRUE(WaitFor([&] { return Held(4) == 1; })) << Held(4);
  EXPECT_EQ(subscriber_.LeadingBlocks("nobody", Prompt(4)), 0u);
}

TEST_F(KvSubscriberTest, AGapIsReplayedFromTheFirstMissingBatch) {
  Publisher p(ctx_);
  Subscribe(p);
  uint64_t seq = WarmUp(p);
  p.Send(seq, StoreBlock(0));
  const uint64_t lost = seq + 1;  // block 1's batch never reaches the subscriber
  p.Send(seq + 2, StoreBlock(2));
  const std::vector<std::string> request = p.ReplayRequest();
  ASSERT_EQ(request.size(), 3u) << "[identity, \"\", start_seq] at the ROUTER";
  EXPECT_EQ(request[1], "");
  EXPECT_EQ(DecodeSeq(request[2]).value(), lost);
  EXPECT_EQ(Held(3), 1u) << "block 2 waits for the replay";

  // The reply layout after vLLM PR #45177 (with the topic frame).
  p.Reply(request[0], {kTopic, EncodeSeq(lost), StoreBlock(1)});
  p.Reply(request[0], {"", EncodeSeq(kReplayEndSeq), ""});
  ASSERT_TRUE(WaitFor([&] { return Held(3) == 3; })) << Held(3);
  const KvSourceStatus s = *subscriber_.Status("p0");
  EXPECT_EQ(s.gaps, 1);
  EXPECT_EQ(s.colds, 0);
  EXPECT_FALSE(s.replaying);
  EXPECT_EQ(Metric("narwhal_kv_event_gaps_total", "iid=\"p0\",outcome=\"replayed\""), 1);
}

TEST_F(KvSubscriberTest, AnUnansweredReplayMakesTheEngineColdAtTheTimeout) {
  Publisher p(ctx_);
  Subscribe(p);
  uint64_t seq = WarmUp(p);
  p.Send(seq, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(2) == 1; }));
  p.Send(seq + 2, StoreBlock(1));  // seq + 1 lost
  ASSERT_EQ(p.ReplayRequest().size(), 3u);
  ASSERT_TRUE(WaitFor([&] { return subscriber_.Status("p0")->replaying; }));
  // Real time passes; the injected clock does not: still replaying.
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(subscriber_.Status("p0")->replaying);
  EXPECT_EQ(Held(2), 1u);

  clock_.Advance(2.0);
  ASSERT_TRUE(WaitFor([&] { return !subscriber_.Status("p0")->replaying; }));
  const KvSourceStatus s = *subscriber_.Status("p0");
  EXPECT_EQ(s.colds, 1);
  EXPECT_NE(s.last_cold.find("timeout"), std::string::npos) << s.last_cold;
  // Cold: block 0 is forgotten; block 1 (held, after the gap) is not
  // indexable without its parent. Nothing is claimed.
  EXPECT_EQ(Held(2), 0u);
  EXPECT_EQ(Metric("narwhal_kv_event_gaps_total", "iid=\"p0\",outcome=\"replay_timeout\""), 1);
  // Fresh events warm it again.
  p.Send(seq + 3, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(2) == 1; }));
}

TEST_F(KvSubscriberTest, AnEngineWithoutReplayGoesColdOnAGap) {
  Publisher p(ctx_);
  Subscribe(p, /*replay=*/false);
  uint64_t seq = WarmUp(p);
  p.Send(seq, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(2) == 1; }));
  p.Send(seq + 2,
         EncodeBatch({StoredSpec{.hashes = {5000}, .parent = std::nullopt, .tokens = Block(7)}}));
  ASSERT_TRUE(WaitFor([&] { return subscriber_.Status("p0")->colds == 1; }));
  EXPECT_EQ(Held(2), 0u);
  EXPECT_EQ(Metric("narwhal_kv_event_gaps_total", "iid=\"p0\",outcome=\"no_replay\""), 1);
}

TEST_F(KvSubscriberTest, APublisherThatRestartsMakesTheEngineCold) {
  std::string endpoint;
  {
    Publisher p(ctx_);
    endpoint = p.endpoint();
    Subscribe(p);
    uint64_t seq = WarmUp(p);
    p.Send(seq, StoreBlock(0));
    p.Send(seq + 1, StoreBlock(1));
    ASSERT_TRUE(WaitFor([&] { return Held(2) == 2; }));
  }  // the engine dies: its sockets close
  ASSERT_TRUE(WaitFor([&] { return subscriber_.Status("p0")->colds >= 1; }));
  EXPECT_EQ(Held(2), 0u) << "a restarted engine's cache is empty: never warm by assumption";
  EXPECT_FALSE(subscriber_.Status("p0")->connected);

  // The engine comes back on the same port, numbering from 0 again.
  Publisher again(ctx_, endpoint);
  WarmUp(again);
  again.Send(subscriber_.Status("p0")->last_seq.value() + 1, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(2) == 1; }));
  EXPECT_TRUE(subscriber_.Status("p0")->connected);
}

TEST_F(KvSubscriberTest, ARemovedSourceDropsItsIndex) {
  Publisher p(ctx_);
  Subscribe(p);
  uint64_t seq = WarmUp(p);
  p.Send(seq, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 1; }));
  subscriber_.SetSources({});
  ASSERT_TRUE(WaitFor([&] { return !subscriber_.Status("p0").has_value(); }));
  EXPECT_EQ(Held(1), 0u);
  EXPECT_TRUE(subscriber_.Statuses().empty());
}

TEST_F(KvSubscriberTest, HostileMessagesMakeTheEngineColdAndNothingElse) {
  Publisher p(ctx_);
  Subscribe(p, /*replay=*/false);
  uint64_t seq = WarmUp(p);
  auto bad_batches = [&] {
    return Metric("narwhal_kv_event_gaps_total", "iid=\"p0\",outcome=\"bad_batch\"");
  };
  p.Send(seq++, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 1; }));
  // Two frames instead of three: its number is unknown, so the next batch
  // also shows a gap (cold again, then applied).
  p.SendRaw({kTopic, EncodeSeq(seq++)});
  ASSERT_TRUE(WaitFor([&] { return bad_batches() == 1; }));
  EXPECT_EQ(Held(1), 0u);
  p.Send(seq++, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 1; }));
  // A payload that is not msgpack, then one nested 100,000 arrays deep.
  p.Send(seq++, std::string("\xc1\xff not msgpack", 14));
  ASSERT_TRUE(WaitFor([&] { return bad_batches() == 2; }));
  EXPECT_EQ(Held(1), 0u);
  p.Send(seq++, std::string(100000, '\x91'));
  ASSERT_TRUE(WaitFor([&] { return bad_batches() == 3; }));
  // The subscription goes on, in order.
  p.Send(seq++, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 1; }));
  EXPECT_EQ(subscriber_.Status("p0")->last_seq, seq - 1);
}

TEST_F(KvSubscriberTest, ForgetClearsTheIndex) {
  Publisher p(ctx_);
  Subscribe(p);
  uint64_t seq = WarmUp(p);
  p.Send(seq, StoreBlock(0));
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 1; }));
  subscriber_.Forget("p0", "ejected");
  ASSERT_TRUE(WaitFor([&] { return Held(1) == 0; }));
  EXPECT_EQ(subscriber_.Status("p0")->last_cold, "ejected");
}

// The product's default: a stream that starts past batch 0 is rebuilt from
// the engine's replay buffer, so a subscriber that joins late (a router
// started beside a running engine, or an engine restarted before the
// router reconnected) knows what the engine published before it.
TEST_F(KvSubscriberTest, AStreamJoinedLateIsRebuiltFromTheEnginesBuffer) {
  KvSubscriber rebuilding(clock_,
                          KvSubscriberOptions{.topic = "kv@p0",
                                              .index = {.block_size = 4, .max_blocks = 1000},
                                              .replay_timeout = 2s,
                                              .rebuild = true,
                                              .max_held = 64,
                                              .decode = {},
                                              .poll_interval = 5ms},
                          nullptr);
  Publisher p(ctx_);
  // Blocks 0..2 are stored before anyone listens.
  std::vector<std::string> published = {StoreBlock(0), StoreBlock(1), StoreBlock(2)};
  for (uint64_t seq = 0; seq < published.size(); ++seq) p.Send(seq, published[seq]);
  rebuilding.SetSources({KvSource{"p0", p.endpoint(), p.replay_endpoint()}});
  // Live batches (no-ops) until one reaches the subscriber: it asks for
  // everything from batch 0.
  uint64_t seq = published.size();
  std::vector<std::string> request;
  ASSERT_TRUE(WaitFor([&] {
    published.push_back(Nothing());
    p.Send(seq++, published.back());
    request = p.ReplayRequest(10ms);
    return !request.empty();
  }));
  ASSERT_EQ(request.size(), 3u);
  EXPECT_EQ(DecodeSeq(request[2]).value(), 0u);
  // The engine's buffer: every batch it published, then the end marker.
  for (uint64_t n = 0; n < published.size(); ++n) {
    p.Reply(request[0], {kTopic, EncodeSeq(n), published[n]});
  }
  p.Reply(request[0], {"", EncodeSeq(kReplayEndSeq), ""});
  ASSERT_TRUE(WaitFor([&] { return rebuilding.LeadingBlocks("p0", Prompt(4)) == 3; }))
      << rebuilding.LeadingBlocks("p0", Prompt(4));
  const KvSourceStatus s = *rebuilding.Status("p0");
  EXPECT_FALSE(s.replaying);
  EXPECT_EQ(s.gaps, 0);
  EXPECT_EQ(s.colds, 0);
  // Later batches follow on.
  p.Send(seq, StoreBlock(3));
  ASSERT_TRUE(WaitFor([&] { return rebuilding.LeadingBlocks("p0", Prompt(4)) == 4; }));
  rebuilding.Stop();
}

}  // namespace
}  // namespace narwhal::router::kv
