// End-to-end tests of what narwhal-serve's HTTP shim refuses (SPEC §4 status
// table, §12): bad input, limits, unknown paths and the API key — and that
// the router still serves afterwards.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

class ServeInputTest : public E2eTest {
 protected:
  // A refusal per SPEC §4: status, OpenAI error shape, `param`, and its
  // journal row.
  void ExpectRefused(ServeProcess& router, const HttpCapture& c, int status,
                     const std::string& type, const json& param, const std::string& terminal) {
    EXPECT_EQ(c.status, status) << Describe(c);
    const json error = ErrorOf(c.body);
    ASSERT_TRUE(error.is_object()) << Describe(c);
    EXPECT_EQ(error.value("type", json()), type) << Describe(c);
    EXPECT_EQ(error.value("code", json()), status) << Describe(c);
    EXPECT_TRUE(error.value("message", json()).is_string()) << Describe(c);
    ASSERT_TRUE(error.contains("param")) << Describe(c);
    EXPECT_EQ(error["param"], param) << Describe(c);
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["terminal"], terminal) << row.dump();
    EXPECT_EQ(row["status"], status) << row.dump();
  }

  void ExpectStillServes(ServeProcess& router) {
    HttpCapture ok = Send(router, kCompletions, Completion("still serving", 3, true));
    EXPECT_EQ(ok.status, 200) << Describe(ok);
    EXPECT_TRUE(ok.saw_done()) << Describe(ok);
    HttpCapture chat = Send(router, kChat, Chat("still serving", 3, false));
    EXPECT_EQ(chat.status, 200) << Describe(chat);
  }
};

TEST_F(ServeInputTest, MalformedJsonIs400) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (const std::string& body :
       {std::string("{\"model\": "), std::string("not json at all"), std::string("[1, 2, 3]"),
        std::string("\"a string\""), std::string("{\"model\":\"x\"\xff}")}) {
    SCOPED_TRACE(body);
    HttpCapture c = SendRaw(router, kCompletions, body);
    EXPECT_EQ(c.status, 400) << Describe(c);
    const json error = ErrorOf(c.body);
    ASSERT_TRUE(error.is_object()) << Describe(c);
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["code"], 400);
    EXPECT_EQ(JournalRow(router, c)["terminal"], "invalid");
  }
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  ExpectStillServes(router);
}

// The ~160 KB body that crashed the process (hardening): an 80,000-deep
// array in a pass-through field is refused with 400 and a journal row, and
// the router keeps serving.
TEST_F(ServeInputTest, DeeplyNestedBodyIs400AndTheRouterSurvives) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::string deep = std::string(80000, '[') + std::string(80000, ']');
  for (const std::string& path : {std::string(kChat), std::string(kCompletions)}) {
    SCOPED_TRACE(path);
    const std::string body =
        path == kChat ? R"({"model":")" + std::string(kModel) +
                            R"(","messages":[{"role":"user","content":"hi","x":)" + deep + "}]}"
                      : R"({"model":")" + std::string(kModel) + R"(","prompt":"hi","x":)" + deep +
                            "}";
    HttpCapture c = SendRaw(router, path, body);
    EXPECT_EQ(c.status, 400) << Describe(c);
    const json error = ErrorOf(c.body);
    ASSERT_TRUE(error.is_object()) << Describe(c);
    EXPECT_TRUE(absl::StrContains(error.value("message", ""), "nests deeper than 128 levels"))
        << Describe(c);
    EXPECT_EQ(JournalRow(router, c)["terminal"], "invalid");
  }
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, MissingFieldsAre400WithParam) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  HttpCapture c = Send(router, kCompletions, {{"model", kModel}, {"max_tokens", 3}});
  ExpectRefused(router, c, 400, "invalid_request_error", "prompt", "invalid");
  c = Send(router, kChat, {{"model", kModel}, {"max_tokens", 3}});
  ExpectRefused(router, c, 400, "invalid_request_error", "messages", "invalid");
  c = Send(router, kCompletions, {{"prompt", "no model"}});
  ExpectRefused(router, c, 400, "invalid_request_error", "model", "invalid");
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, WrongFieldTypesAre400WithParam) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (const auto& [field, value] : {std::pair{std::string("max_tokens"), json("x")},
                                     std::pair{std::string("stream"), json("yes")},
                                     std::pair{std::string("temperature"), json("hot")},
                                     std::pair{std::string("stop"), json(17)}}) {
    SCOPED_TRACE(field);
    json body = Completion("typed", 3, false);
    body[field] = value;
    HttpCapture c = Send(router, kCompletions, body);
    ExpectRefused(router, c, 400, "invalid_request_error", field, "invalid");
  }
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, WrongModelIs404) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (bool stream : {false, true}) {
    json body = Completion("wrong model", 3, stream);
    body["model"] = "no-such-model";
    HttpCapture c = Send(router, kCompletions, body);
    ExpectRefused(router, c, 404, "invalid_request_error", "model", "invalid");
    EXPECT_TRUE(absl::StrContains(ErrorOf(c.body).value("message", ""), "no-such-model"));
  }
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, BodyOverTheLimitIs413AndJournaled) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"max_request_bytes", 4096}}}});
  const std::string big(8192, 'a');
  HttpCapture c = Send(router, kCompletions, Completion(big, 3, false));
  EXPECT_EQ(c.status, 413) << Describe(c);
  const json error = ErrorOf(c.body);
  ASSERT_TRUE(error.is_object()) << Describe(c);
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["code"], 413);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "invalid");
  EXPECT_EQ(row["status"], 413);
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());
  // Just under the limit is fine.
  HttpCapture fits = Send(router, kCompletions, Completion(std::string(3000, 'b'), 3, false));
  EXPECT_EQ(fits.status, 200) << Describe(fits);
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, MaxInflightReachedIs429) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"max_inflight", 1}}},
                                                    {"engine", {{"first_token_timeout_s", 10}}}});
  std::unique_ptr<Occupation> hold = Occupy(router, "decode", {"d0"});
  ASSERT_EQ(hold->busy, "d0");
  for (bool stream : {false, true}) {
    HttpCapture c = Send(router, kCompletions, Completion("over the limit", 3, stream));
    ExpectRefused(router, c, 429, "rate_limit_error", nullptr, "rejected");
  }
  EXPECT_EQ(SimRequests(Sim("p0"), "prefill").size(), 1u)
      << "a refused request must not reach an engine";
  hold->Release();
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& row : router.JournalRows()) {
          if (row.value("terminal", "") == "cancelled") return true;
        }
        return false;
      },
      absl::Seconds(10)));
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, UnknownPathIs404Json) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (const auto& [method, path] : {std::pair{"GET", "/v1/nope"},
                                     std::pair{"POST", "/v2/completions"}, std::pair{"GET", "/"}}) {
    SCOPED_TRACE(std::string(method) + " " + path);
    HttpResult r = std::string(method) == "GET" ? HttpGet(router.http_port(), path)
                                                : HttpPostRaw(router.http_port(), path, "{}");
    EXPECT_EQ(r.status, 404) << r.body;
    EXPECT_TRUE(absl::StrContains(r.header("Content-Type"), "application/json")) << r.body;
    const json error = ErrorOf(r.body);
    ASSERT_TRUE(error.is_object()) << r.body;
    EXPECT_EQ(error["code"], 404);
    EXPECT_EQ(error["type"], "invalid_request_error");
  }
  ExpectStillServes(router);
}

TEST_F(ServeInputTest, ModelsHealthAndReady) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  HttpResult models = HttpGet(router.http_port(), "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json list = json::parse(models.body, nullptr, false);
  EXPECT_EQ(list.value("object", json()), "list") << models.body;
  ASSERT_TRUE(list.contains("data") && list["data"].size() == 1) << models.body;
  EXPECT_EQ(list["data"][0]["id"], kModel);
  EXPECT_EQ(HttpGet(router.http_port(), "/health").status, 200);
  // Ready once each role's engine has passed its start-up health check.
  EXPECT_TRUE(WaitUntil([&] { return HttpGet(router.http_port(), "/ready").status == 200; },
                        absl::Seconds(10)));
}

TEST_F(ServeInputTest, ApiKeyIsRequiredWhenConfigured) {
  ServeProcess& router =
      StartRouter({"p0", "d0"}, {{"serving", {{"api_key_env", "NARWHAL_E2E_API_KEY"}}}},
                  {{"NARWHAL_E2E_API_KEY", "s3cret-key"}});
  for (const httplib::Headers& headers :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}},
        httplib::Headers{{"Authorization", "s3cret-key"}}}) {
    HttpCaptureOptions options;
    options.headers = headers;
    HttpCapture c = Send(router, kCompletions, Completion("keyed", 3, false), options);
    EXPECT_EQ(c.status, 401) << Describe(c);
    const json error = ErrorOf(c.body);
    ASSERT_TRUE(error.is_object()) << Describe(c);
    EXPECT_EQ(error["code"], 401);
    EXPECT_EQ(JournalRow(router, c)["status"], 401);
  }
  EXPECT_EQ(HttpGet(router.http_port(), "/v1/models").status, 401);
  EXPECT_TRUE(SimRequests(Sim("p0")).empty());

  HttpCaptureOptions good;
  good.headers = {{"Authorization", "Bearer s3cret-key"}};
  HttpCapture c = Send(router, kCompletions, Completion("keyed", 3, true), good);
  EXPECT_EQ(c.status, 200) << Describe(c);
  EXPECT_TRUE(c.saw_done());
  EXPECT_EQ(
      HttpGet(router.http_port(), "/v1/models", {{"Authorization", "Bearer s3cret-key"}}).status,
      200);
  // Operational endpoints stay open.
  EXPECT_EQ(HttpGet(router.http_port(), "/health").status, 200);
  // The key never goes to engines (no engine key configured).
  for (const json& r : SimRequests(Sim("p0"))) {
    EXPECT_FALSE(r["headers"].contains("authorization")) << r.dump();
  }
}

}  // namespace
}  // namespace narwhal::testing
