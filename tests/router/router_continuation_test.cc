// The router core's stream continuation (SPEC §15, B29/B30): a decode that
// breaks after output has started continues on another consumer from the
// token ids already sent, in the client's own format, bounded per request
// and by the credit pool; a request that cannot move exactly is refused with
// its reason. FakeEngineClient with token-id chunks; fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/router/router_fixture.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using json = nlohmann::json;

const std::vector<uint32_t> kPromptIds = {11, 12, 13};

// A completions chunk with vLLM's return_token_ids fields: one token `id`
// whose text is " w<id>"; `prompt_ids` set on the first chunk.
std::string IdChunk(uint32_t id, const std::string& finish = "",
                    const std::vector<uint32_t>* prompt_ids = nullptr,
                    const std::string& cmpl_id = "cmpl-1") {
  json choice = {{"index", 0},
                 {"text", " w" + std::to_string(id)},
                 {"logprobs", nullptr},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)},
                 {"token_ids", json::array({id})}};
  if (prompt_ids != nullptr) choice["prompt_token_ids"] = *prompt_ids;
  json c = {{"id", cmpl_id},
            {"object", "text_completion"},
            {"created", cmpl_id == "cmpl-1" ? 1700000000 : 1800000000},
            {"model", "m"},
            {"choices", json::array({choice})}};
  return c.dump();
}

// The same for a chat client's first leg: a role chunk with the top-level
// prompt ids, then content chunks.
std::string ChatRole(const std::vector<uint32_t>& prompt_ids) {
  json c = json::parse(nt::ChatRoleChunk());
  c["prompt_token_ids"] = prompt_ids;
  return c.dump();
}
std::string ChatIdChunk(uint32_t id) {
  json c = json::parse(nt::ChatChunk(" w" + std::to_string(id)));
  c["choices"][0]["token_ids"] = json::array({id});
  return c.dump();
}

// Tokens first..last as completions chunks, the first carrying the prompt's
// ids, the last `finish`.
std::vector<std::string> Tokens(uint32_t first, uint32_t last, const std::string& finish = "",
                                bool with_prompt = false, const std::string& cmpl_id = "cmpl-1") {
  std::vector<std::string> out;
  for (uint32_t id = first; id <= last; ++id) {
    out.push_back(IdChunk(id, id == last ? finish : "",
                          with_prompt && id == first ? &kPromptIds : nullptr, cmpl_id));
  }
  return out;
}

std::string Text(uint32_t first, uint32_t last) {
  std::string t;
  for (uint32_t id = first; id <= last; ++id) t += " w" + std::to_string(id);
  return t;
}

class RouterContinuationTest : public RouterTest {
 protected:
  RouterContinuationTest() {
    settings_.engines = {nt::Engine("p0", Role::kPrefill), nt::Engine("d0", Role::kDecode),
                         nt::Engine("d1", Role::kDecode), nt::Engine("d2", Role::kDecode)};
    settings_.continuation.enabled = true;
  }

  // The first decode leg lands on d0 (least loaded, first in order).
  void BreakFirstLeg(std::vector<std::string> payloads,
                     engines::EngineFailure f = nt::ConnectionLost()) {
    fake_.QueueDecode(nt::DecodeStep::FailAfter(std::move(payloads), std::move(f)), "d0");
  }

  static std::string StreamedText(const Result& r) {
    std::string t;
    for (const nt::Chunk& c : r.chunks) t += c.text;
    return t;
  }
};

TEST_F(RouterContinuationTest, B29_AStreamBrokenAtTokenThreeContinuesOnAnotherConsumer) {
  Start();
  BreakFirstLeg(Tokens(1, 3, "", /*with_prompt=*/true));
  fake_.QueueDecode(nt::DecodeStep::Stream(Tokens(4, 8, "length", false, "cmpl-2")));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(r.outcome.finish_reason, "length");
  EXPECT_EQ(r.outcome.output_tokens, 8);
  // Every token exactly once, under the first leg's id, without token fields
  // (the client did not ask for them).
  EXPECT_EQ(StreamedText(r), Text(1, 8));
  ASSERT_EQ(r.chunks.size(), 8u);
  for (const nt::Chunk& c : r.chunks) {
    const json chunk = json::parse(c.data);
    EXPECT_EQ(chunk["id"], "cmpl-1") << c.data;
    EXPECT_EQ(chunk["created"], 1700000000) << c.data;
    EXPECT_FALSE(chunk["choices"][0].contains("token_ids")) << c.data;
    EXPECT_FALSE(chunk["choices"][0].contains("prompt_token_ids")) << c.data;
  }

  // The legs: the first asked for token ids; the continuation is a token-id
  // completion of prompt + generated ids with the remaining budget, on a
  // consumer other than the failed one, with fresh backend ids (B8).
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_EQ(decodes[0].target.iid, "d0");
  EXPECT_EQ(decodes[0].body["return_token_ids"], true);
  EXPECT_NE(decodes[1].target.iid, "d0");
  const json& body = decodes[1].body;
  EXPECT_EQ(body["prompt"], json({11, 12, 13, 1, 2, 3}));
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_EQ(body["return_token_ids"], true);
  EXPECT_NE(decodes[1].backend_request_id, decodes[0].backend_request_id);
  const std::vector<nt::PrefillCall> prefills = fake_.prefill_calls();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_EQ(prefills[1].api, Api::kCompletions);
  EXPECT_EQ(prefills[1].body["prompt"], json({11, 12, 13, 1, 2, 3}));

  const json row = Row(rid);
  ASSERT_EQ(row["continuations"].size(), 1u) << row.dump();
  const json& c = row["continuations"][0];
  EXPECT_EQ(c["at_token"], 3);
  EXPECT_EQ(c["from_iid"], "d0");
  EXPECT_EQ(c["to_iid"], decodes[1].target.iid);
  EXPECT_EQ(c["reason"], "engine_connection");
  EXPECT_EQ(c["outcome"], "continued");
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "continuation");
  EXPECT_EQ(Metric("narwhal_continuations_total", {{"outcome", "continued"}}), 1);
  WaitIdle();
  ExpectNoReservations();
}

TEST_F(RouterContinuationTest, B29_AChatStreamContinuesInChatChunks) {
  Start();
  BreakFirstLeg({ChatRole(kPromptIds), ChatIdChunk(1), ChatIdChunk(2)}, nt::MissingDone());
  fake_.QueueDecode(nt::DecodeStep::Stream(Tokens(3, 8, "length", false, "cmpl-9")));
  const Result r = Run(/*stream=*/true, Api::kChatCompletions);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(StreamedText(r), Text(1, 8));
  for (const nt::Chunk& c : r.chunks) {
    const json chunk = json::parse(c.data);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk") << c.data;
    EXPECT_EQ(chunk["id"], "chatcmpl-1") << c.data;
    EXPECT_FALSE(chunk.contains("prompt_token_ids")) << c.data;
    EXPECT_FALSE(chunk["choices"][0].contains("text")) << c.data;
    EXPECT_FALSE(chunk["choices"][0].contains("token_ids")) << c.data;
  }
  const json last = json::parse(r.chunks.back().data);
  EXPECT_EQ(last["choices"][0]["delta"]["content"], " w8");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  // The continuation is a completion: no messages, the chat budget reduced.
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_FALSE(decodes[1].body.contains("messages"));
  EXPECT_EQ(decodes[1].body["prompt"], json({11, 12, 13, 1, 2}));
  EXPECT_EQ(decodes[1].body["max_tokens"], 6);
}

TEST_F(RouterContinuationTest, B29_ANonStreamingAnswerIsAssembledAcrossLegsWithWholeUsage) {
  Start();
  BreakFirstLeg(Tokens(1, 4, "", true), nt::ReadTimeout());
  std::vector<std::string> rest = Tokens(5, 8, "length", false, "cmpl-2");
  // The continuation's usage counts its own prompt (prompt + 4) and tokens.
  json usage = json::parse(nt::UsageChunk(7, 4));
  usage["object"] = "text_completion";
  rest.push_back(usage.dump());
  fake_.QueueDecode(nt::DecodeStep::Stream(rest));
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_TRUE(r.ended);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  const json& body = r.outcome.body;
  EXPECT_EQ(body["choices"][0]["text"], Text(1, 8));
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(body["usage"]["completion_tokens"], 8);
  EXPECT_EQ(body["usage"]["total_tokens"], 11);
  EXPECT_FALSE(body["choices"][0].contains("token_ids"));
  EXPECT_EQ(r.outcome.output_tokens, 8);
  EXPECT_EQ(r.outcome.prompt_tokens, 3);
  EXPECT_EQ(Row(rid)["continuations"][0]["outcome"], "continued");
}

TEST_F(RouterContinuationTest, B29_AClientThatAskedForTokenIdsGetsThemAsOneEngineWouldGive) {
  Start();
  BreakFirstLeg(Tokens(1, 2, "", true));
  fake_.QueueDecode(nt::DecodeStep::Stream(Tokens(3, 8, "length", false, "cmpl-2")));
  Request req = MakeRequest(/*stream=*/true);
  req.body["return_token_ids"] = true;
  const Result r = Run(std::move(req));
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  std::vector<uint32_t> ids;
  int prompt_id_chunks = 0;
  for (const nt::Chunk& c : r.chunks) {
    const json choice = json::parse(c.data)["choices"][0];
    for (const json& id : choice["token_ids"]) ids.push_back(id.get<uint32_t>());
    if (choice.contains("prompt_token_ids")) {
      ++prompt_id_chunks;
      EXPECT_EQ(choice["prompt_token_ids"], json(kPromptIds));
    }
  }
  EXPECT_EQ(ids, std::vector<uint32_t>({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(prompt_id_chunks, 1);  // the first chunk's, never the continuation prompt's
}

TEST_F(RouterContinuationTest, B30_StopStringsAreRefusedAndTheStreamEndsAsB16) {
  Start();
  BreakFirstLeg(Tokens(1, 3, "", true));
  Request req = MakeRequest(/*stream=*/true);
  req.body["stop"] = json::array({"\n\n"});
  const std::string rid = req.rid;
  const Result r = Run(std::move(req));
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(StreamedText(r), Text(1, 3));
  // A request that cannot move is not even asked for token ids.
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_FALSE(decodes[0].body.contains("return_token_ids"));
  const json row = Row(rid);
  ASSERT_EQ(row["continuations"].size(), 1u);
  EXPECT_EQ(row["continuations"][0]["reason"], "stop");
  EXPECT_EQ(row["continuations"][0]["outcome"], "refused");
  EXPECT_TRUE(row["continuations"][0]["to_iid"].is_null());
  EXPECT_EQ(Metric("narwhal_continuations_total", {{"outcome", "refused"}}), 1);
}

TEST_F(RouterContinuationTest, B30_EachStaticRefusalIsNamed) {
  const json base = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 8}};
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"n", 2}}, "n"},
      {{{"best_of", 3}}, "best_of"},
      {{{"echo", true}}, "echo"},
      {{{"response_format", {{"type", "json_object"}}}}, "structured_output"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}}},
       "structured_output"},
      {{{"guided_json", json::object()}}, "structured_output"},
      {{{"structured_outputs", {{"regex", "a+"}}}}, "structured_output"},
      {{{"tools", json::array({{{"type", "function"}}})}}, "tools"},
      {{{"stop", "END"}}, "stop"},
      {{{"logprobs", 2}}, "logprobs"},
      {{{"presence_penalty", 0.5}}, "penalties"},
  };
  for (const auto& [extra, reason] : cases) {
    json body = base;
    body.update(extra);
    EXPECT_EQ(ContinuationRefusal(body), reason) << body.dump();
  }
  json fine = base;
  fine.update({{"n", 1},
               {"stop", json::array()},
               {"temperature", 0},
               {"stop_token_ids", {7}},
               {"logprobs", nullptr},
               {"presence_penalty", 0},
               {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(ContinuationRefusal(fine), "");
  EXPECT_EQ(ContinuationRefusal({{"messages", json::array()}, {"logprobs", true}}), "logprobs");
  EXPECT_EQ(ContinuationRefusal({{"messages", json::array()}, {"logprobs", false}}), "");
}

TEST_F(RouterContinuationTest, B30_AnEngineWithoutTokenIdsIsRefused) {
  Start();
  BreakFirstLeg({nt::CompletionChunk(" a"), nt::CompletionChunk(" b")});
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(Row(rid)["continuations"][0]["reason"], "no_token_ids");
  EXPECT_EQ(ClientDecodes().size(), 1u);
}

TEST_F(RouterContinuationTest, ANormalEndOrAClientCancelIsNeverContinued) {
  Start();
  // The request deadline is the router's, not an engine fault.
  BreakFirstLeg(Tokens(1, 3, "", true), nt::RequestDeadline());
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kExpired);
  EXPECT_FALSE(Row(rid).contains("continuations"));
  EXPECT_EQ(ClientDecodes().size(), 1u);
}

TEST_F(RouterContinuationTest, B29_TheCapPerRequestHoldsAndBothFailuresAreJournaled) {
  Start();  // max_per_request 1
  BreakFirstLeg(Tokens(1, 2, "", true));
  // The continuation breaks too, after two more tokens.
  fake_.QueueDecode(
      nt::DecodeStep::FailAfter(Tokens(3, 4, "", false, "cmpl-2"), nt::ConnectionLost()));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(StreamedText(r), Text(1, 4));
  const json row = Row(rid);
  ASSERT_EQ(row["continuations"].size(), 2u) << row.dump();
  EXPECT_EQ(row["continuations"][0]["outcome"], "failed");
  EXPECT_EQ(row["continuations"][1]["outcome"], "refused");
  EXPECT_EQ(row["continuations"][1]["reason"], "max_per_request");
  EXPECT_EQ(row["continuations"][1]["at_token"], 4);
  ASSERT_EQ(row["attempt_failures"].size(), 2u);
  EXPECT_EQ(ClientDecodes().size(), 2u);
  WaitIdle();
  ExpectNoReservations();
}

TEST_F(RouterContinuationTest, TwoContinuationsWhenTheCapAllows) {
  settings_.continuation.max_per_request = 2;
  Start();
  BreakFirstLeg(Tokens(1, 2, "", true));
  fake_.QueueDecode(
      nt::DecodeStep::FailAfter(Tokens(3, 4, "", false, "cmpl-2"), nt::ConnectionLost()));
  fake_.QueueDecode(nt::DecodeStep::Stream(Tokens(5, 8, "length", false, "cmpl-3")));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(StreamedText(r), Text(1, 8));
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 3u);
  EXPECT_EQ(decodes[2].body["prompt"], json({11, 12, 13, 1, 2, 3, 4}));
  EXPECT_EQ(decodes[2].body["max_tokens"], 4);
  // Each continuation avoids every consumer that failed this request.
  EXPECT_NE(decodes[2].target.iid, decodes[0].target.iid);
  EXPECT_NE(decodes[2].target.iid, decodes[1].target.iid);
  const json row = Row(rid);
  ASSERT_EQ(row["continuations"].size(), 2u);
  EXPECT_EQ(row["continuations"][0]["outcome"], "failed");
  EXPECT_EQ(row["continuations"][1]["outcome"], "continued");
  EXPECT_EQ(row["continuations"][1]["from_iid"], decodes[1].target.iid);
}

TEST_F(RouterContinuationTest, B29_TheCreditPoolRunsDryAndRefillsFromCompletedRequests) {
  settings_.continuation.budget = 1;
  settings_.continuation.replenish = 0.5;
  Start();
  BreakFirstLeg(Tokens(1, 2, "", true));
  fake_.QueueDecode(nt::DecodeStep::Stream(Tokens(3, 8, "length", false, "cmpl-2")));
  EXPECT_EQ(Run(true).outcome.terminal, Terminal::kCompleted);
  // The pool got 0.5 back from that completed request: not a whole credit.
  EXPECT_DOUBLE_EQ(router_->continuation_budget().credits(), 0.5);
  fake_.QueueDecode(nt::DecodeStep::FailAfter(Tokens(1, 2, "", true), nt::ConnectionLost()));
  std::string rid;
  const Result second = Run(/*stream=*/true, Api::kCompletions, &rid);
  EXPECT_EQ(second.outcome.terminal, Terminal::kFailed);
  EXPECT_EQ(Row(rid)["continuations"][0]["outcome"], "no_budget");
  EXPECT_EQ(Metric("narwhal_continuations_total", {{"outcome", "no_budget"}}), 1);
  // One more completed request refills a whole credit.
  EXPECT_EQ(Run(true).outcome.terminal, Terminal::kCompleted);
  EXPECT_DOUBLE_EQ(router_->continuation_budget().credits(), 1.0);
}

TEST_F(RouterContinuationTest, DisabledAsksForNoTokenIdsAndEndsAsB16) {
  settings_.continuation.enabled = false;
  Start();
  BreakFirstLeg(Tokens(1, 3, "", true));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_FALSE(ClientDecodes()[0].body.contains("return_token_ids"));
  EXPECT_FALSE(Row(rid).contains("continuations"));
  // Without a ledger the engine's bytes reach the client unchanged.
  EXPECT_TRUE(json::parse(r.chunks[0].data)["choices"][0].contains("token_ids"));
}

TEST_F(RouterContinuationTest, NoConsumerLeftEndsTheStreamAsB16) {
  settings_.engines = {nt::Engine("p0", Role::kPrefill), nt::Engine("d0", Role::kDecode)};
  Start();
  BreakFirstLeg(Tokens(1, 3, "", true));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(Row(rid)["continuations"][0]["reason"], "no_engine");
}

TEST_F(RouterContinuationTest, AContinuationWhosePrefillFailsEndsFailedWithBothFailures) {
  Start();
  BreakFirstLeg(Tokens(1, 3, "", true));
  fake_.QueuePrefill(nt::PrefillStep::Ok());  // the first attempt's
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::EngineStatusFailure(503)));
  std::string rid;
  const Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  ASSERT_TRUE(r.ended);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(StreamedText(r), Text(1, 3));
  const json row = Row(rid);
  ASSERT_EQ(row["attempt_failures"].size(), 2u) << row.dump();
  EXPECT_EQ(row["attempt_failures"][1]["phase"], "prefill");
  EXPECT_EQ(row["continuations"][0]["outcome"], "failed");
  EXPECT_EQ(Metric("narwhal_continuations_total", {{"outcome", "failed"}}), 1);
  WaitIdle();
  ExpectNoReservations();
}

// The first leg's rewrite is a byte-level edit: every other byte stays.
TEST(StripTokenFieldsTest, RemovesTheMembersAndKeepsEveryOtherByte) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"choices":[{"index":0,"text":" a","token_ids":[5]}]})",
       R"({"choices":[{"index":0,"text":" a"}]})"},
      {R"({"choices":[{"token_ids": [5, 6] ,"text":"x"}]})", R"({"choices":[{"text":"x"}]})"},
      {R"({"prompt_token_ids":[1,2],"id":"c","choices":[{"delta":{},"token_ids":null}]})",
       R"({"id":"c","choices":[{"delta":{}}]})"},
      {R"({"token_ids":[1]})", R"({})"},
      // A string that reads like a key is text, not a member.
      {R"({"text":"\"token_ids\":[1]","token_ids":[2]})", R"({"text":"\"token_ids\":[1]"})"},
      {R"({"text":"token_ids","n":1})", R"({"text":"token_ids","n":1})"},
  };
  for (const auto& [in, want] : cases) {
    std::string out;
    ASSERT_TRUE(StripTokenFields(in, &out)) << in;
    EXPECT_EQ(out, want) << in;
  }
}

TEST(StripTokenFieldsTest, AgreesWithAJsonRewriteOnEveryShape) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    json choice = json::object();
    std::vector<std::string> keys = {"index",         "text",      "logprobs",
                                     "finish_reason", "token_ids", "prompt_token_ids",
                                     "stop_reason"};
    std::shuffle(keys.begin(), keys.end(), rng);
    const size_t n = 1 + rng() % keys.size();
    for (size_t i = 0; i < n; ++i) {
      const std::string& k = keys[i];
      if (k == "token_ids" || k == "prompt_token_ids") {
        choice[k] = rng() % 3 == 0 ? json(nullptr) : json::array({rng() % 1000, rng() % 7});
      } else if (k == "text") {
        choice[k] = rng() % 2 ? " \"token_ids\": [1]," : " w";
      } else {
        choice[k] = static_cast<int>(rng() % 5);
      }
    }
    json chunk = {{"id", "x"}, {"choices", json::array({choice})}};
    if (rng() % 2) chunk["prompt_token_ids"] = json::array({1, 2, 3});
    const std::string in = chunk.dump(rng() % 2 ? 1 : -1);
    json want = chunk;
    want.erase("prompt_token_ids");
    want["choices"][0].erase("token_ids");
    want["choices"][0].erase("prompt_token_ids");
    std::string out;
    if (!StripTokenFields(in, &out)) continue;  // the caller falls back to a JSON rewrite
    ASSERT_TRUE(json::accept(out)) << in << " -> " << out;
    EXPECT_EQ(json::parse(out), want) << in << " -> " << out;
  }
}

// An engine streaming without end cannot grow the ledger past its bound: the
// answer then no longer moves exactly.
TEST(StreamLedgerTest, IdsAreBoundedAndAnEventWithoutIdsEndsExactness) {
  StreamLedger ledger(engines::Api::kCompletions, /*client_wants_ids=*/true);
  engines::StreamEvent ev;
  ev.kind = engines::EventKind::kToken;
  ev.has_prompt_token_ids = true;
  ev.prompt_token_ids = {1, 2};
  ev.has_token_ids = true;
  ev.token_ids.assign(StreamLedger::kMaxIds, 7);
  ev.tokens = static_cast<int>(ev.token_ids.size());
  ledger.Pass("{}", &ev);
  EXPECT_TRUE(ledger.exact());
  EXPECT_EQ(ledger.generated().size(), StreamLedger::kMaxIds);
  ev.has_prompt_token_ids = false;
  ev.token_ids = {8};
  ev.tokens = 1;
  ledger.Pass("{}", &ev);
  EXPECT_FALSE(ledger.exact());
  EXPECT_EQ(ledger.generated().size(), StreamLedger::kMaxIds);

  StreamLedger other(engines::Api::kCompletions, false);
  engines::StreamEvent text;
  text.kind = engines::EventKind::kToken;
  text.tokens = 1;
  text.has_prompt_token_ids = true;
  text.prompt_token_ids = {1};
  other.Pass(R"({"choices":[{"text":"x"}]})", &text);
  EXPECT_FALSE(other.exact());  // a token without its id
}

}  // namespace
}  // namespace narwhal::router
