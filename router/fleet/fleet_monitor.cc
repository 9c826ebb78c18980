#include "router/fleet/fleet_monitor.h"

namespace narwhal::router {

FleetMonitor::FleetMonitor(FleetControl& fleet, Prober& prober, engines::Executor executor,
                           engines::MonoClock::duration tick)
    : fleet_(fleet), prober_(prober), tick_(tick), tasks_(std::move(executor), "fleet monitor") {}

FleetMonitor::~FleetMonitor() { Stop(); }

void FleetMonitor::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  stop_ = std::make_unique<engines::CancelToken>();
  tasks_.Spawn(Loop(stop_.get()));
}

void FleetMonitor::Stop() {
  std::unique_ptr<engines::CancelToken> stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) return;
    stop_->Cancel();
    stop = std::move(stop_);
  }
  tasks_.Wait();  // the loop (it reads `stop` until it ends) and its probes
}

void FleetMonitor::FollowKvEndpoints() {
  if (kv_ == nullptr) return;
  std::vector<KvEndpoint> endpoints = fleet_.KvEndpoints();
  if (kv_endpoints_ == endpoints) return;
  std::vector<kv::KvSource> sources;
  sources.reserve(endpoints.size());
  for (const KvEndpoint& e : endpoints) sources.push_back(kv::KvSource{e.iid, e.events, e.replay});
  kv_->SetSources(std::move(sources));
  kv_endpoints_ = std::move(endpoints);
}

engines::Awaitable<void> FleetMonitor::Loop(engines::CancelToken* stop) {
  const Clock& clock = prober_.clock();
  while (!stop->cancelled()) {
    for (ProbeTask& task : fleet_.TakeDueProbes()) tasks_.Spawn(prober_.Run(std::move(task)));
    for (LinkProbeTask& task : fleet_.TakeDueLinkProbes()) {
      tasks_.Spawn(prober_.RunLink(std::move(task)));
    }
    for (RecomputeScrapeTask& task : fleet_.TakeDueRecomputeScrapes()) {
      tasks_.Spawn(prober_.ScrapeRecompute(std::move(task)));
    }
    for (JoinTask& task : fleet_.TakeDueJoinChecks())
      tasks_.Spawn(prober_.RunJoin(std::move(task)));
    fleet_.SweepLeaving();
    FollowKvEndpoints();
    if (!co_await engines::SleepUntil(clock, tasks_.executor(), clock.Now() + tick_, stop)) break;
  }
}

}  // namespace narwhal::router
