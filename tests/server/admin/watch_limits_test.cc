// The bounds of event watching: the EventBus's watchers (a cap on their
// number, a bound in bytes on each one's buffer) and the admin WatchEvents
// streams built on them — refused beyond the cap with RESOURCE_EXHAUSTED, a
// slow stream ended with RESOURCE_EXHAUSTED instead of growing, a stream
// that never reads cancelled so it frees its place, normal streams
// unaffected.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "router/fleet/event_bus.h"
#include "tests/server/admin/admin_harness.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;
using json = nlohmann::json;
using router::EventBus;
using router::WatchLimits;
using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// Event `n` of a flood, carrying `detail_bytes` of detail.
router::FleetEvent Sized(int n, size_t detail_bytes) {
  router::FleetEvent event;
  event.kind = router::FleetEventKind::kEngineHoldSuppressed;
  event.iid = "flood";
  event.cause = std::to_string(n);
  event.detail = std::string(detail_bytes, 'x');
  return event;
}

WatchLimits Limits(size_t max_watchers, size_t buffer_bytes, size_t buffer_events = 0) {
  WatchLimits l;
  l.max_watchers = max_watchers;
  l.buffer_bytes = buffer_bytes;
  l.buffer_events = buffer_events;
  return l;
}

// ------------------------------------------------------------------ EventBus

TEST(EventBusTest, WatchersBeyondTheCapAreRefusedAndCounted) {
  EventBus bus;
  const WatchLimits limits = Limits(2, 1 << 20);
  auto a = bus.Watch(limits, nullptr);
  auto b = bus.Watch(limits, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(bus.Watch(limits, nullptr), nullptr);
  EXPECT_EQ(bus.Watch(limits, nullptr), nullptr);
  EventBus::WatchStats stats = bus.watch_stats();
  EXPECT_EQ(stats.open, 2u);
  EXPECT_EQ(stats.refused, 2);
  // Leaving frees a place.
  bus.Unwatch(a);
  auto c = bus.Watch(limits, nullptr);
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(bus.watch_stats().open, 2u);
  // Subscribers (in-process callbacks) are not watchers.
  int seen = 0;
  const int id = bus.Subscribe([&](const router::PublishedEvent&) { ++seen; });
  bus.Publish(Sized(0, 1), 0);
  EXPECT_EQ(seen, 1);
  bus.Unsubscribe(id);
}

TEST(EventBusTest, SlowWatcherBufferNeverExceedsItsBoundInBytes) {
  EventBus bus;
  constexpr size_t kBound = 16 * 1024;
  int wakes = 0;
  auto slow = bus.Watch(Limits(8, kBound), [&] { ++wakes; });
  ASSERT_NE(slow, nullptr);
  constexpr int kEvents = 2000;
  for (int i = 0; i < kEvents; ++i) {
    bus.Publish(Sized(i, 500), 0);
    ASSERT_LE(slow->buffered_bytes(), kBound) << "after event " << i;
  }
  EXPECT_TRUE(slow->overflowed());
  EXPECT_LE(slow->peak_bytes(), kBound);
  EXPECT_GT(slow->peak_bytes(), kBound / 2);  // it did fill up before overflowing
  EXPECT_EQ(slow->buffered_bytes(), 0u);      // emptied at the overflow
  EXPECT_EQ(slow->buffered_events(), 0u);
  EXPECT_EQ(slow->dropped(), kEvents);  // none was ever taken
  EventBus::SharedEvent event;
  EXPECT_FALSE(slow->TryPop(&event));
  EXPECT_EQ(bus.watch_stats().overflowed, 1);
  // It woke its consumer for what it buffered and for the overflow, no more.
  EXPECT_LT(wakes, kEvents);
}

TEST(EventBusTest, AnEventLargerThanTheBoundOverflowsRatherThanExceedIt) {
  EventBus bus;
  auto w = bus.Watch(Limits(1, 1024), nullptr);
  bus.Publish(Sized(0, 4096), 0);
  EXPECT_TRUE(w->overflowed());
  EXPECT_EQ(w->peak_bytes(), 0u);
}

TEST(EventBusTest, EventCountBoundOverflowsToo) {
  EventBus bus;
  auto w = bus.Watch(Limits(1, 1 << 20, /*buffer_events=*/4), nullptr);
  for (int i = 0; i < 4; ++i) bus.Publish(Sized(i, 10), 0);
  EXPECT_FALSE(w->overflowed());
  EXPECT_EQ(w->buffered_events(), 4u);
  bus.Publish(Sized(4, 10), 0);
  EXPECT_TRUE(w->overflowed());
  EXPECT_EQ(w->dropped(), 5);
}

TEST(EventBusTest, WatcherThatKeepsUpGetsEveryEventInOrder) {
  EventBus bus;
  constexpr size_t kSlowBound = 64 * 1024;
  constexpr size_t kFastBound = 1 << 20;  // room for all of it, whatever the scheduling
  auto slow = bus.Watch(Limits(8, kSlowBound), nullptr);
  std::atomic<bool> done{false};
  std::vector<long long> seqs;
  std::shared_ptr<EventBus::Watcher> fast = bus.Watch(Limits(8, kFastBound), nullptr);
  std::thread reader([&] {
    EventBus::SharedEvent e;
    while (true) {
      if (fast->TryPop(&e)) {
        seqs.push_back(e->seq);
      } else if (done) {
        if (!fast->TryPop(&e)) break;
        seqs.push_back(e->seq);
      } else {
        std::this_thread::yield();
      }
    }
  });
  constexpr int kEvents = 3000;
  for (int i = 0; i < kEvents; ++i) {
    bus.Publish(Sized(i, 200), 0);
    if (i % 50 == 0) std::this_thread::sleep_for(1ms);  // a pace a reader keeps up with
  }
  done = true;
  reader.join();
  EXPECT_TRUE(slow->overflowed());
  EXPECT_FALSE(fast->overflowed());
  ASSERT_EQ(seqs.size(), static_cast<size_t>(kEvents));
  for (size_t i = 1; i < seqs.size(); ++i) ASSERT_EQ(seqs[i], seqs[i - 1] + 1);
  EXPECT_LE(fast->peak_bytes(), kFastBound);
  EXPECT_LE(slow->peak_bytes(), kSlowBound);
  EXPECT_EQ(bus.watch_stats().overflowed, 1);
}

TEST(EventBusTest, CloseEmptiesAndWakes) {
  EventBus bus;
  int wakes = 0;
  auto w = bus.Watch(Limits(1, 1 << 20), [&] { ++wakes; });
  bus.Publish(Sized(0, 10), 0);
  EXPECT_EQ(w->buffered_events(), 1u);
  w->Close();
  EXPECT_TRUE(w->closed());
  EXPECT_EQ(w->buffered_bytes(), 0u);
  EXPECT_EQ(wakes, 2);
  bus.Publish(Sized(1, 10), 0);
  EXPECT_EQ(w->buffered_events(), 0u);
  EXPECT_EQ(wakes, 2);
}

TEST(EventBusTest, HistoryIsSharedWithWatchersAndBounded) {
  EventBus bus(/*history=*/10);
  for (int i = 0; i < 25; ++i) bus.Publish(Sized(i, 10), 0);
  const std::vector<EventBus::SharedEvent> recent = bus.SharedSince(0);
  ASSERT_EQ(recent.size(), 10u);
  EXPECT_EQ(recent.front()->seq, 16);
  EXPECT_EQ(bus.Since(20).size(), 5u);
  EXPECT_GT(EventBus::ChargedBytes(*recent.front()),
            router::PublishedEventJson(*recent.front()).dump().size());
}

// ------------------------------------------------------------------ WatchEvents

class CappedWatcher {
 public:
  CappedWatcher(AdminHarness& h, std::optional<long long> since_seq) {
    pb::WatchEventsRequest request;
    if (since_seq) request.set_since_seq(*since_seq);
    reader_ = h.stub().WatchEvents(&context_, request);
  }
  ~CappedWatcher() {
    if (finished_) return;
    context_.TryCancel();
    pb::Event ignored;
    while (reader_->Read(&ignored)) {
    }
    reader_->Finish();
  }
  bool Next(pb::Event* event) { return reader_->Read(event); }
  // The next marker `name` (AdminHarness::Mark), skipping other events.
  bool NextMarker(const std::string& name, pb::Event* event) {
    while (reader_->Read(event)) {
      if (event->iid() == name) return true;
    }
    return false;
  }
  grpc::Status Finish() {
    finished_ = true;
    return reader_->Finish();
  }

 private:
  bool finished_ = false;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pb::Event>> reader_;
};

std::vector<router::EngineSettings> UnreachableEngines() {
  return {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
          {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
}

bool WaitOpenWatchers(AdminHarness& h, size_t n, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (h.events().watch_stats().open != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(AdminWatchLimitsTest, StreamsBeyondTheCapAreRefusedWithResourceExhausted) {
  server::AdminOptions options;
  options.max_watchers = 2;
  AdminHarness h(AdminTestSettings(UnreachableEngines()), options);
  h.Mark("test_marker");
  pb::Event event;
  auto first = std::make_unique<CappedWatcher>(h, 0);
  ASSERT_TRUE(first->NextMarker("test_marker", &event));
  CappedWatcher second(h, 0);
  ASSERT_TRUE(second.NextMarker("test_marker", &event));

  CappedWatcher third(h, 0);
  EXPECT_FALSE(third.Next(&event));
  const grpc::Status refused = third.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("admin.max_watchers"), std::string::npos)
      << refused.error_message();
  EXPECT_EQ(h.events().watch_stats().refused, 1);

  // The open ones are unaffected; one leaving frees a place.
  h.Mark("after_refusal");
  ASSERT_TRUE(second.NextMarker("after_refusal", &event));
  first.reset();
  ASSERT_TRUE(WaitOpenWatchers(h, 1));
  CappedWatcher fourth(h, 0);
  ASSERT_TRUE(fourth.NextMarker("after_refusal", &event));
}

TEST(AdminWatchLimitsTest, SlowStreamIsEndedAtItsByteBoundAndOthersGetEverything) {
  server::AdminOptions options;
  options.watch_buffer_bytes = 256 * 1024;
  options.watch_queue = 0;  // bytes only
  AdminHarness h(AdminTestSettings(UnreachableEngines()), options);
  h.Mark("test_marker");
  pb::Event event;
  CappedWatcher slow(h, 0);
  ASSERT_TRUE(slow.NextMarker("test_marker", &event));  // from here on it reads nothing
  CappedWatcher fast(h, 0);
  ASSERT_TRUE(fast.NextMarker("test_marker", &event));

  std::atomic<int> received{0};
  std::thread reader([&] {
    pb::Event e;
    while (fast.Next(&e)) {
      if (e.iid() == "flood_end") break;
      if (e.iid() == "flood") ++received;
    }
  });
  // Until `slow` overflows: what the transport holds for it, then its bound.
  const std::string detail(1024, 'x');
  int published = 0;
  while (h.events().watch_stats().overflowed == 0 && published < 200000) {
    h.Mark("flood", detail);
    if (++published % 5 == 0) std::this_thread::sleep_for(1ms);  // a pace `fast` keeps up with
  }
  h.Mark("flood_end");
  reader.join();
  EXPECT_EQ(received, published);
  EXPECT_EQ(h.events().watch_stats().overflowed, 1);

  int got = 0;
  while (slow.Next(&event)) ++got;
  EXPECT_LT(got, published);
  const grpc::Status s = slow.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("subscriber too slow: events dropped"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("262144 bytes"), std::string::npos) << s.error_message();

  // The fast one is still live.
  h.Mark("after_flood");
  ASSERT_TRUE(fast.NextMarker("after_flood", &event));
}

TEST(AdminWatchLimitsTest, StreamThatNeverReadsIsCancelledAndFreesItsPlace) {
  server::AdminOptions options;
  options.max_watchers = 1;
  options.watch_buffer_bytes = 32 * 1024;
  options.watch_queue = 0;
  options.watch_stall_timeout = 200ms;
  AdminHarness h(AdminTestSettings(UnreachableEngines()), options);
  h.Mark("test_marker");
  pb::Event event;
  auto stuck = std::make_unique<CappedWatcher>(h, 0);
  ASSERT_TRUE(stuck->NextMarker("test_marker", &event));  // then never reads again

  const std::string detail(4096, 'x');
  for (int i = 0; i < 50000 && h.events().watch_stats().overflowed == 0; ++i) {
    h.Mark("flood", detail);
  }
  ASSERT_EQ(h.events().watch_stats().overflowed, 1);
  // Its client never takes the end: the call is cancelled, the place freed.
  ASSERT_TRUE(WaitOpenWatchers(h, 0));
  // A new watcher takes the place. It starts after the flood: the bus keeps
  // a bounded history, which the flood may have rolled past the first marker.
  const std::vector<nlohmann::json> history = h.events().Since(0);
  const long long after = history.empty() ? 0 : history.back().value("seq", 0LL);
  h.Mark("after_flood");
  CappedWatcher next(h, after);
  ASSERT_TRUE(next.NextMarker("after_flood", &event));
}

TEST(AdminWatchLimitsTest, ShutdownEndsStreamsAndRefusesNewOnes) {
  AdminHarness h(AdminTestSettings(UnreachableEngines()));
  h.Mark("test_marker");
  pb::Event event;
  CappedWatcher w(h, 0);
  ASSERT_TRUE(w.NextMarker("test_marker", &event));
  h.service().Shutdown();
  EXPECT_FALSE(w.Next(&event));
  EXPECT_EQ(w.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(WaitOpenWatchers(h, 0));
}

}  // namespace
}  // namespace narwhal::testing
