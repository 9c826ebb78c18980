// End-to-end tests of narwhal-serve's backend execution (SPEC §5, B1–B19)
// through its HTTP shim, against real narwhal-sim engines.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

const json kPlaceholderKv = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                             {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                             {"remote_host", nullptr},      {"remote_port", nullptr}};

json Rule(const std::string& kind, const std::string& phase, const json& params = json::object()) {
  json rule = {{"kind", kind}, {"phase", phase}};
  rule.update(params);
  return rule;
}

json Rules(std::initializer_list<json> rules) {
  json list = json::array();
  for (const json& rule : rules) list.push_back(rule);
  return list;
}

// Whether `record` is the release of an abandoned handoff (a one-token
// decode whose backend id is "<rid>-<attempt>r"), not a client leg.
bool IsRelease(const json& record) {
  const std::string id = record["headers"].value("x-request-id", "");
  return !id.empty() && id.back() == 'r' && record["body"].is_object() &&
         record["body"].value("max_tokens", 0) == 1;
}

// The client legs of `phase` an engine received (releases left out).
std::vector<json> ClientLegs(SimProcess& sim, const std::string& phase) {
  std::vector<json> out;
  for (const json& r : SimRequests(sim, phase)) {
    if (!IsRelease(r)) out.push_back(r);
  }
  return out;
}

// The record of the client leg whose prompt (or first message) is `marker`.
std::vector<json> RequestsWithPrompt(SimProcess& sim, const std::string& phase,
                                     const std::string& marker) {
  std::vector<json> out;
  for (const json& r : ClientLegs(sim, phase)) {
    const json& body = r["body"];
    if (!body.is_object()) continue;
    if (body.value("prompt", json()) == marker) out.push_back(r);
    if (body.contains("messages") && body["messages"].is_array() && !body["messages"].empty() &&
        body["messages"][0].value("content", json()) == marker) {
      out.push_back(r);
    }
  }
  return out;
}

// Expects an ordinary (non-streamed) error response per SPEC §4.
void ExpectErrorResponse(const HttpCapture& c, int status, const std::string& type,
                         const std::string& message_prefix) {
  EXPECT_EQ(c.status, status) << Describe(c);
  EXPECT_FALSE(absl::StrContains(Header(c, "Content-Type"), "text/event-stream"))
      << "an error before the first token must be a plain HTTP response: " << Describe(c);
  const json error = ErrorOf(c.body);
  ASSERT_TRUE(error.is_object()) << Describe(c);
  EXPECT_EQ(error.value("type", json()), type) << Describe(c);
  EXPECT_EQ(error.value("code", json()), status) << Describe(c);
  EXPECT_TRUE(error.contains("param") && error["param"].is_null()) << Describe(c);
  ASSERT_TRUE(error.value("message", json()).is_string()) << Describe(c);
  EXPECT_TRUE(absl::StartsWith(error["message"].get<std::string>(), message_prefix))
      << "message should start with \"" << message_prefix << "\": " << Describe(c);
}

double HeaderSeconds(const HttpCapture& c, const std::string& name) {
  double v = -1;
  EXPECT_TRUE(absl::SimpleAtod(Header(c, name), &v)) << name << " missing: " << Describe(c);
  return v;
}

class ServeBackendTest : public E2eTest {};

// --- B1, B2, B3, B4, B5 ------------------------------------------------------

TEST_F(ServeBackendTest, B1PrefillLegIsOneTokenNonStreamingWithPlaceholderDescriptor) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const json body = Completion("B1 completions prompt", 6, true,
                               {{"stream_options", {{"include_usage", true}}}, {"min_tokens", 2}});
  HttpCapture c = Send(router, kCompletions, body, WithHeaders({{"X-Request-Id", "client-b1"}}));
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_TRUE(c.saw_done()) << Describe(c);
  EXPECT_EQ(TokenEvents(c).size(), 6u) << Describe(c);
  const std::string rid = Header(c, "x-request-id");
  EXPECT_FALSE(rid.empty());

  std::vector<json> prefills = SimRequests(Sim("p0"), "prefill");
  ASSERT_EQ(prefills.size(), 1u);
  const json& p = prefills[0];
  EXPECT_EQ(p["path"], kCompletions);
  EXPECT_EQ(p["body"]["stream"], false) << p.dump();
  EXPECT_EQ(p["body"]["max_tokens"], 1) << p.dump();
  EXPECT_FALSE(p["body"].contains("stream_options")) << p.dump();
  EXPECT_FALSE(p["body"].contains("min_tokens")) << p.dump();
  EXPECT_EQ(p["body"]["kv_transfer_params"], kPlaceholderKv) << p.dump();
  EXPECT_EQ(p["body"]["prompt"], "B1 completions prompt");
  EXPECT_EQ(p["body"]["model"], kModel);
  const std::string backend_id = p["headers"].value("x-request-id", "");
  EXPECT_FALSE(backend_id.empty()) << "prefill leg without X-Request-Id: " << p.dump();
  EXPECT_NE(backend_id, "client-b1");

  std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_NE(decodes[0]["headers"].value("x-request-id", ""), backend_id)
      << "decode must get its own backend request id";

  const json row = JournalRow(router, c);
  EXPECT_EQ(row["rid"], rid);
  EXPECT_EQ(row["client_rid"], "client-b1");
  EXPECT_EQ(row["api"], "completions");
  EXPECT_EQ(row["stream"], true);
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_EQ(row["status"], 200);
  EXPECT_EQ(row["prefill_iid"], "p0");
  EXPECT_EQ(row["decode_iid"], "d0");
  EXPECT_EQ(row["crossed"], true);
  EXPECT_EQ(row["attempts"], 1);
  EXPECT_EQ(row["output_tokens"], 6);
  EXPECT_TRUE(row["attempt_failures"].empty()) << row.dump();
}

TEST_F(ServeBackendTest, B1ChatPrefillCapsMaxCompletionTokensToo) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const json body = Chat("B1 chat prompt", 5, false,
                         {{"max_completion_tokens", 5}, {"min_completion_tokens", 1}});
  HttpCapture c = Send(router, kChat, body);
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_FALSE(ResponseText(c.body).empty()) << Describe(c);

  std::vector<json> prefills = SimRequests(Sim("p0"), "prefill");
  ASSERT_EQ(prefills.size(), 1u);
  const json& p = prefills[0]["body"];
  EXPECT_EQ(prefills[0]["path"], kChat);
  EXPECT_EQ(p["max_tokens"], 1) << p.dump();
  EXPECT_EQ(p["max_completion_tokens"], 1) << p.dump();
  EXPECT_FALSE(p.contains("min_completion_tokens")) << p.dump();
  EXPECT_EQ(p["stream"], false);
  EXPECT_EQ(p["kv_transfer_params"], kPlaceholderKv);
  EXPECT_EQ(p["messages"], body["messages"]);

  std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0]["path"], kChat);
  EXPECT_EQ(decodes[0]["body"]["max_completion_tokens"], 5) << decodes[0].dump();
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["api"], "chat");
  EXPECT_EQ(row["terminal"], "completed");
}

TEST_F(ServeBackendTest, B2PrefillWithoutDescriptorIs502NoHandoff) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    SetFaults("p0", Rules({Rule("no_descriptor", "prefill")}));
    HttpCapture c = Send(router, kCompletions, Completion("B2", 4, stream));
    ExpectErrorResponse(c, 502, "prefill", "no handoff:");
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["terminal"], "failed");
    EXPECT_EQ(row["status"], 502);
    EXPECT_EQ(row["error_type"], "prefill");
    EXPECT_TRUE(absl::StartsWith(row.value("error", ""), "no handoff:")) << row.dump();
  }
  EXPECT_TRUE(SimRequests(Sim("d0")).empty()) << "decode engine got a request without a handoff";
}

TEST_F(ServeBackendTest, B3InvalidDescriptorIs502InvalidContinuationAndDecodeGetsNothing) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const struct {
    const char* kind;
    const char* rejection;
  } kFaults[] = {{"descriptor_without_engine_id", "missing_engine_id"},
                 {"malformed_block_ids", "malformed_block_ids"}};
  for (const auto& [kind, rejection] : kFaults) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(kind) + (stream ? " streaming" : " non-streaming"));
      SetFaults("p0", Rules({Rule(kind, "prefill")}));
      HttpCapture c = Send(router, kCompletions, Completion(std::string("B3 ") + kind, 4, stream));
      ExpectErrorResponse(c, 502, "decode", "invalid continuation:");
      const json row = JournalRow(router, c);
      EXPECT_EQ(row["terminal"], "failed");
      EXPECT_EQ(row["status"], 502);
      EXPECT_EQ(row["error_type"], "decode");
      ASSERT_EQ(row["attempt_failures"].size(), 1u) << row.dump();
      EXPECT_EQ(row["attempt_failures"][0]["phase"], "decode") << row.dump();
      EXPECT_EQ(row["attempt_failures"][0]["handoff_rejection"], rejection) << row.dump();
    }
  }
  EXPECT_TRUE(SimRequests(Sim("d0")).empty())
      << "the decode engine must receive nothing when the descriptor is rejected";
  for (const auto& [kind, rejection] : kFaults) {
    EXPECT_EQ(MetricSum(Metrics(router), "narwhal_handoff_rejected_total", {{"reason", rejection}}),
              2)
        << kind;
  }
}

TEST_F(ServeBackendTest, B4DecodeCarriesDescriptorVerbatimAndClientFieldsPassThrough) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const json extra = {{"temperature", 0.25},
                      {"seed", 1234},
                      {"stop", json::array({"never-in-output"})},
                      {"top_k", 7},
                      {"vendor_extension", {{"mode", "fast"}, {"levels", json::array({1, 2})}}}};
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    ASSERT_TRUE(Sim("p0").ClearRequests().ok());
    ASSERT_TRUE(Sim("d0").ClearRequests().ok());
    HttpCapture c = Send(router, kCompletions, Completion("B4 pass-through", 5, stream, extra));
    ASSERT_EQ(c.status, 200) << Describe(c);

    std::vector<json> prefills = SimRequests(Sim("p0"), "prefill");
    std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
    ASSERT_EQ(prefills.size(), 1u);
    ASSERT_EQ(decodes.size(), 1u);
    for (const json* leg : {&prefills[0], &decodes[0]}) {
      const json& b = (*leg)["body"];
      for (const auto& [key, value] : extra.items()) {
        EXPECT_EQ(b.value(key, json()), value) << key << " on the " << (*leg)["phase"] << " leg";
      }
    }
    const json& d = decodes[0]["body"];
    EXPECT_EQ(d["stream"], true) << "the decode leg always streams upstream";
    EXPECT_EQ(d["max_tokens"], 5);
    EXPECT_EQ(d["prompt"], "B4 pass-through");

    // The descriptor p0 issued (its KV store) is what d0 got, with every
    // runtime field retained.
    absl::StatusOr<json> kv = Sim("p0").Kv();
    ASSERT_TRUE(kv.ok()) << kv.status();
    const json& sent = d["kv_transfer_params"];
    ASSERT_TRUE(sent.is_object()) << d.dump();
    json issued;
    for (const json& e : (*kv)["consumed"]) {
      if (e["remote_request_id"] == sent["remote_request_id"]) issued = e;
    }
    ASSERT_TRUE(issued.is_object())
        << "no consumed handoff on p0 matches " << sent.dump() << " in " << kv->dump();
    EXPECT_EQ(sent["remote_block_ids"], issued["remote_block_ids"]);
    EXPECT_EQ(sent["remote_engine_id"], "p0");
    EXPECT_EQ(sent["remote_host"], "127.0.0.1");
    EXPECT_EQ(sent["remote_port"], Sim("p0").port());
    EXPECT_EQ(sent["do_remote_prefill"], true);
    EXPECT_EQ(sent["do_remote_decode"], false);
    EXPECT_EQ(sent["remote_num_tokens"], issued["remote_num_tokens"]);
    EXPECT_EQ(sent.value("tp_size", json()), 1) << sent.dump();
    EXPECT_EQ(sent.value("transfer_mode", json()), "pull") << sent.dump();
    EXPECT_TRUE(sent.contains("remote_blocks_expiry_time") &&
                sent["remote_blocks_expiry_time"].is_null())
        << "null-valued descriptor fields are retained too: " << sent.dump();
    EXPECT_EQ(issued["consumer"]["engine_id"], "d0");
    JournalRow(router, c);
  }
}

TEST_F(ServeBackendTest, B5SameWorkerDecodeDropsKvTransferParams) {
  ServeProcess& router = StartRouter({"b0"});
  const json client_kv = {{"do_remote_prefill", true}, {"remote_host", "attacker.example"}};
  for (const auto& [path, body] :
       {std::pair{std::string(kCompletions),
                  Completion("B5 same worker", 4, true, {{"kv_transfer_params", client_kv}})},
        std::pair{std::string(kChat),
                  Chat("B5 same worker", 4, false, {{"kv_transfer_params", client_kv}})}}) {
    SCOPED_TRACE(path);
    ASSERT_TRUE(Sim("b0").ClearRequests().ok());
    HttpCapture c = Send(router, path, body);
    ASSERT_EQ(c.status, 200) << Describe(c);
    std::vector<json> prefills = SimRequests(Sim("b0"), "prefill");
    std::vector<json> decodes = SimRequests(Sim("b0"), "decode");
    ASSERT_EQ(prefills.size(), 1u);
    ASSERT_EQ(decodes.size(), 1u);
    EXPECT_EQ(prefills[0]["body"]["kv_transfer_params"], kPlaceholderKv);
    EXPECT_FALSE(decodes[0]["body"].contains("kv_transfer_params"))
        << "same-worker decode must carry no kv_transfer_params: " << decodes[0].dump();
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["prefill_iid"], "b0");
    EXPECT_EQ(row["decode_iid"], "b0");
    EXPECT_EQ(row["crossed"], false);
  }
}

TEST_F(ServeBackendTest, B5DecodeStaysOffItsProducerWhenAnotherEngineCanTakeIt) {
  // b0 is the only engine that can prefill; decode may go to b0 or d0 and
  // must go to d0.
  ServeProcess& router = StartRouter({"b0", "d0"});
  for (int i = 0; i < 4; ++i) {
    HttpCapture c = Send(router, kCompletions, Completion("B5 off producer", 3, i % 2 == 0));
    ASSERT_EQ(c.status, 200) << Describe(c);
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["prefill_iid"], "b0");
    EXPECT_EQ(row["decode_iid"], "d0") << "decode landed on its producer: " << row.dump();
    EXPECT_EQ(row["crossed"], true);
  }
  EXPECT_TRUE(SimRequests(Sim("b0"), "decode").empty());
  EXPECT_EQ(SimRequests(Sim("d0"), "decode").size(), 4u);
}

TEST_F(ServeBackendTest, ClientKvTransferParamsNeverReachAnEngine) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const json client_kv = {
      {"do_remote_prefill", true},          {"do_remote_decode", false},
      {"remote_engine_id", "evil"},         {"remote_block_ids", json::array({1, 2, 3})},
      {"remote_host", "attacker.example"},  {"remote_port", 1},
      {"remote_request_id", "evil-request"}};
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    ASSERT_TRUE(Sim("p0").ClearRequests().ok());
    ASSERT_TRUE(Sim("d0").ClearRequests().ok());
    HttpCapture c =
        Send(router, kChat, Chat("client kv", 3, stream, {{"kv_transfer_params", client_kv}}));
    ASSERT_EQ(c.status, 200) << Describe(c);
    std::vector<json> prefills = SimRequests(Sim("p0"), "prefill");
    std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
    ASSERT_EQ(prefills.size(), 1u);
    ASSERT_EQ(decodes.size(), 1u);
    EXPECT_EQ(prefills[0]["body"]["kv_transfer_params"], kPlaceholderKv);
    const json& sent = decodes[0]["body"]["kv_transfer_params"];
    EXPECT_EQ(sent.value("remote_engine_id", json()), "p0") << sent.dump();
    EXPECT_EQ(sent.value("remote_host", json()), "127.0.0.1") << sent.dump();
    EXPECT_NE(sent.value("remote_request_id", json()), "evil-request") << sent.dump();
    for (const json* leg : {&prefills[0], &decodes[0]}) {
      EXPECT_FALSE(absl::StrContains((*leg)["body"].dump(), "attacker.example")) << leg->dump();
      EXPECT_FALSE(absl::StrContains((*leg)["body"].dump(), "evil")) << leg->dump();
    }
    JournalRow(router, c);
  }
}

// --- B7, B8, B9 ----------------------------------------------------------------

TEST_F(ServeBackendTest, B7HandoffOlderThanTheLimitIs504HandoffExpired) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"handoff_timeout_s", 0.2}}}});
  SetFaults("p0", Rules({Rule("delay_headers", "prefill", {{"ms", 500}})}));
  HttpCapture c = Send(router, kCompletions, Completion("B7", 4, true));
  ExpectErrorResponse(c, 504, "handoff_expired", "KV handoff expired");
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "expired");
  EXPECT_EQ(row["reason"], "handoff");
  EXPECT_EQ(row["status"], 504);
  EXPECT_EQ(row["error_type"], "handoff_expired");
  // The expired handoff is never dispatched as the client's decode; d0 gets
  // at most its release (a one-token pull, x-request-id "<rid>-1r").
  for (const json& r : SimRequests(Sim("d0"))) {
    const std::string id = r["headers"].value("x-request-id", "");
    EXPECT_TRUE(!id.empty() && id.back() == 'r')
        << "an expired handoff must not be dispatched: " << r.dump();
    EXPECT_EQ(r["body"].value("max_tokens", 0), 1) << r.dump();
  }
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_handoff_rejected_total", {{"reason", "expired"}}),
            1);

  // A young handoff still passes.
  HttpCapture ok = Send(router, kCompletions, Completion("B7 young", 4, true));
  EXPECT_EQ(ok.status, 200) << Describe(ok);
}

TEST_F(ServeBackendTest, B8PrefillRetryUsesFreshBackendIdsAndAnotherProducer) {
  ServeProcess& router = StartRouter({"p0", "p1", "d0"}, {{"serving", {{"max_attempts", 2}}}});
  // p_busy holds one prefill in flight, so least-loaded placement sends the
  // next prefill to the other producer, which answers 503.
  std::unique_ptr<Occupation> hold = Occupy(router, "prefill", {"p0", "p1"});
  ASSERT_EQ(hold->idle.size(), 1u);
  const std::string failing = hold->idle[0];
  const std::string healthy = hold->busy;
  SetFaults(failing, Rules({Rule("http_status", "prefill", {{"status", 503}, {"times", -1}})}));

  HttpCapture c = Send(router, kCompletions, Completion("B8 prefill retry", 4, false),
                       WithHeaders({{"X-Request-Id", "client-b8"}}));
  ASSERT_EQ(c.status, 200) << Describe(c);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_EQ(row["attempts"], 2) << row.dump();
  EXPECT_EQ(row["prefill_iid"], healthy);
  ASSERT_EQ(row["attempt_failures"].size(), 1u) << row.dump();
  const json& f = row["attempt_failures"][0];
  EXPECT_EQ(f["attempt"], 1);
  EXPECT_EQ(f["phase"], "prefill");
  EXPECT_EQ(f["iid"], failing);
  EXPECT_EQ(f["transient"], true);
  EXPECT_EQ(f["retry_scheduled"], true);
  EXPECT_EQ(f["output_started"], false);

  std::vector<json> first = RequestsWithPrompt(Sim(failing), "prefill", "B8 prefill retry");
  std::vector<json> second = RequestsWithPrompt(Sim(healthy), "prefill", "B8 prefill retry");
  std::vector<json> decode = RequestsWithPrompt(Sim("d0"), "decode", "B8 prefill retry");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  ASSERT_EQ(decode.size(), 1u);
  std::set<std::string> ids = {first[0]["headers"].value("x-request-id", ""),
                               second[0]["headers"].value("x-request-id", ""),
                               decode[0]["headers"].value("x-request-id", "")};
  EXPECT_EQ(ids.size(), 3u) << "backend request ids must be fresh per attempt and phase";
  EXPECT_EQ(ids.count(""), 0u);
  EXPECT_EQ(ids.count("client-b8"), 0u);
  hold->Release();
}

TEST_F(ServeBackendTest, B8B14DecodeRetryGetsFreshIdsNewPrefillAndAvoidsFailedEngines) {
  ServeProcess& router = StartRouter(
      {"p0", "p1", "d0", "d1"},
      {{"serving", {{"max_attempts", 2}}}, {"engine", {{"first_token_timeout_s", 10}}}});
  std::unique_ptr<Occupation> hold = Occupy(router, "decode", {"d0", "d1"});
  ASSERT_EQ(hold->idle.size(), 1u);
  const std::string failing = hold->idle[0];
  const std::string healthy = hold->busy;
  SetFaults(failing, Rules({Rule("http_status", "decode", {{"status", 503}, {"times", -1}})}));

  HttpCapture c = Send(router, kCompletions, Completion("B8 decode retry", 4, true));
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_TRUE(c.saw_done());
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["attempts"], 2) << row.dump();
  EXPECT_EQ(row["decode_iid"], healthy);
  ASSERT_EQ(row["attempt_failures"].size(), 1u) << row.dump();
  const json& f = row["attempt_failures"][0];
  EXPECT_EQ(f["phase"], "decode");
  EXPECT_EQ(f["iid"], failing);
  EXPECT_EQ(f["retry_scheduled"], true);

  // Two prefills (a handoff is never reused), on two different producers
  // (a failed decode also excludes that attempt's producer), two decodes.
  std::vector<json> prefills;
  for (const char* p : {"p0", "p1"}) {
    for (json& r : RequestsWithPrompt(Sim(p), "prefill", "B8 decode retry")) {
      r["engine"] = p;
      prefills.push_back(r);
    }
  }
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_NE(prefills[0]["engine"], prefills[1]["engine"])
      << "the retry's prefill must avoid the first attempt's producer";
  std::vector<json> d_fail = RequestsWithPrompt(Sim(failing), "decode", "B8 decode retry");
  std::vector<json> d_ok = RequestsWithPrompt(Sim(healthy), "decode", "B8 decode retry");
  ASSERT_EQ(d_fail.size(), 1u);
  ASSERT_EQ(d_ok.size(), 1u);
  std::set<std::string> ids;
  for (const json& r : {prefills[0], prefills[1], d_fail[0], d_ok[0]}) {
    ids.insert(r["headers"].value("x-request-id", ""));
  }
  EXPECT_EQ(ids.size(), 4u) << "fresh backend ids for both phases of every attempt";
  // The retry's decode consumed the retry's own handoff.
  EXPECT_NE(d_fail[0]["body"]["kv_transfer_params"]["remote_request_id"],
            d_ok[0]["body"]["kv_transfer_params"]["remote_request_id"]);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_retry_attempts_total"), 1);
  hold->Release();
}

TEST_F(ServeBackendTest, B9TimingHeadersMatchTheJournal) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  HttpCapture c = Send(router, kCompletions, Completion("B9 timing", 4, false));
  ASSERT_EQ(c.status, 200) << Describe(c);
  const double ttft = HeaderSeconds(c, "x-narwhal-ttft-s");
  const double first_byte = HeaderSeconds(c, "x-narwhal-first-byte-s");
  EXPECT_GT(ttft, 0);
  EXPECT_GT(first_byte, 0);
  EXPECT_LE(ttft, first_byte);
  EXPECT_LT(first_byte, absl::ToDoubleSeconds(c.elapsed) + 0.001);
  const json row = JournalRow(router, c);
  ASSERT_TRUE(row["ttft_s"].is_number()) << row.dump();
  ASSERT_TRUE(row["first_byte_s"].is_number()) << row.dump();
  EXPECT_NEAR(row["ttft_s"].get<double>(), ttft, 1e-6);
  EXPECT_NEAR(row["first_byte_s"].get<double>(), first_byte, 1e-6);
  EXPECT_EQ(row["output_tokens"], 4);
}

// --- B10, B11 --------------------------------------------------------------------

struct FaultCase {
  std::string name;
  std::string iid;
  json rule;
  int status;
  std::string type;
  std::string prefix;
};

class ServeFaultTest : public ServeBackendTest {
 protected:
  // Each case, non-streaming then streaming, on a fresh rule set: an
  // ordinary HTTP error with the case's status, type and message prefix.
  void Run(ServeProcess& router, const std::vector<FaultCase>& cases) {
    for (const FaultCase& fc : cases) {
      for (bool stream : {false, true}) {
        SCOPED_TRACE(fc.name + (stream ? " (streaming)" : " (non-streaming)"));
        ASSERT_TRUE(Sim("p0").ClearFaults().ok());
        ASSERT_TRUE(Sim("d0").ClearFaults().ok());
        SetFaults(fc.iid, json::array({fc.rule}));
        HttpCapture c = Send(router, kCompletions, Completion(fc.name, 4, stream));
        ExpectErrorResponse(c, fc.status, fc.type, fc.prefix);
        const json row = JournalRow(router, c);
        EXPECT_EQ(row["status"], fc.status) << row.dump();
        EXPECT_EQ(row["error_type"], fc.type) << row.dump();
        EXPECT_EQ(row["attempts"], 1) << row.dump();
        EXPECT_EQ(row["terminal"], "failed") << row.dump();
      }
    }
  }
};

TEST_F(ServeFaultTest, B10EngineStatusMapping) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  Run(router,
      {
          {"prefill 503", "p0", Rule("http_status", "prefill", {{"status", 503}}), 502, "prefill",
           "engine returned HTTP 503"},
          {"decode 503", "d0", Rule("http_status", "decode", {{"status", 503}}), 502, "decode",
           "engine returned HTTP 503"},
          {"prefill 408", "p0", Rule("http_status", "prefill", {{"status", 408}}), 504, "prefill",
           ""},
          {"decode 408", "d0", Rule("http_status", "decode", {{"status", 408}}), 504, "decode", ""},
          {"decode 504", "d0", Rule("http_status", "decode", {{"status", 504}}), 504, "decode", ""},
          {"decode 500", "d0", Rule("http_status", "decode", {{"status", 500}}), 502, "decode", ""},
          {"prefill dropped connection", "p0", Rule("drop_connection", "prefill"), 502, "prefill",
           ""},
      });
}

TEST_F(ServeFaultTest, B10EngineClientErrorKeepsTheEnginesStatusAndMessage) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string too_long =
      "This model's maximum context length is 32768 tokens. However, you requested 40000 "
      "tokens in the messages. Please reduce the length of the messages.";
  for (const char* phase : {"prefill", "decode"}) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(phase) + (stream ? " streaming" : " non-streaming"));
      SetFaults(phase[0] == 'p' ? "p0" : "d0",
                Rules({Rule("http_status", phase, {{"status", 400}, {"message", too_long}})}));
      HttpCapture c = Send(router, kCompletions, Completion("B10 too long", 4, stream));
      ExpectErrorResponse(c, 400, "invalid_request_error", too_long);
      EXPECT_EQ(ErrorOf(c.body).value("message", ""), too_long);
      const json row = JournalRow(router, c);
      EXPECT_EQ(row["status"], 400);
      EXPECT_EQ(row["terminal"], "failed");
      if (phase[0] == 'd') {
        // The refused decode's handoff is released through the consumer
        // after the client has its answer: wait for that leg, or the next
        // iteration's fault rule could fire on it instead of its decode.
        const std::string release = Header(c, "x-request-id") + "-1r";
        bool released = false;
        for (int i = 0; i < 500 && !released; ++i) {
          for (const json& r : SimRequests(Sim("d0"), "decode")) {
            released = released || r["headers"].value("x-request-id", "") == release;
          }
          if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_TRUE(released) << "no release leg " << release << " reached d0";
      }
    }
  }
}

TEST_F(ServeFaultTest, B10ConnectionRefusedIs502) {
  absl::StatusOr<std::unique_ptr<SimProcess>> dead =
      SimProcess::Start({"--engine-id", "gone", "--model", kModel, "--threads", "4"});
  ASSERT_TRUE(dead.ok()) << dead.status();
  const std::string dead_url = (*dead)->url();
  (*dead)->Kill(SIGKILL);
  ASSERT_TRUE((*dead)->Wait(absl::Seconds(10)).has_value());

  for (const auto& [engines, type] :
       {std::pair{std::vector<std::tuple<std::string, std::string, std::string>>{
                      {"px", dead_url, "prefill"}, {"d0", SimUrl("d0"), "decode"}},
                  std::string("prefill")},
        std::pair{std::vector<std::tuple<std::string, std::string, std::string>>{
                      {"p0", SimUrl("p0"), "prefill"}, {"dx", dead_url, "decode"}},
                  std::string("decode")}}) {
    SCOPED_TRACE(type + " engine down");
    ServeProcess& router = StartRouterWith(engines);
    for (bool stream : {false, true}) {
      HttpCapture c = Send(router, kCompletions, Completion("B10 refused", 4, stream));
      ExpectErrorResponse(c, 502, type, "engine unreachable");
      const json row = JournalRow(router, c);
      EXPECT_EQ(row["status"], 502);
      EXPECT_EQ(row["error_type"], type);
    }
  }
}

TEST_F(ServeFaultTest, B11InvalidStreamTermination) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  Run(router, {
                  {"done before token", "d0", Rule("done_before_token", "decode"), 502, "decode",
                   "stream ended with [DONE] before any token arrived"},
                  {"close before done", "d0", Rule("close_before_done", "decode", {{"tokens", 0}}),
                   502, "decode", "stream ended before the [DONE] terminator"},
                  {"error in stream 503", "d0",
                   Rule("error_in_stream", "decode", {{"after_tokens", 0}, {"code", 503}}), 503,
                   "decode", ""},
                  {"error in stream 429", "d0",
                   Rule("error_in_stream", "decode", {{"after_tokens", 0}, {"code", 429}}), 429,
                   "decode", ""},
              });
}

// --- B12, B13, B16 ------------------------------------------------------------------

TEST_F(ServeFaultTest, B12NoFirstTokenIs504AndAStreamingClientGetsPlainHttp) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  Run(router,
      {
          {"silent before first token", "d0", Rule("silent_before_first_token", "decode"), 504,
           "decode", "no first token within"},
          {"metadata then silence", "d0", Rule("metadata_then_silence", "decode", {{"chunks", 2}}),
           504, "decode", "no first token within"},
          // Response-header delays consume the same budget.
          {"slow decode headers", "d0", Rule("delay_headers", "decode", {{"ms", 3000}}), 504,
           "decode", "no first token within"},
      });
  // The budget is engine.first_token_timeout_s (1 s), not the request deadline.
  SetFaults("d0", Rules({Rule("silent_before_first_token", "decode")}));
  HttpCapture c = Send(router, kCompletions, Completion("B12 timing", 4, true));
  EXPECT_EQ(c.status, 504);
  EXPECT_GE(c.elapsed, absl::Milliseconds(900)) << Describe(c);
  EXPECT_LT(c.elapsed, absl::Seconds(10)) << Describe(c);
  JournalRow(router, c);
}

TEST_F(ServeBackendTest, B13SilenceAfterTokensEndsCommittedStreamWithTerminalEvent) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  SetFaults("d0", Rules({Rule("stall_after_tokens", "decode", {{"tokens", 2}})}));
  HttpCapture c = Send(router, kCompletions, Completion("B13 streaming", 6, true));
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_TRUE(absl::StrContains(Header(c, "Content-Type"), "text/event-stream"));
  EXPECT_EQ(TokenEvents(c).size(), 2u) << Describe(c);
  EXPECT_FALSE(c.saw_done()) << "a failed stream must not end with [DONE]: " << Describe(c);
  const json terminal = TerminalErrorEvent(c);
  ASSERT_TRUE(terminal.is_object()) << Describe(c);
  EXPECT_EQ(terminal.value("type", json()), "decode");
  EXPECT_EQ(terminal.value("code", json()), 504);
  EXPECT_TRUE(absl::StartsWith(terminal.value("message", ""), "engine went silent between tokens"))
      << terminal.dump();
  json row = JournalRow(router, c);
  EXPECT_EQ(row["status"], 504);
  EXPECT_EQ(row["terminal"], "failed");
  EXPECT_EQ(row["output_tokens"], 2);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  EXPECT_EQ(row["attempt_failures"][0]["output_started"], true);

  SetFaults("d0", Rules({Rule("stall_after_tokens", "decode", {{"tokens", 2}})}));
  HttpCapture plain = Send(router, kCompletions, Completion("B13 non-streaming", 6, false));
  ExpectErrorResponse(plain, 504, "decode", "engine went silent between tokens");
  row = JournalRow(router, plain);
  EXPECT_EQ(row["status"], 504);
}

TEST_F(ServeBackendTest, B16ErrorAfterOutputEndsStreamWithTheErrorsCode) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"max_attempts", 2}}}});
  for (const auto& [code, expected] :
       {std::pair{json(503), 503}, std::pair{json(400), 400}, std::pair{json("overloaded"), 500}}) {
    SCOPED_TRACE(code.dump());
    SetFaults("d0", Rules({Rule("error_in_stream", "decode",
                                {{"after_tokens", 2}, {"code", code}, {"message", "boom"}})}));
    HttpCapture c = Send(router, kCompletions, Completion("B16", 6, true));
    ASSERT_EQ(c.status, 200) << Describe(c);
    EXPECT_EQ(TokenEvents(c).size(), 2u) << Describe(c);
    EXPECT_FALSE(c.saw_done());
    const json terminal = TerminalErrorEvent(c);
    ASSERT_TRUE(terminal.is_object()) << Describe(c);
    EXPECT_EQ(terminal.value("code", json()), expected) << terminal.dump();
    EXPECT_EQ(terminal.value("type", json()), "decode") << terminal.dump();
    EXPECT_TRUE(absl::StrContains(terminal.value("message", ""), "boom")) << terminal.dump();
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["status"], expected) << row.dump();
    EXPECT_EQ(row["terminal"], "failed");
    EXPECT_EQ(row["attempts"], 1) << "nothing after visible output is retried: " << row.dump();
    EXPECT_EQ(row["output_tokens"], 2);
  }
  EXPECT_EQ(SimRequests(Sim("d0"), "decode").size(), 3u);
}

// --- B14, B15 -----------------------------------------------------------------------

TEST_F(ServeBackendTest, B14NonTransientEngineRejectionIsNotRetried) {
  ServeProcess& router =
      StartRouter({"p0", "p1", "d0", "d1"}, {{"serving", {{"max_attempts", 2}}}});
  for (const char* d : {"d0", "d1"}) {
    SetFaults(d, Rules({Rule("http_status", "decode",
                             {{"status", 400}, {"message", "bad sampling"}, {"times", -1}})}));
  }
  HttpCapture c = Send(router, kCompletions, Completion("B14 400", 4, true));
  ExpectErrorResponse(c, 400, "invalid_request_error", "bad sampling");
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["attempts"], 1);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  EXPECT_EQ(row["attempt_failures"][0]["transient"], false);
  EXPECT_EQ(row["attempt_failures"][0]["retry_scheduled"], false);
  // One client decode (the refused handoff's release aside).
  EXPECT_EQ(ClientLegs(Sim("d0"), "decode").size() + ClientLegs(Sim("d1"), "decode").size(), 1u);
  EXPECT_EQ(SimRequests(Sim("p0"), "prefill").size() + SimRequests(Sim("p1"), "prefill").size(),
            1u);
}

TEST_F(ServeBackendTest, B14TransientFaultIsNotRetriedByDefault) {
  ServeProcess& router = StartRouter({"p0", "p1", "d0", "d1"});  // max_attempts default 1
  for (const char* d : {"d0", "d1"}) {
    SetFaults(d, Rules({Rule("http_status", "decode", {{"status", 503}, {"times", -1}})}));
  }
  HttpCapture c = Send(router, kCompletions, Completion("B14 default", 4, false));
  ExpectErrorResponse(c, 502, "decode", "engine returned HTTP 503");
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["attempts"], 1);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  EXPECT_EQ(row["attempt_failures"][0]["transient"], true);
  EXPECT_EQ(row["attempt_failures"][0]["retry_scheduled"], false);
  // One client decode (the refused handoff's release aside).
  EXPECT_EQ(ClientLegs(Sim("d0"), "decode").size() + ClientLegs(Sim("d1"), "decode").size(), 1u);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_retry_attempts_total"), 0);
}

TEST_F(ServeBackendTest, B15FailedEngineGetsNoLegsDuringQuarantine) {
  constexpr double kQuarantineS = 3;
  ServeProcess& router =
      StartRouter({"p0", "d0", "d1"}, {{"recovery", {{"failure_quarantine_s", kQuarantineS}}}});
  // Whichever decode engine takes the first request fails it.
  for (const char* d : {"d0", "d1"}) {
    SetFaults(d, Rules({Rule("http_status", "decode", {{"status", 503}})}));
  }
  HttpCapture failed = Send(router, kCompletions, Completion("B15 fail", 3, false));
  const absl::Time failed_at = absl::Now();
  ASSERT_EQ(failed.status, 502) << Describe(failed);
  const std::string bad = JournalRow(router, failed)["decode_iid"].get<std::string>();
  const std::string good = bad == "d0" ? "d1" : "d0";
  ASSERT_TRUE(Sim(good).ClearFaults().ok());
  ASSERT_TRUE(Sim(bad).ClearRequests().ok());
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_engine_quarantined", {{"iid", bad}}), 1);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_engine_quarantined", {{"iid", good}}), 0);
  bool hold_journaled = false;
  for (const json& event : router.EventRows()) {
    hold_journaled |=
        event.value("event", "") == "engine_hold_started" && event.value("iid", "") == bad;
  }
  EXPECT_TRUE(hold_journaled) << "no engine_hold_started event row for " << bad;

  int checked = 0;
  for (int i = 0; i < 6; ++i) {
    const absl::Time start = absl::Now();
    HttpCapture c = Send(router, kCompletions, Completion("B15 during", 3, i % 2 == 0));
    EXPECT_EQ(c.status, 200) << Describe(c);
    const json row = JournalRow(router, c);
    if (start - failed_at < absl::Seconds(kQuarantineS - 0.5)) {
      EXPECT_EQ(row["decode_iid"], good) << "a quarantined engine got a leg: " << row.dump();
      ++checked;
    }
  }
  EXPECT_GE(checked, 2) << "the machine is too slow to observe the quarantine window";
  if (absl::Now() - failed_at < absl::Seconds(kQuarantineS - 0.5)) {
    EXPECT_TRUE(SimRequests(Sim(bad)).empty());
  }

  // After the quarantine the engine serves again: two overlapping slow
  // requests land on both decode engines.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return MetricSum(Metrics(router), "narwhal_engine_quarantined", {{"iid", bad}}) == 0;
      },
      absl::Seconds(kQuarantineS + 5)));
  for (const char* d : {"d0", "d1"}) {
    SetFaults(d, Rules({Rule("slow_tokens", "decode", {{"interval_ms", 150}})}));
  }
  std::set<std::string> decoders;
  std::vector<std::string> rids(2);
  std::thread other([&] {
    HttpCapture c = PostCapture("127.0.0.1", router.http_port(), kCompletions,
                                Completion("B15 after a", 4, true).dump());
    rids[0] = Header(c, "x-request-id");
  });
  absl::SleepFor(absl::Milliseconds(100));
  HttpCapture c = Send(router, kCompletions, Completion("B15 after b", 4, true));
  other.join();
  CountRequest(router);
  rids[1] = Header(c, "x-request-id");
  for (const std::string& rid : rids)
    decoders.insert(JournalRowFor(router, rid).value("decode_iid", ""));
  EXPECT_EQ(decoders, (std::set<std::string>{"d0", "d1"}));
}

TEST_F(ServeBackendTest, B15LastEngineOfARoleIsNeverQuarantined) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"recovery", {{"failure_quarantine_s", 30}}}});
  SetFaults("p0", Rules({Rule("http_status", "prefill", {{"status", 503}})}));
  SetFaults("d0", Rules({Rule("http_status", "decode", {{"status", 503}})}));
  HttpCapture a = Send(router, kCompletions, Completion("B15 last p", 3, false));
  EXPECT_EQ(a.status, 502) << Describe(a);
  HttpCapture b = Send(router, kCompletions, Completion("B15 last d", 3, false));
  EXPECT_EQ(b.status, 502) << Describe(b);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_engine_quarantined"), 0);
  EXPECT_EQ(HttpGet(router.http_port(), "/ready").status, 200);
  HttpCapture c = Send(router, kCompletions, Completion("B15 last ok", 3, false));
  EXPECT_EQ(c.status, 200) << Describe(c);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["prefill_iid"], "p0");
  EXPECT_EQ(row["decode_iid"], "d0");
}

// --- B19 ----------------------------------------------------------------------------

// Seconds from `hung_up` until the decode exchange on `iid` whose prompt is
// `marker` ended client_gone (nullopt when it did not within the bound).
std::optional<double> ClientGoneLatency(SimProcess& sim, const std::string& marker,
                                        absl::Time hung_up) {
  std::optional<double> latency;
  WaitUntil(
      [&] {
        for (const json& r : RequestsWithPrompt(sim, "decode", marker)) {
          if (r["end"] == "client_gone" && r["ended_at"].is_number()) {
            latency =
                r["ended_at"].get<double>() - absl::ToDoubleSeconds(hung_up - absl::UnixEpoch());
            return true;
          }
          if (!r["end"].is_null()) return true;  // ended some other way
        }
        return false;
      },
      absl::Seconds(5));
  return latency;
}

void ReportLatency(const std::string& what, double seconds) {
  std::cout << "[ measured ] " << what << ": " << seconds * 1000 << " ms" << std::endl;
  ::testing::Test::RecordProperty(what, std::to_string(seconds * 1000) + " ms");
}

TEST_F(ServeBackendTest, B19ClientAbortMidStreamClosesTheDecodeLeg) {
  ServeProcess& router = StartRouter(
      {"p0", "p1", "d0", "d1"},
      {{"serving", {{"max_attempts", 2}}}, {"engine", {{"decode_read_timeout_s", 10}}}});
  for (const char* d : {"d0", "d1"}) {
    SetFaults(d, Rules({Rule("stall_after_tokens", "decode", {{"tokens", 2}, {"times", -1}})}));
  }
  absl::Time hung_up = absl::InfiniteFuture();
  HttpCaptureOptions options;
  options.hang_up = [&](const HttpCapture& c) {
    if (TokenEvents(c).size() < 2) return false;
    hung_up = absl::Now();
    return true;
  };
  HttpCapture c = Send(router, kCompletions, Completion("B19 abort", 8, true), options);
  ASSERT_EQ(c.status, 200) << Describe(c);
  ASSERT_NE(hung_up, absl::InfiniteFuture()) << Describe(c);

  std::string decoder;
  std::optional<double> latency;
  for (const char* d : {"d0", "d1"}) {
    if (!RequestsWithPrompt(Sim(d), "decode", "B19 abort").empty()) {
      decoder = d;
      latency = ClientGoneLatency(Sim(d), "B19 abort", hung_up);
    }
  }
  ASSERT_TRUE(latency.has_value()) << "the decode leg did not end client_gone on " << decoder;
  ReportLatency("B19 upstream close latency (mid-stream abort)", *latency);
  EXPECT_LT(*latency, 1.0) << "target 100 ms";

  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "cancelled");
  EXPECT_EQ(row["attempts"], 1) << "a cancelled request is never retried: " << row.dump();
  EXPECT_EQ(SimRequests(Sim("d0"), "decode").size() + SimRequests(Sim("d1"), "decode").size(), 1u);
}

TEST_F(ServeBackendTest, B19ClientGoneBeforeTheFirstTokenClosesTheDecodeLeg) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"engine", {{"first_token_timeout_s", 10}}}});
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    const std::string marker = stream ? "B19 held stream" : "B19 held plain";
    SetFaults("d0", Rules({Rule("silent_before_first_token", "decode")}));
    CountRequest(router);
    std::unique_ptr<RawClient> client =
        RawClient::Post(router.http_port(), kCompletions, Completion(marker, 4, stream).dump());
    ASSERT_TRUE(client->connected());
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::vector<json> r = RequestsWithPrompt(Sim("d0"), "decode", marker);
          return !r.empty() && r[0]["end"].is_null();
        },
        absl::Seconds(10)));
    client->ReadFor(absl::Milliseconds(50));
    EXPECT_EQ(client->received(), "") << "status must be held until the first token";
    const absl::Time hung_up = client->Close();
    std::optional<double> latency = ClientGoneLatency(Sim("d0"), marker, hung_up);
    ASSERT_TRUE(latency.has_value()) << RequestsWithPrompt(Sim("d0"), "decode", marker)[0].dump();
    ReportLatency(std::string("B19 upstream close latency (held, ") +
                      (stream ? "streaming)" : "non-streaming)"),
                  *latency);
    EXPECT_LT(*latency, 1.0) << "target 100 ms";
    // The row: cancelled, no status sent.
    std::vector<json> rows;
    ASSERT_TRUE(WaitUntil(
        [&] {
          rows.clear();
          for (const json& row : router.JournalRows()) {
            if (row.value("terminal", "") == "cancelled" &&
                row.value("stream", !stream) == stream) {
              rows.push_back(row);
            }
          }
          return !rows.empty();
        },
        absl::Seconds(10)));
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_TRUE(rows[0]["status"].is_null()) << rows[0].dump();
    EXPECT_EQ(rows[0]["attempts"], 1);
  }
}

}  // namespace
}  // namespace narwhal::testing

namespace narwhal::testing {
namespace {

// W3C trace context through the HTTP door: the client's trace reaches both
// engine legs as children with spans of their own, and the journal names it.
TEST_F(ServeBackendTest, TheClientsTraceparentReachesBothLegsAsItsChildren) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  HttpCapture c = Send(router, kCompletions, Completion("traced prompt", 3, true),
                       WithHeaders({{"traceparent", "00-" + trace + "-00f067aa0ba902b7-01"},
                                    {"tracestate", "congo=t61rcWkgMzE"}}));
  ASSERT_EQ(c.status, 200) << Describe(c);
  std::vector<json> legs = SimRequests(Sim("p0"), "prefill");
  for (const json& d : SimRequests(Sim("d0"), "decode")) legs.push_back(d);
  ASSERT_EQ(legs.size(), 2u);
  std::set<std::string> spans;
  for (const json& leg : legs) {
    const std::string tp = leg["headers"].value("traceparent", "");
    ASSERT_EQ(tp.size(), 55u) << leg.dump();
    EXPECT_EQ(tp.substr(0, 36), "00-" + trace + "-") << tp;
    EXPECT_EQ(tp.substr(52), "-01") << tp;
    spans.insert(tp.substr(36, 16));
    EXPECT_EQ(leg["headers"].value("tracestate", ""), "congo=t61rcWkgMzE");
  }
  EXPECT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans.count("00f067aa0ba902b7"), 0u);
  EXPECT_EQ(JournalRow(router, c)["trace_id"], trace);

  // Without one the router starts a trace: the legs share its id, which the
  // journal names.
  HttpCapture fresh = Send(router, kCompletions, Completion("untraced prompt", 2, true));
  ASSERT_EQ(fresh.status, 200) << Describe(fresh);
  const std::string started = JournalRow(router, fresh).value("trace_id", "");
  ASSERT_EQ(started.size(), 32u);
  EXPECT_EQ(started, Header(fresh, "x-request-id"));  // the request's own id
  const std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_EQ(decodes[1]["headers"].value("traceparent", "").substr(3, 32), started);
}

}  // namespace
}  // namespace narwhal::testing
