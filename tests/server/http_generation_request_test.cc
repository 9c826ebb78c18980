// The HTTP door's translation into admission (server/http/generation_request):
// a Beast request — path, Authorization, X-Request-Id, JSON body — as the
// DoorRequest and DoorBody admission reads, and through RequestAdmission
// into the router::Request or refusal the door answers with. No socket.
#include <gtest/gtest.h>

#include <boost/beast/http/field.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/http/generation_request.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::server {
namespace {

namespace http = boost::beast::http;
using engines::Api;
using ::narwhal::testing::ErrorTypeOf;
using ::narwhal::testing::HttpStatus;
using ::narwhal::testing::ReasonOf;
using json = nlohmann::json;

HttpRequest Post(std::string_view path, const std::string& body) {
  HttpRequest r{http::verb::post, path, 11};
  r.set(http::field::content_type, "application/json");
  r.body() = body;
  r.prepare_payload();
  return r;
}

router::Settings TestSettings() {
  router::Settings s;
  s.model = "m";
  s.limits.max_tokens = 100;
  return s;
}

class DoorCountingBook : public AdmissionBook {
 public:
  std::string NewRequestId() override { return "r" + std::to_string(++ids); }
  void RecordRefused(const router::Request&, const router::Outcome& outcome) override {
    reasons.push_back(ReasonOf(outcome));
  }
  int ids = 0;
  std::vector<std::string> reasons;
};

TEST(HttpGenerationRequestTest, PathNamesTheApi) {
  EXPECT_EQ(ApiForPath("/v1/completions"), Api::kCompletions);
  EXPECT_EQ(ApiForPath("/v1/chat/completions"), Api::kChatCompletions);
  EXPECT_EQ(HttpDoorRequest(Post("/v1/chat/completions", "{}"), "/v1/chat/completions").api,
            Api::kChatCompletions);
}

TEST(HttpGenerationRequestTest, HeadersBecomeTheDoorRequest) {
  HttpRequest r = Post("/v1/completions", "{}");
  DoorRequest door = HttpDoorRequest(r, "/v1/completions");
  EXPECT_EQ(door.door, router::Door::kHttp);
  EXPECT_FALSE(door.stream);
  EXPECT_FALSE(door.authorization.has_value());
  EXPECT_EQ(door.client_request_id, "");
  EXPECT_FALSE(door.client_time_left.has_value());

  r.set(http::field::authorization, "Bearer k");
  r.set("X-Request-Id", "client-1");
  door = HttpDoorRequest(r, "/v1/completions");
  ASSERT_TRUE(door.authorization.has_value());
  EXPECT_EQ(*door.authorization, "Bearer k");
  EXPECT_EQ(door.client_request_id, "client-1");

  // Present but empty is still a header (and matches no key).
  r.set(http::field::authorization, "");
  door = HttpDoorRequest(r, "/v1/completions");
  ASSERT_TRUE(door.authorization.has_value());
  EXPECT_EQ(*door.authorization, "");
}

TEST(HttpGenerationRequestTest, BodyIsParsedAndValidated) {
  const router::Settings settings = TestSettings();
  const DoorBody ok =
      HttpDoorBody(Post("/v1/chat/completions",
                        R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
                        R"("kv_transfer_params":{"remote_host":"x"}})"),
                   "/v1/chat/completions", settings);
  ASSERT_FALSE(ok.refusal.has_value()) << ok.refusal->message;
  EXPECT_EQ(ok.api, Api::kChatCompletions);
  EXPECT_TRUE(ok.stream);
  EXPECT_EQ(ok.body["messages"][0]["content"], "hi");
  EXPECT_FALSE(ok.body.contains("kv_transfer_params"));

  const DoorBody not_json = HttpDoorBody(Post("/v1/completions", "{"), "/v1/completions", settings);
  ASSERT_TRUE(not_json.refusal.has_value());
  EXPECT_EQ(not_json.refusal->reason, router::Reason::kInvalidRequest);
  EXPECT_EQ(not_json.refusal->message, "request body is not valid JSON");

  const DoorBody model = HttpDoorBody(Post("/v1/completions", R"({"model":"n","prompt":"x"})"),
                                      "/v1/completions", settings);
  ASSERT_TRUE(model.refusal.has_value());
  EXPECT_EQ(model.refusal->reason, router::Reason::kModelNotFound);
  EXPECT_EQ(model.refusal->param, "model");

  const DoorBody limit =
      HttpDoorBody(Post("/v1/completions", R"({"model":"m","prompt":"x","max_tokens":101})"),
                   "/v1/completions", settings);
  ASSERT_TRUE(limit.refusal.has_value());
  EXPECT_EQ(limit.refusal->message, "max_tokens must be at most 100 (got 101)");
  EXPECT_EQ(limit.refusal->param, "max_tokens");
}

TEST(HttpGenerationRequestTest, AdmittedAsARouterRequest) {
  const router::Settings settings = TestSettings();
  narwhal::testing::FakeClock clock;
  DoorCountingBook book;
  const RequestAdmission admission(settings, clock, "k", book);
  HttpRequest r = Post("/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":4})");
  r.set(http::field::authorization, "Bearer k");
  r.set("X-Request-Id", "c-9");
  const AdmissionResult result = admission.Admit(HttpDoorRequest(r, "/v1/completions"), [&] {
    return HttpDoorBody(r, "/v1/completions", settings);
  });
  ASSERT_TRUE(result.admitted());
  EXPECT_EQ(result.request.rid, "r1");
  EXPECT_EQ(result.request.client_rid, "c-9");
  EXPECT_EQ(result.request.door, router::Door::kHttp);
  EXPECT_EQ(result.request.api, Api::kCompletions);
  EXPECT_FALSE(result.request.stream);
  EXPECT_EQ(result.request.body, json::parse(R"({"model":"m","prompt":"hi","max_tokens":4})"));
  EXPECT_TRUE(book.reasons.empty());

  // Without the key the body is not even parsed: a broken one is still a 401.
  HttpRequest broken = Post("/v1/completions", "{");
  const AdmissionResult refused = admission.Admit(HttpDoorRequest(broken, "/v1/completions"), [&] {
    return HttpDoorBody(broken, "/v1/completions", settings);
  });
  ASSERT_FALSE(refused.admitted());
  EXPECT_EQ(HttpStatus(refused.outcome), 401);
  EXPECT_EQ(book.reasons, std::vector<std::string>{"unauthorized"});
}

}  // namespace
}  // namespace narwhal::server
