// The engine adapter's handling of a prefill response body, step for step as
// engines/http/beast_engine_client.cc (BeastEngineClient::Prefill) does it
// once the HTTP message is read: a 2xx body goes through JsonDepthWithin,
// ParseJson and ExtractDescriptor, and a found descriptor is bound into a
// PrefillResult, checked with ValidateContinuation and sent on with
// BuildDecodeBody; any other status goes through EngineErrorMessage and
// ClassifyEngineStatus. (That sequence is inline in the coroutine; the
// functions it calls are the project's.)
//
// Input: byte 0 picks the HTTP status (low 4 bits index kStatuses), the
// endpoint (bit 4) and a byte bound for ToValidUtf8 (bits 5-7); the rest is
// the response body.
//
// Checked: nothing throws; a refused body carries a reason; a descriptor is
// a non-empty object equal to the top-level kv_transfer_params (or choice
// 0's when that is absent or null); the decode body serialises; the error
// message of a non-2xx body and the failure detail are bounded
// (kMaxEngineTextBytes), well-formed UTF-8 (they reach JSON documents and
// the gRPC door's proto3 ErrorInfo) and non-empty for a non-empty body;
// IsValidUtf8 agrees with an independent decoder, ToValidUtf8 keeps valid
// text, cuts only at character boundaries and stays within its bound, and
// EngineText is idempotent. The same bytes are read as a /tokenize answer
// too (router/prompt_tokens.h).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "engines/http/connector.h"
#include "engines/json_limits.h"
#include "engines/prefill_result.h"
#include "router/prompt_tokens.h"
#include "server/status_table.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using json = nlohmann::json;
using narwhal::engines::Api;
using narwhal::fuzz::IsUtf8;
using narwhal::fuzz::Printable;
using narwhal::fuzz::Serialises;
using narwhal::fuzz::Show;

constexpr int kStatuses[] = {200, 200, 200, 200, 200, 200, 201, 299,
                             400, 404, 408, 429, 500, 503, 504, 302};

// Where the header says the descriptor is: top-level kv_transfer_params,
// else choices[0].kv_transfer_params (null counts as absent).
const json* Expected(const json& response) {
  if (!response.is_object()) return nullptr;
  if (auto it = response.find("kv_transfer_params"); it != response.end() && !it->is_null()) {
    return &*it;
  }
  auto choices = response.find("choices");
  if (choices == response.end() || !choices->is_array() || choices->empty()) return nullptr;
  const json& first = (*choices)[0];
  if (!first.is_object()) return nullptr;
  auto c = first.find("kv_transfer_params");
  return c != first.end() && !c->is_null() ? &*c : nullptr;
}

void Success(const std::string& response, Api api) {
  std::string why;
  std::optional<json> descriptor;
  if (!narwhal::engines::JsonDepthWithin(response)) {
    why = "prefill response " + narwhal::engines::DepthLimitText();
  } else if (json parsed = narwhal::engines::ParseJson(response); parsed.is_discarded()) {
    why = "prefill response is not valid JSON";
  } else {
    descriptor = narwhal::engines::ExtractDescriptor(parsed, &why);
    const json* expected = Expected(parsed);
    if (expected != nullptr && expected->is_object() && !expected->empty()) {
      FUZZ_CHECK_MSG(descriptor.has_value() && *descriptor == *expected, why);
    } else {
      FUZZ_CHECK_MSG(!descriptor.has_value(), Show(parsed));
    }
  }
  if (!descriptor) {
    FUZZ_CHECK(!why.empty() && why.size() <= 200);
    return;
  }
  FUZZ_CHECK(descriptor->is_object() && !descriptor->empty());
  const narwhal::engines::PrefillResult handoff("p0", "http://127.0.0.1:8100", api, "rid-1",
                                                "NixlConnector", std::move(*descriptor));
  const std::string invalid =
      narwhal::engines::ValidateContinuation(handoff, "NixlConnector", api).detail;
  FUZZ_CHECK_MSG(invalid == narwhal::engines::ValidateDescriptorShape(handoff.descriptor()),
                 invalid);
  if (!invalid.empty()) return;
  const json client_body = api == Api::kCompletions
                               ? json{{"model", "Qwen/Qwen3-0.6B"}, {"prompt", "Capital of France?"}}
                               : json{{"model", "Qwen/Qwen3-0.6B"},
                                      {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  for (const bool same_worker : {false, true}) {
    const json body = narwhal::engines::BuildDecodeBody(client_body, handoff, same_worker,
                                                        /*client_streams=*/false);
    std::string text;
    FUZZ_CHECK(Serialises(body, &text));
    FUZZ_CHECK(narwhal::engines::JsonDepthWithin(text));
  }
}

void Failure(const std::string& response, int status) {
  const std::string message = narwhal::engines::EngineErrorMessage(response);
  FUZZ_CHECK_MSG(message.size() <= narwhal::engines::kMaxEngineTextBytes,
                 std::to_string(message.size()));
  FUZZ_CHECK(response.empty() || !message.empty());
  FUZZ_CHECK_MSG(IsUtf8(message), Printable(message));
  FUZZ_CHECK(narwhal::engines::EngineText(message) == message);  // idempotent
  const narwhal::engines::EngineFailure f = narwhal::engines::ClassifyEngineStatus(
      narwhal::engines::Phase::kPrefill, "p0", status, message, /*in_stream=*/false);
  FUZZ_CHECK(f.cause == (narwhal::engines::EngineRefusesRouter(status)
                             ? narwhal::engines::FailureCause::kEngineRefusedRouter
                             : narwhal::engines::FailureCause::kEngineStatus));
  const int client_status = narwhal::server::FailureStatus(f);
  FUZZ_CHECK(client_status >= 400 && client_status <= 599);
  FUZZ_CHECK(f.engine_status == status);
  FUZZ_CHECK(!f.detail.empty() || message.empty());
  FUZZ_CHECK_MSG(IsUtf8(f.detail), Printable(f.detail));
}

// engines/engine_failure.h's UTF-8 helpers on the raw body: every engine
// text passes through them before it reaches a JSON document or a proto3
// string.
void CheckText(const std::string& bytes, size_t max_bytes) {
  FUZZ_CHECK_MSG(narwhal::engines::IsValidUtf8(bytes) == IsUtf8(bytes), Printable(bytes));
  bool truncated = false;
  const std::string valid = narwhal::engines::ToValidUtf8(bytes, max_bytes, &truncated);
  FUZZ_CHECK_MSG(IsUtf8(valid) && valid.size() <= max_bytes, Printable(valid));
  if (IsUtf8(bytes) && bytes.size() <= max_bytes) FUZZ_CHECK(valid == bytes && !truncated);
  if (!truncated) {
    FUZZ_CHECK(narwhal::engines::ToValidUtf8(valid, max_bytes) == valid);
  } else {
    // Cut at a character boundary: what is kept is a prefix of the whole.
    const std::string whole = narwhal::engines::ToValidUtf8(bytes);
    FUZZ_CHECK_MSG(whole.compare(0, valid.size(), valid) == 0, Printable(valid));
  }
  const std::string text = narwhal::engines::EngineText(bytes);
  FUZZ_CHECK(IsUtf8(text) && text.size() <= narwhal::engines::kMaxEngineTextBytes);
  FUZZ_CHECK(narwhal::engines::EngineText(text) == text);
}

// The same bytes as an engine's /tokenize answer (router/prompt_tokens.h):
// read whole within the bound of ids, or refused with a reason and no ids.
void Tokenize(const std::string& response) {
  constexpr size_t kBound = 64;
  std::vector<uint32_t> ids = {7};
  std::string why;
  if (narwhal::router::ParseTokenizeAnswer(response, kBound, &ids, &why)) {
    FUZZ_CHECK(!ids.empty() && ids.size() <= kBound);
  } else {
    FUZZ_CHECK(ids.empty() && !why.empty());
  }
}

void Run(const uint8_t* bytes, size_t size) {
  if (size == 0) return;
  const int status = kStatuses[bytes[0] & 15];
  const Api api = (bytes[0] & 16) ? Api::kChatCompletions : Api::kCompletions;
  const std::string response(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  CheckText(response, bytes[0] >> 5 == 0 ? std::string::npos : (bytes[0] >> 5) * 37);
  Tokenize(response);
  if (status >= 200 && status <= 299) {
    Success(response, api);
  } else {
    Failure(response, status);
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
