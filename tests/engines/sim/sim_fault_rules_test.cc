#include "engines/sim/fault_rules.h"

#include <string>

#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

using nlohmann::json;

std::string ErrorOf(const std::string& body) {
  absl::StatusOr<std::vector<FaultRule>> rules = ParseFaultBody(body);
  if (rules.ok()) return "ok";
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(rules.status().message());
}

std::vector<FaultRule> Parse(const std::string& body) {
  absl::StatusOr<std::vector<FaultRule>> rules = ParseFaultBody(body);
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *rules : std::vector<FaultRule>{};
}

TEST(SimFaultRulesTest, ParsesEveryKindWithItsParameters) {
  const std::vector<FaultRule> rules = Parse(R"({"faults":[
    {"kind":"drop_connection"},
    {"kind":"delay_headers","ms":250},
    {"kind":"http_status","status":503,"message":"busy","type":"Overloaded"},
    {"kind":"silent_before_first_token"},
    {"kind":"metadata_then_silence","chunks":3},
    {"kind":"stall_after_tokens","tokens":2},
    {"kind":"close_before_done","tokens":4},
    {"kind":"done_before_token"},
    {"kind":"error_in_stream","after_tokens":2,"code":429,"message":"slow"},
    {"kind":"no_descriptor"},
    {"kind":"descriptor_without_engine_id"},
    {"kind":"malformed_block_ids","block_ids":[-3]},
    {"kind":"slow_tokens","interval_ms":40}]})");
  ASSERT_EQ(rules.size(), 13u);
  EXPECT_EQ(rules[0].kind, FaultKind::kDropConnection);
  EXPECT_EQ(rules[1].ms, 250);
  EXPECT_EQ(rules[2].status, 503);
  EXPECT_EQ(rules[2].message, "busy");
  EXPECT_EQ(rules[2].type, "Overloaded");
  EXPECT_EQ(rules[4].count, 3);
  EXPECT_EQ(rules[5].count, 2);
  EXPECT_EQ(rules[6].count, 4);
  EXPECT_EQ(rules[8].count, 2);
  EXPECT_EQ(rules[8].code, json(429));
  EXPECT_EQ(rules[8].message, "slow");
  EXPECT_EQ(rules[11].block_ids, json::parse("[-3]"));
  EXPECT_EQ(rules[12].kind, FaultKind::kSlowTokens);
  EXPECT_EQ(rules[12].ms, 40);
}

TEST(SimFaultRulesTest, Defaults) {
  const std::vector<FaultRule> rules = Parse(R"({"faults":[
    {"kind":"stall_after_tokens"},{"kind":"error_in_stream"},
    {"kind":"metadata_then_silence"}]})");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].phase, PhaseFilter::kAny);
  EXPECT_EQ(rules[0].times, 1);
  EXPECT_EQ(rules[0].count, 1);
  EXPECT_EQ(rules[1].count, 0);
  EXPECT_EQ(rules[1].code, json(500));
  EXPECT_EQ(rules[2].count, 1);
}

TEST(SimFaultRulesTest, NamesTheOffendingField) {
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection"},{"kind":"frob"}]})"),
            "faults[1].kind: unknown fault kind \"frob\"");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"http_status","status":700}]})"),
            "faults[0].status: must be an integer 100..599");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"http_status","status":"503"}]})"),
            "faults[0].status: must be an integer 100..599");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"http_status"}]})"),
            "faults[0].status: required");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"delay_headers","ms":1.5}]})"),
            "faults[0].ms: must be an integer 0..3600000");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"slow_tokens"}]})"),
            "faults[0].interval_ms: required");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","times":0}]})"),
            "faults[0].times: must be a positive integer or -1");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","times":-2}]})"),
            "faults[0].times: must be a positive integer or -1");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","phase":"both"}]})"),
            "faults[0].phase: must be \"prefill\", \"decode\" or \"any\"");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"no_descriptor","phase":"decode"}]})"),
            "faults[0].phase: kind \"no_descriptor\" applies only to the "
            "prefill phase");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"error_in_stream","code":[1]}]})"),
            "faults[0].code: must be an integer or a string");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"phase":"any"}]})"), "faults[0].kind: required");
  EXPECT_EQ(ErrorOf(R"({"faults":[7]})"), "faults[0]: must be an object");
  EXPECT_EQ(ErrorOf(R"({"faults":{}})"), "faults: required, must be a list");
  EXPECT_EQ(ErrorOf(R"({})"), "faults: required, must be a list");
  EXPECT_EQ(ErrorOf(R"({"faults":[],"mode":"x"})"), "mode: unknown key");
  EXPECT_EQ(ErrorOf("not json"), "body: invalid JSON");
}

TEST(SimFaultRulesTest, RejectsUnknownParameters) {
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","ms":5}]})"),
            "faults[0].ms: unknown parameter for kind \"drop_connection\" "
            "(allowed: none)");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"slow_tokens","interval_ms":5,"ms":1}]})"),
            "faults[0].ms: unknown parameter for kind \"slow_tokens\" "
            "(allowed: interval_ms)");
}

TEST(SimFaultRulesTest, ADocumentWithOneBadRuleYieldsNoRules) {
  absl::StatusOr<std::vector<FaultRule>> rules = ParseFaultDocument(
      json::parse(R"({"faults":[{"kind":"drop_connection"},{"kind":"x"}]})"));
  EXPECT_FALSE(rules.ok());
}

TEST(SimFaultRulesTest, FirstMatchingRuleFiresAndCountsDown) {
  FaultBook book;
  ASSERT_TRUE(book.Append(Parse(R"({"faults":[
      {"kind":"http_status","status":500,"phase":"prefill","times":2},
      {"kind":"drop_connection","phase":"decode"},
      {"kind":"done_before_token","times":-1}]})"))
                  .ok());
  // Decode: the prefill rule is skipped, drop_connection fires once.
  std::optional<FaultRule> rule = book.Take(Phase::kDecode);
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ(rule->kind, FaultKind::kDropConnection);
  rule = book.Take(Phase::kDecode);
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ(rule->kind, FaultKind::kDoneBeforeToken);
  // Prefill: http_status twice, then the unlimited rule.
  EXPECT_EQ(book.Take(Phase::kPrefill)->kind, FaultKind::kHttpStatus);
  EXPECT_EQ(book.Take(Phase::kPrefill)->kind, FaultKind::kHttpStatus);
  EXPECT_EQ(book.Take(Phase::kPrefill)->kind, FaultKind::kDoneBeforeToken);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(book.Take(Phase::kDecode)->kind, FaultKind::kDoneBeforeToken);
  }
  const json listed = book.ToJson()["faults"];
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0]["times"], 0);
  EXPECT_EQ(listed[0]["fired"], 2);
  EXPECT_EQ(listed[1]["times"], 0);
  EXPECT_EQ(listed[2]["times"], -1);
  EXPECT_EQ(listed[2]["fired"], 7);
  EXPECT_EQ(listed[0]["kind"], "http_status");
  EXPECT_EQ(listed[0]["phase"], "prefill");
  EXPECT_EQ(listed[0]["status"], 500);
}

TEST(SimFaultRulesTest, DescriptorKindsOnlyMatchPrefill) {
  FaultBook book;
  ASSERT_TRUE(book.Append(Parse(R"({"faults":[{"kind":"no_descriptor"}]})")).ok());
  EXPECT_FALSE(book.Take(Phase::kDecode).has_value());
  EXPECT_EQ(book.Take(Phase::kPrefill)->kind, FaultKind::kNoDescriptor);
  EXPECT_FALSE(book.Take(Phase::kPrefill).has_value());
}

TEST(SimFaultRulesTest, ClearAndCapacity) {
  FaultBook book;
  std::vector<FaultRule> many(FaultBook::kMaxRules);
  ASSERT_TRUE(book.Append(many).ok());
  EXPECT_FALSE(book.Append(Parse(R"({"faults":[{"kind":"drop_connection"}]})")).ok());
  book.Clear();
  EXPECT_FALSE(book.Take(Phase::kDecode).has_value());
  EXPECT_TRUE(book.ToJson()["faults"].empty());
}

TEST(SimFaultRulesTest, RemoteEngineIdMatchesOnlyThatProducersHandoffs) {
  FaultBook book;
  ASSERT_TRUE(book.Append(Parse(R"({"faults":[{"kind":"http_status","status":500,
      "phase":"decode","remote_engine_id":"p0","times":-1}]})"))
                  .ok());
  EXPECT_FALSE(book.Take(Phase::kDecode, "p1").has_value());
  EXPECT_FALSE(book.Take(Phase::kDecode, "").has_value());
  EXPECT_FALSE(book.Take(Phase::kPrefill, "p0").has_value());
  EXPECT_TRUE(book.Take(Phase::kDecode, "p0").has_value());
  EXPECT_TRUE(book.Take(Phase::kDecode, "p0").has_value());
  EXPECT_EQ(book.ToJson()["faults"][0]["remote_engine_id"], "p0");
  EXPECT_EQ(book.ToJson()["faults"][0]["fired"], 2);
}

TEST(SimFaultRulesTest, RemoteEngineIdMustBeANonEmptyStringOnANonDescriptorKind) {
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","remote_engine_id":3}]})"),
            "faults[0].remote_engine_id: must be a non-empty string");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"drop_connection","remote_engine_id":""}]})"),
            "faults[0].remote_engine_id: must be a non-empty string");
  EXPECT_NE(ErrorOf(R"({"faults":[{"kind":"no_descriptor","remote_engine_id":"p0"}]})"), "ok");
}

}  // namespace
}  // namespace narwhal::sim

namespace narwhal::sim {
namespace {

TEST(SimFaultRulesTest, RecomputeMatchesOnlyDecodesThatCarryAHandoff) {
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"recompute","phase":"prefill"}]})"),
            "faults[0].phase: kind \"recompute\" applies only to the decode phase");
  EXPECT_EQ(ErrorOf(R"({"faults":[{"kind":"recompute","tokens":1}]})"),
            "faults[0].tokens: unknown parameter for kind \"recompute\" (allowed: none)");
  const std::vector<FaultRule> rules =
      Parse(R"({"faults":[{"kind":"recompute","times":-1}]})");
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].kind, FaultKind::kRecompute);
  EXPECT_EQ(rules[0].ToJson()["kind"], "recompute");
  EXPECT_TRUE(rules[0].Matches(Phase::kDecode, "p0"));
  EXPECT_FALSE(rules[0].Matches(Phase::kDecode, ""));  // no handoff: nothing to ignore
  EXPECT_FALSE(rules[0].Matches(Phase::kPrefill, ""));
}

}  // namespace
}  // namespace narwhal::sim
