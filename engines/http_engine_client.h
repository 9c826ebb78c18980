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
#include "engines/http/http_options.h"
#include "engines/leg_watchdog.h"

namespace narwhal::engines {

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

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_ENGINE_CLIENT_H_
