// Fleet's silent-recompute detection: the RecomputeLedger behind Fleet's
// mutex, narwhal_kv_recompute_suspected_total, log lines and the link
// evidence (router/fleet/kv_recompute.h has the rules).
#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

void Fleet::RecomputeDecodeStarted(const std::string& producer, const std::string& consumer) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  Sync();
  std::lock_guard<std::mutex> lock(mu_);
  recompute_.DecodeStarted(consumer, producer);
}

void Fleet::RecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                                 bool suspected, bool failed, const std::string& evidence) {
  Sync();
  DoRecomputeDecodeEnded(producer, consumer, suspected, failed, evidence);
}

void Fleet::DoRecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                                   bool suspected, bool failed, const std::string& evidence) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  prometheus::Counter* counter = nullptr;
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const int i = book_.Find(consumer); i >= 0) counter = members_[i].series.recompute_suspected;
    recompute_.DecodeEnded(consumer, producer, suspected || failed, clock_.Now());
    if (suspected) {
      events = links_.RecordFailure(producer, consumer, "kv_recompute: " + evidence, clock_.Now());
      PublishViewLocked();
    }
  }
  if (!suspected) return;
  if (counter != nullptr) counter->Increment();
  LogWarning("consumer " + consumer + " recomputed the prompt of a handoff from " + producer +
             " instead of using the transferred KV cache (" + evidence + ")");
  EmitLinks(events);
}

void Fleet::RecomputeProbeEnded(const std::string& producer, const std::string& consumer,
                                bool explained) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  Sync();
  std::lock_guard<std::mutex> lock(mu_);
  recompute_.DecodeEnded(consumer, producer, explained, clock_.Now());
}

std::vector<RecomputeScrapeTask> Fleet::TakeDueRecomputeScrapes() {
  Sync();
  const MonoTime now = clock_.Now();
  std::vector<RecomputeScrapeTask> due;
  std::lock_guard<std::mutex> lock(mu_);
  for (Member& m : members_) {
    if (!CanDecode(m.engine->settings().role) || m.joining || m.scrape_running ||
        now < m.next_scrape) {
      continue;
    }
    m.scrape_running = true;
    m.next_scrape = now + engines::FromSeconds(kRecomputeScrapeIntervalS);
    due.push_back(RecomputeScrapeTask{m.engine->iid()});
  }
  return due;
}

void Fleet::CompleteRecomputeScrape(const RecomputeScrapeTask& task,
                                    std::optional<double> failed_transfers) {
  Sync();
  const std::string& consumer = task.iid;
  prometheus::Counter* counter = nullptr;
  RecomputeSettlement settled;
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int found = book_.Find(consumer);
    if (found < 0) return;  // it left the fleet meanwhile
    members_[found].scrape_running = false;
    counter = members_[found].series.recompute_suspected;
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
    if (!events.empty()) PublishViewLocked();
  }
  if (settled.count == 0) return;
  if (counter != nullptr) counter->Increment(static_cast<double>(settled.count));
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
