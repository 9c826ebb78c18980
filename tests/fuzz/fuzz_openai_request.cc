// The HTTP door's validation of OpenAI request bodies
// (server::ParseOpenAiRequest) for both APIs.
//
// Input: byte 0 picks the API (bit 0); the rest is the raw request body.
//
// Checked: nothing throws; a refusal is a 400 or 404 with a non-empty
// message; an accepted body is an object naming the served model, carries no
// kv_transfer_params, has the prompt (completions) or messages (chat) the
// API needs, reports `stream` as the body says, serialises, stays within the
// depth bound, builds valid prefill and decode legs (engines/http/connector.h),
// and validating its serialised form again accepts it unchanged (the gRPC
// door re-validates bodies through ValidateOpenAiBody, so the rules must be
// idempotent).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engines/api.h"
#include "engines/http/connector.h"
#include "engines/json_limits.h"
#include "server/openai_request.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using json = nlohmann::json;
using narwhal::engines::Api;
using narwhal::fuzz::Printable;
using narwhal::fuzz::Serialises;
using narwhal::server::ParsedRequest;

const std::string kModel = "Qwen/Qwen3-0.6B";

void CheckRefusal(const ParsedRequest& p, size_t raw_size) {
  FUZZ_CHECK_MSG(p.error.reason == narwhal::router::Reason::kInvalidRequest ||
                     p.error.reason == narwhal::router::Reason::kModelNotFound,
                 std::string(narwhal::router::ReasonName(p.error.reason)));
  FUZZ_CHECK(!p.error.message.empty());
  // Messages are fixed text, plus at most the client's own model name.
  FUZZ_CHECK_MSG(p.error.message.size() <= 200 + raw_size, Printable(p.error.message));
  FUZZ_CHECK(p.error.param.size() <= 64);
}

void Run(const uint8_t* bytes, size_t size) {
  if (size == 0) return;
  const Api api = (bytes[0] & 1) ? Api::kChatCompletions : Api::kCompletions;
  const std::string_view raw(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  const ParsedRequest p = narwhal::server::ParseOpenAiRequest(raw, api, kModel);
  if (!p.ok) {
    CheckRefusal(p, raw.size());
    return;
  }
  const json& body = p.body;
  FUZZ_CHECK(body.is_object());
  FUZZ_CHECK(body.contains("model") && body["model"] == kModel);
  FUZZ_CHECK(!body.contains("kv_transfer_params"));
  if (api == Api::kCompletions) {
    FUZZ_CHECK(body.contains("prompt") && !body["prompt"].is_null());
  } else {
    FUZZ_CHECK(body.contains("messages") && body["messages"].is_array() &&
               !body["messages"].empty());
  }
  const bool stream = body.contains("stream") && body["stream"] == true;
  FUZZ_CHECK(p.stream == stream);
  if (!stream) FUZZ_CHECK(!body.contains("stream_options") || body["stream_options"].is_null());
  std::string text;
  FUZZ_CHECK_MSG(Serialises(body, &text), Printable(raw));
  FUZZ_CHECK(narwhal::engines::JsonDepthWithin(text));

  // The legs built from it (what the router sends to engines).
  std::string leg;
  FUZZ_CHECK(Serialises(narwhal::engines::BuildPrefillBody(body), &leg));
  FUZZ_CHECK(narwhal::engines::JsonDepthWithin(leg));

  // Idempotent: the forwarded body validates again, unchanged.
  const ParsedRequest again = narwhal::server::ParseOpenAiRequest(text, api, kModel);
  FUZZ_CHECK_MSG(again.ok, again.error.message + " for " + Printable(text));
  FUZZ_CHECK_MSG(again.body == body && again.stream == p.stream, Printable(text));
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
