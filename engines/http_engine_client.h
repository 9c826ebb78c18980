// HttpEngineClient: EngineClient over HTTP + SSE to vLLM (or narwhal-sim).
//
// One blocking httplib client per leg, aborted from outside by the shared
// LegWatchdog (first-token budget armed before connect, B12; read timeout
// re-armed on every transport chunk after the first token, B13; the request
// deadline throughout) or by the request's CancelToken (B19). Every failure is
// classified once into an EngineFailure. Thread-safe: legs run concurrently on
// their callers' threads.
#ifndef NARWHAL_ENGINES_HTTP_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_ENGINE_CLIENT_H_

#include <memory>
#include <string>

#include "engines/engine_client.h"
#include "engines/leg_watchdog.h"

namespace narwhal::engines {

struct HttpEngineClientOptions {
  double first_token_timeout_s = 2.5;  // B12
  double decode_read_timeout_s = 10;   // B13; 0 = request deadline bounds the stream
  double connect_timeout_s = 10;
  std::string connector = "NixlConnector";
  std::string api_key;  // Bearer token sent to engines; empty = none
  // Largest non-streaming engine response body read (prefill responses).
  size_t max_response_bytes = 16 * 1024 * 1024;
};

class HttpEngineClient : public EngineClient {
 public:
  explicit HttpEngineClient(HttpEngineClientOptions options);
  ~HttpEngineClient() override;

  PrefillOutcome Prefill(const EngineTarget& producer, Api api, const nlohmann::json& client_body,
                         const LegOptions& options) override;

  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                       const nlohmann::json& client_body, bool client_streams,
                       const LegOptions& options, DecodeObserver& observer) override;

  ControlResponse Control(const EngineTarget& engine, std::string_view method,
                          std::string_view path, const std::string& body,
                          double timeout_s) override;

  const HttpEngineClientOptions& options() const { return options_; }

 private:
  HttpEngineClientOptions options_;
  LegWatchdog watchdog_;
};

// Splits "http://host:port" into host and port. False if malformed.
bool ParseEngineUrl(const std::string& url, std::string* host, int* port);

// The message inside an engine's error body (vLLM's nested, legacy flat or
// string shapes; else the raw text), truncated to a readable length.
std::string EngineErrorMessage(const std::string& body);

// Classifies an engine's HTTP error status (or, with `in_stream`, an error
// object inside a 200 stream, B11) into the one failure record.
EngineFailure ClassifyEngineStatus(Phase phase, const std::string& iid, int engine_status,
                                   const std::string& message, bool in_stream);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_ENGINE_CLIENT_H_
