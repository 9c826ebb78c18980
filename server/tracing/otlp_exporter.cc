#include "server/tracing/otlp_exporter.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "router/common/log.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

// Unix seconds as OTLP's fixed64 nanoseconds (a decimal string in JSON).
// (A double holds a unix time to about a quarter of a microsecond: the
// whole seconds and the fraction are converted apart, so nothing finer is
// invented.)
std::string UnixNanos(double unix_s) {
  const double whole = std::floor(std::max(0.0, unix_s));
  const long long nanos = static_cast<long long>(whole) * 1000000000LL +
                          std::llround((std::max(0.0, unix_s) - whole) * 1e9);
  return std::to_string(nanos);
}

// One attribute value as an OTLP AnyValue.
json AnyValue(const json& v) {
  if (v.is_boolean()) return {{"boolValue", v.get<bool>()}};
  if (v.is_number_integer()) return {{"intValue", std::to_string(v.get<long long>())}};
  if (v.is_number()) return {{"doubleValue", v.get<double>()}};
  if (v.is_array()) {
    json values = json::array();
    for (const json& e : v) values.push_back(AnyValue(e));
    return {{"arrayValue", {{"values", std::move(values)}}}};
  }
  return {{"stringValue", v.is_string() ? v.get<std::string>() : v.dump()}};
}

json Attributes(const json& attributes) {
  json out = json::array();
  for (auto it = attributes.begin(); it != attributes.end(); ++it) {
    out.push_back({{"key", it.key()}, {"value", AnyValue(it.value())}});
  }
  return out;
}

json Span(const router::TraceContext& trace, const router::PhaseSpan& span,
          const std::string& parent) {
  json out = {{"traceId", trace.trace_id},
              {"spanId", span.span_id},
              {"name", span.name},
              {"kind", static_cast<int>(span.kind)},
              {"startTimeUnixNano", UnixNanos(span.start_unix_s)},
              {"endTimeUnixNano", UnixNanos(std::max(span.start_unix_s, span.end_unix_s))},
              {"attributes", Attributes(span.attributes)}};
  if (!parent.empty()) out["parentSpanId"] = parent;
  if (!trace.tracestate.empty()) out["traceState"] = trace.tracestate;
  if (!span.error.empty()) out["status"] = {{"code", 2}, {"message", span.error}};
  return out;
}

size_t SpanCount(const router::RequestSpans& spans) { return 1 + spans.phases.size(); }

}  // namespace

absl::StatusOr<OtlpTarget> ParseOtlpEndpoint(const std::string& endpoint) {
  constexpr std::string_view kScheme = "http://";
  if (endpoint.rfind(kScheme, 0) != 0) {
    return absl::InvalidArgumentError("tracing.otlp_endpoint must start with http://");
  }
  std::string_view rest = std::string_view(endpoint).substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view host_port = rest.substr(0, slash);
  OtlpTarget t;
  t.path = slash == std::string_view::npos ? "/v1/traces" : std::string(rest.substr(slash));
  const size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError("tracing.otlp_endpoint must name host:port");
  }
  t.host = std::string(host_port.substr(0, colon));
  if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']') {
    t.host = t.host.substr(1, t.host.size() - 2);
  }
  t.port = std::string(host_port.substr(colon + 1));
  return t;
}

std::string EncodeOtlpJson(const std::vector<router::RequestSpans>& batch,
                           const std::string& service, const std::string& version) {
  json spans = json::array();
  for (const router::RequestSpans& r : batch) {
    spans.push_back(Span(r.trace, r.request, r.trace.parent_id));
    for (const router::PhaseSpan& phase : r.phases) {
      spans.push_back(Span(r.trace, phase, phase.parent_id));
    }
  }
  const json resource = {
      {"attributes", Attributes({{"service.name", service}, {"service.version", version}})}};
  const json scope = {{"scope", {{"name", "narwhal"}, {"version", version}}},
                      {"spans", std::move(spans)}};
  const json document = {{"resourceSpans", json::array({{{"resource", resource},
                                                         {"scopeSpans", json::array({scope})}}})}};
  return document.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Start(
    const router::TracingSettings& settings, std::string version, prometheus::Registry* registry) {
  absl::StatusOr<OtlpTarget> target = ParseOtlpEndpoint(settings.otlp_endpoint);
  if (!target.ok()) return target.status();
  std::unique_ptr<OtlpExporter> exporter(
      new OtlpExporter(settings, std::move(*target), std::move(version), registry));
  exporter->thread_ = std::thread([e = exporter.get()] { e->Run(); });
  router::LogInfo("span export to " + settings.otlp_endpoint + " (OTLP/HTTP JSON)");
  return exporter;
}

OtlpExporter::OtlpExporter(const router::TracingSettings& settings, OtlpTarget target,
                           std::string version, prometheus::Registry* registry)
    : settings_(settings), target_(std::move(target)), version_(std::move(version)) {
  if (registry != nullptr) {
    exported_counter_ = &prometheus::BuildCounter()
                             .Name("narwhal_trace_spans_exported_total")
                             .Help("Spans sent to the OTLP endpoint and accepted by it.")
                             .Register(*registry)
                             .Add({});
    auto& dropped = prometheus::BuildCounter()
                        .Name("narwhal_trace_spans_dropped_total")
                        .Help("Spans not exported: the queue was full, or their batch failed.")
                        .Register(*registry);
    queue_full_counter_ = &dropped.Add({{"reason", "queue_full"}});
    failed_counter_ = &dropped.Add({{"reason", "export_failed"}});
  }
}

OtlpExporter::~OtlpExporter() { Stop(); }

void OtlpExporter::Export(router::RequestSpans spans) {
  const size_t n = SpanCount(spans);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queued_spans_ + n > static_cast<size_t>(settings_.max_queued_spans)) {
      dropped_queue_full_ += static_cast<long long>(n);
      if (queue_full_counter_ != nullptr) queue_full_counter_->Increment(static_cast<double>(n));
      return;
    }
    queue_.push_back(std::move(spans));
    queued_spans_ += n;
    wake = queued_spans_ >= kBatchSpans || queue_.size() == 1;
  }
  if (wake) cv_.notify_one();
}

void OtlpExporter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void OtlpExporter::Run() {
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(settings_.export_interval_s));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (!stop_ && queued_spans_ < kBatchSpans) {
      // The first spans wait at most one interval for company.
      cv_.wait_for(lock, interval, [&] { return stop_ || queued_spans_ >= kBatchSpans; });
    }
    const bool last = stop_;
    while (!queue_.empty()) {
      std::vector<router::RequestSpans> batch;
      size_t spans = 0;
      while (!queue_.empty() &&
             (batch.empty() || spans + SpanCount(queue_.front()) <= kBatchSpans)) {
        spans += SpanCount(queue_.front());
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_spans_ -= spans;
      lock.unlock();
      std::string error;
      const bool ok = Post(EncodeOtlpJson(batch, "narwhal", version_), &error);
      Sent(spans, ok, error);
      lock.lock();
      if (!last && queued_spans_ < kBatchSpans) break;
    }
    if (last) return;
  }
}

void OtlpExporter::Sent(size_t spans, bool ok, const std::string& error) {
  bool log_failure = false;
  bool log_recovery = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      exported_ += static_cast<long long>(spans);
      log_recovery = failing_;
      failing_ = false;
    } else {
      dropped_failed_ += static_cast<long long>(spans);
      log_failure = !failing_;
      failing_ = true;
    }
  }
  if (ok && exported_counter_ != nullptr) exported_counter_->Increment(static_cast<double>(spans));
  if (!ok && failed_counter_ != nullptr) failed_counter_->Increment(static_cast<double>(spans));
  if (log_failure) {
    router::LogWarning(absl::StrCat("span export to ", settings_.otlp_endpoint, " failed (", error,
                                    "): ", spans,
                                    " spans dropped; further failures are counted in "
                                    "narwhal_trace_spans_dropped_total"));
  }
  if (log_recovery) router::LogInfo("span export to " + settings_.otlp_endpoint + " works again");
}

bool OtlpExporter::Post(const std::string& body, std::string* error) const {
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(settings_.export_timeout_s));
  bool done = false;
  int status = 0;
  std::string failure;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          auto endpoints =
              co_await resolver.async_resolve(target_.host, target_.port, asio::use_awaitable);
          stream.expires_after(timeout);
          co_await stream.async_connect(endpoints, asio::use_awaitable);
          http::request<http::string_body> req{http::verb::post, target_.path, 11};
          req.set(http::field::host, target_.host + ":" + target_.port);
          req.set(http::field::content_type, "application/json");
          req.set(http::field::user_agent, "narwhal/" + version_);
          req.body() = body;
          req.prepare_payload();
          co_await http::async_write(stream, req, asio::use_awaitable);
          beast::flat_buffer buffer;
          http::response_parser<http::string_body> parser;
          parser.body_limit(1 << 16);
          co_await http::async_read(stream, buffer, parser, asio::use_awaitable);
          status = static_cast<int>(parser.get().result_int());
        } catch (const std::exception& e) {
          failure = e.what();
        }
        done = true;
      },
      asio::detached);
  io.run_for(timeout);
  if (!done) {
    // Out of time (the resolver has no timer of its own): end what runs.
    beast::error_code ignored;
    stream.socket().close(ignored);
    resolver.cancel();
    io.restart();
    io.run_for(std::chrono::seconds(1));
    *error = "timed out after " + absl::StrCat(settings_.export_timeout_s) + " s";
    return false;
  }
  if (!failure.empty()) {
    *error = failure;
    return false;
  }
  if (status < 200 || status > 299) {
    *error = "HTTP " + std::to_string(status);
    return false;
  }
  return true;
}

long long OtlpExporter::exported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exported_;
}
long long OtlpExporter::dropped_queue_full() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_queue_full_;
}
long long OtlpExporter::dropped_export_failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_failed_;
}

}  // namespace narwhal::server
