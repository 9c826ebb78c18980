// Unit tests of router/engine_wait (--preflight-wait-s) against scripted
// engines on a fake clock: loading answers (refused, 503) are retried until
// the engine is up or the timeout passes; other answers end the wait for that
// engine; a zero timeout asks nothing.
#include "router/fleet/engine_wait.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engines/api.h"
#include "engines/engine_client.h"
#include "router/common/settings.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::router {
namespace {

using testing::Call;

engines::ControlResponse Refused() {
  engines::ControlResponse r;
  r.error = "no response from 127.0.0.1:9000: connection refused";
  return r;
}
engines::ControlResponse Status(int status, std::string body = "") {
  engines::ControlResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Settings WaitFleet(const std::vector<std::string>& iids) {
  Settings s;
  s.model = "m";
  int port = 9000;
  for (const std::string& iid : iids) {
    EngineSettings e;
    e.iid = iid;
    e.url = "http://127.0.0.1:" + std::to_string(port++);
    e.role = iid[0] == 'p' ? Role::kPrefill : Role::kDecode;
    s.engines.push_back(e);
  }
  s.engine.health_timeout_s = 1.5;
  return s;
}

// Engines that answer like healthy ones unless scripted to be loading.
class EngineWaitTest : public ::testing::Test {
 protected:
  // The wait asks only with GETs bounded by engine.health_timeout_s and
  // runs no inference.
  void TearDown() override {
    EXPECT_TRUE(engines_.calls("prefill").empty()) << "the wait runs no inference";
    EXPECT_TRUE(engines_.calls("decode").empty()) << "the wait runs no inference";
    for (const Call& c : engines_.calls("control")) {
      EXPECT_TRUE(c.path.starts_with("GET ")) << c.path;
      EXPECT_DOUBLE_EQ(c.timeout_s, 1.5) << c.path;
    }
  }
  // `iid` answers `loading` (to `path`, or to every path) until the fake
  // clock is `up_at` seconds past the start, then like a healthy engine.
  void Loading(const std::string& iid, double up_at, engines::ControlResponse loading,
               const std::string& path = "") {
    engines_.SetControlUntil(iid, path, clock_.start() + engines::FromSeconds(up_at),
                             std::move(loading));
  }
  size_t CallsTo(const std::string& iid) const { return engines_.calls("control", iid).size(); }
  EngineWaitResult Wait(const Settings& s, double timeout_s) {
    return WaitForEngines(
        s, engines_, loop_.executor(), clock_,
        [this](double d) {
          sleeps_.push_back(d);
          clock_.Advance(engines::FromSeconds(d));
          return sleeps_.size() < stop_after_;
        },
        timeout_s, 1.0);
  }
  testing::ControlLoop loop_;  // the control plane's loop
  testing::FakeClock clock_;
  testing::ScriptedEngines engines_{clock_, &clock_, /*first_token_timeout_s=*/1.0};
  std::vector<double> sleeps_;
  size_t stop_after_ = 1000;  // the sleep that reports a signal
};

TEST(IsLoadingAnswerTest, RefusedAnd503AreLoadingOtherAnswersAreNot) {
  EXPECT_TRUE(IsLoadingAnswer(Refused()));
  EXPECT_TRUE(IsLoadingAnswer(Status(503)));
  EXPECT_FALSE(IsLoadingAnswer(Status(200)));
  EXPECT_FALSE(IsLoadingAnswer(Status(500)));
  EXPECT_FALSE(IsLoadingAnswer(Status(404)));
  engines::ControlResponse timeout;
  timeout.error = "no answer from 127.0.0.1:9000 within 1.5s";
  EXPECT_FALSE(IsLoadingAnswer(timeout));
  engines::ControlResponse dns;
  dns.error = "no response from engine.invalid:80: host name not found (DNS)";
  EXPECT_FALSE(IsLoadingAnswer(dns));
}

TEST_F(EngineWaitTest, ZeroTimeoutAsksNothing) {
  Loading("d0", 100, Refused());
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 0);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 0);
  EXPECT_TRUE(engines_.calls().empty());
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(EngineWaitTest, HealthyFleetNeedsOneRoundAndNoSleep) {
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 1);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(CallsTo("p0"), 2u);  // /health and /v1/models
  EXPECT_EQ(CallsTo("d0"), 2u);
}

TEST_F(EngineWaitTest, RefusedEngineIsRetriedUntilItListens) {
  Loading("d0", 4.5, Refused());
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_TRUE(r.still_loading.empty());
  // Rounds at t = 0, 1, 2, 3, 4 see it refused; t = 5 sees it up.
  EXPECT_EQ(r.rounds, 6);
  EXPECT_DOUBLE_EQ(r.waited_s, 5.0);
  EXPECT_EQ(sleeps_, std::vector<double>(5, 1.0));
  // An engine that is up is not asked again.
  EXPECT_EQ(CallsTo("p0"), 2u);
  EXPECT_EQ(CallsTo("d0"), 5 + 2u);
}

TEST_F(EngineWaitTest, ModelListAnswering503KeepsWaiting) {
  Loading("p0", 2.5, Status(503), "/v1/models");
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 4);
  EXPECT_DOUBLE_EQ(r.waited_s, 3.0);
}

TEST_F(EngineWaitTest, TimeoutEndsTheWaitAndNamesTheEnginesStillLoading) {
  Loading("d0", 1000, Status(503), "/health");
  Loading("d1", 1000, Refused());
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0", "d1"}), 2.5);
  EXPECT_FALSE(r.settled);
  EXPECT_EQ(r.still_loading, (std::vector<std::string>{"d0", "d1"}));
  // Sleeps never pass the deadline: 1 + 1 + 0.5.
  EXPECT_EQ(sleeps_, (std::vector<double>{1.0, 1.0, 0.5}));
  EXPECT_DOUBLE_EQ(r.waited_s, 2.5);
  EXPECT_EQ(r.rounds, 4);
}

TEST_F(EngineWaitTest, ASignalDuringASleepEndsTheWait) {
  Loading("d0", 1000, Refused());
  stop_after_ = 2;
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.settled);
  EXPECT_EQ(sleeps_.size(), 2u);
  EXPECT_EQ(r.rounds, 2);
  EXPECT_EQ(r.still_loading, (std::vector<std::string>{"d0"}));
}

TEST_F(EngineWaitTest, ARealFailureIsNotWaitedFor) {
  // A 500 is not "still loading": the preflight reports it at once.
  Loading("d0", 1000, Status(500), "/health");
  const EngineWaitResult r = Wait(WaitFleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 1);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(CallsTo("d0"), 1u);
}

}  // namespace
}  // namespace narwhal::router
