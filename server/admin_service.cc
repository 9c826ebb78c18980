#include "server/admin_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <utility>
#include <vector>

#include <grpcpp/alarm.h>

#include "engines/engine_failure.h"
#include "server/api_key.h"
#include "server/config_loader.h"
#include "server/log.h"
#include "server/wake_link.h"

namespace narwhal::server {
namespace {

namespace pb = narwhal::admin::v1;
using router::EngineSnapshot;
using router::PlacementState;

constexpr char kShuttingDown[] = "narwhal-serve is shutting down";

// ------------------------------------------------------------------ JSON

void JsonToValue(const nlohmann::json& j, google::protobuf::Value* out);

void JsonToStruct(const nlohmann::json& object, google::protobuf::Struct* out) {
  out->clear_fields();
  if (!object.is_object()) return;
  auto& fields = *out->mutable_fields();
  for (const auto& [key, value] : object.items()) JsonToValue(value, &fields[key]);
}

void JsonToValue(const nlohmann::json& j, google::protobuf::Value* out) {
  switch (j.type()) {
    case nlohmann::json::value_t::boolean:
      out->set_bool_value(j.get<bool>());
      break;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      out->set_number_value(j.get<double>());
      break;
    case nlohmann::json::value_t::string:
      out->set_string_value(j.get<std::string>());
      break;
    case nlohmann::json::value_t::array: {
      google::protobuf::ListValue* list = out->mutable_list_value();
      for (const nlohmann::json& item : j) JsonToValue(item, list->add_values());
      break;
    }
    case nlohmann::json::value_t::object:
      JsonToStruct(j, out->mutable_struct_value());
      break;
    default:  // null, binary, discarded
      out->set_null_value(google::protobuf::NULL_VALUE);
      break;
  }
}

std::string JsonString(const nlohmann::json& event, const char* key) {
  auto it = event.find(key);
  return it != event.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void FillEvent(const nlohmann::json& event, pb::Event* out) {
  out->Clear();
  out->set_seq(event.value("seq", 0LL));
  auto at = event.find("at");
  if (at != event.end() && at->is_number()) out->set_at(at->get<double>());
  out->set_kind(JsonString(event, "event"));
  out->set_iid(JsonString(event, "iid"));
  out->set_hold_kind(JsonString(event, "hold_kind"));
  out->set_cause(JsonString(event, "cause"));
  out->set_evidence(JsonString(event, "evidence"));
  out->set_probe_kind(JsonString(event, "probe_kind"));
  out->set_outcome(JsonString(event, "outcome"));
  out->set_producer(JsonString(event, "producer"));
  out->set_detail(JsonString(event, "detail"));
  JsonToStruct(event, out->mutable_fields());
}

// ------------------------------------------------------------------ engines

void FillStreak(const EngineSnapshot& s, google::protobuf::Map<std::string, int32_t>* out) {
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    (*out)[std::string(engines::BreakerClassName(static_cast<engines::BreakerClass>(c)))] =
        s.streak[c];
  }
}

void FillHold(const EngineSnapshot& s, pb::Hold* out) {
  out->set_kind(s.hold_kind);
  if (s.hold_remaining_s) out->set_remaining_s(*s.hold_remaining_s);
  out->set_cause(s.hold_cause);
  out->set_held_for_s(s.held_for_s.value_or(0));
}

void FillEjection(const EngineSnapshot& s, pb::Ejection* out) {
  out->set_cause(s.ejection_cause);
  out->set_detail(s.ejection_detail);
  out->set_ejected_for_s(s.ejected_for_s.value_or(0));
}

void FillProbe(const EngineSnapshot& s, pb::Probe* out) {
  out->set_kind(s.last_probe_kind);
  out->set_outcome(s.last_probe_outcome);
  out->set_detail(s.last_probe_detail);
  out->set_age_s(s.last_probe_age_s.value_or(0));
}

void FillEngine(const EngineSnapshot& s, pb::Engine* out) {
  out->Clear();
  out->set_iid(s.settings.iid);
  out->set_url(s.settings.url);
  out->set_role(router::RoleName(s.settings.role));
  out->set_state(std::string(router::PlacementStateName(s.state)));
  FillStreak(s, out->mutable_streak());
  if (!s.hold_kind.empty()) FillHold(s, out->mutable_hold());
  if (!s.ejection_cause.empty()) FillEjection(s, out->mutable_ejection());
  out->set_last_ejection_cause(s.last_ejection_cause);
  if (!s.last_probe_kind.empty()) FillProbe(s, out->mutable_last_probe());
  if (s.next_probe_in_s) out->set_next_probe_in_s(*s.next_probe_in_s);
  out->set_probe_failures(s.probe_failures);
  out->set_probe_running(s.probe_running);
  out->set_liveness_misses(s.liveness_misses);
  out->set_inflight_prefill(s.inflight_prefill);
  out->set_inflight_decode(s.inflight_decode);
  out->set_prefix_index_chunks(static_cast<int32_t>(s.prefix_index_chunks));
  out->set_reserved_decode(s.reserved_decode);
  out->set_explanation(s.explanation);
}

// ------------------------------------------------------------------ preflight

pb::Pairs PairsProto(router::PairMode mode) {
  return mode == router::PairMode::kRing ? pb::PAIRS_RING : pb::PAIRS_MESH;
}

void FillReport(const router::PreflightReport& r, const std::string& trigger,
                pb::PreflightReport* out) {
  out->Clear();
  out->set_passed(r.passed);
  out->set_started_at(r.started_at);
  out->set_duration_s(r.duration_s);
  out->set_pairs(PairsProto(r.pairs));
  for (const router::PreflightGate& g : r.gates) {
    pb::PreflightGate* p = out->add_gates();
    p->set_name(g.name);
    p->set_passed(g.passed);
    p->set_skipped(g.skipped);
    p->set_detail(g.detail);
    p->set_duration_s(g.duration_s);
  }
  for (const router::PreflightCheck& c : r.checks) {
    pb::PreflightCheck* p = out->add_checks();
    p->set_gate(c.gate);
    p->set_iid(c.iid);
    p->set_outcome(c.outcome);
    p->set_detail(c.detail);
    p->set_duration_s(c.duration_s);
  }
  for (const router::PreflightPair& t : r.transfers) {
    pb::PreflightTransfer* p = out->add_transfers();
    p->set_producer(t.producer);
    p->set_consumer(t.consumer);
    p->set_outcome(t.outcome);
    p->set_detail(t.detail);
    p->set_prefill_s(t.prefill_s);
    p->set_first_token_s(t.first_token_s);
    p->set_duration_s(t.duration_s);
  }
  out->set_trigger(trigger);
  out->set_table(r.ToTable());
}

// The `preflight` event: outcome, a one-line summary and each gate's result.
nlohmann::json PreflightEvent(const router::PreflightReport& r, const std::string& trigger) {
  nlohmann::json gates = nlohmann::json::object();
  std::string first_failure;
  for (const router::PreflightGate& g : r.gates) {
    gates[g.name] = g.skipped ? "skipped" : g.passed ? "passed" : "failed";
    if (!g.passed && !g.skipped && first_failure.empty()) {
      first_failure = "gate " + g.name + " failed: " + g.detail;
    }
  }
  int transfers_passed = 0;
  for (const router::PreflightPair& t : r.transfers) transfers_passed += t.outcome == "passed";
  std::string detail = first_failure;
  if (detail.empty()) {
    detail = r.passed ? "every gate passed (" + std::to_string(transfers_passed) + "/" +
                            std::to_string(r.transfers.size()) + " transfers)"
                      : "preflight failed";
  }
  return {{"event", "preflight"},
          {"outcome", r.passed ? "passed" : "failed"},
          {"trigger", trigger},
          {"pairs", r.pairs == router::PairMode::kRing ? "ring" : "mesh"},
          {"duration_s", r.duration_s},
          {"gates", gates},
          {"transfers", r.transfers.size()},
          {"transfers_passed", transfers_passed},
          {"detail", detail}};
}

// An ejected engine the breaker readmits only through an inference probe
// (ejected by a failed one, or while on an inference hold).
bool InferenceSuspect(const EngineSnapshot& s) {
  return s.state == PlacementState::kEjected && s.inference_suspect;
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

// ------------------------------------------------------------------ call state

class AdminService::PendingCall {
 public:
  PendingCall(grpc::ServerUnaryReactor* reactor, google::protobuf::Message* response)
      : reactor_(reactor), response_(response) {}

  // Finishes the call unless it already was; on OK `result` becomes the
  // response. The response is touched only here, under the lock, because
  // it is freed once the call finishes.
  void Finish(const grpc::Status& status, const google::protobuf::Message* result) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (status.ok() && result != nullptr) response_->CopyFrom(*result);
    reactor_->Finish(status);
  }

 private:
  std::mutex mu_;
  grpc::ServerUnaryReactor* const reactor_;
  google::protobuf::Message* const response_;
  bool finished_ = false;
};

// One WatchEvents stream: a bounded EventBus watcher. Replays the requested
// history, then relays live events, one write in flight. The stream ends
// when its watcher overflows (RESOURCE_EXHAUSTED) or is closed at shutdown
// (UNAVAILABLE); a client that takes nothing more cannot hold it past
// AdminOptions::watch_stall_timeout from then: the call is cancelled.
class AdminService::WatchReactor : public grpc::ServerWriteReactor<pb::Event> {
 public:
  WatchReactor(AdminService& service, grpc::CallbackServerContext* context,
               const pb::WatchEventsRequest& request)
      : service_(service),
        context_(context),
        link_(std::make_shared<WakeLink<WatchReactor>>(this)),
        stalled_(std::make_shared<std::atomic<bool>>(false)) {
    if (grpc::Status admitted = service_.Admit(context); !admitted.ok()) {
      finished_ = true;
      Finish(admitted);
      return;
    }
    // Watch first, then read the history: nothing published in between is
    // lost, and live copies of replayed events are skipped. Wake-ups wait
    // on mu_ until the replay is in place.
    std::unique_lock<std::mutex> lock(mu_);
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;
    watcher_ = service_.events_.Watch(service_.watch_limits_, [link] { link->Wake(); });
    if (!watcher_) {
      finished_ = true;
      lock.unlock();
      service_.LogWatchLimit(
          "refused a WatchEvents stream: " + std::to_string(service_.watch_limits_.max_watchers) +
          " watchers are open (admin.max_watchers); refused so far: " +
          std::to_string(service_.events_.watch_stats().refused));
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          "too many event watchers: " + std::to_string(service_.watch_limits_.max_watchers) +
              " are open (admin.max_watchers); retry later"));
      return;
    }
    bool shutting_down = false;
    {
      std::lock_guard<std::mutex> service_lock(service_.mu_);
      shutting_down = service_.shutting_down_;
      if (!shutting_down) service_.watchers_.insert(watcher_);
    }
    if (shutting_down) {
      finished_ = true;
      lock.unlock();
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown));
      return;
    }
    if (request.has_since_seq()) {
      replay_until_ = request.since_seq();
      for (router::EventBus::SharedEvent& e : service_.events_.SharedSince(request.since_seq())) {
        replay_until_ = std::max(replay_until_, e->value("seq", 0LL));
        replay_.push_back(std::move(e));
      }
    }
    lock.unlock();
    Pump();
  }

  // Writes the next event if none is in flight, or ends the stream.
  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (watcher_ && !ending_) {
      ending_ = Ending();
      if (ending_) ArmStallGuard();
    }
    if (ending_ && stalled_->load() && !cancel_sent_) {
      // The client has not taken the stream's end: free its resources.
      cancel_sent_ = true;
      lock.unlock();
      context_->TryCancel();
      return;
    }
    if (writing_ || finished_) return;
    if (ending_) {
      finished_ = true;
      const grpc::Status status = *ending_;
      lock.unlock();
      Finish(status);
      return;
    }
    router::EventBus::SharedEvent event;
    if (!replay_.empty()) {
      event = std::move(replay_.front());
      replay_.pop_front();
    } else {
      do {
        if (!watcher_->TryPop(&event)) return;  // the watcher wakes us on the next one
      } while (event->value("seq", 0LL) <= replay_until_);
    }
    FillEvent(*event, &message_);
    writing_ = true;
    lock.unlock();
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_) {  // the client is gone
        if (finished_) return;
        finished_ = true;
        lock.unlock();
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
        return;
      }
    }
    Pump();
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(mu_);
    cancelled_ = true;
    // With a write in flight, OnWriteDone(false) finishes.
    if (writing_ || finished_) return;
    finished_ = true;
    lock.unlock();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
  }

  void OnDone() override {
    if (watcher_) {
      service_.events_.Unwatch(watcher_);
      std::lock_guard<std::mutex> lock(service_.mu_);
      service_.watchers_.erase(watcher_);
    }
    if (stall_alarm_) stall_alarm_->Cancel();
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;  // outlives the reactor
    link->Done();
  }

 private:
  // The status to end the stream with, once it must end (under mu_).
  std::optional<grpc::Status> Ending() {
    if (watcher_->closed()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown);
    if (!watcher_->overflowed()) return std::nullopt;
    const router::WatchLimits& limits = service_.watch_limits_;
    std::string bound = std::to_string(limits.buffer_bytes) + " bytes";
    if (limits.buffer_events > 0) {
      bound += " or " + std::to_string(limits.buffer_events) + " events";
    }
    service_.LogWatchLimit("ended a slow WatchEvents stream: its buffer passed " + bound + ", " +
                           std::to_string(watcher_->dropped()) +
                           " events dropped; slow watchers ended so far: " +
                           std::to_string(service_.events_.watch_stats().overflowed));
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "subscriber too slow: events dropped (more than " + bound +
                            " queued); reconnect with since_seq to catch up");
  }

  // From the decision to end on, the stream has watch_stall_timeout to end.
  void ArmStallGuard() {
    if (stall_alarm_) return;
    stall_alarm_ = std::make_unique<grpc::Alarm>();
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;
    std::shared_ptr<std::atomic<bool>> stalled = stalled_;
    stall_alarm_->Set(std::chrono::system_clock::now() + service_.options_.watch_stall_timeout,
                      [link, stalled](bool fired) {
                        if (!fired) return;  // cancelled: the stream ended
                        stalled->store(true);
                        link->Wake();
                      });
  }

  AdminService& service_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<WakeLink<WatchReactor>> link_;
  const std::shared_ptr<std::atomic<bool>> stalled_;
  std::shared_ptr<router::EventBus::Watcher> watcher_;
  std::unique_ptr<grpc::Alarm> stall_alarm_;
  std::mutex mu_;
  std::deque<router::EventBus::SharedEvent> replay_;
  long long replay_until_ = 0;
  std::optional<grpc::Status> ending_;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  bool cancel_sent_ = false;
  pb::Event message_;
};

// ------------------------------------------------------------------ service

AdminService::AdminService(const router::Settings& settings, router::Fleet& fleet,
                           router::Prober& prober, router::EventBus& events,
                           engines::EngineClient& client, const router::Clock& clock,
                           AdminOptions options)
    : settings_(settings),
      fleet_(fleet),
      prober_(prober),
      events_(events),
      client_(client),
      clock_(clock),
      options_(std::move(options)),
      watch_limits_{options_.max_watchers, options_.watch_buffer_bytes, options_.watch_queue},
      workers_(std::make_unique<router::WorkerPool>(std::max<size_t>(1, options_.workers))) {
  counts_subscription_ =
      events_.Subscribe([counts = counts_](const nlohmann::json& e) { counts->Count(e); });
}

AdminService::~AdminService() {
  events_.Unsubscribe(counts_subscription_);
  workers_.reset();  // runs what is queued, joins
}

void AdminService::LogWatchLimit(const std::string& message) {
  long long suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_watch_log_) {
      ++watch_logs_suppressed_;
      return;
    }
    next_watch_log_ = now + std::chrono::seconds(1);
    suppressed = watch_logs_suppressed_;
    watch_logs_suppressed_ = 0;
  }
  std::string line = "narwhal-serve: admin: " + message;
  if (suppressed > 0) line += " (" + std::to_string(suppressed) + " similar lines suppressed)";
  LogWarning(line);
}

void AdminService::EventCounts::Count(const nlohmann::json& event) {
  const std::string kind = JsonString(event, "event");
  const std::string iid = JsonString(event, "iid");
  if (iid.empty()) return;
  std::lock_guard<std::mutex> lock(mu);
  Counters& c = engines[iid];
  if (kind == "engine_hold_started") {
    ++c.holds;
  } else if (kind == "engine_ejected") {
    ++c.ejections;
  } else if (kind == "engine_probe") {
    const std::string outcome = JsonString(event, "outcome");
    if (outcome == "producer_failed") return;  // an attempt, not a settled probe
    ++c.probes;
    if (outcome == "failed") ++c.probes_failed;
  } else if (kind == "engine_readmitted") {
    ++c.readmissions;
    c.last_readmission_evidence = JsonString(event, "evidence");
  }
}

grpc::Status AdminService::Admit(grpc::CallbackServerContext* context) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown);
  }
  if (options_.token.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing admin token (metadata authorization: Bearer <token>)");
  }
  // Constant time (server/api_key), as the inference doors compare theirs.
  if (!BearerMatches(std::string_view(it->second.data(), it->second.size()), options_.token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid admin token");
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Lookup(const std::string& iid, EngineSnapshot* out) const {
  if (iid.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "iid is required");
  const int index = fleet_.Find(iid);
  if (index < 0) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no engine " + iid);
  *out = fleet_.Snapshot()[index];
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::Defer(
    grpc::CallbackServerContext* context, google::protobuf::Message* response,
    std::function<grpc::Status(google::protobuf::Message* result)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_shared<PendingCall>(reactor, response);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) {
      call->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown), nullptr);
      return reactor;
    }
    pending_.insert(call);
  }
  std::shared_ptr<google::protobuf::Message> result(response->New());
  workers_->Run([this, call, result, work = std::move(work)] {
    const grpc::Status status = work(result.get());
    call->Finish(status, result.get());
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(call);
  });
  return reactor;
}

void AdminService::Shutdown() {
  std::set<std::shared_ptr<PendingCall>> pending;
  std::set<std::shared_ptr<router::EventBus::Watcher>> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    pending.swap(pending_);
    watchers = watchers_;  // each one leaves the set in its OnDone
  }
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, kShuttingDown);
  for (const auto& call : pending) call->Finish(unavailable, nullptr);
  for (const auto& watcher : watchers) watcher->Close();
}

router::PreflightReport AdminService::Preflight(router::PairMode pairs,
                                                const std::string& trigger) {
  router::PreflightReport report = router::RunPreflight(settings_, client_, clock_, pairs);
  pb::PreflightReport proto;
  FillReport(report, trigger, &proto);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_report_ = std::move(proto);
  }
  fleet_.PublishEvent(PreflightEvent(report, trigger));
  return report;
}

grpc::Status AdminService::Readmit(const std::string& iid, pb::ReadmitEngineResponse* out) {
  EngineSnapshot before;
  if (grpc::Status found = Lookup(iid, &before); !found.ok()) return found;
  if (before.state == PlacementState::kServing) {
    FillEngine(before, out->mutable_engine());
    out->set_readmitted(false);
    out->set_detail("already serving");
    return grpc::Status::OK;
  }
  // B17: an engine held or ejected on inference evidence returns only
  // through an inference probe; any other through a health check. Both
  // re-check the pinned contract (lifecycle validation) when there is one.
  const bool pinned = settings_.engine_contract.has_value();
  const bool inference = before.state == PlacementState::kHeld || InferenceSuspect(before);
  const int index = fleet_.Find(iid);
  const router::ProbeResult r =
      inference ? prober_.Inference(
                      router::ProbeTask{static_cast<size_t>(index), router::ProbeKind::kInference},
                      pinned)
                : prober_.Health(fleet_.Target(index), pinned);
  const std::string validation = inference ? "inference" : "health";
  const std::string evidence = pinned ? "lifecycle" : inference ? "verification" : "health";
  out->set_validation(validation);
  out->set_detail(r.detail);
  if (r.outcome != router::ProbeOutcome::kPassed) {
    const std::string outcome(router::ProbeOutcomeName(r.outcome));
    nlohmann::json event = {
        {"event", "engine_readmit_refused"}, {"iid", iid},         {"cause", "operator"},
        {"probe_kind", validation},          {"outcome", outcome}, {"detail", r.detail}};
    if (!r.producer.empty()) event["producer"] = r.producer;
    fleet_.PublishEvent(std::move(event));
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "readmission of " + iid + " refused: " + validation + " validation " +
                            outcome + ": " + r.detail);
  }
  if (absl::Status s = fleet_.Readmit(iid, evidence); !s.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
  }
  EngineSnapshot after;
  if (grpc::Status found = Lookup(iid, &after); !found.ok()) return found;
  FillEngine(after, out->mutable_engine());
  out->set_readmitted(true);
  out->set_evidence(evidence);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ RPCs

grpc::ServerUnaryReactor* AdminService::ListEngines(grpc::CallbackServerContext* context,
                                                    const pb::ListEnginesRequest*,
                                                    pb::ListEnginesResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const EngineSnapshot& s : fleet_.Snapshot()) FillEngine(s, response->add_engines());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::GetEngine(grpc::CallbackServerContext* context,
                                                  const pb::GetEngineRequest* request,
                                                  pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::GetBreakers(grpc::CallbackServerContext* context,
                                                    const pb::GetBreakersRequest*,
                                                    pb::GetBreakersResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  const std::vector<EngineSnapshot> snapshots = fleet_.Snapshot();
  std::map<std::string, Counters> counters;
  {
    std::lock_guard<std::mutex> lock(counts_->mu);
    counters = counts_->engines;
  }
  for (const EngineSnapshot& s : snapshots) {
    pb::BreakerEntry* e = response->add_engines();
    e->set_iid(s.settings.iid);
    e->set_state(std::string(router::PlacementStateName(s.state)));
    FillStreak(s, e->mutable_streak());
    if (!s.hold_kind.empty()) FillHold(s, e->mutable_hold());
    if (!s.ejection_cause.empty()) FillEjection(s, e->mutable_ejection());
    e->set_last_ejection_cause(s.last_ejection_cause);
    if (!s.last_probe_kind.empty()) FillProbe(s, e->mutable_last_probe());
    if (s.next_probe_in_s) e->set_next_probe_in_s(*s.next_probe_in_s);
    e->set_probe_failures(s.probe_failures);
    e->set_probe_running(s.probe_running);
    e->set_liveness_misses(s.liveness_misses);
    e->set_explanation(s.explanation);
    const Counters& c = counters[s.settings.iid];
    pb::BreakerCounters* pc = e->mutable_counters();
    pc->set_holds(c.holds);
    pc->set_ejections(c.ejections);
    pc->set_probes(c.probes);
    pc->set_probes_failed(c.probes_failed);
    pc->set_readmissions(c.readmissions);
    pc->set_last_readmission_evidence(c.last_readmission_evidence);
  }
  std::string why;
  response->set_ready(fleet_.Ready(&why));
  if (!response->ready()) response->set_not_ready_reason(why);
  const router::RecoverySettings& r = settings_.recovery;
  pb::RecoveryPolicy* policy = response->mutable_policy();
  policy->set_eject_after(r.eject_after);
  policy->set_failure_quarantine_s(r.failure_quarantine_s);
  policy->set_readmit_interval_s(r.readmit_interval_s);
  policy->set_liveness_interval_s(r.liveness_interval_s);
  policy->set_liveness_misses(r.liveness_misses);
  policy->set_engine_restart_policy(
      r.engine_restart_policy == router::RestartPolicy::kWholeWave ? "whole_wave" : "individual");
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ListQuarantine(grpc::CallbackServerContext* context,
                                                       const pb::ListQuarantineRequest*,
                                                       pb::ListQuarantineResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const EngineSnapshot& s : fleet_.Snapshot()) {
    if (s.hold_kind != "timed") continue;
    pb::QuarantineEntry* q = response->add_engines();
    q->set_iid(s.settings.iid);
    q->set_remaining_s(s.hold_remaining_s.value_or(0));
    q->set_cause(s.hold_cause);
    q->set_held_for_s(s.held_for_s.value_or(0));
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ListLinks(grpc::CallbackServerContext* context,
                                                  const pb::ListLinksRequest* request,
                                                  pb::ListLinksResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const router::LinkSnapshot& l : fleet_.Links()) {
    if (request->held_only() && l.state != router::LinkState::kHeld) continue;
    pb::Link* out = response->add_links();
    out->set_producer(l.producer);
    out->set_consumer(l.consumer);
    out->set_state(std::string(router::LinkStateName(l.state)));
    out->set_since(l.since);
    out->set_cause(l.cause);
    out->set_streak(l.streak);
    out->set_successes(l.successes);
    out->set_failures(l.failures);
    if (l.last_success_age_s) out->set_last_success_age_s(*l.last_success_age_s);
    if (l.last_failure_age_s) out->set_last_failure_age_s(*l.last_failure_age_s);
    out->set_last_failure(l.last_failure);
    if (l.next_probe_in_s) out->set_next_probe_in_s(*l.next_probe_in_s);
    out->set_probe_failures(l.probe_failures);
    out->set_probe_running(l.probe_running);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::RunPreflight(grpc::CallbackServerContext* context,
                                                     const pb::RunPreflightRequest* request,
                                                     pb::PreflightReport* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  if (request->pairs() != pb::PAIRS_UNSPECIFIED && request->pairs() != pb::PAIRS_MESH &&
      request->pairs() != pb::PAIRS_RING) {
    return FinishNow(context,
                     grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown pairs value"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (preflight_running_) {
      return FinishNow(context, grpc::Status(grpc::StatusCode::ABORTED,
                                             "a preflight is already running; "
                                             "GetPreflightReport returns it when done"));
    }
    preflight_running_ = true;
  }
  const router::PairMode pairs =
      request->pairs() == pb::PAIRS_RING ? router::PairMode::kRing : router::PairMode::kMesh;
  return Defer(context, response, [this, pairs](google::protobuf::Message* result) {
    Preflight(pairs, "admin");
    std::lock_guard<std::mutex> lock(mu_);
    preflight_running_ = false;
    result->CopyFrom(*last_report_);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* AdminService::GetPreflightReport(grpc::CallbackServerContext* context,
                                                           const pb::GetPreflightReportRequest*,
                                                           pb::PreflightReport* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!last_report_) {
      return FinishNow(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                             "no preflight has run yet (start narwhal-serve with "
                                             "--preflight, or call RunPreflight)"));
    }
    response->CopyFrom(*last_report_);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::EjectEngine(grpc::CallbackServerContext* context,
                                                    const pb::EjectEngineRequest* request,
                                                    pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  const std::string detail =
      request->reason().empty() ? "ejected by an operator" : request->reason();
  if (absl::Status s = fleet_.Eject(request->iid(), detail); !s.ok()) {
    return FinishNow(
        context, grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message())));
  }
  Lookup(request->iid(), &snapshot);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ReadmitEngine(grpc::CallbackServerContext* context,
                                                      const pb::ReadmitEngineRequest* request,
                                                      pb::ReadmitEngineResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  const std::string iid = request->iid();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!readmitting_.insert(iid).second) {
      return FinishNow(context, grpc::Status(grpc::StatusCode::ABORTED,
                                             "a readmission of " + iid + " is already running"));
    }
  }
  return Defer(context, response, [this, iid](google::protobuf::Message* result) {
    const grpc::Status status = Readmit(iid, static_cast<pb::ReadmitEngineResponse*>(result));
    std::lock_guard<std::mutex> lock(mu_);
    readmitting_.erase(iid);
    return status;
  });
}

grpc::ServerUnaryReactor* AdminService::DrainEngine(grpc::CallbackServerContext* context,
                                                    const pb::DrainEngineRequest* request,
                                                    pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  if (absl::Status s = fleet_.Drain(request->iid()); !s.ok()) {
    return FinishNow(
        context, grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message())));
  }
  Lookup(request->iid(), &snapshot);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ReleaseQuarantine(
    grpc::CallbackServerContext* context, const pb::ReleaseQuarantineRequest* request,
    pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  if (absl::Status s = fleet_.ReleaseQuarantine(request->iid()); !s.ok()) {
    return FinishNow(
        context, grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message())));
  }
  Lookup(request->iid(), &snapshot);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerWriteReactor<pb::Event>* AdminService::WatchEvents(
    grpc::CallbackServerContext* context, const pb::WatchEventsRequest* request) {
  return new WatchReactor(*this, context, *request);
}

grpc::ServerUnaryReactor* AdminService::GetConfig(grpc::CallbackServerContext* context,
                                                  const pb::GetConfigRequest*,
                                                  google::protobuf::Struct* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  JsonToStruct(SettingsToJson(settings_), response);
  return FinishNow(context, grpc::Status::OK);
}

}  // namespace narwhal::server
