#include "router/handoff_releaser.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "router/common/log.h"

namespace narwhal::router {
namespace {

using engines::FailureReason;
using engines::Phase;
using json = nlohmann::json;

// A release leg's output goes nowhere.
class DiscardObserver : public engines::DecodeObserver {
 public:
  bool OnEvent(std::string_view, const engines::StreamEvent&) override { return true; }
};

ReleaseOutcome OutcomeOf(const engines::DecodeOutcome& out, bool reject) {
  if (out.ok()) return ReleaseOutcome::kReleased;
  switch (out.failure->reason) {
    case FailureReason::kCancelled:
      return ReleaseOutcome::kCancelled;
    case FailureReason::kDeadline:
    case FailureReason::kEngineTimeout:
      return ReleaseOutcome::kTimeout;
    case FailureReason::kEngineRejected:
      return reject ? ReleaseOutcome::kRejected : ReleaseOutcome::kFailed;
    case FailureReason::kEngineError:
      // The unserved model's 404 (or any refusal of the router's request
      // before admission) is the refusal a "reject" release asks for.
      return reject && out.failure->cause == engines::FailureCause::kEngineRefusedRouter
                 ? ReleaseOutcome::kRejected
                 : ReleaseOutcome::kFailed;
    default:
      return ReleaseOutcome::kFailed;
  }
}

// "<rid>-<attempt>p" -> "<rid>-<attempt>r": the release leg's own id (B8).
std::string ReleaseRequestId(const std::string& prefill_id) {
  if (!prefill_id.empty() && prefill_id.back() == 'p') {
    return prefill_id.substr(0, prefill_id.size() - 1) + "r";
  }
  return prefill_id + "-r";
}

}  // namespace

json ReleaseBody(const json& client_body, bool reject) {
  json body = client_body.is_object() ? client_body : json::object();
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body.erase("min_tokens");
  body.erase("min_completion_tokens");
  body.erase("n");
  body.erase("stream_options");
  body["stream"] = false;
  if (reject) body["model"] = kReleaseRejectModel;
  return body;
}

struct HandoffReleaser::Job {
  Job(const engines::PrefillResult& h, Fleet::Reservation r, json b, AbandonReason why,
      std::string id, bool rej, double timeout_s)
      // A fresh handoff object for the one release leg: the abandoned one
      // may already be claimed by the decode that never reached a consumer.
      : handoff(h.producer_iid(), h.producer_url(), h.endpoint(), h.backend_request_id(),
                h.connector(), h.descriptor(), h.producer_kv_engine_id()),
        consumer(std::move(r)),
        body(std::move(b)),
        reason(why),
        rid(std::move(id)),
        reject(rej),
        release_timeout_s(timeout_s) {}

  engines::PrefillResult handoff;
  Fleet::Reservation consumer;
  json body;
  AbandonReason reason;
  std::string rid;
  bool reject;
  double release_timeout_s;
};

HandoffReleaser::HandoffReleaser(const Settings& settings, engines::AsyncEngineClient& engines,
                                 Fleet& fleet, const Clock& clock, Metrics* metrics)
    : settings_(settings), engines_(engines), fleet_(fleet), clock_(clock), metrics_(metrics) {}

HandoffReleaser::~HandoffReleaser() { Cancel(); }

int HandoffReleaser::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

void HandoffReleaser::Count(ReleaseOutcome outcome) {
  if (metrics_ == nullptr) return;
  metrics_->handoff_releases_total.Add({{"outcome", std::string(ReleaseOutcomeName(outcome))}})
      .Increment();
}

void HandoffReleaser::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  --inflight_;
  // Under the lock: once Cancel() sees zero, no release touches this object.
  idle_.notify_all();
}

ReleaseDispatch HandoffReleaser::Release(const Abandoned& a, const engines::Executor& executor) {
  const HandoffSettings& h = a.settings != nullptr ? *a.settings : settings_.handoff;
  const std::string& producer = a.handoff->producer_iid();
  const std::string what = "request " + a.rid + ": KV handoff from " + producer + " abandoned (" +
                           std::string(AbandonReasonName(a.reason)) + ")";
  if (metrics_ != nullptr) {
    metrics_->handoffs_abandoned_total.Add({{"reason", std::string(AbandonReasonName(a.reason))}})
        .Increment();
  }
  auto not_started = [&](ReleaseOutcome outcome, const std::string& why) {
    LogInfo(what + "; not released (" + std::string(ReleaseOutcomeName(outcome)) + "): " + why);
    Count(outcome);
    return ReleaseDispatch::kNotStarted;
  };
  if (h.release == "off") {
    return not_started(ReleaseOutcome::kOff, "handoff.release is off; the lease frees it");
  }
  if (clock_.Now() - a.handoff_start >= engines::FromSeconds(h.lease_s)) {
    return not_started(ReleaseOutcome::kLeaseEnded, "the producer's lease has already ended");
  }
  enum class Admit { kYes, kClosed, kFull };
  Admit admit = Admit::kYes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      admit = Admit::kClosed;
    } else if (inflight_ >= h.release_max_inflight) {
      admit = Admit::kFull;
    } else {
      ++inflight_;
    }
  }
  if (admit == Admit::kClosed) {
    return not_started(ReleaseOutcome::kCancelled, "the router is shutting down");
  }
  if (admit == Admit::kFull) {
    return not_started(ReleaseOutcome::kDropped,
                       std::to_string(h.release_max_inflight) +
                           " releases already running (handoff.release_max_inflight)");
  }
  // A consumer other than the producer (a same-worker decode would not read
  // the transferred blocks), outside `avoid` when another one exists.
  auto pick = [&](const std::vector<std::string>& excluded) {
    std::optional<Fleet::Reservation> r = fleet_.PickAndReserve(Phase::kDecode, excluded, producer);
    if (r && r->target().iid == producer) r.reset();
    return r;
  };
  std::optional<Fleet::Reservation> consumer = pick(a.avoid);
  if (!consumer && !a.avoid.empty()) consumer = pick({});
  if (!consumer) {
    Done();
    return not_started(ReleaseOutcome::kNoConsumer,
                       "no consumer other than the producer is in placement");
  }
  const bool reject = h.release == "reject";
  LogInfo(what + "; releasing it by " + h.release + " through " + consumer->target().iid);
  auto job =
      std::make_shared<Job>(*a.handoff, std::move(*consumer), ReleaseBody(a.client_body, reject),
                            a.reason, a.rid, reject, h.release_timeout_s);
  boost::asio::co_spawn(executor, Run(std::move(job)), boost::asio::detached);
  return ReleaseDispatch::kStarted;
}

engines::Awaitable<void> HandoffReleaser::Run(std::shared_ptr<Job> job) {
  ReleaseOutcome outcome = ReleaseOutcome::kFailed;
  std::string detail;
  const engines::EngineTarget target = job->consumer.target();
  try {
    engines::LegOptions options;
    options.backend_request_id = ReleaseRequestId(job->handoff.backend_request_id());
    options.request_deadline = clock_.Now() + engines::FromSeconds(job->release_timeout_s);
    options.cancel = &shutdown_;
    DiscardObserver observer;
    engines::DecodeOutcome out =
        co_await engines_.Decode(target, job->handoff, job->body,
                                 /*client_streams=*/false, options, observer);
    outcome = OutcomeOf(out, job->reject);
    if (out.failure) detail = out.failure->detail;
  } catch (const std::exception& e) {
    detail = e.what();
  }
  // Never breaker evidence: nothing is recorded against the consumer or the
  // producer, whatever the leg's end.
  job->consumer.Release();
  LogInfo("request " + job->rid + ": release of the KV handoff from " +
          job->handoff.producer_iid() + " through " + target.iid + ": " +
          std::string(ReleaseOutcomeName(outcome)) + (detail.empty() ? "" : " (" + detail + ")"));
  Count(outcome);
  Done();
}

void HandoffReleaser::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  shutdown_.Cancel();
  std::unique_lock<std::mutex> lock(mu_);
  // Cancelled legs end within moments on their loops; the real-time bound
  // only guards against a loop that no longer runs.
  if (!idle_.wait_for(lock, std::chrono::seconds(10), [&] { return inflight_ == 0; })) {
    LogError("handoff releases did not end within 10 s of shutdown");
  }
}

}  // namespace narwhal::router
