// End-to-end tests of narwhal-serve's gRPC inference API (SPEC §6): buf curl
// through server reflection, and the parity of outcomes between the HTTP
// shim and gRPC for the same engine faults.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// --- gRPC client ---------------------------------------------------------------

struct GrpcOutcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  bool has_info = false;
  narwhal::v1::ErrorInfo info;
  int deltas = 0;  // deltas carrying text
  std::string text;
  bool has_final = false;
  narwhal::v1::Final final;
  std::string request_id;  // x-request-id initial metadata
};

narwhal::v1::GenerateRequest GenerateRequest(const std::string& prompt, int max_tokens) {
  narwhal::v1::GenerateRequest req;
  req.set_model(kModel);
  req.set_prompt(prompt);
  req.set_max_tokens(static_cast<uint32_t>(max_tokens));
  return req;
}

// Runs Generate to its end. `after_read` (optional) sees the outcome after
// every message; returning true cancels the call.
GrpcOutcome Generate(const std::string& target, const narwhal::v1::GenerateRequest& req,
                     grpc::ClientContext* context,
                     const std::function<bool(const GrpcOutcome&)>& after_read = nullptr,
                     absl::Time* cancelled_at = nullptr) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = narwhal::v1::Inference::NewStub(channel);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  GrpcOutcome out;
  std::unique_ptr<grpc::ClientReader<narwhal::v1::GenerateResponse>> reader =
      stub->Generate(context, req);
  narwhal::v1::GenerateResponse response;
  bool cancelled = false;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      if (!response.delta().text().empty()) ++out.deltas;
      out.text += response.delta().text();
    } else if (response.has_final()) {
      out.has_final = true;
      out.final = response.final();
    }
    if (!cancelled && after_read && after_read(out)) {
      if (cancelled_at != nullptr) *cancelled_at = absl::Now();
      context->TryCancel();
      cancelled = true;
    }
  }
  const grpc::Status status = reader->Finish();
  out.code = status.error_code();
  out.message = status.error_message();
  if (!status.error_details().empty()) {
    google::rpc::Status details;
    if (details.ParseFromString(status.error_details())) {
      for (const auto& any : details.details()) {
        if (any.Is<narwhal::v1::ErrorInfo>()) out.has_info = any.UnpackTo(&out.info);
      }
    }
  }
  const auto& md = context->GetServerInitialMetadata();
  if (auto it = md.find("x-request-id"); it != md.end()) {
    out.request_id = std::string(it->second.data(), it->second.size());
  }
  return out;
}

grpc::StatusCode CodeForHttp(int status) {
  switch (status) {
    case 400:
    case 413:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 502:
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 500:
      return grpc::StatusCode::INTERNAL;
    default:
      return grpc::StatusCode::UNKNOWN;
  }
}

// The client-visible outcome of a streaming HTTP request.
struct HttpOutcome {
  int status = 0;  // HTTP status, or the terminal event's code after commit
  std::string type;
  std::string message;
  bool output_started = false;
  int tokens = 0;
};

HttpOutcome OutcomeOf(const HttpCapture& c) {
  HttpOutcome o;
  o.tokens = static_cast<int>(TokenEvents(c).size());
  json error;
  if (c.status != 200) {
    o.status = c.status;
    error = ErrorOf(c.body);
  } else {
    o.output_started = o.tokens > 0;
    error = TerminalErrorEvent(c);
    o.status = error.is_object() ? error.value("code", 0) : 200;
  }
  if (error.is_object()) {
    o.type = error.value("type", "");
    o.message = error.value("message", "");
  }
  return o;
}

// Splits concatenated JSON documents (buf curl prints one per message).
std::vector<json> JsonDocuments(const std::string& text) {
  std::vector<json> docs;
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (ch == '\\') {
        escape = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '{') {
      if (depth++ == 0) start = i;
    } else if (ch == '}' && depth > 0 && --depth == 0) {
      docs.push_back(json::parse(text.substr(start, i - start + 1), nullptr, false));
    }
  }
  return docs;
}

std::string Buf() { return NARWHAL_BUF_BINARY; }

std::string BufCurl(const std::string& rest) {
  return absl::StrCat("timeout 60 '", Buf(), "' curl --protocol grpc --http2-prior-knowledge ",
                      rest, " 2>&1");
}

class ServeGrpcTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    ASSERT_EQ(access(Buf().c_str(), X_OK), 0)
        << Buf() << " is missing: run deploy/install-deps.sh (npm clients in tests/clients)";
  }

  GrpcOutcome Call(ServeProcess& router, const narwhal::v1::GenerateRequest& req,
                   const std::function<bool(const GrpcOutcome&)>& after_read = nullptr,
                   absl::Time* cancelled_at = nullptr) {
    CountRequest(router);
    grpc::ClientContext context;
    return Generate(router.grpc_target(), req, &context, after_read, cancelled_at);
  }
};

TEST_F(ServeGrpcTest, BothReflectionProtocolsDescribeTheInferenceService) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string url = absl::StrCat("http://127.0.0.1:", router.grpc_port());
  for (const char* protocol : {"grpc-v1", "grpc-v1alpha"}) {
    CommandResult services =
        RunShell(BufCurl(absl::StrCat("--reflect-protocol ", protocol, " --list-services ", url)));
    EXPECT_EQ(services.exit_code, 0) << protocol << "\n" << services.out;
    EXPECT_TRUE(absl::StrContains(services.out, "narwhal.v1.Inference")) << services.out;
    EXPECT_TRUE(absl::StrContains(services.out, "grpc.health.v1.Health")) << services.out;
    CommandResult methods =
        RunShell(BufCurl(absl::StrCat("--reflect-protocol ", protocol, " --list-methods ", url)));
    EXPECT_EQ(methods.exit_code, 0) << protocol << "\n" << methods.out;
    EXPECT_TRUE(absl::StrContains(methods.out, "narwhal.v1.Inference/Generate")) << methods.out;
  }
  // A call described through v1 alone.
  CountRequest(router);
  CommandResult complete = RunShell(BufCurl(absl::StrCat(
      "--reflect-protocol grpc-v1 -d '{\"model\":\"", kModel,
      "\",\"prompt\":\"v1 prompt\",\"maxTokens\":3}' ", url, "/narwhal.v1.Inference/Complete")));
  ASSERT_EQ(complete.exit_code, 0) << complete.out;
  EXPECT_TRUE(absl::StrContains(complete.out, "\"text\"")) << complete.out;
}

TEST_F(ServeGrpcTest, BufCurlListsMethodsAndGeneratesThroughReflection) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string url = absl::StrCat("http://127.0.0.1:", router.grpc_port());
  CommandResult list = RunShell(BufCurl("--list-methods " + url));
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "narwhal.v1.Inference/Generate")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "narwhal.v1.Inference/Complete")) << list.out;

  CountRequest(router);
  CommandResult gen = RunShell(BufCurl(
      absl::StrCat("-d '{\"model\":\"", kModel,
                   "\",\"prompt\":\"buf prompt\",\"maxTokens\":5,\"requestId\":\"buf-1\"}' ", url,
                   "/narwhal.v1.Inference/Generate")));
  ASSERT_EQ(gen.exit_code, 0) << gen.out;
  std::vector<json> messages = JsonDocuments(gen.out);
  ASSERT_FALSE(messages.empty()) << gen.out;
  int deltas = 0;
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    EXPECT_TRUE(messages[i].contains("delta")) << messages[i].dump();
    if (messages[i].contains("delta") && messages[i]["delta"].contains("text")) ++deltas;
  }
  EXPECT_EQ(deltas, 5) << gen.out;
  const json& last = messages.back();
  ASSERT_TRUE(last.contains("final")) << gen.out;
  EXPECT_FALSE(last["final"].value("requestId", "").empty()) << last.dump();
  EXPECT_GT(last["final"].value("ttftS", 0.0), 0) << last.dump();
  EXPECT_GE(last["final"].value("firstByteS", 0.0), last["final"].value("ttftS", 0.0));
  const json row = JournalRowFor(router, last["final"]["requestId"].get<std::string>());
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_EQ(row["client_rid"], "buf-1");

  // An error carries its ErrorInfo in the status details.
  CountRequest(router);
  CommandResult wrong =
      RunShell(BufCurl(absl::StrCat("-d '{\"model\":\"no-such-model\",\"prompt\":\"x\"}' ", url,
                                    "/narwhal.v1.Inference/Generate")));
  EXPECT_NE(wrong.exit_code, 0) << wrong.out;
  EXPECT_TRUE(absl::StrContains(wrong.out, "not_found")) << wrong.out;
  // buf prints the detail as {"type": "narwhal.v1.ErrorInfo", "value": <base64>}.
  std::vector<json> docs = JsonDocuments(wrong.out);
  ASSERT_FALSE(docs.empty()) << wrong.out;
  const json& error = docs.back();
  EXPECT_EQ(error.value("code", ""), "not_found") << wrong.out;
  ASSERT_TRUE(error.contains("details") && error["details"].size() == 1) << wrong.out;
  EXPECT_EQ(error["details"][0].value("type", ""), "narwhal.v1.ErrorInfo") << wrong.out;
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(error["details"][0].value("value", ""), &bytes)) << wrong.out;
  narwhal::v1::ErrorInfo info;
  ASSERT_TRUE(info.ParseFromString(bytes)) << wrong.out;
  EXPECT_EQ(info.http_status(), 404);
  EXPECT_EQ(info.type(), "invalid_request_error");
  EXPECT_FALSE(info.output_started());
  EXPECT_TRUE(absl::StrContains(info.message(), "no-such-model")) << info.message();
  EXPECT_EQ(JournalRowFor(router, info.request_id())["status"], 404);
}

TEST_F(ServeGrpcTest, GenerateMatchesTheHttpStreamOnSuccess) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  HttpCapture c = Send(router, kCompletions, Completion("parity ok", 6, true));
  ASSERT_EQ(c.status, 200) << Describe(c);
  GrpcOutcome g = Call(router, GenerateRequest("parity ok", 6));
  ASSERT_EQ(g.code, grpc::StatusCode::OK) << g.message;
  EXPECT_EQ(g.text, StreamedText(c)) << "the sim is deterministic: same prompt, same text";
  EXPECT_EQ(g.deltas, 6);
  ASSERT_TRUE(g.has_final);
  EXPECT_EQ(g.final.request_id(), g.request_id);
  EXPECT_GT(g.final.ttft_s(), 0);
  EXPECT_LE(g.final.ttft_s(), g.final.first_byte_s());
  EXPECT_EQ(g.final.usage().completion_tokens(), 6u);
  const json row = JournalRowFor(router, g.request_id);
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_NEAR(row["ttft_s"].get<double>(), g.final.ttft_s(), 1e-9);
  EXPECT_NEAR(row["first_byte_s"].get<double>(), g.final.first_byte_s(), 1e-9);
  EXPECT_EQ(row["output_tokens"], 6);
}

TEST_F(ServeGrpcTest, MaxTokensOverTheModelsContextIsRefusedBeforeAnyPrefillAtBothDoors) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  // Readiness follows the start-up checks, which read max_model_len (32768).
  ASSERT_TRUE(WaitUntil([&] { return HttpGet(router.http_port(), "/ready").status == 200; },
                        absl::Seconds(10)));
  const std::string limit = "exceeds the model's context length (max_model_len 32768)";
  HttpCapture c = Send(router, kCompletions, Completion("too long", 40000, true));
  EXPECT_EQ(c.status, 400) << Describe(c);
  EXPECT_EQ(ErrorOf(c.body).value("type", ""), "invalid_request_error");
  EXPECT_EQ(ErrorOf(c.body).value("message", ""), "max_tokens 40000 " + limit);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "invalid");
  EXPECT_EQ(row["reason"], "context_length_exceeded");

  GrpcOutcome g = Call(router, GenerateRequest("too long", 40000));
  EXPECT_EQ(g.code, grpc::StatusCode::INVALID_ARGUMENT) << g.message;
  EXPECT_NE(g.message.find(limit), std::string::npos) << g.message;
  EXPECT_EQ(JournalRowFor(router, g.request_id)["terminal"], "invalid");

  // Neither reached an engine; both are counted invalid, none failed.
  EXPECT_TRUE(SimRequests(Sim("p0"), "prefill").empty());
  EXPECT_TRUE(SimRequests(Sim("d0"), "decode").empty());
  const std::vector<MetricSample> m = Metrics(router);
  EXPECT_EQ(MetricSum(m, "narwhal_requests_total", {{"terminal", "invalid"}}), 2);
  EXPECT_EQ(MetricSum(m, "narwhal_requests_total", {{"terminal", "failed"}}), 0);
  EXPECT_EQ(MetricSum(m, "narwhal_engine_breaker_streak", {}), 0);
  // Within the limit the same request is served.
  HttpCapture ok = Send(router, kCompletions, Completion("fits", 4, true));
  EXPECT_EQ(ok.status, 200) << Describe(ok);
}

struct ParityCase {
  std::string name;
  std::string iid;
  json rule;
  int status;
  std::string type;
  std::string prefix;
  bool after_output;
};

TEST_F(ServeGrpcTest, FaultOutcomesAgreeBetweenHttpAndGrpc) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::vector<ParityCase> cases = {
      {"B10 decode 503",
       "d0",
       {{"kind", "http_status"}, {"phase", "decode"}, {"status", 503}},
       502,
       "decode",
       "engine returned HTTP 503",
       false},
      {"B10 prefill 503",
       "p0",
       {{"kind", "http_status"}, {"phase", "prefill"}, {"status", 503}},
       502,
       "prefill",
       "engine returned HTTP 503",
       false},
      {"B10 decode 408",
       "d0",
       {{"kind", "http_status"}, {"phase", "decode"}, {"status", 408}},
       504,
       "decode",
       "",
       false},
      {"B10 prefill 400",
       "p0",
       {{"kind", "http_status"},
        {"phase", "prefill"},
        {"status", 400},
        {"message", "prompt too long"}},
       400,
       "invalid_request_error",
       "prompt too long",
       false},
      {"B11 done before token",
       "d0",
       {{"kind", "done_before_token"}, {"phase", "decode"}},
       502,
       "decode",
       "stream ended with [DONE] before any token arrived",
       false},
      {"B11 close before done",
       "d0",
       {{"kind", "close_before_done"}, {"phase", "decode"}, {"tokens", 0}},
       502,
       "decode",
       "stream ended before the [DONE] terminator",
       false},
      {"B11 error in stream before output",
       "d0",
       {{"kind", "error_in_stream"}, {"phase", "decode"}, {"after_tokens", 0}, {"code", 503}},
       503,
       "decode",
       "",
       false},
      {"B12 silence before the first token",
       "d0",
       {{"kind", "silent_before_first_token"}, {"phase", "decode"}},
       504,
       "decode",
       "no first token within",
       false},
      {"B13 stall after two tokens",
       "d0",
       {{"kind", "stall_after_tokens"}, {"phase", "decode"}, {"tokens", 2}},
       504,
       "decode",
       "engine went silent between tokens",
       true},
      {"B16 error after two tokens",
       "d0",
       {{"kind", "error_in_stream"}, {"phase", "decode"}, {"after_tokens", 2}, {"code", 503}},
       503,
       "decode",
       "",
       true},
  };
  for (const ParityCase& pc : cases) {
    SCOPED_TRACE(pc.name);
    // HTTP (streaming)
    SetFaults(pc.iid, json::array({pc.rule}));
    HttpCapture c = Send(router, kCompletions, Completion(pc.name, 6, true));
    const HttpOutcome h = OutcomeOf(c);
    EXPECT_EQ(h.status, pc.status) << Describe(c);
    EXPECT_EQ(h.type, pc.type) << Describe(c);
    EXPECT_TRUE(absl::StartsWith(h.message, pc.prefix)) << Describe(c);
    EXPECT_EQ(h.output_started, pc.after_output) << Describe(c);
    const json http_row = JournalRow(router, c);

    // gRPC Generate
    ASSERT_TRUE(Sim(pc.iid).ClearFaults().ok());
    SetFaults(pc.iid, json::array({pc.rule}));
    GrpcOutcome g = Call(router, GenerateRequest(pc.name, 6));
    EXPECT_EQ(g.code, CodeForHttp(pc.status)) << g.code << " " << g.message;
    ASSERT_TRUE(g.has_info) << "no narwhal.v1.ErrorInfo in the status details: " << g.message;
    EXPECT_EQ(g.info.http_status(), h.status);
    EXPECT_EQ(g.info.type(), h.type);
    EXPECT_TRUE(absl::StartsWith(g.info.message(), pc.prefix)) << g.info.message();
    EXPECT_EQ(g.info.message().substr(0, 24), h.message.substr(0, 24));
    EXPECT_EQ(g.info.output_started(), pc.after_output);
    EXPECT_EQ(g.deltas, h.tokens) << "the same output before the failure";
    EXPECT_FALSE(g.has_final);
    EXPECT_EQ(g.info.request_id(), g.request_id);
    const json grpc_row = JournalRowFor(router, g.request_id);
    for (const char* key : {"terminal", "status", "error_type", "attempts", "output_tokens"}) {
      EXPECT_EQ(grpc_row[key], http_row[key])
          << key << "\nhttp: " << http_row.dump() << "\ngrpc: " << grpc_row.dump();
    }
    EXPECT_EQ(grpc_row.value("door", "grpc"), "grpc");
    ASSERT_TRUE(Sim(pc.iid).ClearFaults().ok());
  }
}

// Hardening: a decode event whose text is not valid Unicode (a raw 0xFF
// byte, or Python json's unpaired surrogate escape) is text with U+FFFD in
// its place, through all four paths alike: gRPC Generate once dropped such
// tokens while its Final reported them all and the journal said completed.
TEST_F(ServeGrpcTest, InvalidUnicodeTextIsRelayedWithReplacementOnEveryPath) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string fffd = "\xEF\xBF\xBD";
  for (const char* shape : {"raw_byte", "lone_surrogate"}) {
    SCOPED_TRACE(shape);
    const json rule = {{"kind", "invalid_text"},
                       {"phase", "decode"},
                       {"at_token", 2},
                       {"shape", shape},
                       {"times", -1}};
    SetFaults("d0", json::array({rule}));
    const std::string prompt = std::string("invalid text ") + shape;

    // HTTP, streaming: six token events, valid JSON, the third with U+FFFD.
    HttpCapture streamed = Send(router, kCompletions, Completion(prompt, 6, true));
    ASSERT_EQ(streamed.status, 200) << Describe(streamed);
    EXPECT_EQ(TokenEvents(streamed).size(), 6u) << Describe(streamed);
    const std::string text = StreamedText(streamed);
    EXPECT_TRUE(absl::StrContains(text, fffd)) << text;
    EXPECT_EQ(JournalRow(router, streamed)["terminal"], "completed");

    // HTTP, assembled.
    HttpCapture whole = Send(router, kCompletions, Completion(prompt, 6, false));
    ASSERT_EQ(whole.status, 200) << Describe(whole);
    EXPECT_EQ(ResponseText(whole.body), text);

    // gRPC Generate: every delta, and a Final that counts what was sent.
    GrpcOutcome g = Call(router, GenerateRequest(prompt, 6));
    ASSERT_EQ(g.code, grpc::StatusCode::OK) << g.message;
    EXPECT_EQ(g.deltas, 6);
    EXPECT_EQ(g.text, text);
    ASSERT_TRUE(g.has_final);
    EXPECT_EQ(g.final.usage().completion_tokens(), 6u);
    EXPECT_EQ(JournalRowFor(router, g.request_id)["output_tokens"], 6);

    // gRPC Complete.
    auto stub = narwhal::v1::Inference::NewStub(
        grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    narwhal::v1::CompleteResponse completed;
    CountRequest(router);
    const grpc::Status status = stub->Complete(&context, GenerateRequest(prompt, 6), &completed);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(completed.text(), text);
    ASSERT_TRUE(Sim("d0").ClearFaults().ok());
  }
}

TEST_F(ServeGrpcTest, RetryOutcomesAgreeBetweenHttpAndGrpc) {
  ServeProcess& router = StartRouter(
      {"p0", "p1", "d0", "d1"},
      {{"serving", {{"max_attempts", 2}}}, {"engine", {{"first_token_timeout_s", 10}}}});
  std::vector<json> rows;
  for (const std::string& door : {std::string("http"), std::string("grpc")}) {
    SCOPED_TRACE(door);
    WaitInflightZero(router, absl::Seconds(5));
    std::unique_ptr<Occupation> hold = Occupy(router, "decode", {"d0", "d1"});
    ASSERT_EQ(hold->idle.size(), 1u);
    SetFaults(
        hold->idle[0],
        json::array(
            {{{"kind", "http_status"}, {"phase", "decode"}, {"status", 503}, {"times", -1}}}));
    std::string rid;
    if (door == "http") {
      HttpCapture c = Send(router, kCompletions, Completion("parity retry", 4, true));
      EXPECT_EQ(c.status, 200) << Describe(c);
      EXPECT_TRUE(c.saw_done());
      rid = Header(c, "x-request-id");
    } else {
      GrpcOutcome g = Call(router, GenerateRequest("parity retry", 4));
      EXPECT_EQ(g.code, grpc::StatusCode::OK) << g.message;
      EXPECT_TRUE(g.has_final);
      EXPECT_EQ(g.deltas, 4);
      rid = g.request_id;
    }
    const json row = JournalRowFor(router, rid);
    EXPECT_EQ(row["terminal"], "completed") << row.dump();
    EXPECT_EQ(row["attempts"], 2) << row.dump();
    EXPECT_EQ(row["decode_iid"], hold->busy) << row.dump();
    ASSERT_EQ(row["attempt_failures"].size(), 1u) << row.dump();
    EXPECT_EQ(row["attempt_failures"][0]["iid"], hold->idle[0]);
    EXPECT_EQ(row["attempt_failures"][0]["retry_scheduled"], true);
    hold->Release();
    ASSERT_TRUE(Sim(hold->idle[0]).ClearFaults().ok());
  }
}

TEST_F(ServeGrpcTest, ClientCancelAgreesBetweenHttpAndGrpc) {
  ServeProcess& router = StartRouter(
      {"p0", "d0"}, {{"engine", {{"decode_read_timeout_s", 10}, {"first_token_timeout_s", 10}}}});
  const json stall =
      json::array({{{"kind", "stall_after_tokens"}, {"phase", "decode"}, {"tokens", 2}}});
  auto client_gone_latency = [&](const std::string& marker, absl::Time hung_up) {
    std::optional<double> latency;
    WaitUntil(
        [&] {
          for (const json& r : SimRequests(Sim("d0"), "decode")) {
            if (r["body"].value("prompt", json()) != marker) continue;
            if (r["end"] == "client_gone") {
              latency =
                  r["ended_at"].get<double>() - absl::ToDoubleSeconds(hung_up - absl::UnixEpoch());
            }
            return !r["end"].is_null();
          }
          return false;
        },
        absl::Seconds(5));
    return latency;
  };

  // HTTP: the client goes away after two tokens.
  SetFaults("d0", stall);
  absl::Time http_hung_up = absl::InfiniteFuture();
  HttpCaptureOptions options;
  options.hang_up = [&](const HttpCapture& c) {
    if (TokenEvents(c).size() < 2) return false;
    http_hung_up = absl::Now();
    return true;
  };
  HttpCapture c = Send(router, kCompletions, Completion("cancel http", 8, true), options);
  ASSERT_NE(http_hung_up, absl::InfiniteFuture()) << Describe(c);
  std::optional<double> http_latency = client_gone_latency("cancel http", http_hung_up);
  ASSERT_TRUE(http_latency.has_value());
  const json http_row = JournalRow(router, c);

  // gRPC: the client cancels after two deltas.
  SetFaults("d0", stall);
  absl::Time grpc_cancelled = absl::InfiniteFuture();
  GrpcOutcome g = Call(
      router, GenerateRequest("cancel grpc", 8), [](const GrpcOutcome& o) { return o.deltas >= 2; },
      &grpc_cancelled);
  EXPECT_EQ(g.code, grpc::StatusCode::CANCELLED) << g.message;
  EXPECT_EQ(g.deltas, 2);
  ASSERT_NE(grpc_cancelled, absl::InfiniteFuture());
  std::optional<double> grpc_latency = client_gone_latency("cancel grpc", grpc_cancelled);
  ASSERT_TRUE(grpc_latency.has_value()) << "the decode leg did not end client_gone";
  std::cout << "[ measured ] B19 upstream close latency: http " << *http_latency * 1000
            << " ms, grpc " << *grpc_latency * 1000 << " ms" << std::endl;
  RecordProperty("b19_http_close_ms", std::to_string(*http_latency * 1000));
  RecordProperty("b19_grpc_close_ms", std::to_string(*grpc_latency * 1000));
  EXPECT_LT(*http_latency, 1.0);
  EXPECT_LT(*grpc_latency, 1.0);

  ASSERT_FALSE(g.request_id.empty());
  const json grpc_row = JournalRowFor(router, g.request_id);
  EXPECT_EQ(http_row["terminal"], "cancelled");
  EXPECT_EQ(grpc_row["terminal"], "cancelled");
  EXPECT_EQ(http_row["attempts"], 1);
  EXPECT_EQ(grpc_row["attempts"], 1);
  EXPECT_EQ(grpc_row["output_tokens"], http_row["output_tokens"]);

  // gRPC cancel while the request is held before its first token.
  SetFaults("d0", json::array({{{"kind", "silent_before_first_token"}, {"phase", "decode"}}}));
  CountRequest(router);
  grpc::ClientContext context;
  absl::Time held_cancelled = absl::InfiniteFuture();
  std::thread canceller([&] {
    WaitUntil(
        [&] {
          for (const json& r : SimRequests(Sim("d0"), "decode")) {
            if (r["body"].value("prompt", json()) == "cancel held" && r["end"].is_null()) {
              return true;
            }
          }
          return false;
        },
        absl::Seconds(10));
    held_cancelled = absl::Now();
    context.TryCancel();
  });
  GrpcOutcome held = Generate(router.grpc_target(), GenerateRequest("cancel held", 4), &context);
  canceller.join();
  EXPECT_EQ(held.code, grpc::StatusCode::CANCELLED) << held.message;
  EXPECT_EQ(held.deltas, 0);
  std::optional<double> held_latency = client_gone_latency("cancel held", held_cancelled);
  ASSERT_TRUE(held_latency.has_value()) << "the held decode leg did not end client_gone";
  std::cout << "[ measured ] B19 upstream close latency (gRPC, held): " << *held_latency * 1000
            << " ms" << std::endl;
  EXPECT_LT(*held_latency, 1.0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        int cancelled = 0;
        for (const json& row : router.JournalRows()) {
          cancelled += row.value("terminal", "") == "cancelled" ? 1 : 0;
        }
        return cancelled == 3;
      },
      absl::Seconds(10)));
}

}  // namespace
}  // namespace narwhal::testing

namespace narwhal::testing {
namespace {

// W3C trace context through the gRPC door: `traceparent` metadata.
TEST_F(ServeGrpcTest, TheClientsTraceparentMetadataReachesBothLegs) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string trace = "0af7651916cd43dd8448eb211c80319c";
  grpc::ClientContext context;
  context.AddMetadata("traceparent", "00-" + trace + "-b7ad6b7169203331-01");
  CountRequest(router);
  GrpcOutcome g = Generate(router.grpc_target(), GenerateRequest("traced over grpc", 3), &context);
  ASSERT_EQ(g.code, grpc::StatusCode::OK) << g.message;
  std::vector<json> legs = SimRequests(Sim("p0"), "prefill");
  for (const json& d : SimRequests(Sim("d0"), "decode")) legs.push_back(d);
  ASSERT_EQ(legs.size(), 2u);
  for (const json& leg : legs) {
    EXPECT_EQ(leg["headers"].value("traceparent", "").substr(0, 36), "00-" + trace + "-")
        << leg.dump();
  }
  EXPECT_EQ(JournalRowFor(router, g.request_id)["trace_id"], trace);
}

}  // namespace
}  // namespace narwhal::testing
