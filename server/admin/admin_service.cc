#include "server/admin/admin_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engines/engine_failure.h"
#include "engines/run_blocking.h"
#include "router/fleet/readmission.h"
#include "server/admin/admin_callbacks.h"
#include "server/admin/admin_mappers.h"
#include "server/admin/runtime_engine.h"
#include "server/admin/struct_codec.h"
#include "server/api_key.h"
#include "server/config/config_loader.h"

namespace narwhal::server {
namespace {

namespace pb = narwhal::admin::v1;
using router::EngineSnapshot;
using router::PlacementState;

}  // namespace

// ------------------------------------------------------------------ service

AdminService::AdminService(const router::Settings& settings, router::Fleet& fleet,
                           router::Prober& prober, router::EventBus& events,
                           engines::AsyncEngineClient& client, engines::Executor control,
                           const router::Clock& clock, AdminOptions options)
    : settings_(settings),
      fleet_(fleet),
      prober_(prober),
      events_(events),
      client_(client),
      control_(std::move(control)),
      clock_(clock),
      options_(std::move(options)),
      watch_limits_{options_.max_watchers, options_.watch_buffer_bytes, options_.watch_queue},
      workers_(std::make_unique<WorkerPool>(std::max<size_t>(1, options_.workers))) {}

AdminService::~AdminService() {
  workers_.reset();  // runs what is queued, joins
}

grpc::Status AdminService::Admit(grpc::CallbackServerContext* context) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kAdminShuttingDown);
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
  std::optional<EngineSnapshot> found = fleet_.admin().Snapshot(iid);
  if (!found) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no engine " + iid);
  *out = std::move(*found);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::Defer(
    grpc::CallbackServerContext* context, google::protobuf::Message* response,
    std::function<grpc::Status(google::protobuf::Message* result)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto call = std::make_shared<PendingUnaryCall>(reactor, response);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) {
      call->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kAdminShuttingDown), nullptr);
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
  std::set<std::shared_ptr<PendingUnaryCall>> pending;
  std::set<std::shared_ptr<router::EventBus::Watcher>> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    pending.swap(pending_);
    watchers = watchers_;  // each one leaves the set in its OnDone
  }
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, kAdminShuttingDown);
  for (const auto& call : pending) call->Finish(unavailable, nullptr);
  for (const auto& watcher : watchers) watcher->Close();
}

router::PreflightReport AdminService::Preflight(router::PairMode pairs,
                                                const std::string& trigger) {
  router::PreflightReport report =
      router::RunPreflight(settings_, client_, control_, clock_, pairs);
  pb::PreflightReport proto;
  FillReport(report, trigger, &proto);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_report_ = std::move(proto);
  }
  fleet_.admin().Publish(router::PreflightEvent(report, trigger));
  return report;
}

grpc::Status AdminService::Readmit(const std::string& iid, pb::ReadmitEngineResponse* out) {
  // The policy (which validation, which evidence) is the fleet's
  // (router/fleet/readmission.h); this maps its result.
  const bool pinned = settings_.engine_contract.has_value();
  absl::StatusOr<router::ReadmitResult> r = engines::RunBlocking(
      control_, router::ValidateAndReadmit(fleet_.admin(), prober_, iid, pinned));
  if (!r.ok()) return ToGrpcStatus(r.status());
  EngineSnapshot after;
  if (grpc::Status found = Lookup(iid, &after); !found.ok()) return found;
  FillEngine(after, out->mutable_engine());
  out->set_readmitted(r->readmitted);
  if (!r->readmitted) {
    out->set_detail("already serving");
    return grpc::Status::OK;
  }
  out->set_validation(std::string(router::ProbeKindName(r->plan.validation)));
  out->set_detail(r->probe.detail);
  out->set_evidence(r->plan.evidence);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ RPCs

grpc::ServerUnaryReactor* AdminService::ListEngines(grpc::CallbackServerContext* context,
                                                    const pb::ListEnginesRequest*,
                                                    pb::ListEnginesResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const EngineSnapshot& s : fleet_.admin().Snapshot()) FillEngine(s, response->add_engines());
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
  const std::vector<EngineSnapshot> snapshots = fleet_.admin().Snapshot();
  std::map<std::string, router::EngineEventCounts> counts = fleet_.admin().EventCounts();
  for (const EngineSnapshot& s : snapshots) {
    FillBreakerEntry(s, counts[s.settings.iid], response->add_engines());
  }
  std::string why;
  response->set_ready(fleet_.Ready(&why));
  if (!response->ready()) response->set_not_ready_reason(why);
  FillPolicy(settings_.recovery, response->mutable_policy());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ListQuarantine(grpc::CallbackServerContext* context,
                                                       const pb::ListQuarantineRequest*,
                                                       pb::ListQuarantineResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const EngineSnapshot& s : fleet_.admin().Snapshot()) {
    if (s.hold_kind != router::HoldKind::kTimed) continue;
    FillQuarantine(s, response->add_engines());
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ListLinks(grpc::CallbackServerContext* context,
                                                  const pb::ListLinksRequest* request,
                                                  pb::ListLinksResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  for (const router::LinkSnapshot& l : fleet_.admin().Links()) {
    if (request->held_only() && l.state != router::LinkState::kHeld) continue;
    FillLink(l, response->add_links());
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

namespace {

// An operator's reason is recorded and shown: bounded, and readable.
constexpr size_t kMaxReasonBytes = 1024;

// FAILED_PRECONDITION when taking `iid` out would leave one of its roles with
// no engine in placement (unless the operator forces it).
grpc::Status LastOfARole(const router::FleetAdmin& fleet, const std::string& iid, bool force,
                         const char* action) {
  if (force) return grpc::Status::OK;
  const std::string role = fleet.LastInPlacement(iid);
  if (role.empty()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "engine " + iid + " is the last engine in placement for the " + role +
                          " role: " + action +
                          " it and every request needing that role gets "
                          "503; set force to do it anyway");
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::EjectEngine(grpc::CallbackServerContext* context,
                                                    const pb::EjectEngineRequest* request,
                                                    pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  if (request->reason().size() > kMaxReasonBytes) {
    return FinishNow(context,
                     grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "reason is over " + std::to_string(kMaxReasonBytes) + " bytes"));
  }
  if (snapshot.state != PlacementState::kEjected) {
    if (grpc::Status s = LastOfARole(fleet_.admin(), request->iid(), request->force(), "ejecting");
        !s.ok()) {
      return FinishNow(context, s);
    }
  }
  const std::string detail =
      request->reason().empty() ? "ejected by an operator" : engines::EngineText(request->reason());
  if (absl::Status s = fleet_.admin().Eject(request->iid(), detail); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
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
  if (snapshot.state != PlacementState::kDraining) {
    if (grpc::Status s = LastOfARole(fleet_.admin(), request->iid(), request->force(), "draining");
        !s.ok()) {
      return FinishNow(context, s);
    }
  }
  if (absl::Status s = fleet_.admin().Drain(request->iid()); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
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
  if (absl::Status s = fleet_.admin().ReleaseQuarantine(request->iid()); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
  }
  Lookup(request->iid(), &snapshot);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::GetConfig(grpc::CallbackServerContext* context,
                                                  const pb::GetConfigRequest*,
                                                  google::protobuf::Struct* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  nlohmann::json config =
      SettingsToJson(options_.current_settings ? *options_.current_settings() : settings_);
  // Not a config key: how the last reload went (the error of a rejected
  // one). narwhal-check --diff leaves it out.
  if (options_.reload_status) config["_reload"] = options_.reload_status();
  JsonToStruct(config, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::AddEngine(grpc::CallbackServerContext* context,
                                                  const pb::AddEngineRequest* request,
                                                  pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  absl::StatusOr<router::EngineSettings> engine =
      RuntimeEngine({request->iid(), request->url(), request->role(), request->kv_engine_id(),
                     request->kv_events(), request->kv_events_replay()});
  if (!engine.ok()) return FinishNow(context, ToGrpcStatus(engine.status()));
  std::vector<router::EngineSettings> members;
  for (const EngineSnapshot& m : fleet_.admin().Snapshot()) members.push_back(m.settings);
  if (absl::Status s = UniqueEngineUrl(*engine, members); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
  }
  const router::MemberSource admin{router::SourceKind::kAdmin, ""};
  if (absl::Status s = fleet_.admin().AddEngine(*engine, admin); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
  }
  EngineSnapshot snapshot;
  Lookup(engine->iid, &snapshot);
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::RemoveEngine(grpc::CallbackServerContext* context,
                                                     const pb::RemoveEngineRequest* request,
                                                     pb::Engine* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  EngineSnapshot snapshot;
  if (grpc::Status s = Lookup(request->iid(), &snapshot); !s.ok()) return FinishNow(context, s);
  const router::MemberSource admin{router::SourceKind::kAdmin, ""};
  if (absl::Status s = fleet_.admin().RemoveEngine(request->iid(), admin); !s.ok()) {
    return FinishNow(context, ToGrpcStatus(s));
  }
  Lookup(request->iid(), &snapshot);  // draining, while its legs run
  FillEngine(snapshot, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::ReloadConfig(grpc::CallbackServerContext* context,
                                                     const pb::ReloadConfigRequest*,
                                                     pb::ReloadConfigResponse* response) {
  if (grpc::Status s = Admit(context); !s.ok()) return FinishNow(context, s);
  if (!options_.reload) {
    return FinishNow(context, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                           "narwhal-serve runs without --config: nothing to "
                                           "reload"));
  }
  return Defer(context, response, [this](google::protobuf::Message* result) {
    const ReloadAnswer answer = options_.reload();
    auto* out = static_cast<pb::ReloadConfigResponse*>(result);
    out->set_result(answer.applied ? "applied" : "rejected");
    out->set_generation(static_cast<int64_t>(answer.generation));
    out->set_error(answer.error);
    for (const std::string& iid : answer.joined) out->add_joined(iid);
    for (const std::string& iid : answer.left) out->add_left(iid);
    for (const std::string& iid : answer.changed) out->add_changed(iid);
    for (const std::string& key : answer.keys_changed) out->add_keys_changed(key);
    out->set_summary(answer.summary);
    return grpc::Status::OK;
  });
}

}  // namespace narwhal::server
