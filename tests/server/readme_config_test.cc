// The README's configuration table is a rendering of the schema
// (proto/narwhal/config/v1/config.proto and its (doc) options): these tests
// keep the README's copy equal to the rendering (a failure prints the table
// to paste), every field documented, and the schema's defaults equal to what
// the loader produces.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "narwhal/config/v1/config.pb.h"
#include "router/common/settings_diff.h"
#include "server/config/config_loader.h"

namespace narwhal::server {
namespace {

namespace pb = ::narwhal::config::v1;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using json = nlohmann::json;

const pb::Doc& DocOf(const FieldDescriptor& f) { return f.options().GetExtension(pb::doc); }

// A bound as the table shows it: 1e7 for large round doubles, else plain.
std::string Bound(double v, bool is_integer) {
  char buf[32];
  if (!is_integer && v >= 1e6) {
    const int exponent = static_cast<int>(std::lround(std::log10(v)));
    if (std::pow(10.0, exponent) == v) {
      std::snprintf(buf, sizeof buf, "1e%d", exponent);
      return buf;
    }
  }
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

std::string Range(const pb::Doc& doc, bool is_integer) {
  const std::string lo = Bound(doc.min(), is_integer);
  if (!doc.has_max()) return "≥ " + lo;
  const std::string hi = Bound(doc.max(), is_integer);
  if (doc.min_exclusive()) return "> " + lo + ", ≤ " + hi;
  return lo + "–" + hi;
}

// The "valid values" cell, from the field's type and (doc) options.
std::string ValidCell(const FieldDescriptor& f) {
  const pb::Doc& doc = DocOf(f);
  if (f.is_repeated()) return Range(doc, true) + " entries";
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "object";
    case FieldDescriptor::CPPTYPE_INT32:
      return Range(doc, true);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Range(doc, false);
    case FieldDescriptor::CPPTYPE_BOOL:
      return "`true`, `false`";
    case FieldDescriptor::CPPTYPE_STRING: {
      std::vector<std::string> parts;
      if (doc.choices_size() > 0) {
        std::string choices;
        for (const std::string& c : doc.choices()) {
          choices += (choices.empty() ? "`" : ", `") + c + "`";
        }
        parts.push_back(choices);
      } else {
        if (!doc.form().empty()) parts.push_back(doc.form());
        if (doc.has_max()) {
          parts.push_back(Range(doc, true) + " characters");
        } else if (doc.min() >= 1) {
          parts.push_back("non-empty");
        }
      }
      std::string cell;
      for (const std::string& p : parts) cell += (cell.empty() ? "" : ", ") + p;
      return cell;
    }
    default:
      return "?";
  }
}

bool IsWordDefault(const std::string& d) {
  return d == "required" || d == "absent" || d == "unset";
}

std::string DefaultCell(const pb::Doc& doc) {
  return IsWordDefault(doc.default_value()) ? doc.default_value() : "`" + doc.default_value() + "`";
}

// Fields with a row: every scalar, and every message field that has a (doc)
// (sections such as `serving` have none: only their keys get rows).
bool HasRow(const FieldDescriptor& f) {
  return f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f.options().HasExtension(pb::doc);
}

void ForEachKey(const Descriptor& d, const std::string& prefix,
                const std::function<void(const std::string&, const FieldDescriptor&)>& visit) {
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    const std::string key = prefix + f.name();
    visit(key, f);
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      ForEachKey(*f.message_type(), key + (f.is_repeated() ? "[]." : "."), visit);
    }
  }
}

std::string RenderedTable() {
  std::string table =
      "| key | default | valid values | meaning |\n"
      "|---|---|---|---|\n";
  ForEachKey(*pb::FleetConfig::descriptor(), "",
             [&](const std::string& key, const FieldDescriptor& f) {
               if (!HasRow(f)) return;
               table += "| `" + key + "` | " + DefaultCell(DocOf(f)) + " | " + ValidCell(f) +
                        " | " + DocOf(f).meaning() + " |\n";
             });
  return table;
}

// The table lines (from its header row to its last row) of README.md's
// "## Fleet config" section.
std::string ReadmeTable() {
  std::ifstream in(std::string(NARWHAL_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t start = readme.find("\n## Fleet config\n");
  if (start == std::string::npos) return "";
  const size_t end = readme.find("\n## ", start + 1);
  std::istringstream section(readme.substr(start, end - start));
  std::string table;
  bool in_table = false;
  for (std::string line; std::getline(section, line);) {
    if (!in_table && line.rfind("| key |", 0) == 0) in_table = true;
    if (!in_table) continue;
    if (line.empty() || line.front() != '|') break;
    table += line + "\n";
  }
  return table;
}

TEST(ReadmeConfigTest, TableIsTheSchemasRendering) {
  const std::string rendered = RenderedTable();
  EXPECT_EQ(ReadmeTable(), rendered)
      << "README.md's \"Fleet config\" table differs from the schema; replace it with:\n\n"
      << rendered;
}

TEST(ReadmeConfigTest, EveryKeyIsDocumented) {
  int rows = 0;
  ForEachKey(*pb::FleetConfig::descriptor(), "",
             [&](const std::string& key, const FieldDescriptor& f) {
               if (!HasRow(f)) return;
               ++rows;
               const pb::Doc& doc = DocOf(f);
               EXPECT_FALSE(doc.default_value().empty()) << key;
               EXPECT_FALSE(doc.meaning().empty()) << key;
               EXPECT_EQ(doc.meaning().find('|'), std::string::npos) << key;
               EXPECT_EQ(doc.form().find('|'), std::string::npos) << key;
               // Every value of the file is a scalar or a documented section.
               if (f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE && !f.is_repeated()) {
                 EXPECT_TRUE(f.has_presence()) << key << " must be `optional` (absent vs zero)";
               }
             });
  EXPECT_GT(rows, 40);
}

// Flattened "a.b" -> value of a JSON object ("engines" entries as "engines[]").
void Flatten(const json& j, const std::string& prefix, std::map<std::string, json>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      Flatten(*it, key, out);
    } else if (it->is_array() && !it->empty() && it->front().is_structured()) {
      for (const json& entry : *it) Flatten(entry, key + "[]", out);
    } else {
      (*out)[key] = *it;
    }
  }
}

TEST(ReadmeConfigTest, SchemaDefaultsAreTheLoadersDefaults) {
  // The smallest file: the required keys, an engine's url (or its dns and
  // port), and the contract pinned by its one required key.
  const json smallest = json::parse(R"({"model": "m", "engines": [{"iid": "e0",
      "url": "http://127.0.0.1:1"}], "engine_contract": {"vllm_version": "v"}})");
  std::map<std::string, json> given;
  Flatten(smallest, "", &given);
  auto settings = ParseFleetConfig(smallest.dump());
  ASSERT_TRUE(settings.ok()) << settings.status();
  std::map<std::string, json> effective;
  Flatten(SettingsToJson(*settings), "", &effective);
  auto no_contract = ParseFleetConfig(R"({"model": "m", "engines": [{"iid": "e0",
      "url": "http://127.0.0.1:1"}]})");
  ASSERT_TRUE(no_contract.ok()) << no_contract.status();

  int checked = 0;
  ForEachKey(*pb::FleetConfig::descriptor(), "",
             [&](const std::string& key, const FieldDescriptor& f) {
               const std::string& d = DocOf(f).default_value();
               if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
                 if (d == "absent") {
                   EXPECT_FALSE(SettingsToJson(*no_contract).contains(key)) << key;
                 }
                 return;
               }
               // The smallest file names no tenant: an entry's keys have
               // nothing to show (tests/server/config_api_keys_test).
               if (key.rfind("serving.api_keys[]", 0) == 0) return;
               if (d == "required") {
                 EXPECT_TRUE(effective.count(key)) << key;
                 return;
               }
               const auto it = effective.find(key);
               if (d == "unset") {
                 if (!given.count(key)) {
                   EXPECT_EQ(it, effective.end()) << key << " should have no default";
                 }
                 return;
               }
               ASSERT_NE(it, effective.end()) << "the loader gives " << key << " no value";
               ++checked;
               if (it->second.is_boolean()) {
                 EXPECT_EQ(d, it->second.get<bool>() ? "true" : "false") << key;
               } else if (it->second.is_array()) {
                 EXPECT_EQ(json::parse(d), it->second) << key;
               } else if (it->second.is_number()) {
                 EXPECT_EQ(std::stod(d), it->second.get<double>()) << key;
               } else if (it->second.is_string()) {
                 EXPECT_EQ(d == "\"\"" ? std::string() : d, it->second.get<std::string>()) << key;
               } else {
                 ADD_FAILURE() << key << " has an unexpected type";
               }
             });
  EXPECT_GT(checked, 35);
  // And the loader's effective config has no key the schema lacks.
  for (const auto& entry : effective) {
    const std::string& key = entry.first;
    bool known = false;
    ForEachKey(*pb::FleetConfig::descriptor(), "",
               [&](const std::string& k, const FieldDescriptor&) { known |= k == key; });
    EXPECT_TRUE(known) << key;
  }
}

// A reload compares every key of the schema (router/common/settings_diff),
// in the schema's order; engines are compared by iid instead, and the
// entries of serving.api_keys as one key.
TEST(ReadmeConfigTest, ReloadComparesEveryKey) {
  std::vector<std::string> keys;
  ForEachKey(*pb::FleetConfig::descriptor(), "",
             [&](const std::string& key, const FieldDescriptor& f) {
               if (key == "engines" || key.rfind("engines[]", 0) == 0 || !HasRow(f)) return;
               if (key.rfind("serving.api_keys[]", 0) == 0) return;
               keys.push_back(key);
             });
  EXPECT_EQ(router::DiffedKeys(), keys);
}

// The README's "Live reload" section lists the keys that need a restart:
// exactly router::RestartKeyPatterns().
TEST(ReadmeConfigTest, RestartKeysAreTheReadmesList) {
  std::ifstream in(std::string(NARWHAL_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t start = readme.find("\n### Live reload\n");
  ASSERT_NE(start, std::string::npos) << "README.md has no \"### Live reload\" section";
  const size_t list = readme.find("need a restart:", start);
  ASSERT_NE(list, std::string::npos);
  // The list ends with its sentence: at ". " or ";".
  const size_t end = std::min(readme.find(". ", list), readme.find(';', list));
  const std::string line = readme.substr(list, end - list);
  std::vector<std::string> listed;
  for (size_t at = line.find('`'); at != std::string::npos; at = line.find('`', at + 1)) {
    const size_t end = line.find('`', at + 1);
    if (end == std::string::npos) break;
    listed.push_back(line.substr(at + 1, end - at - 1));
    at = end;
  }
  std::vector<std::string> table;
  for (std::string_view p : router::RestartKeyPatterns()) table.emplace_back(p);
  EXPECT_EQ(listed, table) << line;
  // Every pattern names keys of the schema.
  for (const std::string& pattern : table) {
    bool matches = false;
    ForEachKey(
        *pb::FleetConfig::descriptor(), "", [&](const std::string& key, const FieldDescriptor&) {
          matches |= router::NeedsRestart(key) &&
                     (key == pattern || key.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0);
        });
    EXPECT_TRUE(matches) << pattern;
  }
}

}  // namespace
}  // namespace narwhal::server
