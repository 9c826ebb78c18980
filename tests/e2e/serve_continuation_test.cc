// Stream continuation end to end (SPEC §15, B29/B30): narwhal-serve over
// narwhal-sim engines whose output is a deterministic function of token ids.
// A decode engine that breaks at token k of n — silence, a close before
// [DONE], an in-stream 503, SIGKILL — does not break the client's answer:
// through both doors, streaming and not, chat and completions, the client
// gets the n tokens one uninterrupted generation gives, each exactly once,
// with usage and finish_reason right. A request that cannot move exactly
// (stop strings) ends as B16 with its reason journaled.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "narwhal/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

constexpr int kContTokens = 12;  // n
constexpr int kContBreakAt = 5;  // k

struct ContGrpcAnswer {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  std::string text;
  int deltas = 0;
  std::vector<uint32_t> indexes;
  narwhal::v1::Final final;
  std::string request_id;
};

// A streamed Generate to its end; `on_delta` sees the text so far.
ContGrpcAnswer ContGenerate(const std::string& target, const narwhal::v1::GenerateRequest& req,
                            const std::function<void(const std::string&)>& on_delta = nullptr) {
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  ContGrpcAnswer out;
  auto reader = stub->Generate(&context, req);
  narwhal::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      ++out.deltas;
      out.text += response.delta().text();
      out.indexes.push_back(response.delta().token_index());
      if (on_delta) on_delta(out.text);
    } else if (response.has_final()) {
      out.final = response.final();
    }
  }
  const grpc::Status status = reader->Finish();
  out.code = status.error_code();
  out.message = status.error_message();
  const auto& md = context.GetServerInitialMetadata();
  if (auto it = md.find("x-request-id"); it != md.end()) {
    out.request_id = std::string(it->second.data(), it->second.size());
  }
  return out;
}

narwhal::v1::GenerateRequest ContRequest(const std::string& prompt, bool chat) {
  narwhal::v1::GenerateRequest req;
  req.set_model(kModel);
  if (chat) {
    auto* m = req.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(prompt);
  } else {
    req.set_prompt(prompt);
  }
  req.set_max_tokens(kContTokens);
  req.set_temperature(0);
  return req;
}

json ContFault(const std::string& kind) {
  if (kind == "silence") {
    return {{"kind", "stall_after_tokens"}, {"phase", "decode"}, {"tokens", kContBreakAt}};
  }
  if (kind == "close") {
    return {{"kind", "close_before_done"}, {"phase", "decode"}, {"tokens", kContBreakAt}};
  }
  return {{"kind", "error_in_stream"},
          {"phase", "decode"},
          {"after_tokens", kContBreakAt},
          {"code", 503}};
}

class ServeContinuationTest : public E2eTest {
 protected:
  // A router over p0, d0 and d1 that continues broken streams; silence is
  // noticed after 0.5 s, while an occupying leg may wait for its first token.
  ServeProcess& StartContinuingRouter(const json& extra = json::object()) {
    json overrides = {{"continuation", {{"enabled", true}}},
                      {"engine", {{"decode_read_timeout_s", 0.5}, {"first_token_timeout_s", 30}}}};
    overrides.merge_patch(extra);
    return StartRouter({"p0", "d0", "d1"}, overrides);
  }

  // The answer one uninterrupted generation gives for `body` (no faults).
  std::string Reference(ServeProcess& router, const std::string& path, json body) {
    body["stream"] = false;
    const HttpCapture c = Send(router, path, body);
    EXPECT_EQ(c.status, 200) << Describe(c);
    const std::string text = ResponseText(c.body);
    EXPECT_FALSE(text.empty());
    return text;
  }

  // Occupies one decode engine so that the next request's decode lands on
  // the other, which breaks as `kind` says; returns the occupation.
  std::unique_ptr<Occupation> BreakNextDecode(ServeProcess& router, const std::string& kind) {
    std::unique_ptr<Occupation> o = Occupy(router, "decode", {"d0", "d1"});
    EXPECT_EQ(o->idle.size(), 1u);
    if (!o->idle.empty()) SetFaults(o->idle[0], json::array({ContFault(kind)}));
    return o;
  }

  // The request's row: one continuation from `from`, continued.
  void ExpectContinued(ServeProcess& router, const std::string& rid, const std::string& from) {
    const json row = JournalRowFor(router, rid);
    EXPECT_EQ(row["terminal"], "completed") << row.dump();
    EXPECT_EQ(row["output_tokens"], kContTokens) << row.dump();
    ASSERT_TRUE(row.contains("continuations")) << row.dump();
    ASSERT_EQ(row["continuations"].size(), 1u) << row.dump();
    const json& c = row["continuations"][0];
    EXPECT_EQ(c["at_token"], kContBreakAt) << row.dump();
    EXPECT_EQ(c["from_iid"], from) << row.dump();
    EXPECT_NE(c["to_iid"], from) << row.dump();
    EXPECT_EQ(c["outcome"], "continued") << row.dump();
  }
};

// Every fault, both endpoints, streaming and not, through the HTTP door.
TEST_F(ServeContinuationTest, B29_AnHttpAnswerBrokenAtTokenKIsCompletedExactly) {
  ServeProcess& router = StartContinuingRouter();
  struct Case {
    std::string kind;
    bool chat;
    bool stream;
  };
  const std::vector<Case> cases = {
      {"silence", false, true}, {"close", false, true}, {"error", false, true},
      {"close", true, true},    {"error", true, true},  {"silence", true, false},
      {"close", false, false},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + (c.chat ? " chat" : " completions") +
                 (c.stream ? " stream" : " non-stream"));
    const std::string prompt = "continue me " + std::to_string(n++) + " " + c.kind;
    const std::string path = c.chat ? kChat : kCompletions;
    json body =
        c.chat ? Chat(prompt, kContTokens, c.stream) : Completion(prompt, kContTokens, c.stream);
    body["temperature"] = 0;
    const std::string reference = Reference(router, path, body);
    std::unique_ptr<Occupation> o = BreakNextDecode(router, c.kind);
    const std::string broken = o->idle.empty() ? "" : o->idle[0];
    const HttpCapture capture = Send(router, path, body);
    EXPECT_EQ(capture.status, 200) << Describe(capture);
    if (c.stream) {
      EXPECT_EQ(StreamedText(capture), reference) << Describe(capture);
      EXPECT_EQ(TokenEvents(capture).size(), static_cast<size_t>(kContTokens)) << Describe(capture);
      EXPECT_TRUE(TerminalErrorEvent(capture).is_null()) << Describe(capture);
      EXPECT_NE(capture.body.find("[DONE]"), std::string::npos);
      // Token ids were asked for the router, never shown to this client.
      EXPECT_EQ(capture.body.find("token_ids"), std::string::npos) << Describe(capture);
    } else {
      const json answer = json::parse(capture.body);
      EXPECT_EQ(ResponseText(capture.body), reference);
      EXPECT_EQ(answer["usage"]["completion_tokens"], kContTokens) << capture.body;
      EXPECT_EQ(answer["choices"][0]["finish_reason"], "length") << capture.body;
      EXPECT_FALSE(answer["choices"][0].contains("token_ids")) << capture.body;
    }
    ExpectContinued(router, Header(capture, "x-request-id"), broken);
    o->Release();
    Sim("d0").ClearFaults().IgnoreError();
    Sim("d1").ClearFaults().IgnoreError();
  }
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_continuations_total", {{"outcome", "continued"}}),
            static_cast<double>(cases.size()));
}

// A client that asked for token ids gets exactly those one engine returns.
TEST_F(ServeContinuationTest, B29_AClientAskingForTokenIdsGetsOneEnginesIds) {
  ServeProcess& router = StartContinuingRouter();
  json body = Completion("ids across the break", kContTokens, false);
  body["return_token_ids"] = true;
  const HttpCapture whole = Send(router, kCompletions, body);
  ASSERT_EQ(whole.status, 200) << Describe(whole);
  const json expected = json::parse(whole.body)["choices"][0];
  ASSERT_EQ(expected["token_ids"].size(), static_cast<size_t>(kContTokens)) << whole.body;
  std::unique_ptr<Occupation> o = BreakNextDecode(router, "close");
  const HttpCapture broken = Send(router, kCompletions, body);
  ASSERT_EQ(broken.status, 200) << Describe(broken);
  const json got = json::parse(broken.body)["choices"][0];
  EXPECT_EQ(got["token_ids"], expected["token_ids"]);
  EXPECT_EQ(got["prompt_token_ids"], expected["prompt_token_ids"]);
  EXPECT_EQ(got["text"], expected["text"]);
  o->Release();
}

// The gRPC door: the deltas' token indexes run on across the break.
TEST_F(ServeContinuationTest, B29_AGrpcStreamBrokenAtTokenKContinuesItsIndexes) {
  ServeProcess& router = StartContinuingRouter();
  for (bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    const std::string prompt = std::string("grpc continue ") + (chat ? "chat" : "text");
    CountRequest(router);
    const ContGrpcAnswer whole = ContGenerate(router.grpc_target(), ContRequest(prompt, chat));
    ASSERT_EQ(whole.code, grpc::StatusCode::OK) << whole.message;
    std::unique_ptr<Occupation> o = BreakNextDecode(router, chat ? "error" : "silence");
    CountRequest(router);
    const ContGrpcAnswer got = ContGenerate(router.grpc_target(), ContRequest(prompt, chat));
    EXPECT_EQ(got.code, grpc::StatusCode::OK) << got.message;
    EXPECT_EQ(got.text, whole.text);
    ASSERT_EQ(got.indexes.size(), static_cast<size_t>(kContTokens));
    for (int i = 0; i < kContTokens; ++i) EXPECT_EQ(got.indexes[i], static_cast<uint32_t>(i));
    EXPECT_EQ(got.final.usage().completion_tokens(), static_cast<uint32_t>(kContTokens));
    EXPECT_EQ(got.final.usage().prompt_tokens(), whole.final.usage().prompt_tokens());
    EXPECT_EQ(got.final.finish_reason(), "length");
    ExpectContinued(router, got.request_id, o->idle.empty() ? "" : o->idle[0]);
    o->Release();
    Sim("d0").ClearFaults().IgnoreError();
    Sim("d1").ClearFaults().IgnoreError();
  }
}

// The gRPC door's unary Complete: the whole answer, continued.
TEST_F(ServeContinuationTest, B29_AGrpcCompleteBrokenAtTokenKReturnsTheWholeAnswer) {
  ServeProcess& router = StartContinuingRouter();
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  auto complete = [&](const narwhal::v1::GenerateRequest& req, narwhal::v1::CompleteResponse* out,
                      std::string* rid) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    CountRequest(router);
    const grpc::Status status = stub->Complete(&context, req, out);
    const auto& md = context.GetServerInitialMetadata();
    if (auto it = md.find("x-request-id"); it != md.end() && rid != nullptr) {
      *rid = std::string(it->second.data(), it->second.size());
    }
    return status;
  };
  for (bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    const narwhal::v1::GenerateRequest req =
        ContRequest(std::string("grpc complete ") + (chat ? "chat" : "text"), chat);
    narwhal::v1::CompleteResponse whole;
    ASSERT_TRUE(complete(req, &whole, nullptr).ok());
    std::unique_ptr<Occupation> o = BreakNextDecode(router, chat ? "close" : "error");
    narwhal::v1::CompleteResponse got;
    std::string rid;
    const grpc::Status status = complete(req, &got, &rid);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(got.text(), whole.text());
    EXPECT_EQ(got.usage().completion_tokens(), static_cast<uint32_t>(kContTokens));
    EXPECT_EQ(got.finish_reason(), "length");
    ASSERT_FALSE(rid.empty());
    ExpectContinued(router, rid, o->idle.empty() ? "" : o->idle[0]);
    o->Release();
    Sim("d0").ClearFaults().IgnoreError();
    Sim("d1").ClearFaults().IgnoreError();
  }
}

// SIGKILL of the decode engine at token k, through both doors.
TEST_F(ServeContinuationTest, B29_ADecodeEngineKilledMidStreamLosesNoAnswer) {
  std::vector<std::unique_ptr<SimProcess>> decoders;
  std::vector<std::tuple<std::string, std::string, std::string>> fleet = {
      {"p0", SimUrl("p0"), "prefill"}};
  for (const char* iid : {"k0", "k1"}) {
    auto sim =
        SimProcess::Start({"--engine-id", iid, "--role", "decode", "--token-interval-ms", "40"});
    ASSERT_TRUE(sim.ok()) << sim.status();
    fleet.emplace_back(iid, (*sim)->url(), "decode");
    decoders.push_back(std::move(*sim));
  }
  ServeProcess& router = StartRouterWith(fleet, {{"continuation", {{"enabled", true}}}});
  // Kills whichever decoder serves the request once k tokens reached the
  // client.
  std::string killed;
  auto on_text = [&](const std::string& text) {
    if (!killed.empty() || std::count(text.begin(), text.end(), ' ') < kContBreakAt) return;
    for (auto& sim : decoders) {
      if (!sim->running()) continue;
      for (const json& r : SimRequests(*sim, "decode")) {
        if (r["end"].is_null()) {
          killed = sim->engine_id();
          sim->Kill(SIGKILL);
          return;
        }
      }
    }
  };
  const std::string prompt = "killed mid stream";
  CountRequest(router);
  const ContGrpcAnswer whole = ContGenerate(router.grpc_target(), ContRequest(prompt, false));
  ASSERT_EQ(whole.code, grpc::StatusCode::OK) << whole.message;
  CountRequest(router);
  const ContGrpcAnswer got =
      ContGenerate(router.grpc_target(), ContRequest(prompt, false), on_text);
  ASSERT_FALSE(killed.empty()) << "no decoder was serving the request";
  EXPECT_EQ(got.code, grpc::StatusCode::OK) << got.message;
  EXPECT_EQ(got.text, whole.text);
  EXPECT_EQ(got.deltas, kContTokens);
  const json row = JournalRowFor(router, got.request_id);
  ASSERT_TRUE(row.contains("continuations")) << row.dump();
  EXPECT_EQ(row["continuations"][0]["from_iid"], killed);
  EXPECT_EQ(row["continuations"][0]["outcome"], "continued");
  EXPECT_GE(row["continuations"][0]["at_token"].get<int>(), kContBreakAt);
}

// B30: stop strings cannot move exactly: the stream ends as B16 says.
TEST_F(ServeContinuationTest, B30_StopStringsAreRefusedWithTheReasonJournaled) {
  ServeProcess& router = StartContinuingRouter();
  json body = Completion("refuse to continue", kContTokens, true);
  body["stop"] = json::array({"never appears"});
  std::unique_ptr<Occupation> o = BreakNextDecode(router, "close");
  const HttpCapture capture = Send(router, kCompletions, body);
  EXPECT_EQ(capture.status, 200);
  EXPECT_FALSE(TerminalErrorEvent(capture).is_null()) << Describe(capture);
  EXPECT_EQ(TokenEvents(capture).size(), static_cast<size_t>(kContBreakAt));
  const json row = JournalRow(router, capture);
  EXPECT_EQ(row["terminal"], "failed");
  ASSERT_TRUE(row.contains("continuations")) << row.dump();
  EXPECT_EQ(row["continuations"][0]["reason"], "stop");
  EXPECT_EQ(row["continuations"][0]["outcome"], "refused");
  o->Release();
}

// Chaos: two of three decode engines SIGKILLed while 200 streams run. Every
// stream a kill hit after its output started is continued (one hit before
// its first token is retried, B14); the test prints how many were hit and
// how many saved (the figure in the README).
TEST_F(ServeContinuationTest, B29_ChaosTwoDecodersKilledDuring200Streams) {
  std::vector<std::unique_ptr<SimProcess>> decoders;
  std::vector<std::tuple<std::string, std::string, std::string>> fleet = {
      {"p0", SimUrl("p0"), "prefill"}, {"p1", SimUrl("p1"), "prefill"}};
  for (const char* iid : {"c0", "c1", "c2"}) {
    auto sim =
        SimProcess::Start({"--engine-id", iid, "--role", "decode", "--token-interval-ms", "25"});
    ASSERT_TRUE(sim.ok()) << sim.status();
    fleet.emplace_back(iid, (*sim)->url(), "decode");
    decoders.push_back(std::move(*sim));
  }
  ServeProcess& router = StartRouterWith(
      fleet, {{"continuation", {{"enabled", true}, {"max_per_request", 2}, {"budget", 1000}}},
              // Streams hit before their first token are retried (B14).
              {"serving", {{"max_inflight", 1000}, {"max_attempts", 3}, {"retry_budget", 1000}}},
              // The survivor takes a hundred continuations at once; on a
              // loaded 2-core machine its first tokens can take over a
              // second, and a stream may pause as long (a killed engine is seen
              // at once: refused or closed).
              {"engine", {{"first_token_timeout_s", 10}, {"decode_read_timeout_s", 5}}}});
  constexpr int kStreams = 200;
  constexpr int kChaosTokens = 40;
  // The uninterrupted answers (8 distinct prompts).
  std::vector<std::string> reference;
  for (int p = 0; p < 8; ++p) {
    json body = Completion("chaos prompt " + std::to_string(p), kChaosTokens, false);
    reference.push_back(Reference(router, kCompletions, body));
  }
  std::vector<HttpCapture> captures(kStreams);
  std::vector<std::thread> clients;
  CountRequest(router, kStreams);
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      const json body = Completion("chaos prompt " + std::to_string(i % 8), kChaosTokens, true);
      captures[i] = PostCapture("127.0.0.1", router.http_port(), kCompletions, body.dump());
    });
  }
  // A quarter and half-way through the answers, one decoder each is killed.
  std::this_thread::sleep_for(std::chrono::milliseconds(kChaosTokens * 25 / 4 + 300));
  decoders[0]->Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(kChaosTokens * 25 / 4));
  decoders[1]->Kill(SIGKILL);
  for (std::thread& t : clients) t.join();

  // Every stream ends exact, or failed before its first token (a request
  // placed on a dead engine before the router knew, once its attempts ran
  // out: B14's business, not continuation's). None ends broken mid-answer.
  int hit = 0, saved = 0, exact = 0, failed_before_output = 0;
  std::string wrong;  // the rows of answers that are neither
  for (int i = 0; i < kStreams; ++i) {
    const HttpCapture& c = captures[i];
    const bool right = c.status == 200 && TerminalErrorEvent(c).is_null() &&
                       StreamedText(c) == reference[i % 8] &&
                       TokenEvents(c).size() == static_cast<size_t>(kChaosTokens);
    if (right) ++exact;
    const std::string rid = Header(c, "x-request-id");
    if (rid.empty()) continue;
    const json row = JournalRowFor(router, rid);
    if (!right) {
      if (c.status != 200 && row["output_started"] == false) {
        ++failed_before_output;
      } else if (wrong.size() < 4000) {
        wrong += row.dump() + "\n";
      }
    }
    if (!row.contains("continuations")) continue;
    ++hit;
    if (row["terminal"] == "completed" && right) ++saved;
  }
  std::printf(
      "continuation chaos: %d streams, %d hit after output started, %d saved, "
      "%d exact answers in all, %d failed before their first token\n",
      kStreams, hit, saved, exact, failed_before_output);
  RecordProperty("streams_hit", hit);
  RecordProperty("streams_saved", saved);
  EXPECT_GT(hit, 0) << "no kill hit a stream";
  EXPECT_EQ(saved, hit);
  EXPECT_EQ(exact + failed_before_output, kStreams) << wrong;
}

}  // namespace
}  // namespace narwhal::testing
