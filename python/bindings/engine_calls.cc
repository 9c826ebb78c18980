#include "python/bindings/engine_calls.h"

#include <cstdio>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "engines/http/connector.h"

namespace narwhal::python {
namespace {

namespace asio = boost::asio;
using engines::EngineFailure;
using json = nlohmann::json;

// The reason text of a connector verdict, whichever shape the connector
// rules return it in (a string, or a record with a detail): empty when the
// handoff may be decoded.
template <typename Verdict>
std::string VerdictText(const Verdict& verdict) {
  if constexpr (std::is_convertible_v<Verdict, std::string>) {
    return verdict;
  } else {
    return verdict.detail;
  }
}

EngineFailure InternalFailure(engines::Phase phase, const std::string& iid,
                              const std::string& what) {
  return engines::MakeFailure(phase, iid, engines::FailureReason::kEngineError,
                              engines::BreakerClass::kNone, engines::FailureCause::kNone,
                              "internal error in the engine adapter: " + what, false);
}

// The URL is the engine's identity: a decode on the URL that produced the
// handoff is a same-worker decode (B5).
engines::EngineTarget TargetOf(const std::string& url) {
  engines::EngineTarget target;
  target.iid = url;
  target.url = url;
  return target;
}

}  // namespace

// --- Runtime ----------------------------------------------------------------

namespace {
std::mutex runtime_mu;
Runtime* runtime = nullptr;  // never destroyed (see Get)
}  // namespace

Runtime& Runtime::Get() {
  // Never destroyed: the loop thread must not outlive the objects it uses at
  // process exit; Shutdown() (the interpreter's atexit) stops it first.
  std::lock_guard<std::mutex> lock(runtime_mu);
  if (runtime == nullptr) runtime = new Runtime();
  return *runtime;
}

void Runtime::ShutdownIfStarted() {
  Runtime* r = nullptr;
  {
    std::lock_guard<std::mutex> lock(runtime_mu);
    r = runtime;
  }
  if (r != nullptr) r->Shutdown();
}

Runtime::Runtime() : executor_(loops_.executor(0)) {}

void Runtime::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  loops_.Stop();
}

bool Runtime::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

std::string NewBackendRequestId() {
  static std::mutex mu;
  static std::mt19937_64 bits{std::random_device{}()};
  uint64_t a = 0;
  uint64_t b = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = bits();
    b = bits();
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b & 0xffffffffULL));
  return std::string("py-") + buf;
}

// --- Call -------------------------------------------------------------------

bool Call::WaitFor(std::chrono::nanoseconds d, bool until_finished) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [&] { return until_finished ? finished_ : ReadyLocked(); });
}

bool Call::Arm(std::weak_ptr<ReadyListener> listener, uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ReadyLocked()) {
    armed_ = false;
    return true;
  }
  listener_ = std::move(listener);
  token_ = token;
  armed_ = true;
  return false;
}

void Call::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
  }
  cancel_.Cancel();
  OnCancel();
}

bool Call::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void Call::NotifyReady() {
  std::weak_ptr<ReadyListener> listener;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ReadyLocked()) return;
    if (armed_) {
      armed_ = false;
      listener = std::move(listener_);
      token = token_;
    }
  }
  cv_.notify_all();
  if (std::shared_ptr<ReadyListener> l = listener.lock()) l->Post(token);
}

// --- ClientCore -------------------------------------------------------------

ClientCore::ClientCore(ClientConfig config)
    : config_(std::move(config)),
      target_(TargetOf(config_.url)),
      adapter_(config_.http, Runtime::Get().clock()) {}

std::shared_ptr<PrefillCall> ClientCore::StartPrefill(json body, engines::Api api) {
  Runtime& runtime = Runtime::Get();
  if (runtime.stopped()) throw std::runtime_error("the narwhal event loop has shut down");
  std::shared_ptr<PrefillCall> call(new PrefillCall());
  call->client_ = shared_from_this();
  call->body_ = std::move(body);
  const engines::MonoTime started = runtime.clock().Now();
  engines::LegOptions options;
  options.backend_request_id = NewBackendRequestId();
  options.cancel = &call->cancel_;
  if (config_.prefill_timeout_s) {
    options.leg_deadline = started + engines::FromSeconds(*config_.prefill_timeout_s);
  }
  asio::co_spawn(
      runtime.executor(),
      [call, api, options, started]() -> engines::Awaitable<void> {
        engines::PrefillOutcome out;
        ClientCore& client = *call->client_;
        try {
          out = co_await client.adapter_.Prefill(client.target_, api, call->body_, options);
        } catch (const std::exception& e) {
          out.failure = InternalFailure(engines::Phase::kPrefill, client.target_.iid, e.what());
        }
        {
          std::lock_guard<std::mutex> lock(call->mu_);
          if (out.result) {
            call->result_ = std::make_shared<const Handoff>(Handoff{std::move(*out.result), started});
          } else if (out.failure) {
            call->failure_ = std::move(out.failure);
          } else {
            call->failure_ = InternalFailure(engines::Phase::kPrefill, client.target_.iid,
                                             "the prefill leg ended without an outcome");
          }
          call->finished_ = true;
        }
        call->NotifyReady();
      },
      asio::detached);
  return call;
}

std::shared_ptr<DecodeCall> ClientCore::StartDecode(std::shared_ptr<const Handoff> handoff,
                                                    json body, engines::Api api, bool stream) {
  Runtime& runtime = Runtime::Get();
  if (runtime.stopped()) throw std::runtime_error("the narwhal event loop has shut down");
  std::shared_ptr<DecodeCall> call(new DecodeCall(api, stream));
  call->client_ = shared_from_this();
  call->handoff_ = std::move(handoff);
  call->body_ = std::move(body);
  call->executor_ = runtime.executor();

  // B3 before any decode request, with the connector rules the adapter
  // applies, against the endpoint this decode asked for (the adapter decodes
  // on the handoff's own endpoint, so only here can the two differ).
  const std::string why =
      VerdictText(engines::ValidateContinuation(call->handoff_->result, config_.http.connector, api));
  if (!why.empty()) {
    EngineFailure f = engines::MakeFailure(
        engines::Phase::kDecode, target_.iid, engines::FailureReason::kInvalidResponse,
        engines::BreakerClass::kKvHandoff, engines::FailureCause::kInvalidContinuation,
        "invalid continuation: " + why, false);
    f.evidence_iid = call->handoff_->result.producer_iid();
    call->rejection_ = f;
    std::lock_guard<std::mutex> lock(call->mu_);
    call->failure_ = std::move(f);
    call->finished_ = true;
    return call;
  }

  engines::LegOptions options;
  options.backend_request_id = NewBackendRequestId();
  options.cancel = &call->cancel_;
  asio::co_spawn(
      runtime.executor(),
      [call, stream, options]() -> engines::Awaitable<void> {
        ClientCore& client = *call->client_;
        call->room_.emplace(call->executor_);
        engines::DecodeOutcome out;
        try {
          out = co_await client.adapter_.Decode(client.target_, call->handoff_->result,
                                                call->body_, stream, options, *call);
        } catch (const std::exception& e) {
          out.failure = InternalFailure(engines::Phase::kDecode, client.target_.iid, e.what());
        }
        call->Finish(std::move(out));
      },
      asio::detached);
  return call;
}

// --- PrefillCall ------------------------------------------------------------

std::shared_ptr<const Handoff> PrefillCall::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_;
}

std::optional<EngineFailure> PrefillCall::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

// --- DecodeCall -------------------------------------------------------------

DecodeCall::Taken DecodeCall::Take() {
  Taken out;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.items.assign(std::make_move_iterator(items_.begin()),
                     std::make_move_iterator(items_.end()));
    items_.clear();
    queued_bytes_ = 0;
    out.finished = finished_;
    if (finished_) out.failure = failure_;
    wake = waiting_for_room_;
    waiting_for_room_ = false;
  }
  if (wake) WakeLoop();
  return out;
}

bool DecodeCall::OnEvent(std::string_view data, const engines::StreamEvent& event) {
  if (!stream_) {
    if (!assembler_.Add(data)) {
      assembly_error_ = assembler_.error();
      return false;
    }
    return true;
  }
  if (event.kind == engines::EventKind::kMalformed) return true;
  std::lock_guard<std::mutex> lock(mu_);
  items_.emplace_back(data);
  queued_bytes_ += data.size();
  fresh_items_ = true;
  return true;
}

engines::Awaitable<bool> DecodeCall::Flush() {
  if (fresh_items_) {
    fresh_items_ = false;
    NotifyReady();
  }
  while (!cancel_.cancelled()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (items_.size() <= kMaxQueuedItems && queued_bytes_ <= kMaxQueuedBytes) break;
      waiting_for_room_ = true;
    }
    // Take() or Cancel() posts the wake-up; it runs on this loop after this
    // wait has begun.
    room_->expires_at(boost::asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await room_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return !cancel_.cancelled();
}

void DecodeCall::WakeLoop() {
  std::shared_ptr<DecodeCall> self = std::static_pointer_cast<DecodeCall>(shared_from_this());
  asio::post(executor_, [self] {
    if (self->room_) self->room_->cancel();
  });
}

void DecodeCall::Finish(engines::DecodeOutcome outcome) {
  std::optional<EngineFailure> failure = std::move(outcome.failure);
  if (!assembly_error_.empty()) {
    failure = engines::MakeFailure(
        engines::Phase::kDecode, client_->target().iid, engines::FailureReason::kInvalidResponse,
        engines::BreakerClass::kNone, engines::FailureCause::kUnassemblable,
        "unassemblable decode response: " + assembly_error_, false);
  }
  std::string response;
  if (!failure && !stream_) response = assembler_.Build().dump();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!response.empty()) {
      queued_bytes_ += response.size();
      items_.push_back(std::move(response));
    }
    failure_ = std::move(failure);
    finished_ = true;
  }
  NotifyReady();
}

}  // namespace narwhal::python
