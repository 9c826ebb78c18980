// The pure parts of HttpEngineClient: URL parsing, engine error messages and
// the engine status table (B10, B11, reference §8).
#include "engines/engine_failure.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "tests/fakes/edge_status.h"

namespace narwhal::engines {
namespace {

namespace nt = ::narwhal::testing;

using ::testing::StartsWith;

// --- ParseEngineUrl ---------------------------------------------------------------

TEST(ParseEngineUrlTest, HostAndPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseEngineUrl("http://127.0.0.1:8000", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8000);
  ASSERT_TRUE(ParseEngineUrl("http://engine-p0.internal:65535/", &host, &port));
  EXPECT_EQ(host, "engine-p0.internal");
  EXPECT_EQ(port, 65535);
  ASSERT_TRUE(ParseEngineUrl("http://[::1]:9000", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9000);
  ASSERT_TRUE(ParseEngineUrl("http://h:1", &host, &port));
  EXPECT_EQ(port, 1);
  EXPECT_FALSE(IsTlsEngineUrl("http://h:1"));
  ASSERT_TRUE(ParseEngineUrl("https://vllm.internal:8443/", &host, &port));
  EXPECT_EQ(host, "vllm.internal");
  EXPECT_EQ(port, 8443);
  EXPECT_TRUE(IsTlsEngineUrl("https://vllm.internal:8443"));
}

TEST(ParseEngineUrlTest, Rejects) {
  for (const char* url :
       {"", "http://", "127.0.0.1:8000", "https://h", "HTTP://h:80", "http://h",
        "http://h:", "http://:80", "http://h:0", "http://h:65536", "http://h:123456",
        "http://h:-1", "http://h:8a", "http://h:80/v1", "http://h:80//", "ftp://h:21", "https://"}) {
    std::string host = "unchanged";
    int port = -7;
    EXPECT_FALSE(ParseEngineUrl(url, &host, &port)) << url;
    EXPECT_EQ(host, "unchanged") << url;
    EXPECT_EQ(port, -7) << url;
  }
}

// --- EngineErrorMessage -----------------------------------------------------------

TEST(EngineErrorMessageTest, CurrentNestedShape) {
  EXPECT_EQ(EngineErrorMessage(
                R"({"error":{"message":"The model `foo` does not exist.","type":"NotFoundError","param":"model","code":404}})"),
            "The model `foo` does not exist.");
}

TEST(EngineErrorMessageTest, LegacyFlatShape) {
  EXPECT_EQ(
      EngineErrorMessage(
          R"({"object":"error","message":"Stream options can only be defined when `stream=True`.","type":"BadRequestError","param":null,"code":400})"),
      "Stream options can only be defined when `stream=True`.");
}

TEST(EngineErrorMessageTest, StringShape) {
  EXPECT_EQ(EngineErrorMessage(R"({"error": "Unauthorized"})"), "Unauthorized");
}

TEST(EngineErrorMessageTest, PlainTextAndUnknownJsonAreKeptRaw) {
  EXPECT_EQ(EngineErrorMessage("Internal Server Error"), "Internal Server Error");
  EXPECT_EQ(EngineErrorMessage(R"({"detail":"Not Found"})"), R"({"detail":"Not Found"})");
  EXPECT_EQ(EngineErrorMessage(R"({"error":{"message":5}})"), R"({"error":{"message":5}})");
  EXPECT_EQ(EngineErrorMessage(""), "");
}

TEST(EngineErrorMessageTest, LongMessagesAreTruncated) {
  const std::string long_message(5000, 'm');
  const std::string from_json =
      EngineErrorMessage(R"({"error":{"message":")" + long_message + R"(","code":400}})");
  EXPECT_LT(from_json.size(), 1000u);
  EXPECT_GE(from_json.size(), 100u);
  EXPECT_THAT(from_json, StartsWith("mmmmmmmmmm"));
  const std::string from_text = EngineErrorMessage(std::string(5000, 't'));
  EXPECT_LT(from_text.size(), 1000u);
  EXPECT_THAT(from_text, StartsWith("tttttttttt"));
  const std::string short_message(200, 's');
  EXPECT_EQ(EngineErrorMessage(short_message), short_message);
}

// --- ClassifyEngineStatus ---------------------------------------------------------

struct StatusCase {
  int engine_status;
  bool in_stream;
  int status;
  FailureReason reason;
  BreakerClass breaker_class;
  bool transient;
  // 401/403/404/405/407: the engine refuses the router (issue: an engine
  // with another API key or model must never read as the client's mistake).
  bool refuses_router = false;
};

class ClassifyEngineStatusTest : public ::testing::TestWithParam<StatusCase> {};

TEST_P(ClassifyEngineStatusTest, Table) {
  const StatusCase& c = GetParam();
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    const EngineFailure f = ClassifyEngineStatus(phase, "e1", c.engine_status, "engine says no",
                                                 c.in_stream);
    SCOPED_TRACE(::testing::Message() << "engine status " << c.engine_status << " in_stream "
                                      << c.in_stream << " phase " << PhaseName(phase));
    EXPECT_EQ(f.phase, phase);
    EXPECT_EQ(f.iid, "e1");
    EXPECT_EQ(nt::HttpStatus(f), c.status);
    EXPECT_EQ(f.engine_status, c.engine_status);
    EXPECT_EQ(f.reason, c.reason);
    EXPECT_EQ(f.breaker_class, c.breaker_class);
    EXPECT_EQ(f.transient, c.transient);
    EXPECT_EQ(f.evidence_iid, c.breaker_class == BreakerClass::kNone ? "" : "e1");
    EXPECT_THAT(f.detail, ::testing::HasSubstr("engine says no"));
    EXPECT_EQ(f.cause, c.refuses_router ? FailureCause::kEngineRefusedRouter
                       : c.in_stream    ? FailureCause::kStreamError
                                        : FailureCause::kEngineStatus);
  }
}

INSTANTIATE_TEST_SUITE_P(
    B10, ClassifyEngineStatusTest,
    ::testing::Values(
        StatusCase{408, false, 504, FailureReason::kEngineOverloaded, BreakerClass::kOverload,
                   true},
        StatusCase{429, false, 502, FailureReason::kEngineOverloaded, BreakerClass::kOverload,
                   true},
        StatusCase{400, false, 400, FailureReason::kEngineRejected, BreakerClass::kNone, false},
        StatusCase{401, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{403, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{404, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{405, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{407, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{401, true, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true, true},
        StatusCase{422, false, 422, FailureReason::kEngineRejected, BreakerClass::kNone, false},
        StatusCase{413, false, 413, FailureReason::kEngineRejected, BreakerClass::kNone, false},
        StatusCase{500, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true},
        StatusCase{502, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true},
        StatusCase{503, false, 502, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true},
        StatusCase{504, false, 504, FailureReason::kEngineTimeout, BreakerClass::kInferenceStatus,
                   true},
        // B11: an error object inside a 200 stream keeps its own status.
        StatusCase{503, true, 503, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true},
        StatusCase{500, true, 500, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                   true},
        StatusCase{400, true, 400, FailureReason::kEngineRejected, BreakerClass::kNone, false}));

TEST(ClassifyEngineStatusDetailTest, DetailNamesTheSource) {
  EXPECT_EQ(ClassifyEngineStatus(Phase::kPrefill, "p0", 503, "queue full", false).detail,
            "engine returned HTTP 503: queue full");
  EXPECT_EQ(ClassifyEngineStatus(Phase::kDecode, "d0", 503, "queue full", true).detail,
            "engine stream error 503: queue full");
  // An engine that refuses the router says so, and names what to check.
  EXPECT_EQ(ClassifyEngineStatus(Phase::kDecode, "d0", 401, "Unauthorized", false).detail,
            "engine returned HTTP 401: Unauthorized (the engine refuses the router: check "
            "engine.api_key_env, the served model name and the engine's URL)");
  // A client-side refusal goes back with the engine's own message.
  EXPECT_EQ(ClassifyEngineStatus(Phase::kPrefill, "p0", 400, "prompt too long", false).detail,
            "prompt too long");
}

TEST(EngineFailureTest, Names) {
  EXPECT_EQ(PhaseName(Phase::kPrefill), "prefill");
  EXPECT_EQ(PhaseName(Phase::kDecode), "decode");
  EXPECT_EQ(BreakerClassName(BreakerClass::kNone), "none");
  EXPECT_EQ(BreakerClassName(BreakerClass::kConnection), "connection");
  EXPECT_EQ(BreakerClassName(BreakerClass::kTimeout), "timeout");
  EXPECT_EQ(BreakerClassName(BreakerClass::kOverload), "overload");
  EXPECT_EQ(BreakerClassName(BreakerClass::kInferenceStatus), "inference_status");
  EXPECT_EQ(BreakerClassName(BreakerClass::kKvHandoff), "kv_handoff");
  EXPECT_EQ(BreakerClassName(BreakerClass::kStream), "stream");
  EXPECT_EQ(BreakerClassName(BreakerClass::kLiveness), "liveness");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineUnreachable), "engine_unreachable");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineConnection), "engine_connection");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineTimeout), "engine_timeout");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineOverloaded), "engine_overloaded");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineRejected), "engine_rejected");
  EXPECT_EQ(FailureReasonName(FailureReason::kEngineError), "engine_error");
  EXPECT_EQ(FailureReasonName(FailureReason::kInvalidResponse), "invalid_response");
  EXPECT_EQ(FailureReasonName(FailureReason::kDeadline), "deadline");
  EXPECT_EQ(FailureReasonName(FailureReason::kHandoffExpired), "handoff");
  EXPECT_EQ(FailureReasonName(FailureReason::kCancelled), "cancelled");
}

}  // namespace
}  // namespace narwhal::engines
