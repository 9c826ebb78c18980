#include "router/common/metrics_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

namespace narwhal::router {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Room for one number, a timestamp, the separators and the newline.
constexpr size_t kNumberBytes = 32;

void AppendDouble(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "Nan";
  } else if (std::isinf(value)) {
    out += value < 0 ? "-Inf" : "+Inf";
  } else {
    char buf[kNumberBytes];
    const std::to_chars_result r =
        std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general, 16);
    out.append(buf, r.ptr);
  }
}

template <typename Int>
void AppendInt(std::string& out, Int value) {
  char buf[kNumberBytes];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

// A label value: backslash, double quote and newline escaped.
void AppendLabelValue(std::string& out, std::string_view value) {
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// The line's name and labels, then a space: `name_suffix{a="x",le="1"} `.
// `extra_name` (le, quantile) is appended when not empty, its value a number
// or, with `extra_text`, that text.
void AppendHead(std::string& out, const MetricFamily& family, const ClientMetric& metric,
                std::string_view suffix = {}, std::string_view extra_name = {},
                double extra_value = 0, std::string_view extra_text = {}) {
  out += family.name;
  out += suffix;
  if (!metric.label.empty() || !extra_name.empty()) {
    out += '{';
    bool first = true;
    for (const ClientMetric::Label& l : metric.label) {
      if (!first) out += ',';
      first = false;
      out += l.name;
      out += "=\"";
      AppendLabelValue(out, l.value);
      out += '"';
    }
    if (!extra_name.empty()) {
      if (!first) out += ',';
      out += extra_name;
      out += "=\"";
      if (extra_text.empty()) {
        AppendDouble(out, extra_value);
      } else {
        out += extra_text;
      }
      out += '"';
    }
    out += '}';
  }
  out += ' ';
}

void AppendTail(std::string& out, const ClientMetric& metric) {
  if (metric.timestamp_ms != 0) {
    out += ' ';
    AppendInt(out, metric.timestamp_ms);
  }
  out += '\n';
}

void AppendMetric(std::string& out, const MetricFamily& family, const ClientMetric& m) {
  switch (family.type) {
    case MetricType::Counter:
      AppendHead(out, family, m);
      AppendDouble(out, m.counter.value);
      AppendTail(out, m);
      break;
    case MetricType::Gauge:
      AppendHead(out, family, m);
      AppendDouble(out, m.gauge.value);
      AppendTail(out, m);
      break;
    case MetricType::Untyped:
      AppendHead(out, family, m);
      AppendDouble(out, m.untyped.value);
      AppendTail(out, m);
      break;
    case MetricType::Summary:
      AppendHead(out, family, m, "_count");
      AppendInt(out, m.summary.sample_count);
      AppendTail(out, m);
      AppendHead(out, family, m, "_sum");
      AppendDouble(out, m.summary.sample_sum);
      AppendTail(out, m);
      for (const ClientMetric::Quantile& q : m.summary.quantile) {
        AppendHead(out, family, m, "", "quantile", q.quantile);
        AppendDouble(out, q.value);
        AppendTail(out, m);
      }
      break;
    case MetricType::Histogram: {
      AppendHead(out, family, m, "_count");
      AppendInt(out, m.histogram.sample_count);
      AppendTail(out, m);
      AppendHead(out, family, m, "_sum");
      AppendDouble(out, m.histogram.sample_sum);
      AppendTail(out, m);
      double last = -std::numeric_limits<double>::infinity();
      for (const ClientMetric::Bucket& b : m.histogram.bucket) {
        AppendHead(out, family, m, "_bucket", "le", b.upper_bound);
        last = b.upper_bound;
        AppendInt(out, b.cumulative_count);
        AppendTail(out, m);
      }
      if (last != std::numeric_limits<double>::infinity()) {
        AppendHead(out, family, m, "_bucket", "le", 0, "+Inf");
        AppendInt(out, m.histogram.sample_count);
        AppendTail(out, m);
      }
      break;
    }
  }
}

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    case MetricType::Untyped:
      break;
  }
  return "untyped";
}

// An upper bound of the text's size (escapes aside, which are rare and
// only cost a regrowth).
size_t EstimateBytes(const std::vector<MetricFamily>& families) {
  size_t bytes = 0;
  for (const MetricFamily& f : families) {
    bytes += 2 * f.name.size() + f.help.size() + 32;
    for (const ClientMetric& m : f.metric) {
      size_t head = f.name.size() + 16 + kNumberBytes;  // suffix, braces, extra label, number
      for (const ClientMetric::Label& l : m.label) head += l.name.size() + l.value.size() + 4;
      head += kNumberBytes;  // the value
      size_t lines = 1;
      if (f.type == MetricType::Histogram) lines = m.histogram.bucket.size() + 3;
      if (f.type == MetricType::Summary) lines = m.summary.quantile.size() + 2;
      bytes += head * lines;
    }
  }
  return bytes;
}

}  // namespace

std::string MetricsText(const std::vector<MetricFamily>& families) {
  std::string out;
  out.reserve(EstimateBytes(families));
  for (const MetricFamily& f : families) {
    if (!f.help.empty()) {
      out += "# HELP ";
      out += f.name;
      out += ' ';
      for (const char c : f.help) {
        if (c == '\\') {
          out += "\\\\";
        } else if (c == '\n') {
          out += "\\n";
        } else {
          out += c;
        }
      }
      out += '\n';
    }
    out += "# TYPE ";
    out += f.name;
    out += ' ';
    out += TypeName(f.type);
    out += '\n';
    for (const ClientMetric& m : f.metric) AppendMetric(out, f, m);
  }
  return out;
}

}  // namespace narwhal::router
