// MetricsText (router/common/metrics_text.h): byte for byte what
// prometheus-cpp's TextSerializer writes for every metric type, label
// escapes, timestamps and the numbers' formatting, for hand-made families
// and for the router's own registry at many engines; HELP text escaped.
#include "router/common/metrics_text.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/summary.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::router {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string Reference(const std::vector<MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

ClientMetric Metric(std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  return m;
}

TEST(MetricsTextTest, EveryTypeAsTheTextSerializerWritesIt) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double values[] = {0,
                           1,
                           -2.5,
                           0.1 + 0.2,
                           1.0 / 3,
                           1e20,
                           1e-7,
                           1e300,
                           123456789012345678.0,
                           1796447381.08,
                           -0.0,
                           kInf,
                           -kInf,
                           std::nan(""),
                           4096,
                           0.5};
  std::vector<MetricFamily> families;

  MetricFamily counter{"c_total", "A counter", MetricType::Counter, {}};
  int k = 0;
  for (const double v : values) {
    ClientMetric m = Metric({{"iid", "p" + std::to_string(k++)}, {"kind", "x"}});
    m.counter.value = v;
    counter.metric.push_back(m);
  }
  ClientMetric escaped = Metric({{"v", "a\"b\\c\nd"}});
  escaped.counter.value = 7;
  counter.metric.push_back(escaped);
  ClientMetric stamped = Metric({});
  stamped.counter.value = 3;
  stamped.timestamp_ms = 1700000000123;
  counter.metric.push_back(stamped);
  families.push_back(counter);

  MetricFamily gauge{"g", "", MetricType::Gauge, {}};  // no HELP line
  for (const double v : values) {
    ClientMetric m = Metric({});
    m.gauge.value = v;
    gauge.metric.push_back(m);
  }
  families.push_back(gauge);

  MetricFamily untyped{"u", "Untyped", MetricType::Untyped, {}};
  ClientMetric u = Metric({{"a", "b"}});
  u.untyped.value = 42.25;
  untyped.metric.push_back(u);
  families.push_back(untyped);

  MetricFamily histogram{"h_seconds", "A histogram", MetricType::Histogram, {}};
  ClientMetric h = Metric({{"phase", "prefill"}});
  h.histogram.sample_count = 9;
  h.histogram.sample_sum = 12.75;
  h.histogram.bucket = {{1, 0.005}, {4, 0.1}, {9, 2.5}};  // no +Inf bucket: one is added
  histogram.metric.push_back(h);
  ClientMetric h_inf = Metric({});
  h_inf.histogram.sample_count = 2;
  h_inf.histogram.sample_sum = 0.25;
  h_inf.histogram.bucket = {{1, 0.1}, {2, kInf}};
  histogram.metric.push_back(h_inf);
  families.push_back(histogram);

  MetricFamily summary{"s", "A summary", MetricType::Summary, {}};
  ClientMetric s = Metric({{"api", "chat"}});
  s.summary.sample_count = 5;
  s.summary.sample_sum = 1.5;
  s.summary.quantile = {{0.5, 0.25}, {0.99, 1.0 / 3}};
  summary.metric.push_back(s);
  families.push_back(summary);

  families.push_back(MetricFamily{"empty_total", "Nothing yet", MetricType::Counter, {}});

  EXPECT_EQ(MetricsText(families), Reference(families));
}

TEST(MetricsTextTest, HelpTextIsEscaped) {
  const std::vector<MetricFamily> families = {
      MetricFamily{"x", "back\\slash\nnewline", MetricType::Gauge, {Metric({})}}};
  EXPECT_EQ(MetricsText(families), "# HELP x back\\\\slash\\nnewline\n# TYPE x gauge\nx 0\n");
}

// The registry a running router exports, with a large fleet's engines.
TEST(MetricsTextTest, TheRoutersRegistryAsTheTextSerializerWritesIt) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  Settings settings;
  settings.model = "m";
  for (int i = 0; i < 64; ++i) {
    settings.engines.push_back(
        {"p" + std::to_string(i), "http://p" + std::to_string(i) + ":8000", Role::kPrefill});
    settings.engines.push_back(
        {"d" + std::to_string(i), "http://d" + std::to_string(i) + ":8000", Role::kDecode});
  }
  testing::FakeClock clock;
  Fleet fleet(settings, clock, &metrics);
  metrics.ttft_seconds.Observe(0.042);
  metrics.inflight.Set(3);
  metrics.retry_credits.Set(9.7);
  prometheus::BuildSummary()
      .Name("narwhal_test_summary")
      .Help("test")
      .Register(registry)
      .Add({}, prometheus::Summary::Quantiles{{0.5, 0.05}, {0.9, 0.01}})
      .Observe(1.5);
  const std::vector<MetricFamily> families = registry.Collect();
  const std::string text = MetricsText(families);
  EXPECT_EQ(text, Reference(families));
  EXPECT_NE(text.find("narwhal_engine_in_placement{iid=\"d63\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace narwhal::router
