// RouterTest: the fixture of the router core's unit tests — a Router over a
// Fleet, a FakeEngineClient and a FakeClock, with its own journal file and
// event loops; helpers to run requests and read rows, metrics and
// reservations.
#ifndef NARWHAL_TESTS_ROUTER_ROUTER_FIXTURE_H_
#define NARWHAL_TESTS_ROUTER_ROUTER_FIXTURE_H_

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/fakes/test_engine.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/test_util.h"

namespace narwhal::router {

class RouterTest : public ::testing::Test {
 public:
  using json = nlohmann::json;
  using Api = engines::Api;

 protected:
  struct Result {
    Outcome outcome;
    std::vector<::narwhal::testing::Chunk> chunks;
    bool ended = false;
  };

  RouterTest() : fake_(&clock_) {
    settings_.model = "m";
    settings_.engines = {::narwhal::testing::Engine("p0", Role::kPrefill),
                         ::narwhal::testing::Engine("d0", Role::kDecode)};
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    journal_path_ = ::testing::TempDir() + "narwhal_router_" + name + "_" +
                    std::to_string(::getpid()) + ".jsonl";
    std::remove(journal_path_.c_str());
  }

  ~RouterTest() override {
    router_.reset();
    fleet_.reset();
    journal_.reset();
    std::remove(journal_path_.c_str());
  }

  void Start(uint64_t seed = 42) {
    metrics_ = std::make_unique<Metrics>(registry_);
    auto journal = Journal::Open(journal_path_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<Fleet>(settings_, clock_, metrics_.get(), journal_.get());
    router_ = std::make_unique<Router>(settings_, fake_, *fleet_, clock_, metrics_.get(),
                                       journal_.get(), seed, &journal_status_);
  }

  Request MakeRequest(bool stream, Api api = Api::kCompletions) {
    Request r;
    r.rid = router_->NewRequestId();
    r.client_rid = "client-" + r.rid.substr(0, 4);
    r.api = api;
    r.stream = stream;
    if (api == Api::kCompletions) {
      r.body = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 8}, {"stream", stream}};
    } else {
      r.body = {{"model", "m"},
                {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                {"max_tokens", 8},
                {"stream", stream}};
    }
    r.arrived = clock_.Now();
    r.arrived_wall = clock_.WallNow();
    r.deadline = r.arrived + engines::FromSeconds(settings_.serving.request_timeout_s);
    return r;
  }

  // Reads a channel to its end (bounded in real time).
  static Result Collect(::narwhal::testing::TestSink& channel) {
    Result r;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ::narwhal::testing::Chunk c;
    while (std::chrono::steady_clock::now() < until) {
      switch (channel.Next(&c, std::chrono::milliseconds(100))) {
        case ::narwhal::testing::TestSink::Pop::kChunk:
          r.chunks.push_back(c);
          break;
        case ::narwhal::testing::TestSink::Pop::kEnd:
          r.ended = true;
          r.outcome = channel.outcome();
          return r;
        case ::narwhal::testing::TestSink::Pop::kEmpty:
          break;
      }
    }
    ADD_FAILURE() << "the request did not end within 10 s";
    return r;
  }

  // Starts `request` on one of the test's loops; the sink records the response.
  std::shared_ptr<::narwhal::testing::TestSink> Submit(Request request) {
    auto sink = std::make_shared<::narwhal::testing::TestSink>();
    router_->Submit(std::move(request), sink, loops_.Next());
    return sink;
  }

  Result Run(Request request) {
    std::shared_ptr<::narwhal::testing::TestSink> channel = Submit(std::move(request));
    return Collect(*channel);
  }
  Result Run(bool stream, Api api = Api::kCompletions, std::string* rid = nullptr) {
    Request r = MakeRequest(stream, api);
    if (rid != nullptr) *rid = r.rid;
    return Run(std::move(r));
  }

  // Waits (bounded, real time) until no request is admitted: every worker
  // has left Router::Finish, so callbacks that ran inside it have returned.
  void WaitIdle() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (router_->inflight() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    EXPECT_EQ(router_->inflight(), 0);
  }

  json Row(const std::string& rid) {
    journal_->Flush();  // rows are written by the journal's own thread
    for (const json& row : ::narwhal::testing::ReadJournal(journal_path_)) {
      if (row.value("rid", "") == rid) return row;
    }
    ADD_FAILURE() << "no journal row for " << rid;
    return json::object();
  }

  // The decode legs of client requests: every decode call but the releases
  // of abandoned handoffs (backend ids "<rid>-<attempt>r").
  std::vector<::narwhal::testing::DecodeCall> ClientDecodes() const {
    std::vector<::narwhal::testing::DecodeCall> out;
    for (const ::narwhal::testing::DecodeCall& c : fake_.decode_calls()) {
      if (c.backend_request_id.empty() || c.backend_request_id.back() != 'r') out.push_back(c);
    }
    return out;
  }

  // As a scrape sees it: the fleet publishes its gauges first.
  double Metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    if (fleet_ != nullptr) fleet_->admin().PublishAll();
    return ::narwhal::testing::MetricValue(registry_, name, labels);
  }
  double Streak(const std::string& iid, const std::string& cls) {
    return Metric("narwhal_engine_breaker_streak", {{"iid", iid}, {"class", cls}});
  }
  EngineSnapshot Snap(const std::string& iid) {
    for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
      if (s.settings.iid == iid) return s;
    }
    ADD_FAILURE() << "no engine " << iid;
    return {};
  }

  // B7: every reservation released, in the fleet and in the gauges.
  void ExpectNoReservations() {
    for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
      EXPECT_EQ(s.inflight_prefill, 0) << s.settings.iid;
      EXPECT_EQ(s.inflight_decode, 0) << s.settings.iid;
      // Gauges exist only for the phases the engine's role runs.
      EXPECT_EQ(Metric("narwhal_engine_inflight", {{"iid", s.settings.iid}, {"phase", "prefill"}}),
                CanPrefill(s.settings.role) ? 0 : ::narwhal::testing::kNoSeries)
          << s.settings.iid;
      EXPECT_EQ(Metric("narwhal_engine_inflight", {{"iid", s.settings.iid}, {"phase", "decode"}}),
                CanDecode(s.settings.role) ? 0 : ::narwhal::testing::kNoSeries)
          << s.settings.iid;
    }
  }

  // Several loops, so a test whose scripted leg blocks one (a hook waiting
  // for the test) still runs the other requests.
  engines::IoLoops loops_{4};
  Settings settings_;
  ::narwhal::testing::FakeClock clock_;
  ::narwhal::testing::FakeEngineClient fake_;
  prometheus::Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<Fleet> fleet_;
  const server::StatusTableJournal journal_status_{};
  std::unique_ptr<Router> router_;
  std::string journal_path_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_TESTS_ROUTER_ROUTER_FIXTURE_H_
