// Unit tests of router/engine_wait (--preflight-wait-s) against scripted
// engines on a fake clock: loading answers (refused, 503) are retried until
// the engine is up or the timeout passes; other answers end the wait for that
// engine; a zero timeout asks nothing.
#include "router/fleet/engine_wait.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "router/common/settings.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

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

// Each engine answers `loading` until the fake clock reaches its `up_at`
// (seconds after the start), then like a healthy engine.
class LoadingEngines : public engines::EngineClient {
 public:
  explicit LoadingEngines(testing::FakeClock* clock) : clock_(clock), start_(clock->Now()) {}

  void Script(const std::string& iid, double up_at, engines::ControlResponse loading,
              const std::string& loading_path = "") {
    scripts_[iid] = {up_at, std::move(loading), loading_path};
  }
  int calls(const std::string& iid) const {
    auto it = calls_.find(iid);
    return it == calls_.end() ? 0 : it->second;
  }
  int total_calls() const {
    int n = 0;
    for (const auto& [iid, c] : calls_) n += c;
    return n;
  }

  engines::PrefillOutcome Prefill(const engines::EngineTarget&, engines::Api, const json&,
                                  const engines::LegOptions&) override {
    ADD_FAILURE() << "the wait runs no inference";
    return {};
  }
  engines::DecodeOutcome Decode(const engines::EngineTarget&, const engines::PrefillResult&,
                                const json&, bool, const engines::LegOptions&,
                                engines::DecodeObserver&) override {
    ADD_FAILURE() << "the wait runs no inference";
    return {};
  }
  engines::ControlResponse Control(const engines::EngineTarget& engine, std::string_view method,
                                   std::string_view path, const std::string&,
                                   double timeout_s) override {
    EXPECT_EQ(method, "GET");
    EXPECT_DOUBLE_EQ(timeout_s, 1.5);
    ++calls_[engine.iid];
    auto it = scripts_.find(engine.iid);
    const double now = engines::Seconds(clock_->Now() - start_);
    if (it != scripts_.end() && now < it->second.up_at &&
        (it->second.path.empty() || it->second.path == path)) {
      return it->second.loading;
    }
    if (path == "/v1/models") {
      return Status(200, json{{"object", "list"}, {"data", {{{"id", "m"}}}}}.dump());
    }
    return Status(200);
  }

 private:
  struct Script_ {
    double up_at = 0;
    engines::ControlResponse loading;
    std::string path;
  };
  testing::FakeClock* clock_;
  engines::MonoTime start_;
  std::map<std::string, Script_> scripts_;
  std::map<std::string, int> calls_;
};

Settings Fleet(const std::vector<std::string>& iids) {
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

class EngineWaitTest : public ::testing::Test {
 protected:
  EngineWaitTest() : engines_(&clock_) {}
  EngineWaitResult Wait(const Settings& s, double timeout_s) {
    return WaitForEngines(
        s, engines_, clock_,
        [this](double d) {
          sleeps_.push_back(d);
          clock_.Advance(engines::FromSeconds(d));
          return sleeps_.size() < stop_after_;
        },
        timeout_s, 1.0);
  }
  testing::FakeClock clock_;
  LoadingEngines engines_;
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
  engines_.Script("d0", 100, Refused());
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 0);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 0);
  EXPECT_EQ(engines_.total_calls(), 0);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(EngineWaitTest, HealthyFleetNeedsOneRoundAndNoSleep) {
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 1);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(engines_.calls("p0"), 2);  // /health and /v1/models
  EXPECT_EQ(engines_.calls("d0"), 2);
}

TEST_F(EngineWaitTest, RefusedEngineIsRetriedUntilItListens) {
  engines_.Script("d0", 4.5, Refused());
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_TRUE(r.still_loading.empty());
  // Rounds at t = 0, 1, 2, 3, 4 see it refused; t = 5 sees it up.
  EXPECT_EQ(r.rounds, 6);
  EXPECT_DOUBLE_EQ(r.waited_s, 5.0);
  EXPECT_EQ(sleeps_, std::vector<double>(5, 1.0));
  // An engine that is up is not asked again.
  EXPECT_EQ(engines_.calls("p0"), 2);
  EXPECT_EQ(engines_.calls("d0"), 5 + 2);
}

TEST_F(EngineWaitTest, ModelListAnswering503KeepsWaiting) {
  engines_.Script("p0", 2.5, Status(503), "/v1/models");
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 4);
  EXPECT_DOUBLE_EQ(r.waited_s, 3.0);
}

TEST_F(EngineWaitTest, TimeoutEndsTheWaitAndNamesTheEnginesStillLoading) {
  engines_.Script("d0", 1000, Status(503), "/health");
  engines_.Script("d1", 1000, Refused());
  const EngineWaitResult r = Wait(Fleet({"p0", "d0", "d1"}), 2.5);
  EXPECT_FALSE(r.settled);
  EXPECT_EQ(r.still_loading, (std::vector<std::string>{"d0", "d1"}));
  // Sleeps never pass the deadline: 1 + 1 + 0.5.
  EXPECT_EQ(sleeps_, (std::vector<double>{1.0, 1.0, 0.5}));
  EXPECT_DOUBLE_EQ(r.waited_s, 2.5);
  EXPECT_EQ(r.rounds, 4);
}

TEST_F(EngineWaitTest, ASignalDuringASleepEndsTheWait) {
  engines_.Script("d0", 1000, Refused());
  stop_after_ = 2;
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.settled);
  EXPECT_EQ(sleeps_.size(), 2u);
  EXPECT_EQ(r.rounds, 2);
  EXPECT_EQ(r.still_loading, (std::vector<std::string>{"d0"}));
}

TEST_F(EngineWaitTest, ARealFailureIsNotWaitedFor) {
  // A 500 is not "still loading": the preflight reports it at once.
  engines_.Script("d0", 1000, Status(500), "/health");
  const EngineWaitResult r = Wait(Fleet({"p0", "d0"}), 30);
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.rounds, 1);
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(engines_.calls("d0"), 1);
}

}  // namespace
}  // namespace narwhal::router
