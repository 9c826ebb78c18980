// Every known label combination of the request and engine counters is
// exported at zero from the start (so increase() sees the first failure), and
// engine series exist only for the phases the engine's role runs.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engines/engine_failure.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/fleet.h"
#include "router/outcome.h"
#include "router/router.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"

namespace narwhal::router {
namespace {

namespace nt = narwhal::testing;
using Labels = std::map<std::string, std::string>;

// The label sets of every series of `name`, and whether each is zero.
struct Series {
  std::vector<Labels> labels;
  bool all_zero = true;
  bool Has(const Labels& want) const {
    for (const Labels& l : labels) {
      bool match = true;
      for (const auto& [k, v] : want) match = match && l.count(k) && l.at(k) == v;
      if (match) return true;
    }
    return false;
  }
  size_t Count(const Labels& want) const {
    size_t n = 0;
    for (const Labels& l : labels) {
      bool match = true;
      for (const auto& [k, v] : want) match = match && l.count(k) && l.at(k) == v;
      n += match ? 1 : 0;
    }
    return n;
  }
};

Series Collect(prometheus::Registry& registry, const std::string& name) {
  Series out;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      Labels l;
      for (const prometheus::ClientMetric::Label& label : m.label) l[label.name] = label.value;
      out.labels.push_back(l);
      const double v = family.type == prometheus::MetricType::Counter ? m.counter.value
                                                                       : m.gauge.value;
      out.all_zero = out.all_zero && v == 0;
    }
  }
  return out;
}

class SeriesAtZeroTest : public ::testing::Test {
 protected:
  SeriesAtZeroTest() : fake_(&clock_) {
    settings_.model = "m";
    settings_.engines = {EngineSettings{"p0", "http://p0:8000", Role::kPrefill},
                         EngineSettings{"d0", "http://d0:8000", Role::kDecode},
                         EngineSettings{"b0", "http://b0:8000", Role::kBoth}};
    metrics_ = std::make_unique<Metrics>(registry_);
    fleet_ = std::make_unique<Fleet>(settings_, clock_, metrics_.get(), nullptr);
    router_ = std::make_unique<Router>(settings_, fake_, *fleet_, clock_, metrics_.get(),
                                       nullptr, 7);
  }
  ~SeriesAtZeroTest() override {
    router_.reset();
    fleet_.reset();
  }

  Settings settings_;
  nt::FakeClock clock_;
  nt::FakeEngineClient fake_;
  prometheus::Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<Router> router_;
};

TEST_F(SeriesAtZeroTest, RequestsByApiDoorAndTerminal) {
  const Series s = Collect(registry_, "narwhal_requests_total");
  EXPECT_TRUE(s.all_zero);
  EXPECT_EQ(s.labels.size(), 2u * 2u * std::size(kTerminals));
  for (Terminal t : kTerminals) {
    for (const char* door : {"http", "grpc"}) {
      for (const char* api : {"completions", "chat"}) {
        EXPECT_TRUE(s.Has({{"api", api}, {"door", door}, {"terminal", std::string(TerminalName(t))}}))
            << api << " " << door << " " << TerminalName(t);
      }
    }
  }
}

TEST_F(SeriesAtZeroTest, AttemptFailuresOnlyForTheEnginesPhases) {
  const Series s = Collect(registry_, "narwhal_attempt_failures_total");
  EXPECT_TRUE(s.all_zero);
  const size_t reasons = std::size(engines::kFailureReasons);
  EXPECT_EQ(s.Count({{"iid", "p0"}, {"phase", "prefill"}}), reasons);
  EXPECT_EQ(s.Count({{"iid", "p0"}, {"phase", "decode"}}), 0u);
  EXPECT_EQ(s.Count({{"iid", "d0"}, {"phase", "decode"}}), reasons);
  EXPECT_EQ(s.Count({{"iid", "d0"}, {"phase", "prefill"}}), 0u);
  EXPECT_EQ(s.Count({{"iid", "b0"}}), 2 * reasons);
  EXPECT_TRUE(s.Has({{"iid", "d0"}, {"reason", "engine_timeout"}}));
}

TEST_F(SeriesAtZeroTest, InflightGaugesOnlyForTheEnginesPhases) {
  const Series s = Collect(registry_, "narwhal_engine_inflight");
  EXPECT_TRUE(s.Has({{"iid", "p0"}, {"phase", "prefill"}}));
  EXPECT_FALSE(s.Has({{"iid", "p0"}, {"phase", "decode"}}));
  EXPECT_TRUE(s.Has({{"iid", "d0"}, {"phase", "decode"}}));
  EXPECT_FALSE(s.Has({{"iid", "d0"}, {"phase", "prefill"}}));
  EXPECT_EQ(s.Count({{"iid", "b0"}}), 2u);
}

TEST_F(SeriesAtZeroTest, HandoffRejectionsByEveryReason) {
  const Series s = Collect(registry_, "narwhal_handoff_rejected_total");
  EXPECT_TRUE(s.all_zero);
  for (const char* reason : {"expired", "not_an_object", "connector_mismatch",
                             "endpoint_mismatch", "reused_handoff", "missing_engine_id"}) {
    EXPECT_TRUE(s.Has({{"reason", reason}})) << reason;
  }
  EXPECT_EQ(s.labels.size(), engines::HandoffRejectionReasons().size() + 1);
}

TEST_F(SeriesAtZeroTest, EjectionsProbesAndReadmissionsPerEngine) {
  const Series ejections = Collect(registry_, "narwhal_engine_ejections_total");
  const Series probes = Collect(registry_, "narwhal_engine_probes_total");
  const Series readmissions = Collect(registry_, "narwhal_engine_readmissions_total");
  EXPECT_TRUE(ejections.all_zero && probes.all_zero && readmissions.all_zero);
  for (const char* iid : {"p0", "d0", "b0"}) {
    EXPECT_EQ(ejections.Count({{"iid", iid}}), std::size(kEjectCauses)) << iid;
    EXPECT_EQ(probes.Count({{"iid", iid}}), std::size(kProbeKinds) * std::size(kProbeOutcomes));
    EXPECT_EQ(readmissions.Count({{"iid", iid}}), std::size(kReadmissionEvidence));
  }
  EXPECT_TRUE(ejections.Has({{"iid", "d0"}, {"cause", "liveness"}}));
  EXPECT_TRUE(probes.Has({{"iid", "p0"}, {"kind", "inference"}, {"outcome", "failed"}}));
  EXPECT_TRUE(readmissions.Has({{"iid", "b0"}, {"evidence", "verification"}}));
}

}  // namespace
}  // namespace narwhal::router
