// The `limits` section of the fleet file (bounds on one generation request)
// and the bound on the config loader's own report of duplicate keys.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"
#include "server/config/config_loader.h"

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

// CPU seconds this thread has run: the bound below holds on a machine busy
// with other work, where wall time would not.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// Instrumented builds: GCC says so with __SANITIZE_*__, clang with
// __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kSlowdown = 10;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr double kSlowdown = 10;
#else
constexpr double kSlowdown = 1;
#endif
#else
constexpr double kSlowdown = 1;
#endif

// The duplicate-key finder once rescanned the parent container at the end of
// every object (nlohmann's callback parser): 320k empty objects took 17 s,
// and a 16 MiB file would have blocked start-up and reloads for minutes.
// Now linear: the largest file (16 MiB) of many small objects — within the
// parsed-cost bound, so it reaches the parser — loads in well under a
// second (about 0.2 s; the quadratic finder took about 27 s).
TEST(ConfigDuplicateKeysTest, SixteenMiBOfSmallObjectsLoadsInUnderASecond) {
  std::string text = absl::StrCat(R"({"model":"m",)", kEngines, R"(,"_padding":[)");
  const std::string object = R"({"k":"0123456789012345678901234567890123456789"})";
  size_t objects = 0;
  while (text.size() + object.size() + 3 <= (16u << 20)) {
    if (objects++ > 0) text += ',';
    text += object;
  }
  text += "]}";
  ASSERT_LE(text.size(), 16u << 20);
  ASSERT_GT(objects, 340000u);
  ASSERT_EQ(engines::CheckJson(text), engines::JsonVerdict::kWithin);

  // The first load also pays for the process's heap growing to hold the
  // document (page faults, about as much again on a busy machine); the
  // second one is the parser's own time.
  ASSERT_TRUE(ParseFleetConfig(text).ok());
  const double start = ThreadCpuSeconds();
  const auto settings = ParseFleetConfig(text);
  const double seconds = ThreadCpuSeconds() - start;
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_LT(seconds, 1.0 * kSlowdown) << objects << " objects";
  std::printf("16 MiB, %zu objects: %.3f CPU seconds\n", objects, seconds);

  // The same objects with one repeated key each are all found (and counted).
  std::string repeated = absl::StrCat(R"({"model":"m",)", kEngines, R"(,"_x":[)");
  for (int i = 0; i < 20000; ++i) {
    absl::StrAppend(&repeated, i > 0 ? "," : "",
                    R"({"k":"0123456789abcdef","k":"0123456789abcdef"})");
  }
  repeated += "]}";
  const double again = ThreadCpuSeconds();
  const std::string message = ErrorOf(repeated);
  EXPECT_LT(ThreadCpuSeconds() - again, 1.0 * kSlowdown);
  EXPECT_TRUE(absl::StartsWith(message, "config: _x[0].k: duplicate key; _x[1].k: duplicate key; "))
      << message.substr(0, 300);
  EXPECT_TRUE(absl::StrContains(message, "... and 19984 more duplicate keys")) << message;
}

TEST(ConfigDuplicateKeysTest, PathsNameArrayEntriesAndNestedKeys) {
  EXPECT_EQ(ErrorOf(absl::StrCat(R"({"model":"m",)", kEngines,
                                 R"(,"_a":[{"b":{"c":1,"c":2}},{"d":[[{"e":1,"e":1}]]}],)"
                                 R"("model":"m"})")),
            "config: _a[0].b.c: duplicate key; _a[1].d[0][0].e: duplicate key; "
            "model: duplicate key");
  // Annotations may repeat.
  const auto settings =
      ParseFleetConfig(absl::StrCat(R"({"_c":1,"_c":2,"model":"m",)", kEngines, "}"));
  EXPECT_TRUE(settings.ok()) << settings.status();
}

}  // namespace
}  // namespace narwhal::server
