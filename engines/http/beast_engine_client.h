// BeastEngineClient: the engine port over HTTP/1.1 + SSE to vLLM (or
// narwhal-sim), on the event loops (Boost.Beast).
//
// Each leg runs on the loop of the coroutine that awaits it: it takes a
// keep-alive connection from that loop's pool (or opens one), writes the
// request, and reads the response with Beast's parser. A decode leg reads the
// SSE body one socket read at a time; every read's events are classified once
// and handed to the observer, which writes them to the client in one write
// (DecodeObserver::Flush) before the next read — no thread handoff, no lock.
// One LegTimer bounds the leg: the first-token budget armed before connect
// (B12), the read timeout re-armed on every complete SSE event or comment
// line after the first token — not on bytes of an event that has not ended —
// and paused while the client back-pressures the stream (B13), the
// prefill bound and the request deadline; its expiry closes the socket and is
// classified by cause. A cancelled CancelToken (B19) closes the socket within
// one loop turn. Every failure is classified once into an EngineFailure.
// A leg that ended abnormally closes its connection instead of pooling it.
// Interim 1xx responses before the final one (a proxy's 100 Continue) are
// skipped on every leg, at most four. What a leg reads is bounded
// (HttpEngineClientOptions): header bytes and
// fields (chunked trailers included), unparsed framing in the read buffer,
// prefill and control bodies, SSE events, choices per decode chunk; past a
// bound the leg fails (kResponseBound, the detail names the bound) and the
// rest of the response is never read.
//
// Thread-safe: any number of legs on any loops.
#ifndef NARWHAL_ENGINES_HTTP_BEAST_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_BEAST_ENGINE_CLIENT_H_

#include <memory>
#include <string>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "engines/http/http_options.h"
#include "engines/snapshot_slot.h"

namespace narwhal::engines {

class TlsClientContext;  // engines/http/tls_client.h

class BeastEngineClient : public AsyncEngineClient {
 public:
  // `clock` must outlive the client.
  BeastEngineClient(HttpEngineClientOptions options, const Clock& clock);
  ~BeastEngineClient() override;

  Awaitable<PrefillOutcome> Prefill(EngineTarget producer, Api api,
                                    const nlohmann::json& client_body, LegOptions options) override;

  Awaitable<DecodeOutcome> Decode(EngineTarget consumer, const PrefillResult& handoff,
                                  const nlohmann::json& client_body, bool client_streams,
                                  LegOptions options, DecodeObserver& observer) override;

  Awaitable<ControlResponse> Control(EngineTarget engine, std::string method, std::string path,
                                     std::string body, double timeout_s) override;

  // The options in force; SetOptions replaces them for legs that start
  // later (a reload), all but `tls`.
  std::shared_ptr<const HttpEngineClientOptions> options() const { return options_.Get(); }
  void SetOptions(HttpEngineClientOptions options);

 private:
  // The TLS context of https:// engines (`url`); null for http:// ones.
  std::shared_ptr<const TlsClientContext> TlsFor(const std::string& url) const;

  // Built from the first options' tls: engine.tls needs a restart
  // (SetOptions keeps it), and its files are read once, at the first TLS
  // connection.
  const std::shared_ptr<const TlsClientContext> tls_;
  SnapshotSlot<HttpEngineClientOptions> options_;
  const Clock& clock_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_BEAST_ENGINE_CLIENT_H_
