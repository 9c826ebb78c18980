// The README's configuration table must state every key the loader knows,
// with the loader's real default.
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/config_loader.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

// key -> default cell, from the table under "## Fleet config".
std::map<std::string, std::string> ReadmeDefaults() {
  std::ifstream in(std::string(NARWHAL_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t start = readme.find("## Fleet config");
  const size_t end = readme.find("\n## ", start + 1);
  std::istringstream section(readme.substr(start, end - start));
  std::map<std::string, std::string> rows;
  const std::regex row(R"(^\| `([a-z_.\[\]]+)` \| ([^|]+) \|)");
  std::string line;
  while (std::getline(section, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) {
      std::string cell = m[2].str();
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') {
        cell = cell.substr(1, cell.size() - 2);
      }
      rows[m[1].str()] = cell;
    }
  }
  return rows;
}

void Flatten(const json& j, const std::string& prefix, std::map<std::string, json>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      Flatten(*it, key, out);
    } else {
      (*out)[key] = *it;
    }
  }
}

TEST(ReadmeConfigTest, TableMatchesTheLoadersDefaults) {
  auto settings = ParseFleetConfig(R"({"model": "m", "engines": [
      {"iid": "p0", "url": "http://127.0.0.1:1", "role": "prefill"},
      {"iid": "d0", "url": "http://127.0.0.1:2", "role": "decode"}]})");
  ASSERT_TRUE(settings.ok()) << settings.status();
  json effective = SettingsToJson(*settings);
  effective.erase("model");
  effective.erase("engines");
  std::map<std::string, json> defaults;
  Flatten(effective, "", &defaults);

  const std::map<std::string, std::string> readme = ReadmeDefaults();
  ASSERT_GT(readme.size(), 20u) << "the README's config table was not found";
  for (const auto& [key, value] : defaults) {
    auto row = readme.find(key);
    ASSERT_NE(row, readme.end()) << "README config table lacks " << key;
    const std::string& cell = row->second;
    if (value.is_number()) {
      EXPECT_DOUBLE_EQ(std::stod(cell), value.get<double>()) << key;
    } else if (value.is_string()) {
      EXPECT_EQ(cell == "\"\"" ? std::string() : cell, value.get<std::string>()) << key;
    } else {
      ADD_FAILURE() << key << " has an unexpected type";
    }
  }
  // And the table names no key the loader does not know.
  for (const auto& [key, cell] : readme) {
    if (key == "model" || key.rfind("engines[]", 0) == 0 || key == "engine_contract") continue;
    EXPECT_TRUE(defaults.count(key)) << "README documents unknown key " << key;
  }
}

}  // namespace
}  // namespace narwhal::server
