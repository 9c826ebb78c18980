// serving.api_keys in the fleet file (server/config/api_keys): where each
// tenant's key comes from, the rules on names, keys and limits, errors that
// name the entry and never the key, the running config's view (no key), and
// a rotated key file as a change a reload applies.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "router/common/settings_diff.h"
#include "server/config/config_loader.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
using json = nlohmann::json;

class ConfigApiKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = nt::MakeTempDir("config_api_keys_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    ASSERT_EQ(setenv("NARWHAL_TEST_KEY_A", "secret-a-123", 1), 0);
    ASSERT_EQ(unsetenv("NARWHAL_TEST_KEY_UNSET"), 0);
  }

  std::string KeyFile(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(nt::WriteTextFile(path, text));
    return path;
  }

  static json Fleet(const json& api_keys) {
    return {{"model", "m"},
            {"engines", {{{"iid", "e0"}, {"url", "http://127.0.0.1:1"}}}},
            {"serving", {{"api_keys", api_keys}}}};
  }

  static absl::StatusOr<router::Settings> Load(const json& config) {
    return ParseFleetConfigText(config.dump(), "fleet.json");
  }

  // The load's error, which must exist.
  static std::string ErrorOf(const json& config) {
    absl::StatusOr<router::Settings> s = Load(config);
    EXPECT_FALSE(s.ok()) << config.dump();
    return s.ok() ? "" : std::string(s.status().message());
  }

  std::string dir_;
};

TEST_F(ConfigApiKeysTest, KeysAreReadFromTheirVariableOrFileWithTheirLimits) {
  const std::string file = KeyFile("b.key", "secret-b-456\n");
  absl::StatusOr<router::Settings> s =
      Load(Fleet({{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_A"}, {"max_inflight", 3}},
                  {{"name", "b"}, {"key_file", file}, {"requests_per_s", 2.5}},
                  {{"name", "c.d-e_f"},
                   {"key_file", KeyFile("c.key", "k-c")},
                   {"requests_per_s", 4},
                   {"burst", 10}}}));
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& keys = s->serving.api_keys;
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].name, "a");
  EXPECT_EQ(keys[0].key, "secret-a-123");
  EXPECT_EQ(keys[0].max_inflight, 3);
  EXPECT_EQ(keys[0].requests_per_s, 0);
  EXPECT_EQ(keys[1].key, "secret-b-456");  // the trailing newline dropped
  EXPECT_EQ(keys[1].max_inflight, 0);
  EXPECT_EQ(keys[1].requests_per_s, 2.5);
  EXPECT_EQ(keys[1].burst, 3);  // rounded up
  EXPECT_EQ(keys[2].name, "c.d-e_f");
  EXPECT_EQ(keys[2].key, "k-c");
  EXPECT_EQ(keys[2].burst, 10);
}

TEST_F(ConfigApiKeysTest, EachRuleIsAnErrorNamingTheEntryAndNeverTheKey) {
  const std::string good = KeyFile("good.key", "good-key");
  struct Case {
    json entry;
    std::string error;
  };
  const Case cases[] = {
      {{{"key_env", "NARWHAL_TEST_KEY_A"}}, "serving.api_keys[0].name is required"},
      {{{"name", "a b"}, {"key_env", "NARWHAL_TEST_KEY_A"}},
       "serving.api_keys[0].name must contain only [A-Za-z0-9._-]"},
      {{{"name", "a"}}, "serving.api_keys[0].key_env or key_file is required"},
      {{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_A"}, {"key_file", good}},
       "key_file are both set"},
      {{{"name", "a"}, {"key_env", "1BAD"}}, "serving.api_keys[0].key_env must be empty or an"},
      {{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_UNSET"}},
       "serving.api_keys[0].key_env names env var NARWHAL_TEST_KEY_UNSET, which is not set"},
      {{{"name", "a"}, {"key_file", dir_ + "/missing.key"}},
       "serving.api_keys[0].key_file names " + dir_ + "/missing.key, which cannot be read"},
      {{{"name", "a"}, {"key_file", KeyFile("empty.key", "\n")}}, "whose key is empty"},
      {{{"name", "a"}, {"key_file", KeyFile("space.key", "has space")}},
       "must be printable ASCII without spaces"},
      {{{"name", "a"}, {"key_file", KeyFile("long.key", std::string(4097, 'k'))}},
       "is longer than 4096 bytes"},
      {{{"name", "a"}, {"key_file", good}, {"max_inflight", 0}},
       "serving.api_keys[0].max_inflight must be"},
      {{{"name", "a"}, {"key_file", good}, {"requests_per_s", 0}},
       "serving.api_keys[0].requests_per_s must be > 0"},
      {{{"name", "a"}, {"key_file", good}, {"burst", 5}},
       "serving.api_keys[0].burst is only allowed with requests_per_s"},
      {{{"name", "a"}, {"key_file", good}, {"requests_per_s", 1}, {"burst", 0.5}},
       "serving.api_keys[0].burst must be >= 1"},
      {{{"name", "a"}, {"key_file", good}, {"key", "inline"}},
       "serving.api_keys[0].key: unknown key"},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf(Fleet(json::array({c.entry})));
    EXPECT_NE(error.find(c.error), std::string::npos) << c.entry.dump() << "\n" << error;
    EXPECT_EQ(error.find("good-key"), std::string::npos) << error;
    EXPECT_EQ(error.find("secret-a-123"), std::string::npos) << error;
    EXPECT_EQ(error.find("has space"), std::string::npos) << error;
  }
}

TEST_F(ConfigApiKeysTest, NamesAndKeysAreUniqueAndTheOneKeyFormIsNotMixedIn) {
  const std::string a = KeyFile("a.key", "secret-a-123\n");
  std::string error = ErrorOf(Fleet({{{"name", "t"}, {"key_env", "NARWHAL_TEST_KEY_A"}},
                                     {{"name", "t"}, {"key_file", KeyFile("x.key", "x")}}}));
  EXPECT_NE(error.find("serving.api_keys[1].name \"t\" is a duplicate of serving.api_keys[0].name"),
            std::string::npos)
      << error;
  // The same key from a variable and a file: which tenant would it be?
  error = ErrorOf(Fleet(
      {{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_A"}}, {{"name", "b"}, {"key_file", a}}}));
  EXPECT_NE(error.find("serving.api_keys[1] has the same key as serving.api_keys[0]"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find("secret-a-123"), std::string::npos) << error;

  json both = Fleet({{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_A"}}});
  both["serving"]["api_key_env"] = "NARWHAL_TEST_KEY_A";
  error = ErrorOf(both);
  EXPECT_NE(error.find("serving.api_keys and serving.api_key_env are both set"), std::string::npos)
      << error;

  json many = Fleet(json::array());
  for (int i = 0; i < 1001; ++i) {
    many["serving"]["api_keys"].push_back(
        {{"name", "t" + std::to_string(i)}, {"key_env", "NARWHAL_TEST_KEY_A"}});
  }
  error = ErrorOf(many);
  EXPECT_NE(error.find("serving.api_keys must have at most 1000 entries"), std::string::npos)
      << error.substr(0, 300);
}

TEST_F(ConfigApiKeysTest, TheRunningConfigShowsWhereKeysComeFromAndNoKey) {
  absl::StatusOr<router::Settings> s = Load(Fleet(
      {{{"name", "a"}, {"key_env", "NARWHAL_TEST_KEY_A"}, {"requests_per_s", 2}, {"burst", 4}}}));
  ASSERT_TRUE(s.ok()) << s.status();
  const json running = SettingsToJson(*s);
  const std::string text = running.dump();
  EXPECT_EQ(text.find("secret-a-123"), std::string::npos) << text;
  EXPECT_EQ(running["serving"]["api_keys"][0]["key_env"], "NARWHAL_TEST_KEY_A") << text;
  EXPECT_EQ(running["serving"]["api_keys"][0]["burst"], 4) << text;
  // Read back as a running router's effective config: no key is read, and
  // the two compare equal (narwhal-check --diff sees no change).
  ASSERT_EQ(unsetenv("NARWHAL_TEST_KEY_A"), 0);
  absl::StatusOr<router::Settings> effective = ParseEffectiveConfig(text);
  ASSERT_TRUE(effective.ok()) << effective.status();
  EXPECT_EQ(effective->serving.api_keys[0].key, "");
  EXPECT_TRUE(router::DiffSettings(*effective, *s).empty())
      << router::DiffSettings(*effective, *s).Summary();
}

TEST_F(ConfigApiKeysTest, ARotatedKeyFileIsAChangeAReloadApplies) {
  const std::string file = KeyFile("rot.key", "old-key");
  const json fleet = Fleet({{{"name", "a"}, {"key_file", file}, {"max_inflight", 2}}});
  absl::StatusOr<router::Settings> before = Load(fleet);
  ASSERT_TRUE(before.ok()) << before.status();
  absl::StatusOr<router::Settings> same = Load(fleet);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(router::DiffSettings(*before, *same).empty());

  ASSERT_TRUE(nt::WriteTextFile(file, "new-key\n"));
  absl::StatusOr<router::Settings> after = Load(fleet);
  ASSERT_TRUE(after.ok()) << after.status();
  const router::ConfigChange change = router::DiffSettings(*before, *after);
  EXPECT_FALSE(change.needs_restart());
  ASSERT_EQ(change.changed_keys.size(), 1u) << change.Summary();
  EXPECT_EQ(change.changed_keys[0], "serving.api_keys");
  EXPECT_EQ(change.Summary().find("new-key"), std::string::npos) << change.Summary();

  // A changed limit is a change too.
  json raised = fleet;
  raised["serving"]["api_keys"][0]["max_inflight"] = 5;
  absl::StatusOr<router::Settings> limit = Load(raised);
  ASSERT_TRUE(limit.ok());
  EXPECT_FALSE(router::DiffSettings(*after, *limit).empty());
}

}  // namespace
}  // namespace narwhal::server
