#include "server/grpc/grpc_request.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/support/slice.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "engines/json_limits.h"
#include "server/grpc/grpc_typed_fields.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

GrpcParsedRequest Fail(std::string message, std::string param) {
  GrpcParsedRequest out;
  out.parsed.error.message = std::move(message);
  out.parsed.error.param = std::move(param);
  return out;
}

GrpcParsedRequest Fail(TypedFieldError error) {
  GrpcParsedRequest out = Fail(std::move(error.message), std::move(error.param));
  if (error.too_large) out.parsed.error.reason = router::Reason::kTooLarge;
  return out;
}

constexpr size_t kMaxShownPath = 64;

// `path` cut to about kMaxShownPath bytes, on a UTF-8 character boundary
// (proto3 strings are well-formed UTF-8), marked "..." when cut.
std::string ShownPath(const std::string& path) {
  if (path.size() <= kMaxShownPath) return path;
  size_t end = kMaxShownPath;
  while (end > 0 && (static_cast<unsigned char>(path[end]) & 0xC0) == 0x80) --end;
  return path.substr(0, end) + "...";
}

// The typed double fields of a GenerateRequest that are set and not finite.
const char* NonFiniteTypedField(const narwhal::v1::GenerateRequest& r) {
  const std::pair<const char*, std::optional<double>> fields[] = {
      {"temperature", r.has_temperature() ? std::optional(r.temperature()) : std::nullopt},
      {"top_p", r.has_top_p() ? std::optional(r.top_p()) : std::nullopt},
      {"min_p", r.has_min_p() ? std::optional(r.min_p()) : std::nullopt},
      {"presence_penalty",
       r.has_presence_penalty() ? std::optional(r.presence_penalty()) : std::nullopt},
      {"frequency_penalty",
       r.has_frequency_penalty() ? std::optional(r.frequency_penalty()) : std::nullopt},
      {"repetition_penalty",
       r.has_repetition_penalty() ? std::optional(r.repetition_penalty()) : std::nullopt},
  };
  for (const auto& [name, value] : fields) {
    if (value && !std::isfinite(*value)) return name;
  }
  return nullptr;
}

}  // namespace

bool DecodeGenerateRequest(const std::string* bytes, long long max_bytes,
                           narwhal::v1::GenerateRequest* out, DecodeError* error) {
  if (bytes == nullptr) {
    *error = {router::Reason::kMalformedMessage, "the call carried no request message"};
    return false;
  }
  const size_t size = bytes->size();
  if (max_bytes >= 0 && size > static_cast<unsigned long long>(max_bytes)) {
    *error = {router::Reason::kTooLarge, "request message of " + std::to_string(size) +
                                             " bytes exceeds serving.max_request_bytes (" +
                                             std::to_string(max_bytes) + " bytes)"};
    return false;
  }
  if (out->ParseFromString(*bytes)) return true;
  out->Clear();
  // Which way it is broken: as bare wire format, or only as this message.
  google::protobuf::UnknownFieldSet wire;
  const bool well_formed = wire.ParseFromString(*bytes);
  error->reason = router::Reason::kMalformedMessage;
  error->message =
      well_formed ? "request message is not a valid narwhal.v1.GenerateRequest: a string field "
                    "is not valid UTF-8, a field has the wrong wire type, or it nests too deeply"
                  : "request message is not valid protobuf (malformed or truncated)";
  return false;
}

bool DecodeGenerateRequest(const grpc::ByteBuffer& bytes, long long max_bytes,
                           narwhal::v1::GenerateRequest* out, DecodeError* error) {
  if (!bytes.Valid())
    return DecodeGenerateRequest(static_cast<const std::string*>(nullptr), max_bytes, out, error);
  std::vector<grpc::Slice> slices;
  (void)bytes.Dump(&slices);
  std::string flat;
  flat.reserve(bytes.Length());
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return DecodeGenerateRequest(&flat, max_bytes, out, error);
}

json ValueToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNullValue:
      return nullptr;
    case google::protobuf::Value::kNumberValue: {
      const double d = value.number_value();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
        return static_cast<long long>(d);
      }
      return d;
    }
    case google::protobuf::Value::kStringValue:
      return value.string_value();
    case google::protobuf::Value::kBoolValue:
      return value.bool_value();
    case google::protobuf::Value::kStructValue:
      return StructToJson(value.struct_value());
    case google::protobuf::Value::kListValue: {
      json list = json::array();
      for (const auto& v : value.list_value().values()) list.push_back(ValueToJson(v));
      return list;
    }
    default:
      return nullptr;
  }
}

json StructToJson(const google::protobuf::Struct& s) {
  json out = json::object();
  for (const auto& [key, value] : s.fields()) out[key] = ValueToJson(value);
  return out;
}

engines::JsonVerdict CheckStruct(const google::protobuf::Struct& s,
                                 const engines::JsonBounds& bounds, size_t* cost_out) {
  using engines::JsonNode;
  using engines::JsonNodeCost;
  // (value, depth of the container holding it) pairs still to visit.
  std::vector<std::pair<const google::protobuf::Value*, int>> pending;
  size_t cost = JsonNodeCost(JsonNode::kObject);
  auto push_struct = [&](const google::protobuf::Struct& st, int depth) {
    for (const auto& [key, value] : st.fields()) {
      cost += JsonNodeCost(JsonNode::kMember, key.size());
      pending.emplace_back(&value, depth);
    }
  };
  auto verdict = [&](engines::JsonVerdict v) {
    if (cost_out != nullptr) *cost_out = cost;
    return v;
  };
  const size_t max_cost = bounds.max_cost != 0 ? bounds.max_cost : static_cast<size_t>(-1);
  if (bounds.max_depth < 1) return verdict(engines::JsonVerdict::kTooDeep);
  push_struct(s, 1);
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    switch (value->kind_case()) {
      case google::protobuf::Value::kStructValue:
        if (depth + 1 > bounds.max_depth) return verdict(engines::JsonVerdict::kTooDeep);
        cost += JsonNodeCost(JsonNode::kObject);
        push_struct(value->struct_value(), depth + 1);
        break;
      case google::protobuf::Value::kListValue:
        if (depth + 1 > bounds.max_depth) return verdict(engines::JsonVerdict::kTooDeep);
        cost += JsonNodeCost(JsonNode::kArray);
        for (const auto& v : value->list_value().values()) pending.emplace_back(&v, depth + 1);
        break;
      case google::protobuf::Value::kStringValue:
        cost += JsonNodeCost(JsonNode::kString, value->string_value().size());
        break;
      default:
        cost += JsonNodeCost(JsonNode::kScalar);
        break;
    }
    if (cost > max_cost) return verdict(engines::JsonVerdict::kTooCostly);
  }
  return verdict(engines::JsonVerdict::kWithin);
}

bool StructDepthWithin(const google::protobuf::Struct& s, int max_depth) {
  return CheckStruct(s, {.max_depth = max_depth, .max_cost = static_cast<size_t>(-1)}) !=
         engines::JsonVerdict::kTooDeep;
}

std::string NonFiniteNumberPath(const google::protobuf::Struct& s) {
  // (value, its path as shown) pairs still to visit; a path is cut as soon
  // as it is too long to show, so none holds more than a few dozen bytes.
  std::vector<std::pair<const google::protobuf::Value*, std::string>> pending;
  auto child = [](const std::string& path, const std::string& segment) {
    return path.size() >= kMaxShownPath && path.ends_with("...") ? path : ShownPath(path + segment);
  };
  auto push_struct = [&](const google::protobuf::Struct& st, const std::string& path) {
    for (const auto& [key, value] : st.fields()) {
      pending.emplace_back(&value, path.empty() ? ShownPath(key) : child(path, "." + key));
    }
  };
  push_struct(s, "");
  while (!pending.empty()) {
    auto [value, path] = std::move(pending.back());
    pending.pop_back();
    switch (value->kind_case()) {
      case google::protobuf::Value::kNumberValue:
        if (!std::isfinite(value->number_value())) return path;
        break;
      case google::protobuf::Value::kStructValue:
        push_struct(value->struct_value(), path);
        break;
      case google::protobuf::Value::kListValue: {
        const auto& values = value->list_value().values();
        for (int i = 0; i < values.size(); ++i) {
          pending.emplace_back(&values[i], child(path, "[" + std::to_string(i) + "]"));
        }
        break;
      }
      default:
        break;
    }
  }
  return "";
}

GrpcParsedRequest TranslateGenerateRequest(const narwhal::v1::GenerateRequest& request, bool stream,
                                           const std::string& served_model,
                                           const router::LimitSettings& limits) {
  // NaN and infinities have no JSON form: refused, not sent as null.
  if (const char* field = NonFiniteTypedField(request)) {
    return Fail(std::string(field) + " must be a finite number", field);
  }
  json body = json::object();
  // Other engine fields first, so the typed fields below win.
  if (request.has_extra()) {
    // `extra` becomes the body itself: the same bounds as an HTTP body (its
    // depth, and the memory its JSON form would take against the size of
    // its wire form).
    const size_t wire_bytes = request.extra().ByteSizeLong();
    switch (CheckStruct(request.extra(), {.max_cost = engines::DefaultJsonCostBound(wire_bytes)})) {
      case engines::JsonVerdict::kWithin:
        break;
      case engines::JsonVerdict::kTooDeep:
        return Fail("extra " + engines::DepthLimitText(), "extra");
      case engines::JsonVerdict::kTooCostly: {
        GrpcParsedRequest costly = Fail("extra " + engines::CostLimitText(wire_bytes), "extra");
        costly.parsed.error.reason = router::Reason::kTooLarge;
        return costly;
      }
    }
    if (const std::string path = NonFiniteNumberPath(request.extra()); !path.empty()) {
      return Fail("extra." + path + " must be a finite number", "extra");
    }
    body = StructToJson(request.extra());
    for (const char* owned : {"model", "prompt", "messages", "stream", "stream_options"}) {
      if (body.contains(owned)) {
        return Fail(std::string("extra.") + owned + " is set by the router; use the typed field",
                    std::string("extra.") + owned);
      }
    }
  }
  GrpcParsedRequest out;
  body["model"] = request.model();
  switch (request.input_case()) {
    case narwhal::v1::GenerateRequest::kPrompt:
      out.api = engines::Api::kCompletions;
      body["prompt"] = request.prompt();
      break;
    case narwhal::v1::GenerateRequest::kMessages: {
      out.api = engines::Api::kChatCompletions;
      json messages = json::array();
      for (int i = 0; i < request.messages().messages_size(); ++i) {
        json message;
        if (auto error = ChatMessageJson(request.messages().messages(i), i, &message)) {
          return Fail(std::move(*error));
        }
        messages.push_back(std::move(message));
      }
      body["messages"] = std::move(messages);
      break;
    }
    default:
      return Fail("prompt or messages is required", "input");
  }
  if (request.model().empty()) return Fail("model is required", "model");
  if (request.has_max_tokens()) body["max_tokens"] = request.max_tokens();
  if (request.has_temperature()) body["temperature"] = request.temperature();
  if (request.has_top_p()) body["top_p"] = request.top_p();
  if (request.has_top_k()) body["top_k"] = request.top_k();
  if (request.has_min_p()) body["min_p"] = request.min_p();
  if (request.has_seed()) body["seed"] = request.seed();
  if (request.stop_size() > 0) {
    json stop = json::array();
    for (const auto& s : request.stop()) stop.push_back(s);
    body["stop"] = std::move(stop);
  }
  if (request.has_presence_penalty()) body["presence_penalty"] = request.presence_penalty();
  if (request.has_frequency_penalty()) body["frequency_penalty"] = request.frequency_penalty();
  if (request.has_repetition_penalty()) body["repetition_penalty"] = request.repetition_penalty();
  if (request.has_ignore_eos()) body["ignore_eos"] = request.ignore_eos();
  if (request.has_min_tokens()) body["min_tokens"] = request.min_tokens();
  if (auto error = AddTypedRequestFields(request, out.api, &body)) return Fail(std::move(*error));
  body["stream"] = stream;
  // Final carries usage: a streaming leg asks the engine for its usage chunk
  // (a non-streaming one gets it from the router, BuildDecodeBody).
  if (stream) body["stream_options"] = json{{"include_usage", true}};
  out.parsed = ValidateOpenAiBody(std::move(body), out.api, served_model, limits);
  return out;
}

}  // namespace narwhal::server
