// The one journal row (router/journal_row) built from a request record:
// the recompute fields (kv_recompute_suspected always present, the evidence
// only when suspected), and the edge fields read through the status table,
// which the access log reads too.
#include "router/journal_row.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/access_log.h"
#include "server/status_table.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

Request RowRequest() {
  Request r;
  r.rid = "rid-1";
  r.door = Door::kHttp;
  r.api = engines::Api::kCompletions;
  r.body = {{"model", "m"}, {"prompt", "hi"}};
  return r;
}

TEST(JournalRowTest, NoRecomputeEvidenceSaysNotSuspectedAndHasNoEvidence) {
  Outcome done;
  done.terminal = Terminal::kCompleted;
  const server::StatusTableJournal table{};
  const json row = JournalRow(RowRequest(), done, RequestRecord{}, 0.1, &table);
  EXPECT_EQ(row["kv_recompute_suspected"], false);
  EXPECT_FALSE(row.contains("kv_recompute_evidence"));
  EXPECT_EQ(row["status"], 200);
  EXPECT_TRUE(row["reason"].is_null());
}

TEST(JournalRowTest, RecomputeEvidenceOfTheRecordIsJournaled) {
  Outcome done;
  done.terminal = Terminal::kCompleted;
  RequestRecord record;
  record.attempts = 1;
  record.prefill_iid = "p0";
  record.decode_iid = "d0";
  const json evidence = {{"source", "usage"},
                         {"producer", "p0"},
                         {"consumer", "d0"},
                         {"prompt_tokens", 40},
                         {"cached_tokens", 0}};
  record.recompute_evidence = evidence;
  const server::StatusTableJournal table{};
  const json row = JournalRow(RowRequest(), done, record, 0.1, &table);
  EXPECT_EQ(row["kv_recompute_suspected"], true);
  EXPECT_EQ(row["kv_recompute_evidence"], evidence);
  EXPECT_EQ(row["crossed"], true);
  EXPECT_EQ(row["terminal"], "completed");
}

TEST(JournalRowTest, ContextLengthRefusalTakesItsStatusFromTheTableInRowAndAccessLog) {
  const Outcome refused = RefusalOutcome(Terminal::kInvalid, Reason::kContextLengthExceeded,
                                         "max_tokens 5000 exceeds the model's context length");
  const server::StatusTableJournal table{};
  const json row = JournalRow(RowRequest(), refused, RequestRecord{}, 0.001, &table);
  EXPECT_EQ(row["terminal"], "invalid");
  EXPECT_EQ(row["reason"], "context_length_exceeded");
  EXPECT_EQ(row["status"], 400);
  EXPECT_EQ(row["error_type"], "invalid_request_error");
  EXPECT_EQ(row["kv_recompute_suspected"], false);
  EXPECT_EQ(row["attempts"], 0);

  const json line =
      AccessLog::Line(RowRequest(), refused, RequestRecord{}, 0.001, 1.7e9, &table);
  EXPECT_EQ(line["status"], row["status"]);
  EXPECT_EQ(line["reason"], row["reason"]);
  EXPECT_EQ(line["terminal"], row["terminal"]);
}

TEST(JournalRowTest, AClientThatLeftBeforeOutputHasNoStatusInRowOrAccessLog) {
  const Outcome gone = RefusalOutcome(Terminal::kCancelled, Reason::kCancelled, "client went away");
  const server::StatusTableJournal table{};
  const json row = JournalRow(RowRequest(), gone, RequestRecord{}, 0.001, &table);
  EXPECT_TRUE(row["status"].is_null());
  EXPECT_TRUE(row["error_type"].is_null());
  const json line = AccessLog::Line(RowRequest(), gone, RequestRecord{}, 0.001, 1.7e9, &table);
  EXPECT_TRUE(line["status"].is_null());
}

}  // namespace
}  // namespace narwhal::router
