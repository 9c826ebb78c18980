#include "engines/connector.h"

namespace narwhal::engines {
namespace {

using json = nlohmann::json;

bool IsBlockId(const json& v) {
  // nlohmann keeps booleans apart from numbers; floats are not ids either.
  if (v.is_number_unsigned()) return true;
  return v.is_number_integer() && v.get<long long>() >= 0;
}

bool IsBlockList(const json& v) {
  if (!v.is_array()) return false;
  for (const json& id : v) {
    if (!IsBlockId(id)) return false;
  }
  return true;
}

}  // namespace

json BuildPrefillBody(const json& client_body) {
  json body = client_body;
  body["stream"] = false;
  body.erase("stream_options");
  body.erase("min_tokens");
  body.erase("min_completion_tokens");
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body["kv_transfer_params"] = json{{"do_remote_decode", true},  {"do_remote_prefill", false},
                                    {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                    {"remote_host", nullptr},      {"remote_port", nullptr}};
  return body;
}

json BuildDecodeBody(const json& client_body, const PrefillResult& handoff, bool same_worker,
                     bool client_streams) {
  json body = client_body;
  body["stream"] = true;
  if (!client_streams) body["stream_options"] = json{{"include_usage", true}};
  if (same_worker) {
    body.erase("kv_transfer_params");
  } else {
    body["kv_transfer_params"] = handoff.descriptor();
  }
  return body;
}

std::optional<json> ExtractDescriptor(const json& response, std::string* error) {
  if (!response.is_object()) {
    *error = "prefill response is not a JSON object";
    return std::nullopt;
  }
  const json* found = nullptr;
  if (auto it = response.find("kv_transfer_params"); it != response.end() && !it->is_null()) {
    found = &*it;
  } else if (auto choices = response.find("choices");
             choices != response.end() && choices->is_array() && !choices->empty() &&
             (*choices)[0].is_object()) {
    const json& choice = (*choices)[0];
    if (auto c = choice.find("kv_transfer_params"); c != choice.end() && !c->is_null()) {
      found = &*c;
    }
  }
  if (found == nullptr) {
    *error = "prefill response carried no kv_transfer_params";
    return std::nullopt;
  }
  if (!found->is_object()) {
    *error = "kv_transfer_params is not a JSON object";
    return std::nullopt;
  }
  if (found->empty()) {
    *error = "kv_transfer_params is empty";
    return std::nullopt;
  }
  return *found;
}

std::string ValidateDescriptorShape(const json& descriptor) {
  if (!descriptor.is_object() || descriptor.empty()) return "descriptor is not a non-empty object";
  auto engine = descriptor.find("remote_engine_id");
  if (engine == descriptor.end() || engine->is_null()) return "remote_engine_id is missing";
  if (!engine->is_string() || engine->get_ref<const std::string&>().empty()) {
    return "remote_engine_id must be a non-empty string";
  }
  auto blocks = descriptor.find("remote_block_ids");
  if (blocks == descriptor.end() || blocks->is_null()) return "remote_block_ids is missing";
  bool ok = blocks->is_array();
  if (ok && !blocks->empty() && (*blocks)[0].is_array()) {
    for (const json& group : *blocks) ok = ok && IsBlockList(group);
  } else {
    ok = ok && IsBlockList(*blocks);
  }
  if (!ok) {
    return "remote_block_ids must be a list of non-negative integers or a list of such lists";
  }
  return "";
}

std::string ValidateContinuation(const PrefillResult& handoff, const std::string& decode_connector,
                                 Api decode_endpoint) {
  if (std::string shape = ValidateDescriptorShape(handoff.descriptor()); !shape.empty()) {
    return shape;
  }
  if (handoff.connector() != decode_connector) {
    return "handoff connector \"" + handoff.connector() + "\" does not match decode connector \"" +
           decode_connector + "\"";
  }
  if (handoff.endpoint() != decode_endpoint) {
    return "handoff endpoint " + std::string(ApiPath(handoff.endpoint())) +
           " does not match decode endpoint " + std::string(ApiPath(decode_endpoint));
  }
  return "";
}

}  // namespace narwhal::engines
