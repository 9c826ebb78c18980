// OtlpExporter: the span sink of narwhal-serve (SPEC §16, span export). Each
// sampled request's spans (router/request_spans.h) are queued — bounded by
// tracing.max_queued_spans; a request whose spans do not fit is dropped whole
// and counted, never waited for — and one thread of the exporter's own sends
// them in batches to an OTLP/HTTP traces endpoint as OTLP's JSON encoding
// (ExportTraceServiceRequest; no OpenTelemetry protobuf package is in the
// distribution, and every OTLP/HTTP receiver takes JSON).
//
// A batch leaves when 512 spans are queued or tracing.export_interval_s after
// the first of them; one request is bounded by tracing.export_timeout_s. A
// batch that fails (connect, timeout, non-2xx) is dropped and counted, never
// retried, and logged once per run of failures (and at most once a minute).
// Stop() sends what is queued, once, and joins the thread.
//
// Metrics (registered only with an exporter): narwhal_trace_spans_exported_total
// and narwhal_trace_spans_dropped_total{reason="queue_full"|"export_failed"}.
// Thread-safe.
#ifndef NARWHAL_SERVER_TRACING_OTLP_EXPORTER_H_
#define NARWHAL_SERVER_TRACING_OTLP_EXPORTER_H_

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "router/common/settings.h"
#include "router/request_spans.h"

namespace narwhal::server {

// Where to POST: "http://host:port[/path]" split (path "/v1/traces" when none).
struct OtlpTarget {
  std::string host;
  std::string port;
  std::string path;
};
absl::StatusOr<OtlpTarget> ParseOtlpEndpoint(const std::string& endpoint);

// The OTLP JSON document of `batch` (ids as hex, times as decimal strings of
// nanoseconds, attributes as typed AnyValues), from service `service` at
// `version`.
std::string EncodeOtlpJson(const std::vector<router::RequestSpans>& batch,
                           const std::string& service, const std::string& version);

class OtlpExporter final : public router::SpanSink {
 public:
  static constexpr size_t kBatchSpans = 512;

  // Starts the export thread. `registry` may be null (no metrics).
  static absl::StatusOr<std::unique_ptr<OtlpExporter>> Start(
      const router::TracingSettings& settings, std::string version, prometheus::Registry* registry);
  ~OtlpExporter() override;  // Stop()
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  void Export(router::RequestSpans spans) override;
  // Sends what is queued (one attempt) and joins the thread. Idempotent.
  void Stop();

  // Spans exported, and dropped for a full queue or a failed export.
  long long exported() const;
  long long dropped_queue_full() const;
  long long dropped_export_failed() const;

 private:
  OtlpExporter(const router::TracingSettings& settings, OtlpTarget target, std::string version,
               prometheus::Registry* registry);
  void Run();
  // Sends one batch; false with *error when it failed.
  bool Post(const std::string& body, std::string* error) const;
  void Sent(size_t spans, bool ok, const std::string& error);

  const router::TracingSettings settings_;
  const OtlpTarget target_;
  const std::string version_;
  prometheus::Counter* exported_counter_ = nullptr;
  prometheus::Counter* queue_full_counter_ = nullptr;
  prometheus::Counter* failed_counter_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<router::RequestSpans> queue_;
  size_t queued_spans_ = 0;
  bool stop_ = false;
  long long exported_ = 0;
  long long dropped_queue_full_ = 0;
  long long dropped_failed_ = 0;
  bool failing_ = false;  // the last export failed (log once per run)
  std::thread thread_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_TRACING_OTLP_EXPORTER_H_
