// Silent-recompute detection rules (router/fleet/kv_recompute.h): rule (a) on a
// decode's usage, the failed-transfer counter read from a /metrics text,
// and the ledger that settles counter increases against what the router saw
// itself, on explicit (fake) times.
#include "router/fleet/kv_recompute.h"

#include <gtest/gtest.h>

namespace narwhal::router {
namespace {

MonoTime Since1000(double s) { return MonoTime{} + engines::FromSeconds(1000 + s); }

TEST(KvRecomputeRuleTest, UsageWithTooFewCachedTokensIsARecompute) {
  // A pull reports every prompt token but the last as cached.
  EXPECT_FALSE(RecomputeSuspected(400, 399));
  EXPECT_FALSE(RecomputeSuspected(6, 5));
  // Nothing cached: recomputed, whatever the prompt's length (>= 2 tokens).
  EXPECT_TRUE(RecomputeSuspected(400, 0));
  EXPECT_TRUE(RecomputeSuspected(6, 0));
  EXPECT_TRUE(RecomputeSuspected(2, 0));
  // One KV block of slack below prompt - 1; beyond it: recomputed.
  EXPECT_FALSE(RecomputeSuspected(400, 399 - kKvBlockTokens));
  EXPECT_TRUE(RecomputeSuspected(400, 398 - kKvBlockTokens));
  EXPECT_FALSE(RecomputeSuspected(18, 1));
  // Unknown or degenerate: never.
  EXPECT_FALSE(RecomputeSuspected(400, -1));  // no prompt_tokens_details
  EXPECT_FALSE(RecomputeSuspected(-1, 0));
  EXPECT_FALSE(RecomputeSuspected(1, 0));  // a one-token prompt is always recomputed
}

TEST(KvRecomputeRuleTest, FailedTransfersSumsEverySeriesOfTheCounter) {
  EXPECT_EQ(FailedTransfers("# HELP x\nvllm:num_requests_running{engine=\"0\"} 3.0\n"),
            std::nullopt);
  EXPECT_EQ(FailedTransfers(
                "# HELP vllm:nixl_num_failed_transfers_total Number of failed NIXL KV Cache "
                "transfers.\n# TYPE vllm:nixl_num_failed_transfers_total counter\n"
                "vllm:nixl_num_failed_transfers_total{engine=\"0\",model_name=\"m {x}\"} 2.0\n"
                "vllm:nixl_num_failed_transfers_total{engine=\"1\",model_name=\"m\"} 3\n"
                "vllm:nixl_num_failed_transfers_created{engine=\"0\"} 1.7e9\n"
                "vllm:nixl_num_failed_notifications_total{engine=\"0\"} 9.0\n"),
            5.0);
  EXPECT_EQ(FailedTransfers("vllm:nixl_num_failed_transfers 4 1700000000000\n"), 4.0);
  // Malformed samples are skipped.
  EXPECT_EQ(FailedTransfers("vllm:nixl_num_failed_transfers_total{engine=\"0\" 1\n"
                            "vllm:nixl_num_failed_transfers_total abc\n"
                            "vllm:nixl_num_failed_transfers_total -1\n"
                            "vllm:nixl_num_failed_transfers_total 1\n"),
            1.0);
}

TEST(RecomputeLedgerTest, TheFirstScrapeIsTheBaselineAndAnIncreaseIsCounted) {
  RecomputeLedger ledger;
  EXPECT_EQ(ledger.Scrape("d0", 7, Since1000(0)).count, 0);  // history before the router
  EXPECT_EQ(ledger.Scrape("d0", 7, Since1000(1)).count, 0);
  ledger.DecodeStarted("d0", "p0");
  ledger.DecodeEnded("d0", "p0", false, Since1000(1.5));
  const RecomputeSettlement s = ledger.Scrape("d0", 9, Since1000(2));
  EXPECT_EQ(s.count, 2);
  // Only p0's handoffs were decoded there since the last scrape.
  EXPECT_EQ(s.producers, (std::vector<std::string>{"p0", "p0"}));
  // A counter that went down (a restart) is a new baseline.
  EXPECT_EQ(ledger.Scrape("d0", 1, Since1000(3)).count, 0);
  EXPECT_EQ(ledger.Scrape("d0", 2, Since1000(4)).count, 1);
  // No answer: nothing changes.
  EXPECT_EQ(ledger.Scrape("d0", std::nullopt, Since1000(5)).count, 0);
  EXPECT_EQ(ledger.Scrape("d0", 2, Since1000(6)).count, 0);
}

TEST(RecomputeLedgerTest, AnIncreaseIsAttributedOnlyToTheOneProducerSeen) {
  RecomputeLedger ledger;
  ledger.Scrape("d0", 0, Since1000(0));
  ledger.DecodeStarted("d0", "p0");
  ledger.DecodeEnded("d0", "p0", false, Since1000(0.2));
  ledger.DecodeStarted("d0", "p1");
  ledger.DecodeEnded("d0", "p1", false, Since1000(0.4));
  const RecomputeSettlement s = ledger.Scrape("d0", 1, Since1000(1));
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.producers, (std::vector<std::string>{""}));  // ambiguous: the consumer only
}

TEST(RecomputeLedgerTest, DecodesTheRouterAlreadyAccountedForAreNotCountedAgain) {
  RecomputeLedger ledger;
  ledger.Scrape("d0", 0, Since1000(0));
  // Found by usage (or failed) before the scrape: a credit.
  ledger.DecodeStarted("d0", "p0");
  ledger.DecodeEnded("d0", "p0", true, Since1000(0.5));
  EXPECT_EQ(ledger.Scrape("d0", 1, Since1000(1)).count, 0);

  // Scraped while the decode is still in flight: pending until it ends.
  ledger.DecodeStarted("d0", "p0");
  EXPECT_EQ(ledger.Scrape("d0", 2, Since1000(2)).count, 0);
  ledger.DecodeEnded("d0", "p0", true, Since1000(2.5));  // its usage showed the recompute
  EXPECT_EQ(ledger.Scrape("d0", 2, Since1000(3)).count, 0);

  // Pending, and the decode in flight ends without evidence (a streaming
  // client that asked for no usage): counted at the next scrape.
  ledger.DecodeStarted("d0", "p0");
  EXPECT_EQ(ledger.Scrape("d0", 3, Since1000(4)).count, 0);
  ledger.DecodeEnded("d0", "p0", false, Since1000(4.5));
  const RecomputeSettlement s = ledger.Scrape("d0", 3, Since1000(5));
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.producers, (std::vector<std::string>{"p0"}));

  // A credit older than kCreditTtlS explains nothing.
  ledger.DecodeStarted("d0", "p1");
  ledger.DecodeEnded("d0", "p1", true, Since1000(6));
  ledger.Scrape("d0", 3, Since1000(7));
  EXPECT_EQ(ledger.Scrape("d0", 4, Since1000(7 + RecomputeLedger::kCreditTtlS)).count, 1);
}

}  // namespace
}  // namespace narwhal::router
