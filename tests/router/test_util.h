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

// The sum over the series of `name` whose labels include `labels` (as
// PromQL's sum() would): counters' or gauges' values, histograms' sample
// counts. kNoSeries when no series matches.
inline double MetricValue(prometheus::Registry& registry, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  double sum = 0;
  bool found_any = false;
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
      found_any = true;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          sum += m.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          sum += m.gauge.value;
          break;
        case prometheus::MetricType::Histogram:
          sum += static_cast<double>(m.histogram.sample_count);
          break;
        default:
          sum += m.untyped.value;
          break;
      }
    }
  }
  return found_any ? sum : kNoSeries;
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
