// narwhal-check --diff reads a running router's effective configuration from
// the admin GetConfig answer (server/check/running_config.h): a Struct whose
// numbers are all doubles, read back into settings without the router's TLS
// files, and refused when it is not a bounded fleet configuration.
#include "server/check/running_config.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "server/config/config_loader.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

const char kFleet[] = R"({"model": "m", "engines": [
    {"iid": "p0", "url": "http://10.0.0.1:8000", "role": "prefill"},
    {"iid": "g", "dns": "decode.svc", "port": 8000, "role": "decode"}],
    "serving": {"max_attempts": 2, "max_request_bytes": 1048576, "retry_replenish": 0.25},
    "discovery": {"dns_servers": ["10.96.0.10:53"]},
    "membership": {"join_checks": false}})";

// What the admin service answers for `settings`.
google::protobuf::Struct GetConfigAnswer(const router::Settings& settings) {
  google::protobuf::Struct answer;
  EXPECT_TRUE(SettingsToStruct(settings, &answer).ok());
  return answer;
}

TEST(RunningConfigTest, TheAnswerReadsBackToTheSameSettings) {
  const absl::StatusOr<router::Settings> settings = ParseFleetConfig(kFleet);
  ASSERT_TRUE(settings.ok()) << settings.status();
  const absl::StatusOr<std::string> text = EffectiveConfigText(GetConfigAnswer(*settings));
  ASSERT_TRUE(text.ok()) << text.status();
  // Integral numbers are integers again (int32 keys refuse 2.0).
  const json document = json::parse(*text);
  EXPECT_TRUE(document["serving"]["max_attempts"].is_number_integer()) << *text;
  EXPECT_TRUE(document["engines"][1]["port"].is_number_integer()) << *text;
  EXPECT_EQ(document["serving"]["retry_replenish"], 0.25);
  const absl::StatusOr<router::Settings> running = ParseEffectiveConfig(*text);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(SettingsToJson(*running), SettingsToJson(*settings));
  EXPECT_EQ(running->engines[1].dns, "decode.svc");
  EXPECT_FALSE(running->membership.join_checks);
}

TEST(RunningConfigTest, TheRoutersTlsFilesAreNotRead) {
  json fleet = json::parse(kFleet);
  fleet["tls"] = {{"cert_file", "/nonexistent/tls.crt"}, {"key_file", "/nonexistent/tls.key"}};
  EXPECT_FALSE(ParseFleetConfig(fleet.dump()).ok());
  const absl::StatusOr<router::Settings> running = ParseEffectiveConfig(fleet.dump());
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->tls.cert_file, "/nonexistent/tls.crt");
}

TEST(RunningConfigTest, AnAnswerThatIsNoFleetConfigIsRefused) {
  google::protobuf::Struct answer;
  (*answer.mutable_fields())["model"].set_number_value(3);
  const absl::StatusOr<std::string> text = EffectiveConfigText(answer);
  ASSERT_TRUE(text.ok());
  const absl::StatusOr<router::Settings> running = ParseEffectiveConfig(*text);
  ASSERT_FALSE(running.ok());
  EXPECT_TRUE(absl::StartsWith(running.status().message(),
                               "running config: model must be a string (got integer)"))
      << running.status();
}

TEST(RunningConfigTest, HostileAnswersAreRefusedWithoutRecursingDeep) {
  // Nested far deeper than any JSON input may be.
  google::protobuf::Struct deep;
  google::protobuf::Struct* at = &deep;
  for (int i = 0; i < 5000; ++i) at = (*at->mutable_fields())["x"].mutable_struct_value();
  const absl::StatusOr<std::string> text = EffectiveConfigText(deep);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(), "running config: the answer nests deeper than 128 levels");

  google::protobuf::Struct infinite;
  (*infinite.mutable_fields())["x"].set_number_value(std::numeric_limits<double>::infinity());
  EXPECT_EQ(EffectiveConfigText(infinite).status().message(),
            "running config: a number is not finite");

  // Many small values: refused by the parsed-cost bound, not parsed.
  google::protobuf::Struct wide;
  google::protobuf::ListValue* list = (*wide.mutable_fields())["x"].mutable_list_value();
  for (int i = 0; i < 400000; ++i) list->add_values()->mutable_struct_value();
  const absl::StatusOr<std::string> wide_text = EffectiveConfigText(wide);
  ASSERT_TRUE(wide_text.ok());
  const absl::StatusOr<router::Settings> running = ParseEffectiveConfig(*wide_text);
  ASSERT_FALSE(running.ok());
  EXPECT_TRUE(absl::StrContains(running.status().message(), "would take more than"))
      << running.status();
}

}  // namespace
}  // namespace narwhal::server
