// Helpers shared by the router unit tests: metric and journal readers.
#ifndef NARWHAL_TESTS_ROUTER_TEST_UTIL_H_
#define NARWHAL_TESTS_ROUTER_TEST_UTIL_H_

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

namespace narwhal::testing {

inline constexpr double kNoSeries = -1;

// The value of the series of `name` whose labels include `labels`: a counter's
// or gauge's value, a histogram's sample count. kNoSeries when absent.
inline double MetricValue(prometheus::Registry& registry, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label) found = found || (l.name == k && l.value == v);
        match = match && found;
      }
      if (!match) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(m.histogram.sample_count);
        default:
          return m.untyped.value;
      }
    }
  }
  return kNoSeries;
}

// A histogram's sample sum (kNoSeries when absent).
inline double HistogramSum(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name && !family.metric.empty()) {
      return family.metric.front().histogram.sample_sum;
    }
  }
  return kNoSeries;
}

// Every JSONL row of a journal file.
inline std::vector<nlohmann::json> ReadJournal(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_ROUTER_TEST_UTIL_H_
