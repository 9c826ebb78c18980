#include "router/fleet/fleet_monitor.h"

namespace narwhal::router {

FleetMonitor::FleetMonitor(Fleet& fleet, Prober& prober, std::chrono::milliseconds tick,
                           size_t probe_threads)
    : fleet_(fleet), prober_(prober), tick_(tick), probe_threads_(probe_threads) {}

FleetMonitor::~FleetMonitor() { Stop(); }

void FleetMonitor::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  probes_ = std::make_unique<WorkerPool>(probe_threads_);  // Stop() joined the last one
  thread_ = std::thread([this] { Loop(); });
}

void FleetMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  probes_.reset();  // joins probes in flight (each is bounded by its timeouts)
}

void FleetMonitor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    for (const ProbeTask& task : fleet_.TakeDueProbes()) {
      probes_->Run([this, task] { prober_.Run(task); });
    }
    for (const LinkProbeTask& task : fleet_.TakeDueLinkProbes()) {
      probes_->Run([this, task] { prober_.RunLink(task); });
    }
    for (const RecomputeScrapeTask& task : fleet_.TakeDueRecomputeScrapes()) {
      probes_->Run([this, task] { prober_.ScrapeRecompute(task); });
    }
    for (const JoinTask& task : fleet_.TakeDueJoinChecks()) {
      probes_->Run([this, task] { prober_.RunJoin(task); });
    }
    fleet_.SweepLeaving();
    lock.lock();
    cv_.wait_for(lock, tick_, [&] { return stop_; });
  }
}

}  // namespace narwhal::router
