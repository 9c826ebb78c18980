// Helpers of the narwhal-sim component tests.
#ifndef NARWHAL_TESTS_SIM_SIM_TEST_UTIL_H_
#define NARWHAL_TESTS_SIM_SIM_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/fakes/http_capture.h"
#include "tests/fakes/sim_process.h"

namespace narwhal::testing {

// The fixture of a suite that shares one narwhal-sim process, started with
// `--engine-id Derived::kEngineId` before the suite's first test and stopped
// after its last; each test starts with no fault rules and an empty request
// log.
template <typename Derived>
class OneSimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = SimProcess::Start({"--engine-id", Derived::kEngineId});
    ASSERT_TRUE(started.ok()) << started.status();
    sim_ = started->release();
  }
  static void TearDownTestSuite() {
    delete sim_;
    sim_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(sim_, nullptr);
    ASSERT_TRUE(sim_->ClearFaults().ok());
    ASSERT_TRUE(sim_->ClearRequests().ok());
  }

  static inline SimProcess* sim_ = nullptr;
};

// The model narwhal-sim serves by default.
inline constexpr char kSimModel[] = "Qwen/Qwen3-0.6B";

struct JsonReply {
  int status = 0;  // 0: no answer
  httplib::Headers headers;
  std::string body;
  nlohmann::json json;  // parsed body (discarded when not JSON)
};

// POSTs `body` as JSON and reads the whole reply.
JsonReply PostJson(const SimProcess& sim, const std::string& path, const nlohmann::json& body,
                   const httplib::Headers& headers = {},
                   absl::Duration read_timeout = absl::Seconds(10));

// POSTs `body` and captures the raw exchange (streams included).
HttpCapture PostStream(const SimProcess& sim, const std::string& path, const nlohmann::json& body,
                       HttpCaptureOptions options = {});

// Capture options that send "X-Request-Id: <id>".
HttpCaptureOptions WithRequestId(const std::string& id);

// The JSON events of a capture, without [DONE] and error frames.
std::vector<nlohmann::json> JsonEvents(const HttpCapture& capture);

// Concatenated generated text of a completions or chat stream.
std::string StreamText(const HttpCapture& capture);

// A one-message chat body / a completions body.
nlohmann::json ChatBody(const std::string& content, int max_tokens, bool stream);
nlohmann::json CompletionBody(const std::string& prompt, int max_tokens, bool stream);

// The producer leg the router sends (B1) for `body`.
nlohmann::json PrefillBody(nlohmann::json body);

// Polls sim.Requests() until `pred` holds for the record with this
// X-Request-Id (at most `timeout`); returns the record when it did.
std::optional<nlohmann::json> WaitForRecord(SimProcess& sim, const std::string& request_id,
                                            const std::function<bool(const nlohmann::json&)>& pred,
                                            absl::Duration timeout = absl::Seconds(10));

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_SIM_SIM_TEST_UTIL_H_
