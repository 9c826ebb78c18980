// The one admission path of both doors (server/admission): the refusal
// table row by row, the order of the rules (API key, the door's body, the
// model's limits), that every refusal is journaled once and an admitted
// request is not, and how the router::Request is built (ids, API, stream,
// deadline). No door, socket or router involved.
#include "server/admission.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::server {
namespace {

using engines::Api;
using ::narwhal::testing::ErrorTypeOf;
using ::narwhal::testing::HttpStatus;
using ::narwhal::testing::ReasonOf;
using json = nlohmann::json;
using router::Reason;
using router::Terminal;
using std::chrono_literals::operator""s;

struct Row {
  router::Request request;
  router::Outcome outcome;
};

class FakeBook : public AdmissionBook {
 public:
  std::string NewRequestId() override { return "rid-" + std::to_string(++ids_); }
  void RecordRefused(const router::Request& request, const router::Outcome& outcome) override {
    rows.push_back({request, outcome});
  }
  std::vector<Row> rows;

 private:
  int ids_ = 0;
};

router::Settings TestSettings() {
  router::Settings s;
  s.model = "m";
  s.serving.request_timeout_s = 30;
  return s;
}

DoorBody ValidBody(const json& body, Api api = Api::kCompletions) {
  return DoorBodyFrom(api, ValidateOpenAiBody(body, api, "m"));
}

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionResult Admit(const RequestAdmission& admission, const DoorRequest& door,
                        const json& body) {
    return admission.Admit(door, [&] {
      ++bodies_;
      return ValidBody(body, door.api);
    });
  }

  router::Settings settings_ = TestSettings();
  narwhal::testing::FakeClock clock_;
  FakeBook book_;
  int bodies_ = 0;
};

struct TableCase {
  Reason kind;
  Terminal terminal;
  const char* reason;
  int status;
  ErrorType type;
};

// What each door sent before the doors shared this path.
constexpr TableCase kTable[] = {
    {Reason::kUnauthorized, Terminal::kRejected, "unauthorized", 401, ErrorType::kUnauthorized},
    {Reason::kModelNotFound, Terminal::kInvalid, "model_not_found", 404,
     ErrorType::kInvalidRequest},
    {Reason::kInvalidRequest, Terminal::kInvalid, "invalid_request", 400,
     ErrorType::kInvalidRequest},
    {Reason::kTooLarge, Terminal::kInvalid, "too_large", 413, ErrorType::kInvalidRequest},
    {Reason::kMalformedHttp, Terminal::kInvalid, "malformed_http", 400, ErrorType::kInvalidRequest},
    {Reason::kMalformedMessage, Terminal::kInvalid, "malformed_message", 400,
     ErrorType::kInvalidRequest},
    {Reason::kHeadersTooLarge, Terminal::kInvalid, "headers_too_large", 431,
     ErrorType::kInvalidRequest},
    {Reason::kHeaderTimeout, Terminal::kInvalid, "header_timeout", 408, ErrorType::kInvalidRequest},
    {Reason::kCancelled, Terminal::kCancelled, "cancelled", 499, ErrorType::kNone},
};

TEST(RefusalTableTest, EveryRefusalReasonGivesItsOutcome) {
  for (const TableCase& c : kTable) {
    Refusal refusal;
    refusal.reason = c.kind;
    refusal.message = std::string("why ") + c.reason;
    refusal.param = "p";
    const router::Outcome o = RefusalOutcome(refusal);
    EXPECT_EQ(o.terminal, c.terminal) << c.reason;
    EXPECT_EQ(ReasonOf(o), c.reason);
    EXPECT_EQ(HttpStatus(o), c.status) << c.reason;
    EXPECT_EQ(ErrorTypeOf(o), c.type) << c.reason;
    EXPECT_EQ(o.message, std::string("why ") + c.reason);
    EXPECT_FALSE(o.output_started);
    EXPECT_FALSE(o.ok());
  }
}

TEST(RefusalTableTest, ValidationErrorsKeepTheirStatusAndParam) {
  const ParsedRequest unknown =
      ValidateOpenAiBody({{"model", "x"}, {"prompt", "hi"}}, Api::kCompletions, "m");
  ASSERT_FALSE(unknown.ok);
  const Refusal model = RefusalFor(unknown.error);
  EXPECT_EQ(model.reason, Reason::kModelNotFound);
  EXPECT_EQ(model.message, "The model `x` does not exist.");
  EXPECT_EQ(model.param, "model");
  EXPECT_EQ(HttpStatus(RefusalOutcome(model)), 404);

  const ParsedRequest invalid = ValidateOpenAiBody({{"model", "m"}}, Api::kCompletions, "m");
  ASSERT_FALSE(invalid.ok);
  const Refusal bad = RefusalFor(invalid.error);
  EXPECT_EQ(bad.reason, Reason::kInvalidRequest);
  EXPECT_EQ(bad.message, "prompt is required");
  EXPECT_EQ(bad.param, "prompt");
  EXPECT_EQ(HttpStatus(RefusalOutcome(bad)), 400);
}

TEST_F(AdmissionTest, MissingOrWrongKeyIsRefusedBeforeTheBody) {
  const RequestAdmission admission(settings_, clock_, "s3cret", book_);
  DoorRequest door;
  door.door = router::Door::kGrpc;
  door.api = Api::kChatCompletions;
  door.stream = true;
  for (const std::optional<std::string_view> auth :
       {std::optional<std::string_view>(), std::optional<std::string_view>("Bearer s3cre"),
        std::optional<std::string_view>("s3cret"), std::optional<std::string_view>("")}) {
    door.authorization = auth;
    const AdmissionResult r = Admit(admission, door, {{"model", "m"}, {"messages", json::array()}});
    ASSERT_FALSE(r.admitted());
    EXPECT_EQ(r.refusal->reason, Reason::kUnauthorized);
    EXPECT_EQ(HttpStatus(r.outcome), 401);
    EXPECT_EQ(r.outcome.terminal, Terminal::kRejected);
    EXPECT_EQ(r.outcome.message, "invalid or missing API key");
    EXPECT_EQ(r.refusal->param, "");
  }
  EXPECT_EQ(bodies_, 0);  // never parsed for a client without the key
  ASSERT_EQ(book_.rows.size(), 4u);
  // The row has what the door knew: its API and stream.
  EXPECT_EQ(book_.rows[0].request.door, router::Door::kGrpc);
  EXPECT_EQ(book_.rows[0].request.api, Api::kChatCompletions);
  EXPECT_TRUE(book_.rows[0].request.stream);
  EXPECT_EQ(ReasonOf(book_.rows[0].outcome), "unauthorized");
}

TEST_F(AdmissionTest, TheRightKeyOrNoneConfiguredIsAdmitted) {
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  DoorRequest door;
  door.authorization = "Bearer s3cret";
  EXPECT_TRUE(Admit(RequestAdmission(settings_, clock_, "s3cret", book_), door, body).admitted());
  door.authorization.reset();
  EXPECT_TRUE(Admit(RequestAdmission(settings_, clock_, "", book_), door, body).admitted());
  EXPECT_TRUE(book_.rows.empty());

  const RequestAdmission keyed(settings_, clock_, "s3cret", book_);
  EXPECT_TRUE(keyed.Authorized("Bearer s3cret"));
  // Whitespace around the value is not part of it (server/api_key.h).
  EXPECT_TRUE(keyed.Authorized("Bearer s3cret "));
  EXPECT_FALSE(keyed.Authorized("Bearer  s3cret"));
  EXPECT_FALSE(keyed.Authorized(std::nullopt));
  EXPECT_TRUE(RequestAdmission(settings_, clock_, "", book_).Authorized(std::nullopt));
}

// A book with the router's real tenant limits and a configuration
// generation that a test can replace (a reload).
class TenantBook : public FakeBook {
 public:
  explicit TenantBook(const engines::Clock& clock) : limits(clock, nullptr) {}
  router::TenantGrant AcquireTenant(const router::TenantSettings& tenant) override {
    return limits.Acquire(tenant);
  }
  std::shared_ptr<const router::ConfigGeneration> CurrentConfig() override { return config; }
  router::TenantLimits limits;
  std::shared_ptr<const router::ConfigGeneration> config;
};

router::TenantSettings Tenant(std::string name, std::string key, int max_inflight = 0,
                              double rate = 0, double burst = 0) {
  router::TenantSettings t;
  t.name = std::move(name);
  t.key_env = "UNUSED";
  t.key = std::move(key);
  t.max_inflight = max_inflight;
  t.requests_per_s = rate;
  t.burst = burst;
  return t;
}

TEST_F(AdmissionTest, EachTenantsKeyNamesItsTenantAndOtherKeysAreRefused) {
  TenantBook book(clock_);
  router::Settings s = settings_;
  s.serving.api_keys = {Tenant("search", "key-search"), Tenant("batch", "key-batch")};
  book.config = std::make_shared<const router::ConfigGeneration>(router::ConfigGeneration{1, s});
  const RequestAdmission admission(settings_, clock_, "", book);
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  DoorRequest door;
  door.authorization = "Bearer key-batch";
  AdmissionResult r = Admit(admission, door, body);
  ASSERT_TRUE(r.admitted());
  EXPECT_EQ(r.request.tenant, "batch");
  ASSERT_NE(r.request.tenant_hold, nullptr);
  EXPECT_EQ(book.limits.InFlight("batch"), 1);
  door.authorization = "Bearer key-search ";
  r = Admit(admission, door, body);
  ASSERT_TRUE(r.admitted());
  EXPECT_EQ(r.request.tenant, "search");
  EXPECT_EQ(book.limits.InFlight("batch"), 0);  // the first request's hold went with it

  for (const std::optional<std::string_view> auth :
       {std::optional<std::string_view>(), std::optional<std::string_view>("Bearer key-batc"),
        std::optional<std::string_view>("Bearer key-batch2"),
        std::optional<std::string_view>("key-batch")}) {
    door.authorization = auth;
    r = Admit(admission, door, body);
    ASSERT_FALSE(r.admitted());
    EXPECT_EQ(r.refusal->reason, Reason::kUnauthorized);
    EXPECT_EQ(r.request.tenant, "");
  }
  EXPECT_TRUE(admission.Authorized("Bearer key-search"));
  EXPECT_FALSE(admission.Authorized("Bearer s3cret"));
  EXPECT_FALSE(admission.Authorized(std::nullopt));
  EXPECT_EQ(bodies_, 2);
}

TEST_F(AdmissionTest, ATenantBeyondItsLimitsGets429WithRetryAfterBeforeItsBodyIsRead) {
  TenantBook book(clock_);
  router::Settings s = settings_;
  s.serving.api_keys = {Tenant("batch", "key-batch", 1), Tenant("search", "key-search", 0, 0.5, 1)};
  book.config = std::make_shared<const router::ConfigGeneration>(router::ConfigGeneration{1, s});
  const RequestAdmission admission(settings_, clock_, "", book);
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  DoorRequest door;
  door.authorization = "Bearer key-batch";
  AdmissionResult held = Admit(admission, door, body);
  ASSERT_TRUE(held.admitted());
  AdmissionResult r = Admit(admission, door, body);
  ASSERT_FALSE(r.admitted());
  EXPECT_EQ(r.refusal->reason, Reason::kTenantInflightLimit);
  EXPECT_EQ(r.outcome.terminal, Terminal::kRejected);
  EXPECT_EQ(HttpStatus(r.outcome), 429);
  EXPECT_EQ(ErrorTypeOf(r.outcome), ErrorType::kRateLimit);
  EXPECT_EQ(r.outcome.retry_after_s, 1);
  EXPECT_EQ(r.request.tenant, "batch");  // journaled with the tenant's name
  EXPECT_EQ(r.outcome.message, "tenant batch in-flight limit reached (1)");
  EXPECT_EQ(bodies_, 1);
  // The place comes back when the request ends.
  held.request.tenant_hold->Release();
  EXPECT_TRUE(Admit(admission, door, body).admitted());

  door.authorization = "Bearer key-search";
  EXPECT_TRUE(Admit(admission, door, body).admitted());
  r = Admit(admission, door, body);
  ASSERT_FALSE(r.admitted());
  EXPECT_EQ(ReasonOf(r.outcome), "tenant_rate_limit");
  EXPECT_EQ(r.outcome.retry_after_s, 2);  // one token per 2 s
  ASSERT_FALSE(book.rows.empty());
  EXPECT_EQ(book.rows.back().request.tenant, "search");
  EXPECT_EQ(book.rows.back().outcome.retry_after_s, 2);
  clock_.Advance(2.0);
  EXPECT_TRUE(Admit(admission, door, body).admitted());
}

TEST_F(AdmissionTest, ARequestIsAdmittedUnderTheKeysOfItsOwnGeneration) {
  TenantBook book(clock_);
  router::Settings s = settings_;
  s.serving.api_keys = {Tenant("a", "old-key")};
  book.config = std::make_shared<const router::ConfigGeneration>(router::ConfigGeneration{1, s});
  const RequestAdmission admission(settings_, clock_, "", book);
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  DoorRequest door;
  door.authorization = "Bearer old-key";
  ASSERT_TRUE(Admit(admission, door, body).admitted());
  // A reload rotated the key.
  s.serving.api_keys = {Tenant("a", "new-key")};
  book.config = std::make_shared<const router::ConfigGeneration>(router::ConfigGeneration{2, s});
  EXPECT_EQ(Admit(admission, door, body).refusal->reason, Reason::kUnauthorized);
  door.authorization = "Bearer new-key";
  EXPECT_TRUE(Admit(admission, door, body).admitted());
}

TEST_F(AdmissionTest, UnknownModelIsModelNotFound) {
  const RequestAdmission admission(settings_, clock_, "", book_);
  const AdmissionResult r = Admit(admission, DoorRequest(), {{"model", "other"}, {"prompt", "x"}});
  ASSERT_FALSE(r.admitted());
  EXPECT_EQ(r.refusal->reason, Reason::kModelNotFound);
  EXPECT_EQ(r.refusal->param, "model");
  EXPECT_EQ(HttpStatus(r.outcome), 404);
  EXPECT_EQ(ReasonOf(r.outcome), "model_not_found");
  EXPECT_EQ(r.outcome.message, "The model `other` does not exist.");
  ASSERT_EQ(book_.rows.size(), 1u);
  EXPECT_EQ(ReasonOf(book_.rows[0].outcome), "model_not_found");
  EXPECT_EQ(book_.rows[0].request.rid, r.request.rid);
  // The access log and journal see the model the client named, nothing else.
  EXPECT_EQ(book_.rows[0].request.body, json({{"model", "other"}}));
}

TEST_F(AdmissionTest, InvalidBodyIsInvalidRequestWithTheBodysApi) {
  const RequestAdmission admission(settings_, clock_, "", book_);
  DoorRequest door;  // the door guessed completions; the body is for chat
  const AdmissionResult r = admission.Admit(door, [] {
    return DoorBodyFrom(Api::kChatCompletions,
                        ValidateOpenAiBody({{"model", "m"}}, Api::kChatCompletions, "m"));
  });
  ASSERT_FALSE(r.admitted());
  EXPECT_EQ(r.refusal->reason, Reason::kInvalidRequest);
  EXPECT_EQ(HttpStatus(r.outcome), 400);
  EXPECT_EQ(ReasonOf(r.outcome), "invalid_request");
  EXPECT_EQ(r.outcome.message, "messages is required");
  EXPECT_EQ(r.refusal->param, "messages");
  ASSERT_EQ(book_.rows.size(), 1u);
  EXPECT_EQ(book_.rows[0].request.api, Api::kChatCompletions);
}

TEST_F(AdmissionTest, DoorBodyRefusalsAreJournaledAsTheyCame) {
  const RequestAdmission admission(settings_, clock_, "", book_);
  for (const Reason kind : {Reason::kTooLarge, Reason::kMalformedMessage, Reason::kCancelled}) {
    const AdmissionResult r = admission.Admit(DoorRequest(), [kind] {
      DoorBody body;
      body.refusal = Refusal{kind, "door says no", ""};
      return body;
    });
    ASSERT_FALSE(r.admitted());
    EXPECT_EQ(r.refusal->reason, kind);
    EXPECT_EQ(r.outcome.message, "door says no");
  }
  ASSERT_EQ(book_.rows.size(), 3u);
  EXPECT_EQ(HttpStatus(book_.rows[0].outcome), 413);
  EXPECT_EQ(ReasonOf(book_.rows[1].outcome), "malformed_message");
  EXPECT_EQ(book_.rows[2].outcome.terminal, Terminal::kCancelled);
}

TEST_F(AdmissionTest, RefusalsFoundByTheDoorAreJournaledWithItsRequest) {
  const RequestAdmission admission(settings_, clock_, "s3cret", book_);
  DoorRequest door;
  door.api = Api::kChatCompletions;
  door.client_request_id = "client-7";
  const AdmissionResult r =
      admission.Refuse(door, Refusal{Reason::kHeadersTooLarge, "too many headers", ""});
  ASSERT_FALSE(r.admitted());
  EXPECT_EQ(HttpStatus(r.outcome), 431);
  EXPECT_EQ(r.request.client_rid, "client-7");
  ASSERT_EQ(book_.rows.size(), 1u);
  EXPECT_EQ(book_.rows[0].request.api, Api::kChatCompletions);
  EXPECT_EQ(ReasonOf(book_.rows[0].outcome), "headers_too_large");
}

TEST_F(AdmissionTest, AdmittedRequestCarriesIdsBodyStreamAndDeadline) {
  const RequestAdmission admission(settings_, clock_, "", book_);
  DoorRequest door;
  door.door = router::Door::kHttp;
  door.client_request_id = "abc-1";
  const AdmissionResult r = Admit(admission, door,
                                  {{"model", "m"},
                                   {"prompt", "hi"},
                                   {"stream", true},
                                   {"kv_transfer_params", {{"remote_host", "evil"}}}});
  ASSERT_TRUE(r.admitted());
  const router::Request& q = r.request;
  EXPECT_EQ(q.rid, "rid-1");
  EXPECT_EQ(q.client_rid, "abc-1");
  EXPECT_EQ(q.door, router::Door::kHttp);
  EXPECT_EQ(q.api, Api::kCompletions);
  EXPECT_TRUE(q.stream);
  EXPECT_EQ(q.body["prompt"], "hi");
  EXPECT_FALSE(q.body.contains("kv_transfer_params"));
  EXPECT_EQ(q.arrived, clock_.Now());
  EXPECT_EQ(q.arrived_wall, clock_.WallNow());
  EXPECT_EQ(q.deadline, q.arrived + 30s);
}

TEST_F(AdmissionTest, ClientDeadlineOnlyShortensAndOddClientIdsAreDropped) {
  const RequestAdmission admission(settings_, clock_, "", book_);
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  DoorRequest door;
  door.client_request_id = "has space";
  door.client_time_left = std::chrono::duration_cast<engines::MonoClock::duration>(5s);
  AdmissionResult r = Admit(admission, door, body);
  ASSERT_TRUE(r.admitted());
  EXPECT_EQ(r.request.deadline, r.request.arrived + 5s);
  EXPECT_EQ(r.request.client_rid, "");

  door.client_time_left = std::chrono::duration_cast<engines::MonoClock::duration>(300s);
  r = Admit(admission, door, body);
  EXPECT_EQ(r.request.deadline, r.request.arrived + 30s);
  EXPECT_EQ(r.request.rid, "rid-2");
}

}  // namespace
}  // namespace narwhal::server

namespace narwhal::server {
namespace {

TEST_F(AdmissionTest, TheClientsTraceIsContinuedElseOneIsStarted) {
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  const RequestAdmission admission(settings_, clock_, "", book_);
  DoorRequest door;
  door.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  door.tracestate = "congo=t61rcWkgMzE";
  AdmissionResult a = Admit(admission, door, body);
  ASSERT_TRUE(a.admitted());
  EXPECT_EQ(a.request.trace.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(a.request.trace.parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(a.request.trace.tracestate, "congo=t61rcWkgMzE");

  // None, or an invalid one (its tracestate goes with it): a new trace each.
  door.traceparent = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
  AdmissionResult b = Admit(admission, door, body);
  door.traceparent.reset();
  door.tracestate.reset();
  AdmissionResult c = Admit(admission, door, body);
  for (const AdmissionResult* r : {&b, &c}) {
    ASSERT_TRUE(r->admitted());
    EXPECT_EQ(r->request.trace.trace_id.size(), 32u);
    EXPECT_FALSE(r->request.trace.continued());
    EXPECT_EQ(r->request.trace.tracestate, "");
    EXPECT_TRUE(router::ParseTraceparent(r->request.trace.ChildTraceparent("00f067aa0ba902b7"), "")
                    .has_value());
  }
  EXPECT_NE(b.request.trace.trace_id, c.request.trace.trace_id);
}

}  // namespace
}  // namespace narwhal::server
