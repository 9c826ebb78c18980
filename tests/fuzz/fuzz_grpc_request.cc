// The gRPC door's request decoding and translation: fuzz bytes handed to
// server::DecodeGenerateRequest as the grpc::ByteBuffer the door receives
// (at the default serving.max_request_bytes and at a 1 KiB one), and a
// decoded narwhal.v1.GenerateRequest translated with
// server::TranslateGenerateRequest for both RPCs (Generate streams,
// Complete does not).
//
// Input: the serialized message itself (seeds are serialized requests).
//
// Checked: nothing throws; decoding agrees with protobuf's own ParseFromArray
// (same verdict, same message), refuses a message over the byte bound with
// 413 before parsing, and refuses with a 400, a reason and a message
// otherwise; a translation refusal is a 400 or 404 with a message; an
// accepted body is an object with the served model, the
// API the input case selects, `stream` as the RPC asks, no
// kv_transfer_params, the typed fields winning over `extra`; it serialises
// (proto3 strings are UTF-8, so nothing may break nlohmann's strict dump),
// stays within the depth bound, and the HTTP door's parser accepts its
// serialised form as the same body (both doors apply one set of rules).
// Also: StructDepthWithin agrees with engines::JsonDepthWithin on the
// JSON form of `extra`.
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/impl/grpc_library.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "engines/api.h"
#include "engines/json_limits.h"
#include "narwhal/v1/inference.pb.h"
#include "server/grpc/grpc_request.h"
#include "server/openai_request.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using json = nlohmann::json;
using narwhal::engines::Api;
using narwhal::fuzz::Printable;
using narwhal::fuzz::Serialises;
using narwhal::fuzz::Show;

const std::string kModel = "Qwen/Qwen3-0.6B";

void CheckTranslation(const narwhal::v1::GenerateRequest& request, bool stream) {
  const narwhal::server::GrpcParsedRequest out =
      narwhal::server::TranslateGenerateRequest(request, stream, kModel);
  const narwhal::server::ParsedRequest& p = out.parsed;
  if (!p.ok) {
    FUZZ_CHECK_MSG(p.error.reason == narwhal::router::Reason::kInvalidRequest ||
                       p.error.reason == narwhal::router::Reason::kModelNotFound,
                   std::string(narwhal::router::ReasonName(p.error.reason)));
    FUZZ_CHECK(!p.error.message.empty());
    FUZZ_CHECK(p.error.message.size() <= 200 + request.model().size());
    return;
  }
  const json& body = p.body;
  FUZZ_CHECK(body.is_object());
  FUZZ_CHECK(body["model"] == kModel);
  FUZZ_CHECK(!body.contains("kv_transfer_params"));
  FUZZ_CHECK(body["stream"] == stream && p.stream == stream);
  if (request.input_case() == narwhal::v1::GenerateRequest::kPrompt) {
    FUZZ_CHECK(out.api == Api::kCompletions && body["prompt"] == request.prompt());
  } else {
    FUZZ_CHECK(out.api == Api::kChatCompletions &&
               body["messages"].size() == static_cast<size_t>(request.messages().messages_size()));
  }
  if (request.has_max_tokens()) FUZZ_CHECK(body["max_tokens"] == request.max_tokens());
  if (request.has_seed()) FUZZ_CHECK(body["seed"] == request.seed());
  if (request.has_top_k()) FUZZ_CHECK(body["top_k"] == request.top_k());

  std::string text;
  FUZZ_CHECK_MSG(Serialises(body, &text), Show(body));
  FUZZ_CHECK_MSG(narwhal::engines::JsonDepthWithin(text), "depth");
  const narwhal::server::ParsedRequest http =
      narwhal::server::ParseOpenAiRequest(text, out.api, kModel);
  FUZZ_CHECK_MSG(http.ok, http.error.message + " for " + Printable(text));
  // Doubles that are not finite serialise as null: compare the wire forms.
  FUZZ_CHECK_MSG(http.body.dump() == text, Printable(text));
}

// Decodes `bytes` as the door does; the decoded request, or false.
bool Decode(const uint8_t* bytes, size_t size, long long max_bytes,
            narwhal::v1::GenerateRequest* request) {
  grpc::Slice slice(bytes, size);
  const grpc::ByteBuffer buffer(&slice, 1);
  narwhal::server::DecodeError error;
  if (narwhal::server::DecodeGenerateRequest(buffer, max_bytes, request, &error)) return true;
  FUZZ_CHECK_MSG(error.reason == (size > static_cast<size_t>(max_bytes)
                                      ? narwhal::router::Reason::kTooLarge
                                      : narwhal::router::Reason::kMalformedMessage),
                 std::string(narwhal::router::ReasonName(error.reason)));
  FUZZ_CHECK(!error.message.empty());
  return false;
}

void Run(const uint8_t* bytes, size_t size) {
  static grpc::internal::GrpcLibraryInitializer grpc_library;  // ByteBuffer's codegen hooks
  narwhal::v1::GenerateRequest request;
  const bool decoded = Decode(bytes, size, 4194304, &request);
  narwhal::v1::GenerateRequest reference;
  const bool parsed = reference.ParseFromArray(bytes, static_cast<int>(size));
  FUZZ_CHECK_MSG(decoded == parsed,
                 decoded ? "decoded, protobuf refuses" : "refused, protobuf parses");
  narwhal::v1::GenerateRequest small;
  FUZZ_CHECK(Decode(bytes, size, 1024, &small) == (decoded && size <= 1024));
  if (!decoded) return;
  // The same message (a NaN number_value equal to itself).
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  FUZZ_CHECK(differencer.Compare(request, reference));
  if (request.has_extra()) {
    const json extra = narwhal::server::StructToJson(request.extra());
    std::string text;
    FUZZ_CHECK(Serialises(extra, &text));
    const bool within =
        narwhal::server::StructDepthWithin(request.extra(), narwhal::engines::kMaxJsonDepth);
    FUZZ_CHECK_MSG(within == narwhal::engines::JsonDepthWithin(text), Printable(text));
  }
  CheckTranslation(request, /*stream=*/true);
  CheckTranslation(request, /*stream=*/false);
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
