#include "engines/http/connector.h"

namespace narwhal::engines {

using json = nlohmann::json;

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
  return CheckDescriptor(descriptor, ProducerIdentity{}, RemoteHostPolicy::kPass).detail;
}

DescriptorRejection ValidateContinuation(const PrefillResult& handoff,
                                         const std::string& decode_connector, Api decode_endpoint,
                                         RemoteHostPolicy host_policy) {
  ProducerIdentity producer{handoff.producer_kv_engine_id(), ""};
  int port = 0;
  ParseEngineUrl(handoff.producer_url(), &producer.host, &port);
  if (DescriptorRejection r = CheckDescriptor(handoff.descriptor(), producer, host_policy);
      !r.ok()) {
    return r;
  }
  if (handoff.connector() != decode_connector) {
    return {"connector_mismatch", "handoff connector \"" + handoff.connector() +
                                      "\" does not match decode connector \"" + decode_connector +
                                      "\""};
  }
  if (handoff.endpoint() != decode_endpoint) {
    return {"endpoint_mismatch", "handoff endpoint " + std::string(ApiPath(handoff.endpoint())) +
                                     " does not match decode endpoint " +
                                     std::string(ApiPath(decode_endpoint))};
  }
  return {};
}

}  // namespace narwhal::engines
