// StartupChecks (router/fleet/startup_checks.h) with a scripted engine
// client, the fake clock and the control loop: a large fleet is checked by
// a bounded number of checkers (never more checks at once than the bound,
// every one on the control loop's one thread) that still run concurrently
// and reach every engine; roles are interleaved; a failed engine is checked
// again only once `retry` passed on the injected clock (its checker sleeps
// on that clock until then), and each outcome change is logged once; an
// engine that left is dropped; Stop() ends idle checkers at once.
#include "router/fleet/startup_checks.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engines/engine_client.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::router {
namespace {

using namespace std::chrono_literals;
using testing::ScriptedEngines;

constexpr double kFirstToken = 0.75;

// Waits (real time, bounded) until `done` holds.
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The scripted engines, with every GET /health suspended at a gate (without
// blocking the loop) until the test opens it; records which threads asked
// and how many asked at once.
class GatedEngines : public ScriptedEngines {
 public:
  using ScriptedEngines::ScriptedEngines;

  engines::Awaitable<engines::ControlResponse> Control(engines::EngineTarget engine,
                                                       std::string method, std::string path,
                                                       std::string body,
                                                       double timeout_s) override {
    if (path == "/health") {
      boost::asio::steady_timer gate(co_await boost::asio::this_coro::executor,
                                     std::chrono::steady_clock::time_point::max());
      bool wait = false;
      {
        std::lock_guard<std::mutex> lock(gate_mu_);
        threads_.insert(std::this_thread::get_id());
        ++inflight_;
        max_inflight_ = std::max(max_inflight_, inflight_);
        gate_cv_.notify_all();
        if (!open_) {
          gates_.push_back(&gate);
          wait = true;
        }
      }
      // Only Open() ends the wait (it cancels the gate on this loop).
      boost::system::error_code ec;
      if (wait)
        co_await gate.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      std::lock_guard<std::mutex> lock(gate_mu_);
      --inflight_;
    }
    co_return co_await ScriptedEngines::Control(std::move(engine), std::move(method),
                                                std::move(path), std::move(body), timeout_s);
  }

  bool WaitInflight(int n) {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, 20s, [&] { return inflight_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    open_ = true;
    for (boost::asio::steady_timer* gate : gates_) {
      boost::asio::post(gate->get_executor(), [gate] { gate->cancel(); });
    }
    gates_.clear();
  }
  int inflight() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return inflight_;
  }
  int max_inflight() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return max_inflight_;
  }
  std::set<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return threads_;
  }

 private:
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool open_ = false;
  int inflight_ = 0;
  int max_inflight_ = 0;
  std::vector<boost::asio::steady_timer*> gates_;  // waiting, each in its leg's frame
  std::set<std::thread::id> threads_;
};

class StartupChecksTest : public ::testing::Test {
 protected:
  StartupChecksTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engine.health_timeout_s = 1;
    settings_.recovery.liveness_interval_s = 0;
  }
  ~StartupChecksTest() override {
    if (engines_ != nullptr) engines_->Open();
    if (checks_ != nullptr) checks_->Stop();
  }

  // `prefill` prefill engines p0.., then `decode` decode engines d0...
  void MakeFleet(int prefill, int decode) {
    for (int i = 0; i < prefill; ++i) {
      settings_.engines.push_back(
          {"p" + std::to_string(i), "http://p" + std::to_string(i) + ".test:8000", Role::kPrefill});
    }
    for (int i = 0; i < decode; ++i) {
      settings_.engines.push_back(
          {"d" + std::to_string(i), "http://d" + std::to_string(i) + ".test:8000", Role::kDecode});
    }
    fleet_ = std::make_unique<Fleet>(settings_, clock_, &metrics_);
    engines_ = std::make_unique<GatedEngines>(clock_, &clock_, kFirstToken);
    prober_ = std::make_unique<Prober>(*engines_, fleet_->control(), clock_);
  }

  void Checks(engines::MonoClock::duration retry, size_t checkers = StartupChecks::kMaxCheckers) {
    checks_ = std::make_unique<StartupChecks>(fleet_->control(), *prober_, loop_.executor(), retry,
                                              checkers);
  }
  // The control loop's thread.
  std::thread::id LoopThread() {
    std::thread::id id;
    loop_.Run([&]() -> engines::Awaitable<void> {
      id = std::this_thread::get_id();
      co_return;
    }());
    return id;
  }

  bool AllChecked() const {
    for (const EngineSettings& e : settings_.engines) {
      if (!fleet_->control().Checked(e.iid)) return false;
    }
    return true;
  }

  std::vector<testing::Call> Health(const std::string& iid) const {
    std::vector<testing::Call> out;
    for (const testing::Call& c : engines_->calls("control", iid)) {
      if (c.path == "GET /health") out.push_back(c);
    }
    return out;
  }

  testing::ControlLoop loop_;
  prometheus::Registry registry_;
  Metrics metrics_;
  Settings settings_;
  testing::FakeClock clock_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<GatedEngines> engines_;
  std::unique_ptr<Prober> prober_;
  std::unique_ptr<StartupChecks> checks_;
};

TEST_F(StartupChecksTest, ChecksStayBoundedOnOneThreadWhileEveryEngineIsChecked) {
  MakeFleet(100, 100);
  Checks(1000ms);
  checks_->Start();
  // Every checker is suspended at the gate: exactly the bound runs at once.
  ASSERT_TRUE(engines_->WaitInflight(StartupChecks::kMaxCheckers));
  EXPECT_EQ(checks_->running(), StartupChecks::kMaxCheckers);
  EXPECT_EQ(engines_->inflight(), static_cast<int>(StartupChecks::kMaxCheckers));
  engines_->Open();
  ASSERT_TRUE(WaitUntil([&] { return AllChecked(); }));
  EXPECT_EQ(engines_->max_inflight(), static_cast<int>(StartupChecks::kMaxCheckers));
  // Concurrent checks, and not one thread of their own: all on the loop.
  EXPECT_EQ(engines_->threads(), std::set<std::thread::id>{LoopThread()});
  for (const EngineSettings& e : settings_.engines) {
    EXPECT_EQ(Health(e.iid).size(), 1u) << e.iid;
  }
  // With nothing left to check the checkers end.
  EXPECT_TRUE(WaitUntil([&] { return checks_->running() == 0; }));
}

TEST_F(StartupChecksTest, FewerEnginesThanTheBoundGetOneCheckerEach) {
  MakeFleet(2, 1);
  Checks(1000ms);
  checks_->Start();
  ASSERT_TRUE(engines_->WaitInflight(3));
  EXPECT_EQ(checks_->running(), 3u);
  engines_->Open();
  ASSERT_TRUE(WaitUntil([&] { return AllChecked(); }));
  EXPECT_TRUE(WaitUntil([&] { return checks_->running() == 0; }));
}

TEST_F(StartupChecksTest, RolesAreInterleaved) {
  MakeFleet(5, 2);
  engines_->Open();
  Checks(1000ms, /*checkers=*/1);
  checks_->Start();
  ASSERT_TRUE(WaitUntil([&] { return AllChecked(); }));
  std::vector<std::string> order;
  for (const testing::Call& c : engines_->calls("control")) {
    if (c.path == "GET /health") order.push_back(c.iid);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"p0", "d0", "p1", "d1", "p2", "p3", "p4"}));
}

TEST_F(StartupChecksTest, AFailedEngineIsCheckedAgainOnlyAfterRetryOnTheClock) {
  MakeFleet(1, 1);
  engines_->Open();
  const engines::MonoTime t0 = clock_.Now();
  // p0 loads until t0 + 150 s: its checks at t0, +60 s and +120 s fail.
  engines_->SetControlUntil("p0", "/health", t0 + engines::FromSeconds(150),
                            engines::ControlResponse{503, "loading", ""});
  Checks(60s);
  ::testing::internal::CaptureStderr();
  checks_->Start();
  // A check is recorded when it starts; p0 is back in line (due on the clock
  // from the failure) once it ended, and d0's checker has ended: one idle
  // checker is left. Only then may the clock move.
  ASSERT_TRUE(WaitUntil([&] {
    return fleet_->control().Checked("d0") && Health("p0").size() == 1 && checks_->waiting() == 1 &&
           checks_->running() == 1;
  }));
  // Its checker sleeps on the clock until exactly the retry is due; while
  // the clock does not move, p0 stays in line, unchecked.
  const engines::MonoTime due = Health("p0")[0].at + 60s;
  ASSERT_TRUE(WaitUntil([&] {
    const std::vector<engines::MonoTime> d = clock_.pending_deadlines();
    return std::find(d.begin(), d.end(), due) != d.end();
  }));
  loop_.Drain();
  EXPECT_EQ(checks_->waiting(), 1u);
  EXPECT_EQ(Health("p0").size(), 1u);
  // 1 ms short of the retry on the clock: still not due.
  clock_.Advance(59999ms);
  loop_.Drain();
  EXPECT_EQ(checks_->waiting(), 1u);
  EXPECT_EQ(Health("p0").size(), 1u);
  // Due on the clock: checked again at once, whatever the real time.
  clock_.Advance(1ms);
  ASSERT_TRUE(WaitUntil([&] { return Health("p0").size() == 2 && checks_->waiting() == 1; }));
  clock_.Advance(60s);
  ASSERT_TRUE(WaitUntil([&] { return Health("p0").size() == 3 && checks_->waiting() == 1; }));
  EXPECT_FALSE(fleet_->control().Checked("p0"));
  clock_.Advance(60s);
  // Checked, then logged: the log is complete once its checker has ended.
  ASSERT_TRUE(
      WaitUntil([&] { return fleet_->control().Checked("p0") && checks_->running() == 0; }));
  const std::string log = ::testing::internal::GetCapturedStderr();

  const std::vector<testing::Call> checks = Health("p0");
  ASSERT_EQ(checks.size(), 4u);
  for (size_t k = 1; k < checks.size(); ++k) {
    EXPECT_GE(checks[k].at - checks[k - 1].at, engines::FromSeconds(60)) << k;
  }
  EXPECT_EQ(Health("d0").size(), 1u);
  // The same failure three times is logged once; the pass once.
  const std::string failed = "engine p0 (http://p0.test:8000) failed its start-up health check";
  size_t failures = 0;
  for (size_t at = log.find(failed); at != std::string::npos; at = log.find(failed, at + 1)) {
    ++failures;
  }
  EXPECT_EQ(failures, 1u) << log;
  EXPECT_NE(log.find("engine p0 (http://p0.test:8000) passed its start-up health check "
                     "(attempt 4)"),
            std::string::npos)
      << log;
}

TEST_F(StartupChecksTest, AnEngineThatLeftIsDropped) {
  MakeFleet(2, 1);
  engines_->Open();
  engines_->SetControl("p1", "/health", engines::ControlResponse{503, "loading", ""});
  Checks(1000ms);
  ::testing::internal::CaptureStderr();
  checks_->Start();
  // Only p1's checker is left, waiting for its retry: p1 is back in line
  // (due on the clock from its failure) once its check ended. Only then may
  // the clock move.
  ASSERT_TRUE(WaitUntil([&] {
    return fleet_->control().Checked("p0") && fleet_->control().Checked("d0") &&
           Health("p1").size() == 1 && checks_->waiting() == 1 && checks_->running() == 1;
  }));
  ASSERT_TRUE(fleet_->admin().RemoveEngine("p1", MemberSource{SourceKind::kFile, ""}).ok());
  clock_.Advance(1s);
  // It drops p1 and, with nothing left, ends.
  EXPECT_TRUE(WaitUntil([&] { return checks_->running() == 0; }));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Health("p1").size(), 1u);
  EXPECT_NE(log.find("engine p1 left the fleet before passing its start-up health check"),
            std::string::npos)
      << log;
}

TEST_F(StartupChecksTest, StopEndsCheckersWaitingForTheirRetry) {
  MakeFleet(20, 20);
  engines_->Open();
  for (const EngineSettings& e : settings_.engines) {
    engines_->SetControl(e.iid, "/health", engines::ControlResponse{503, "loading", ""});
  }
  // An hour between checks on the clock, which stands still: only Stop()
  // wakes them.
  Checks(std::chrono::hours(1));
  checks_->Start();
  ASSERT_TRUE(WaitUntil([&] {
    for (const EngineSettings& e : settings_.engines) {
      if (Health(e.iid).empty()) return false;
    }
    return true;
  }));
  const auto start = std::chrono::steady_clock::now();
  checks_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_FALSE(fleet_->control().Checked("p0"));
}

}  // namespace
}  // namespace narwhal::router
