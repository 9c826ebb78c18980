// Fleet's silent-recompute detection: the RecomputeLedger behind Fleet's
// mutex, narwhal_kv_recompute_suspected_total, log lines and the link
// evidence (router/fleet/kv_recompute.h has the rules).
#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

void Fleet::InitRecompute() {
  // Called from the constructor with mu_ held.
  const size_t n = settings_.engines.size();
  recompute_counters_.assign(n, nullptr);
  next_scrape_.assign(n, clock_.Now());
  scrape_running_.assign(n, false);
  if (metrics_ == nullptr) return;
  for (size_t i = 0; i < n; ++i) {
    const EngineSettings& e = settings_.engines[i];
    if (!CanDecode(e.role)) continue;
    recompute_counters_[i] = &metrics_->kv_recompute_suspected_total.Add({{"iid", e.iid}});
  }
}

void Fleet::CountRecompute(size_t index, long long n) {
  if (n <= 0 || index >= recompute_counters_.size() || recompute_counters_[index] == nullptr) {
    return;
  }
  recompute_counters_[index]->Increment(static_cast<double>(n));
}

void Fleet::RecomputeDecodeStarted(const std::string& producer, const std::string& consumer) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  std::lock_guard<std::mutex> lock(mu_);
  recompute_.DecodeStarted(consumer, producer);
}

void Fleet::RecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                                 bool suspected, bool failed, const std::string& evidence) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  const int index = Find(consumer);
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recompute_.DecodeEnded(consumer, producer, suspected || failed, clock_.Now());
    if (suspected) {
      events = links_.RecordFailure(producer, consumer, "kv_recompute: " + evidence, clock_.Now());
    }
  }
  if (!suspected) return;
  if (index >= 0) CountRecompute(static_cast<size_t>(index), 1);
  LogWarning("consumer " + consumer + " recomputed the prompt of a handoff from " + producer +
             " instead of using the transferred KV cache (" + evidence + ")");
  EmitLinks(events);
}

void Fleet::RecomputeProbeEnded(const std::string& producer, const std::string& consumer,
                                bool explained) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  std::lock_guard<std::mutex> lock(mu_);
  recompute_.DecodeEnded(consumer, producer, explained, clock_.Now());
}

std::vector<RecomputeScrapeTask> Fleet::TakeDueRecomputeScrapes() {
  const MonoTime now = clock_.Now();
  std::vector<RecomputeScrapeTask> due;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < settings_.engines.size(); ++i) {
    if (!CanDecode(settings_.engines[i].role) || scrape_running_[i] || now < next_scrape_[i]) {
      continue;
    }
    scrape_running_[i] = true;
    next_scrape_[i] = now + engines::FromSeconds(kRecomputeScrapeIntervalS);
    due.push_back(RecomputeScrapeTask{i});
  }
  return due;
}

void Fleet::CompleteRecomputeScrape(const RecomputeScrapeTask& task,
                                    std::optional<double> failed_transfers) {
  if (task.index >= settings_.engines.size()) return;
  const std::string& consumer = settings_.engines[task.index].iid;
  RecomputeSettlement settled;
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    scrape_running_[task.index] = false;
    const MonoTime now = clock_.Now();
    settled = recompute_.Scrape(consumer, failed_transfers, now);
    for (const std::string& producer : settled.producers) {
      if (producer.empty()) continue;
      // The decode reached [DONE] and counted for the link: it did not use
      // the transfer after all.
      std::vector<LinkEvent> e = links_.ReclassifyLastSuccess(
          producer, consumer,
          "kv_recompute: " + std::string(kFailedTransfersMetric) + " increased on " + consumer,
          now);
      events.insert(events.end(), e.begin(), e.end());
    }
  }
  if (settled.count == 0) return;
  CountRecompute(task.index, settled.count);
  std::string producers;
  for (const std::string& p : settled.producers) {
    if (!producers.empty()) producers += ", ";
    producers += p.empty() ? "unattributed" : p;
  }
  LogWarning("consumer " + consumer + " reported " + std::to_string(settled.count) +
             " failed KV transfer(s) no failed or recomputed decode accounts for (" +
             std::string(kFailedTransfersMetric) +
             "): counted as recomputed prompts (producer: " + producers + ")");
  EmitLinks(events);
}

}  // namespace narwhal::router
