// The legs of the Python API, run on the adapter's event loop.
//
// Each Python call (prefill, decode) becomes one Call: a shared state between
// the Python thread that started it and the event-loop thread that runs the
// leg as a coroutine of the router's own adapter (BeastEngineClient over the
// EngineClient port). Nothing here touches Python: the module (module.cc)
// waits on a Call with the GIL released, and asyncio callers are woken
// through a ReadyListener (waker.h).
//
// Threads: one event loop (Runtime) serves every client and every leg of the
// process, whatever the number of concurrent legs; a leg holds buffers and a
// connection, never a thread.
//
// Thread-safe: every public method may be called from any thread.
#ifndef NARWHAL_PYTHON_BINDINGS_ENGINE_CALLS_H_
#define NARWHAL_PYTHON_BINDINGS_ENGINE_CALLS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/clock.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/http_options.h"
#include "engines/http/io_loops.h"
#include "engines/prefill_result.h"
#include "router/assembler.h"

namespace narwhal::python {

// The process's one event loop and clock. Created on first use; Shutdown()
// (the interpreter's exit) stops the loop, after which no leg starts.
class Runtime {
 public:
  static Runtime& Get();
  // Shuts the runtime down if it was ever started.
  static void ShutdownIfStarted();
  const engines::Executor& executor() const { return executor_; }
  const engines::Clock& clock() const { return clock_; }
  // Stops and joins the loop thread. Idempotent.
  void Shutdown();
  bool stopped() const;

 private:
  Runtime();
  engines::RealClock clock_;
  engines::IoLoops loops_{1};
  engines::Executor executor_;
  mutable std::mutex mu_;
  bool stopped_ = false;
};

// Told when a Call becomes ready (see Call::Arm). Post() runs on the event
// loop's thread without any lock of the Call held.
class ReadyListener {
 public:
  virtual ~ReadyListener() = default;
  virtual void Post(uint64_t token) = 0;
};

// What the handoff carries besides the port's PrefillResult: when its
// producer leg started (B7: handoff age starts there).
struct Handoff {
  engines::PrefillResult result;
  engines::MonoTime started;
};

class Call : public std::enable_shared_from_this<Call> {
 public:
  virtual ~Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Waits at most `d` for the call to become ready (prefill: finished;
  // decode: an item to take, or finished), or with `until_finished` for the
  // leg to end. True when that happened.
  bool WaitFor(std::chrono::nanoseconds d, bool until_finished);
  // The next time the call is ready, `listener->Post(token)` runs once (from
  // the loop thread). Returns true instead, posting nothing, when it is ready
  // already. A newer Arm replaces an older one.
  bool Arm(std::weak_ptr<ReadyListener> listener, uint64_t token);
  // Ends the leg (B19): its socket is closed within one loop turn and it
  // finishes with FailureReason::kCancelled. Idempotent; a no-op once
  // finished.
  void Cancel();
  bool finished() const;

 protected:
  Call() = default;
  // Wakes waiters and the armed listener; call without mu_ held.
  void NotifyReady();
  virtual bool ReadyLocked() const = 0;
  virtual void OnCancel() {}

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;  // guarded by mu_
  engines::CancelToken cancel_;

 private:
  std::weak_ptr<ReadyListener> listener_;  // guarded by mu_
  uint64_t token_ = 0;                     // guarded by mu_
  bool armed_ = false;                     // guarded by mu_
};

// The adapter configured for one engine URL.
struct ClientConfig {
  std::string url;  // "http://host:port", without a trailing '/'
  engines::HttpEngineClientOptions http;
  std::optional<double> prefill_timeout_s;  // unset: no bound of its own
};

class PrefillCall;
class DecodeCall;

// One engine, as both a producer and a consumer. Immutable; shared by the
// legs it started (a leg keeps its client alive).
class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  explicit ClientCore(ClientConfig config);
  const ClientConfig& config() const { return config_; }
  const engines::EngineTarget& target() const { return target_; }

  // B1/B2: the producer leg. `body` is the client's request.
  std::shared_ptr<PrefillCall> StartPrefill(nlohmann::json body, engines::Api api);
  // B3-B5, B11-B13: the consumer leg. A handoff the connector rules reject
  // for this client's connector and `api` gives a call that has already
  // failed ("invalid continuation: ..."): no request reaches the engine.
  std::shared_ptr<DecodeCall> StartDecode(std::shared_ptr<const Handoff> handoff,
                                          nlohmann::json body, engines::Api api, bool stream);

 private:
  ClientConfig config_;
  engines::EngineTarget target_;
  engines::BeastEngineClient adapter_;
};

class PrefillCall : public Call {
 public:
  // Set once finished: exactly one of them.
  std::shared_ptr<const Handoff> result() const;
  std::optional<engines::EngineFailure> failure() const;

 private:
  friend class ClientCore;
  PrefillCall() = default;
  bool ReadyLocked() const override { return finished_; }

  std::shared_ptr<ClientCore> client_;
  nlohmann::json body_;
  std::shared_ptr<const Handoff> result_;          // guarded by mu_
  std::optional<engines::EngineFailure> failure_;  // guarded by mu_
};

// A decode leg's output, taken by the caller in order. A streaming leg
// queues each chunk's JSON payload (malformed events are not chunks and are
// left out); a non-streaming one queues one assembled response once the
// stream ended well. The engine read pauses while the queue is over its
// bound (back-pressure; the read timeout is paused meanwhile, B13).
class DecodeCall : public Call, public engines::DecodeObserver {
 public:
  struct Taken {
    std::vector<std::string> items;
    bool finished = false;
    std::optional<engines::EngineFailure> failure;  // when finished and failed
  };
  // Everything queued so far; `finished` once the leg ended and nothing is
  // left to take.
  Taken Take();
  // The connector rules' refusal (B3) when the leg never started.
  const std::optional<engines::EngineFailure>& rejection() const { return rejection_; }

  // DecodeObserver (the loop thread).
  bool OnEvent(std::string_view data, const engines::StreamEvent& event) override;
  engines::Awaitable<bool> Flush() override;

  // Most items and bytes queued before the engine read waits for the caller.
  static constexpr size_t kMaxQueuedItems = 256;
  static constexpr size_t kMaxQueuedBytes = 1 << 20;

 private:
  friend class ClientCore;
  explicit DecodeCall(engines::Api api, bool stream) : stream_(stream), assembler_(api) {}
  bool ReadyLocked() const override { return !items_.empty() || finished_; }
  void OnCancel() override { WakeLoop(); }
  // Wakes a Flush() waiting for room, on the loop.
  void WakeLoop();
  void Finish(engines::DecodeOutcome outcome);

  std::shared_ptr<ClientCore> client_;
  std::shared_ptr<const Handoff> handoff_;
  nlohmann::json body_;
  const bool stream_;
  engines::Executor executor_;
  std::optional<engines::EngineFailure> rejection_;  // set before the call is shared
  // Loop thread only.
  router::Assembler assembler_;
  std::string assembly_error_;
  bool fresh_items_ = false;
  std::optional<boost::asio::steady_timer> room_;
  // Guarded by mu_.
  std::deque<std::string> items_;
  size_t queued_bytes_ = 0;
  bool waiting_for_room_ = false;
  std::optional<engines::EngineFailure> failure_;
};

// A fresh backend request id (B8): "py-" and 24 random hex digits.
std::string NewBackendRequestId();

}  // namespace narwhal::python

#endif  // NARWHAL_PYTHON_BINDINGS_ENGINE_CALLS_H_
