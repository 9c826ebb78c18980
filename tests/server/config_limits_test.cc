// The `limits` section of the fleet file (bounds on one generation request)
// and the bound on the config loader's own report of duplicate keys.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/config_loader.h"

namespace narwhal::server {
namespace {

using nlohmann::json;

const char kEngines[] = R"("engines":[{"iid":"p0","url":"http://127.0.0.1:8100","role":"prefill"},)"
                        R"({"iid":"d0","url":"http://127.0.0.1:8200","role":"decode"}])";

std::string Config(const std::string& limits) {
  std::string text = absl::StrCat(R"({"model":"m",)", kEngines);
  if (!limits.empty()) absl::StrAppend(&text, R"(,"limits":)", limits);
  return text + "}";
}

std::string ErrorOf(const std::string& text) {
  const auto settings = ParseFleetConfig(text);
  EXPECT_FALSE(settings.ok()) << text;
  return settings.ok() ? "" : std::string(settings.status().message());
}

TEST(ConfigLimitsTest, DefaultsWhenAbsent) {
  const auto settings = ParseFleetConfig(Config(""));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->limits.max_tokens, 131072);
  EXPECT_EQ(settings->limits.max_messages, 4096);
  EXPECT_EQ(settings->limits.max_prompts, 1024);
}

TEST(ConfigLimitsTest, ValuesAreReadAndPrintedBack) {
  const auto settings =
      ParseFleetConfig(Config(R"({"max_tokens":512,"max_messages":8,"max_prompts":1})"));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->limits.max_tokens, 512);
  EXPECT_EQ(settings->limits.max_messages, 8);
  EXPECT_EQ(settings->limits.max_prompts, 1);
  const json printed = SettingsToJson(*settings);
  EXPECT_EQ(printed["limits"], json({{"max_tokens", 512}, {"max_messages", 8}, {"max_prompts", 1}}))
      << printed.dump();
  const auto again = ParseFleetConfig(printed.dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->limits.max_tokens, 512);
}

TEST(ConfigLimitsTest, EachMustBeAPositiveInteger) {
  EXPECT_EQ(ErrorOf(Config(R"({"max_tokens":0})")),
            "config: limits.max_tokens must be >= 1 (got 0)");
  EXPECT_EQ(ErrorOf(Config(R"({"max_tokens":1.5})")),
            "config: limits.max_tokens must be an integer (got number 1.5)");
  EXPECT_EQ(ErrorOf(Config(R"({"max_tokens":"100"})")),
            "config: limits.max_tokens must be an integer (got string \"100\")");
  EXPECT_EQ(ErrorOf(Config(R"({"max_tokens":9223372036854775808})")),
            "config: limits.max_tokens must be <= 2147483647 (got 9223372036854775808)");
  EXPECT_EQ(ErrorOf(Config(R"({"max_messages":0,"max_prompts":-1})")),
            "config: limits.max_messages must be between 1 and 1000000 (got 0); "
            "limits.max_prompts must be between 1 and 1000000 (got -1)");
  EXPECT_EQ(ErrorOf(Config(R"({"max_messages":null})")),
            "config: limits.max_messages must be an integer (got null)");
  EXPECT_EQ(ErrorOf(Config(R"({"max_token":5})")), "config: limits.max_token: unknown key");
}

// A file that repeats keys thousands of times gets a short report (the
// first duplicates and a count of the rest), quickly.
TEST(ConfigDuplicateKeysTest, ThousandsOfDuplicatesGiveABoundedReport) {
  constexpr int kDuplicates = 50000;
  std::string text = absl::StrCat(R"({"model":"m",)", kEngines, R"(,"serving":{"max_attempts":1)");
  for (int i = 0; i < kDuplicates; ++i) absl::StrAppend(&text, R"(,"max_attempts":1)");
  text += "}}";
  const auto start = std::chrono::steady_clock::now();
  const std::string message = ErrorOf(text);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_LT(message.size(), 1500u) << message.substr(0, 2000);
  EXPECT_TRUE(absl::StartsWith(message, "config: serving.max_attempts: duplicate key; "))
      << message.substr(0, 200);
  EXPECT_TRUE(absl::StrContains(message,
                                absl::StrCat("... and ", kDuplicates - 16, " more duplicate keys")))
      << message;
  EXPECT_FALSE(absl::StrContains(message, "more errors")) << message;
}

TEST(ConfigDuplicateKeysTest, AFewDuplicatesAreEachNamed) {
  const std::string text = absl::StrCat(R"({"model":"m","model":"n",)", kEngines,
                                        R"(,"serving":{"max_attempts":1,"max_attempts":2}})");
  EXPECT_EQ(ErrorOf(text), "config: model: duplicate key; serving.max_attempts: duplicate key");
}

}  // namespace
}  // namespace narwhal::server
