// The KV handoff descriptor rules of engines/http/connector.h (B2, B3, B4, B5) on
// arbitrary JSON read with the project's bounded parser (engines::ParseJson):
// ValidateDescriptorShape, ValidateContinuation on a PrefillResult holding
// the document, ExtractDescriptor on the two places a descriptor may sit,
// BuildDecodeBody and (for objects) BuildPrefillBody.
//
// Input: byte 0 selects the handoff's and the decode side's endpoint (bits 0,
// 1), whether the connectors match (bit 2), same_worker (bit 3) and
// client_streams (bit 4); the rest is the descriptor's JSON text.
//
// Checked: nothing throws; a refusal carries a message of bounded length and
// a shape refusal is the continuation refusal; the shape verdict is the one
// engines/descriptor_contract.h states (restated below: do_remote_prefill
// true, remote_engine_id, remote_request_id and remote_host non-empty
// strings, remote_block_ids a list of non-negative integers or of such
// lists, remote_port in 1..65535, sizes positive integers, and under the
// default `pass` policy a remote_host engines/remote_host_guard.h does not
// forbid); parameters() is a detached copy; the decode body carries the
// descriptor verbatim (or none with same_worker) and serialises; the
// prefill body has exactly the B1 edits.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "engines/http/connector.h"
#include "engines/json_limits.h"
#include "engines/prefill_result.h"
#include "engines/remote_host_guard.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using json = nlohmann::json;
using narwhal::engines::Api;
using narwhal::engines::PrefillResult;
using narwhal::fuzz::Serialises;
using narwhal::fuzz::Show;

constexpr size_t kMaxReasonChars = 200;

bool IsBlockId(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<long long>() >= 0);
}

bool IsIdList(const json& v) {
  if (!v.is_array()) return false;
  for (const json& x : v) {
    if (!IsBlockId(x)) return false;
  }
  return true;
}

bool IsListOfIdLists(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& x : v) {
    if (!IsIdList(x)) return false;
  }
  return true;
}

bool IsPositive(const json& v) {
  return (v.is_number_unsigned() && v.get<unsigned long long>() > 0) ||
         (v.is_number_integer() && v.get<long long>() > 0);
}

bool NonEmptyString(const json& d, const char* name) {
  auto it = d.find(name);
  return it != d.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// The contract of engines/descriptor_contract.h, stated independently: the
// B3 shape plus the typed fields.
bool ShapeValid(const json& d) {
  if (!d.is_object() || d.empty()) return false;
  auto prefill = d.find("do_remote_prefill");
  if (prefill == d.end() || *prefill != json(true)) return false;
  if (!NonEmptyString(d, "remote_engine_id")) return false;
  auto blocks = d.find("remote_block_ids");
  if (blocks == d.end() || !(IsIdList(*blocks) || IsListOfIdLists(*blocks))) return false;
  if (!NonEmptyString(d, "remote_request_id") || !NonEmptyString(d, "remote_host")) return false;
  // `pass` forwards the host: never to an unspecified, link-local or
  // metadata address.
  if (!narwhal::engines::ForbiddenRemoteHostKind(d["remote_host"].get_ref<const std::string&>())
           .empty()) {
    return false;
  }
  auto port = d.find("remote_port");
  if (port == d.end() || !IsPositive(*port) || port->get<unsigned long long>() > 65535) {
    return false;
  }
  for (const char* size : {"tp_size", "dcp_size", "pp_size"}) {
    if (auto it = d.find(size); it != d.end() && !IsPositive(*it)) return false;
  }
  if (auto it = d.find("remote_num_tokens"); it != d.end() && !IsBlockId(*it)) return false;
  return true;
}

void CheckExtract(const json& response, const json& descriptor) {
  std::string why;
  const std::optional<json> found = narwhal::engines::ExtractDescriptor(response, &why);
  if (descriptor.is_object() && !descriptor.empty()) {
    FUZZ_CHECK_MSG(found.has_value() && *found == descriptor, why);
  } else {
    FUZZ_CHECK_MSG(!found.has_value(), Show(descriptor));
    FUZZ_CHECK(!why.empty() && why.size() <= kMaxReasonChars);
  }
}

void Run(const uint8_t* bytes, size_t size) {
  if (size == 0) return;
  const uint8_t control = bytes[0];
  const Api handoff_api = (control & 1) ? Api::kChatCompletions : Api::kCompletions;
  const Api decode_api = (control & 2) ? Api::kChatCompletions : Api::kCompletions;
  const std::string connector = "NixlConnector";
  const std::string decode_connector = (control & 4) ? "NixlConnector" : "OtherConnector";
  const bool same_worker = (control & 8) != 0;
  const bool client_streams = (control & 16) != 0;
  const std::string_view text(reinterpret_cast<const char*>(bytes) + 1, size - 1);

  const json descriptor = narwhal::engines::ParseJson(text);
  if (descriptor.is_discarded()) return;
  FUZZ_CHECK(narwhal::engines::JsonDepthWithin(text));
  std::string dumped;
  FUZZ_CHECK_MSG(Serialises(descriptor, &dumped), Show(descriptor));

  // B3: shape, then connector and endpoint.
  const std::string shape = narwhal::engines::ValidateDescriptorShape(descriptor);
  FUZZ_CHECK_MSG(shape.empty() == ShapeValid(descriptor), shape + " for " + Show(descriptor));
  FUZZ_CHECK(shape.size() <= kMaxReasonChars);
  const PrefillResult handoff("p0", "http://127.0.0.1:8100", handoff_api, "rid-1", connector,
                              descriptor);
  const std::string why =
      narwhal::engines::ValidateContinuation(handoff, decode_connector, decode_api).detail;
  if (!shape.empty()) {
    FUZZ_CHECK_MSG(why == shape, why);
  } else {
    const bool matches = connector == decode_connector && handoff_api == decode_api;
    FUZZ_CHECK_MSG(why.empty() == matches, why);
  }
  FUZZ_CHECK(why.size() <= kMaxReasonChars);

  // B6: parameters() is detached.
  json copy = handoff.parameters();
  FUZZ_CHECK(copy == descriptor);
  copy = json{{"edited", true}};
  FUZZ_CHECK(handoff.descriptor() == descriptor);

  // B2: the descriptor found where a prefill response puts it.
  CheckExtract(json{{"id", "cmpl-1"}, {"kv_transfer_params", descriptor}}, descriptor);
  CheckExtract(json{{"choices", json::array({json{{"index", 0}, {"kv_transfer_params", descriptor}}})}},
               descriptor);

  // B4/B5: the consumer's body.
  const json client_body = {{"model", "Qwen/Qwen3-0.6B"},
                            {"prompt", "Capital of France?"},
                            {"max_tokens", 16},
                            {"stream", client_streams},
                            {"kv_transfer_params", {{"remote_host", "attacker.example"}}}};
  const json decode =
      narwhal::engines::BuildDecodeBody(client_body, handoff, same_worker, client_streams);
  FUZZ_CHECK(decode.is_object() && decode.value("stream", false) == true);
  if (same_worker) {
    FUZZ_CHECK(!decode.contains("kv_transfer_params"));
  } else {
    FUZZ_CHECK(decode.contains("kv_transfer_params") && decode["kv_transfer_params"] == descriptor);
  }
  if (!client_streams) FUZZ_CHECK(decode["stream_options"]["include_usage"] == true);
  FUZZ_CHECK(Serialises(decode));

  // B1: the same document as a client body (the door only passes objects).
  if (descriptor.is_object()) {
    const json prefill = narwhal::engines::BuildPrefillBody(descriptor);
    FUZZ_CHECK(prefill["stream"] == false && prefill["max_tokens"] == 1);
    FUZZ_CHECK(!prefill.contains("stream_options") && !prefill.contains("min_tokens") &&
               !prefill.contains("min_completion_tokens"));
    if (descriptor.contains("max_completion_tokens")) {
      FUZZ_CHECK(prefill["max_completion_tokens"] == 1);
    }
    const json& kv = prefill["kv_transfer_params"];
    FUZZ_CHECK(kv.is_object() && kv["do_remote_decode"] == true && kv["do_remote_prefill"] == false);
    for (const auto& [key, value] : descriptor.items()) {
      if (key == "stream" || key == "max_tokens" || key == "max_completion_tokens" ||
          key == "stream_options" || key == "min_tokens" || key == "min_completion_tokens" ||
          key == "kv_transfer_params") {
        continue;
      }
      FUZZ_CHECK_MSG(prefill.contains(key) && prefill[key] == value, key);
    }
    FUZZ_CHECK(Serialises(prefill));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Run(data, size);
  } catch (const std::exception& e) {
    narwhal::fuzz::CheckFailed(__FILE__, __LINE__, "no exception escapes", e.what());
  }
  return 0;
}
