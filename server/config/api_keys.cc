#include "server/config/api_keys.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/config/address_rules.h"
#include "server/config/bounded_file.h"

namespace narwhal::server::config_file {
namespace {

constexpr size_t kMaxKeyBytes = 4096;

// Printable ASCII without spaces: what a Bearer token carries.
bool IsKeyChar(char c) { return c > 0x20 && c < 0x7f; }

// The key's own problem, "" when it is fine. Never shows the key.
std::string KeyProblem(const std::string& key) {
  if (key.empty()) return "is empty";
  if (key.size() > kMaxKeyBytes) return absl::StrCat("is longer than ", kMaxKeyBytes, " bytes");
  if (!std::all_of(key.begin(), key.end(), IsKeyChar)) {
    return "must be printable ASCII without spaces";
  }
  return "";
}

// Reads the key of `entry` (`f`), or reports why it cannot.
bool ReadKey(const Fields& f, router::TenantSettings* entry) {
  using K = pb::ApiKey;
  std::string where;
  int number = 0;
  if (!entry->key_env.empty()) {
    number = K::kKeyEnvFieldNumber;
    where = absl::StrCat("names env var ", entry->key_env, ", whose value");
    const char* value = std::getenv(entry->key_env.c_str());
    if (value == nullptr) {
      f.Error(number, absl::StrCat("names env var ", entry->key_env, ", which is not set"));
      return false;
    }
    entry->key = value;
  } else {
    number = K::kKeyFileFieldNumber;
    where = absl::StrCat("names ", entry->key_file, ", whose key");
    absl::StatusOr<std::string> text = ReadBoundedFile(entry->key_file, kMaxKeyBytes + 2);
    if (!text.ok()) {
      f.Error(number, absl::StrCat("names ", entry->key_file,
                                   ", which cannot be read: ", text.status().message()));
      return false;
    }
    std::string key = std::move(*text);
    if (!key.empty() && key.back() == '\n') key.pop_back();
    if (!key.empty() && key.back() == '\r') key.pop_back();
    entry->key = std::move(key);
  }
  if (const std::string problem = KeyProblem(entry->key); !problem.empty()) {
    f.Error(number, absl::StrCat(where, " ", problem));
    entry->key.clear();
    return false;
  }
  return true;
}

}  // namespace

void ValidateApiKeys(const Fields& f, const pb::Serving& serving, bool read_keys,
                     std::vector<router::TenantSettings>* out) {
  using K = pb::ApiKey;
  using S = pb::Serving;
  if (!f.Entries(S::kApiKeysFieldNumber)) return;
  std::map<std::string, std::string> names;  // name -> path of its entry
  std::map<std::string, std::string> keys;   // key -> path of its entry
  for (int i = 0; i < serving.api_keys_size(); ++i) {
    const std::string path = absl::StrCat(f.PathOf(S::kApiKeysFieldNumber), "[", i, "]");
    if (f.reported().count(path)) continue;
    const Fields e(serving.api_keys(i), path, f.RankOf(S::kApiKeysFieldNumber), f.errors(),
                   f.reported());
    router::TenantSettings t;
    bool ok = e.String(K::kNameFieldNumber, &t.name);
    if (ok && !e.Present(K::kNameFieldNumber)) {
      e.Error(K::kNameFieldNumber, "is required");
      ok = false;
    } else if (ok && !std::all_of(t.name.begin(), t.name.end(), IsIidChar)) {
      e.Error(K::kNameFieldNumber,
              absl::StrCat("must contain only [A-Za-z0-9._-] (got ", Quote(t.name), ")"));
      ok = false;
    } else if (ok) {
      if (const auto [it, inserted] = names.emplace(t.name, e.PathOf(K::kNameFieldNumber));
          !inserted) {
        e.Error(K::kNameFieldNumber,
                absl::StrCat(Quote(t.name), " is a duplicate of ", it->second));
        ok = false;
      }
    }
    const bool env_ok = e.EnvVarName(K::kKeyEnvFieldNumber, &t.key_env);
    const bool file_ok = e.String(K::kKeyFileFieldNumber, &t.key_file);
    if (env_ok && file_ok && t.key_env.empty() == t.key_file.empty()) {
      e.Error(t.key_env.empty() ? K::kKeyEnvFieldNumber : K::kKeyFileFieldNumber,
              t.key_env.empty() ? "or key_file is required (exactly one of the two)"
                                : "and key_file are both set (exactly one of the two)");
      ok = false;
    }
    ok &= env_ok && file_ok;
    ok &= e.Int(K::kMaxInflightFieldNumber, &t.max_inflight);
    ok &= e.Number(K::kRequestsPerSFieldNumber, &t.requests_per_s);
    const bool burst_ok = e.Number(K::kBurstFieldNumber, &t.burst);
    ok &= burst_ok;
    if (burst_ok && e.Present(K::kBurstFieldNumber) && !e.Present(K::kRequestsPerSFieldNumber)) {
      e.Error(K::kBurstFieldNumber, "is only allowed with requests_per_s");
      ok = false;
    }
    if (t.requests_per_s > 0 && t.burst == 0) t.burst = std::max(1.0, std::ceil(t.requests_per_s));
    if (ok && read_keys && ReadKey(e, &t)) {
      if (const auto [it, inserted] = keys.emplace(t.key, path); !inserted) {
        f.errors()->Add(f.RankOf(S::kApiKeysFieldNumber),
                        absl::StrCat(path, " has the same key as ", it->second,
                                     " (each tenant needs its own)"));
      }
    }
    out->push_back(std::move(t));
  }
}

}  // namespace narwhal::server::config_file
