#include "engines/descriptor_contract.h"

#include <cstdint>
#include <functional>
#include <vector>

#include "engines/remote_host_guard.h"

namespace narwhal::engines {
namespace {

using json = nlohmann::json;

bool IsNonNegativeInteger(const json& v) {
  // nlohmann keeps booleans apart from numbers; floats are not integers.
  if (v.is_number_unsigned()) return true;
  return v.is_number_integer() && v.get<int64_t>() >= 0;
}

bool IsPositiveInteger(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() > 0;
  return v.is_number_integer() && v.get<int64_t>() > 0;
}

bool IsBlockList(const json& v) {
  if (!v.is_array()) return false;
  for (const json& id : v) {
    if (!IsNonNegativeInteger(id)) return false;
  }
  return true;
}

bool IsNonEmptyString(const json* v) {
  return v != nullptr && v->is_string() && !v->get_ref<const std::string&>().empty();
}

const json* Field(const json& d, const char* name) {
  auto it = d.find(name);
  return it == d.end() ? nullptr : &*it;
}

// `id` is `expected` or `expected` + "_dp" + digits (vLLM renames the
// engine id of each data-parallel engine core so).
bool NamesProducer(const std::string& id, const std::string& expected) {
  if (id == expected) return true;
  const std::string prefix = expected + "_dp";
  if (id.size() <= prefix.size() || id.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
  }
  return true;
}

std::string Quoted(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

struct Context {
  const json& d;
  const ProducerIdentity& producer;
  RemoteHostPolicy policy;
};

// One rule: returns the detail when broken, else an empty string.
struct Rule {
  const char* reason;
  std::function<std::string(const Context&)> broken;
};

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> kRules = {
      {"not_remote_prefill",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "do_remote_prefill");
         if (v != nullptr && v->is_boolean() && v->get<bool>()) return "";
         return "do_remote_prefill must be true (got " + (v ? Quoted(*v) : "nothing") + ")";
       }},
      {"missing_engine_id",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "remote_engine_id");
         if (v == nullptr || v->is_null()) return "remote_engine_id is missing";
         if (!IsNonEmptyString(v)) return "remote_engine_id must be a non-empty string";
         return "";
       }},
      {"engine_id_mismatch",
       [](const Context& c) -> std::string {
         const std::string& expected = c.producer.kv_engine_id;
         const std::string& id = c.d.at("remote_engine_id").get_ref<const std::string&>();
         if (expected.empty() || NamesProducer(id, expected)) return "";
         return "remote_engine_id " + Quoted(id) + " is not the producer's engine id \"" +
                expected + "\"";
       }},
      {"malformed_block_ids",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "remote_block_ids");
         if (v == nullptr || v->is_null()) return "remote_block_ids is missing";
         bool ok = v->is_array();
         if (ok && !v->empty() && (*v)[0].is_array()) {
           for (const json& group : *v) ok = ok && IsBlockList(group);
         } else {
           ok = ok && IsBlockList(*v);
         }
         if (ok) return "";
         return "remote_block_ids must be a list of non-negative integers or a list of such lists";
       }},
      {"bad_request_id",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "remote_request_id");
         if (IsNonEmptyString(v)) return "";
         return "remote_request_id must be a non-empty string (got " +
                (v ? Quoted(*v) : "nothing") + ")";
       }},
      {"bad_remote_host",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "remote_host");
         if (IsNonEmptyString(v)) return "";
         return "remote_host must be a non-empty string (got " + (v ? Quoted(*v) : "nothing") +
                ")";
       }},
      {"forbidden_remote_host",
       [](const Context& c) -> std::string {
         // Only where the producer's word is forwarded as is: `match` holds
         // it to the configured host, `rewrite` replaced it.
         if (c.policy != RemoteHostPolicy::kPass) return "";
         const std::string& host = c.d.at("remote_host").get_ref<const std::string&>();
         const std::string_view kind = ForbiddenRemoteHostKind(host);
         if (kind.empty()) return "";
         return "remote_host " + Quoted(host) + " is " + std::string(kind) +
                ", which a consumer is never sent to (handoff.remote_host: pass)";
       }},
      {"remote_host_mismatch",
       [](const Context& c) -> std::string {
         if (c.policy != RemoteHostPolicy::kMatch) return "";
         const std::string& host = c.d.at("remote_host").get_ref<const std::string&>();
         if (host == c.producer.host) return "";
         return "remote_host " + Quoted(host) + " is not the producer's host \"" +
                c.producer.host + "\"";
       }},
      {"bad_remote_port",
       [](const Context& c) -> std::string {
         const json* v = Field(c.d, "remote_port");
         if (v != nullptr && IsPositiveInteger(*v) && v->get<uint64_t>() <= 65535) return "";
         return "remote_port must be an integer in 1..65535 (got " +
                (v ? Quoted(*v) : "nothing") + ")";
       }},
      {"bad_size",
       [](const Context& c) -> std::string {
         for (const char* name : {"tp_size", "dcp_size", "pp_size"}) {
           const json* v = Field(c.d, name);
           if (v != nullptr && !IsPositiveInteger(*v)) {
             return std::string(name) + " must be a positive integer (got " + Quoted(*v) + ")";
           }
         }
         const json* v = Field(c.d, "remote_num_tokens");
         if (v != nullptr && !IsNonNegativeInteger(*v)) {
           return "remote_num_tokens must be a non-negative integer (got " + Quoted(*v) + ")";
         }
         return "";
       }},
  };
  return kRules;
}

}  // namespace

bool ParseRemoteHostPolicy(std::string_view name, RemoteHostPolicy* out) {
  if (name == "pass") {
    *out = RemoteHostPolicy::kPass;
  } else if (name == "rewrite") {
    *out = RemoteHostPolicy::kRewrite;
  } else if (name == "match") {
    *out = RemoteHostPolicy::kMatch;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string_view> DescriptorRejectionReasons() {
  std::vector<std::string_view> out = {"not_an_object"};
  for (const Rule& rule : Rules()) out.emplace_back(rule.reason);
  return out;
}

DescriptorRejection CheckDescriptor(const json& descriptor, const ProducerIdentity& producer,
                                    RemoteHostPolicy policy) {
  if (!descriptor.is_object() || descriptor.empty()) {
    return {"not_an_object", "descriptor is not a non-empty object"};
  }
  const Context context{descriptor, producer, policy};
  for (const Rule& rule : Rules()) {
    if (std::string detail = rule.broken(context); !detail.empty()) {
      return {rule.reason, std::move(detail)};
    }
  }
  return {};
}

bool ApplyRemoteHostPolicy(const ProducerIdentity& producer, RemoteHostPolicy policy,
                           json* descriptor) {
  if (policy != RemoteHostPolicy::kRewrite || !descriptor->is_object() || producer.host.empty()) {
    return false;
  }
  auto it = descriptor->find("remote_host");
  if (it == descriptor->end() || !it->is_string() ||
      it->get_ref<const std::string&>() == producer.host) {
    return false;
  }
  *it = producer.host;
  return true;
}

}  // namespace narwhal::engines
