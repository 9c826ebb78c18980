#include "server/grpc/grpc_typed_fields.h"

#include <utility>

#include "engines/json_limits.h"
#include "server/grpc/grpc_request.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;
namespace pb = narwhal::v1;

TypedFieldError Error(std::string message, std::string param, bool too_large = false) {
  return TypedFieldError{std::move(message), std::move(param), too_large};
}

// A Struct field as JSON, under the bounds an HTTP body's JSON gets (depth,
// and the memory its JSON form takes against its wire size), with finite
// numbers only.
std::optional<TypedFieldError> StructField(const google::protobuf::Struct& s,
                                           const std::string& name, json* out) {
  const size_t wire_bytes = s.ByteSizeLong();
  switch (CheckStruct(s, {.max_cost = engines::DefaultJsonCostBound(wire_bytes)})) {
    case engines::JsonVerdict::kWithin:
      break;
    case engines::JsonVerdict::kTooDeep:
      return Error(name + " " + engines::DepthLimitText(), name);
    case engines::JsonVerdict::kTooCostly:
      return Error(name + " " + engines::CostLimitText(wire_bytes), name, /*too_large=*/true);
  }
  if (const std::string path = NonFiniteNumberPath(s); !path.empty()) {
    return Error(name + "." + path + " must be a finite number", name);
  }
  *out = StructToJson(s);
  return std::nullopt;
}

std::optional<TypedFieldError> ContentPartJson(const pb::ContentPart& part, const std::string& name,
                                               json* out) {
  switch (part.part_case()) {
    case pb::ContentPart::kText:
      *out = {{"type", "text"}, {"text", part.text()}};
      return std::nullopt;
    case pb::ContentPart::kImageUrl: {
      json image = {{"url", part.image_url().url()}};
      if (part.image_url().has_detail()) image["detail"] = part.image_url().detail();
      *out = {{"type", "image_url"}, {"image_url", std::move(image)}};
      return std::nullopt;
    }
    case pb::ContentPart::kOther: {
      if (auto error = StructField(part.other(), name, out)) return error;
      if (!out->contains("type") || !(*out)["type"].is_string()) {
        return Error(name + " needs a string \"type\"", name);
      }
      return std::nullopt;
    }
    default:
      return Error(name + " is empty: set text, image_url or other", name);
  }
}

json ToolCallJson(const pb::ToolCall& call) {
  return {
      {"id", call.id()},
      {"type", call.type().empty() ? "function" : call.type()},
      {"function", {{"name", call.function().name()}, {"arguments", call.function().arguments()}}}};
}

std::string Text(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A token's bytes ([72, 105]) as a byte string; "" when absent or not bytes.
std::string Bytes(const json& object) {
  auto it = object.find("bytes");
  if (it == object.end() || !it->is_array()) return "";
  std::string out;
  for (const json& b : *it) {
    if (!b.is_number_integer()) return "";
    const long long v = b.get<long long>();
    if (v < 0 || v > 255) return "";
    out.push_back(static_cast<char>(v));
  }
  return out;
}

double Number(const json& value) { return value.is_number() ? value.get<double>() : 0.0; }

// Choice 0's logprobs (chat: {"content": [...]}; completion: {"tokens",
// "token_logprobs", "top_logprobs"}) as TokenLogprob messages.
template <typename Add>
void ForEachLogprob(const json& choice, Add add) {
  auto lp = choice.find("logprobs");
  if (lp == choice.end() || !lp->is_object()) return;
  if (auto content = lp->find("content"); content != lp->end() && content->is_array()) {
    for (const json& t : *content) {
      if (!t.is_object()) continue;
      pb::TokenLogprob* out = add();
      out->set_token(Text(t, "token"));
      if (auto v = t.find("logprob"); v != t.end()) out->set_logprob(Number(*v));
      out->set_bytes(Bytes(t));
      if (auto top = t.find("top_logprobs"); top != t.end() && top->is_array()) {
        for (const json& alt : *top) {
          if (!alt.is_object()) continue;
          pb::TopLogprob* a = out->add_top_logprobs();
          a->set_token(Text(alt, "token"));
          if (auto v = alt.find("logprob"); v != alt.end()) a->set_logprob(Number(*v));
          a->set_bytes(Bytes(alt));
        }
      }
    }
    return;
  }
  auto tokens = lp->find("tokens");
  if (tokens == lp->end() || !tokens->is_array()) return;
  auto values = lp->find("token_logprobs");
  auto tops = lp->find("top_logprobs");
  for (size_t i = 0; i < tokens->size(); ++i) {
    pb::TokenLogprob* out = add();
    if ((*tokens)[i].is_string()) out->set_token((*tokens)[i].get<std::string>());
    if (values != lp->end() && values->is_array() && i < values->size()) {
      out->set_logprob(Number((*values)[i]));
    }
    if (tops != lp->end() && tops->is_array() && i < tops->size() && (*tops)[i].is_object()) {
      for (const auto& [token, value] : (*tops)[i].items()) {
        pb::TopLogprob* a = out->add_top_logprobs();
        a->set_token(token);
        a->set_logprob(Number(value));
      }
    }
  }
}

const json* ChoiceZero(const json& body) {
  auto choices = body.find("choices");
  if (choices == body.end() || !choices->is_array() || choices->empty()) return nullptr;
  const json& c = (*choices)[0];
  return c.is_object() ? &c : nullptr;
}

std::string Reasoning(const json& message) {
  std::string r = Text(message, "reasoning_content");
  return r.empty() ? Text(message, "reasoning") : r;
}

}  // namespace

std::optional<TypedFieldError> ChatMessageJson(const pb::ChatMessage& m, int index, json* out) {
  const std::string name = "messages[" + std::to_string(index) + "]";
  json message = {{"role", m.role()}};
  if (m.content_parts_size() > 0) {
    if (!m.content().empty()) {
      return Error(name + " sets both content and content_parts", name + ".content_parts");
    }
    json parts = json::array();
    for (int i = 0; i < m.content_parts_size(); ++i) {
      json part;
      const std::string part_name = name + ".content_parts[" + std::to_string(i) + "]";
      if (auto error = ContentPartJson(m.content_parts(i), part_name, &part)) return error;
      parts.push_back(std::move(part));
    }
    message["content"] = std::move(parts);
  } else if (!m.content().empty() || m.tool_calls_size() == 0) {
    // An assistant turn with tool calls only has no content (null).
    message["content"] = m.content();
  } else {
    message["content"] = nullptr;
  }
  if (m.has_name()) message["name"] = m.name();
  if (m.tool_calls_size() > 0) {
    json calls = json::array();
    for (const pb::ToolCall& call : m.tool_calls()) calls.push_back(ToolCallJson(call));
    message["tool_calls"] = std::move(calls);
  }
  if (m.has_tool_call_id()) message["tool_call_id"] = m.tool_call_id();
  if (m.has_reasoning_content()) message["reasoning_content"] = m.reasoning_content();
  *out = std::move(message);
  return std::nullopt;
}

std::optional<TypedFieldError> AddTypedRequestFields(const pb::GenerateRequest& r, engines::Api api,
                                                     json* body) {
  const bool chat = api == engines::Api::kChatCompletions;
  if (r.tools_size() > 0) {
    if (!chat) return Error("tools need messages (a chat request)", "tools");
    json tools = json::array();
    for (int i = 0; i < r.tools_size(); ++i) {
      const pb::Tool& tool = r.tools(i);
      const std::string name = "tools[" + std::to_string(i) + "]";
      if (tool.function().name().empty()) return Error(name + ".function.name is required", name);
      json function = {{"name", tool.function().name()}};
      if (tool.function().has_description()) {
        function["description"] = tool.function().description();
      }
      if (tool.function().has_parameters()) {
        json parameters;
        if (auto error = StructField(tool.function().parameters(), name + ".function.parameters",
                                     &parameters)) {
          return error;
        }
        function["parameters"] = std::move(parameters);
      }
      if (tool.function().has_strict()) function["strict"] = tool.function().strict();
      tools.push_back({{"type", tool.type().empty() ? "function" : tool.type()},
                       {"function", std::move(function)}});
    }
    (*body)["tools"] = std::move(tools);
  }
  if (r.has_tool_choice()) {
    if (!chat) return Error("tool_choice needs messages (a chat request)", "tool_choice");
    const google::protobuf::Value& choice = r.tool_choice();
    if (choice.kind_case() == google::protobuf::Value::kStringValue) {
      (*body)["tool_choice"] = choice.string_value();
    } else if (choice.kind_case() == google::protobuf::Value::kStructValue) {
      json object;
      if (auto error = StructField(choice.struct_value(), "tool_choice", &object)) return error;
      (*body)["tool_choice"] = std::move(object);
    } else {
      return Error("tool_choice must be a string or an object", "tool_choice");
    }
  }
  if (r.has_parallel_tool_calls()) {
    if (!chat) {
      return Error("parallel_tool_calls needs messages (a chat request)", "parallel_tool_calls");
    }
    (*body)["parallel_tool_calls"] = r.parallel_tool_calls();
  }
  if (r.has_response_format()) {
    const pb::ResponseFormat& format = r.response_format();
    if (format.type().empty()) return Error("response_format.type is required", "response_format");
    json out = {{"type", format.type()}};
    if (format.has_json_schema()) {
      json schema;
      if (auto error = StructField(format.json_schema(), "response_format.json_schema", &schema)) {
        return error;
      }
      out["json_schema"] = std::move(schema);
    }
    (*body)["response_format"] = std::move(out);
  }
  if (r.has_top_logprobs() && r.top_logprobs() > 20) {
    return Error("top_logprobs must be between 0 and 20", "top_logprobs");
  }
  if (r.has_top_logprobs() && !(r.has_logprobs() && r.logprobs())) {
    return Error("top_logprobs needs logprobs: true", "top_logprobs");
  }
  if (r.has_logprobs()) {
    if (chat) {
      (*body)["logprobs"] = r.logprobs();
      if (r.has_top_logprobs()) (*body)["top_logprobs"] = r.top_logprobs();
    } else if (r.logprobs()) {
      // The completions API takes the number of alternatives in `logprobs`.
      (*body)["logprobs"] = r.has_top_logprobs() ? r.top_logprobs() : 0u;
    }
  }
  return std::nullopt;
}

bool MayCarryTypedFields(std::string_view chunk) {
  for (std::string_view key :
       {std::string_view("\"tool_calls\""), std::string_view("\"reasoning"),
        std::string_view("\"logprob\""), std::string_view("\"token_logprobs\"")}) {
    if (chunk.find(key) != std::string_view::npos) return true;
  }
  return false;
}

void FillDeltaTypedFields(std::string_view chunk, pb::Delta* delta) {
  // Under the bounds of every engine document (depth, parsed cost).
  const json body = engines::ParseJson(chunk);
  if (!body.is_object()) return;
  const json* choice = ChoiceZero(body);
  if (choice == nullptr) return;
  if (auto d = choice->find("delta"); d != choice->end() && d->is_object()) {
    delta->set_reasoning_content(Reasoning(*d));
    if (auto calls = d->find("tool_calls"); calls != d->end() && calls->is_array()) {
      for (const json& call : *calls) {
        if (!call.is_object()) continue;
        pb::ToolCallDelta* out = delta->add_tool_calls();
        if (auto i = call.find("index"); i != call.end() && i->is_number_unsigned()) {
          out->set_index(static_cast<uint32_t>(i->get<unsigned long long>()));
        }
        out->set_id(Text(call, "id"));
        out->set_type(Text(call, "type"));
        if (auto f = call.find("function"); f != call.end() && f->is_object()) {
          out->set_name(Text(*f, "name"));
          out->set_arguments(Text(*f, "arguments"));
        }
      }
    }
  }
  ForEachLogprob(*choice, [delta] { return delta->add_logprobs(); });
}

void FillCompleteTypedFields(const json& body, pb::CompleteResponse* response) {
  const json* choice = body.is_object() ? ChoiceZero(body) : nullptr;
  if (choice == nullptr) return;
  if (auto m = choice->find("message"); m != choice->end() && m->is_object()) {
    response->set_reasoning_content(Reasoning(*m));
    if (auto calls = m->find("tool_calls"); calls != m->end() && calls->is_array()) {
      for (const json& call : *calls) {
        if (!call.is_object()) continue;
        pb::ToolCall* out = response->add_tool_calls();
        out->set_id(Text(call, "id"));
        out->set_type(Text(call, "type"));
        if (auto f = call.find("function"); f != call.end() && f->is_object()) {
          out->mutable_function()->set_name(Text(*f, "name"));
          out->mutable_function()->set_arguments(Text(*f, "arguments"));
        }
      }
    }
  }
  ForEachLogprob(*choice, [response] { return response->add_logprobs(); });
}

}  // namespace narwhal::server
