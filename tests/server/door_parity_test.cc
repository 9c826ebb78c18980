// Both doors on one router give the same request and the same answer: a
// chat with content parts, an earlier tool call and its answer, tools,
// tool_choice, response_format and logprobs reaches the engine as the same
// JSON whether a client sent it over HTTP or as typed gRPC fields; tool
// calls, reasoning text and logprobs the engine streams reach a gRPC client
// as typed Delta and CompleteResponse fields equal to what an HTTP client
// reads; typed fields that cannot be sent are refused with their param.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "server/grpc/grpc_typed_fields.h"
#include "tests/server/both_doors_harness.h"

namespace narwhal::server::http_door_test {
namespace {

const json kSchema = {
    {"type", "object"}, {"properties", {{"q", {{"type", "string"}}}}}, {"required", {"q"}}};

// The chat request as an HTTP client writes it.
json HttpChat(bool stream) {
  return {{"model", "m"},
          {"messages",
           {{{"role", "system"}, {"content", "be brief"}},
            {{"role", "user"},
             {"content",
              {{{"type", "text"}, {"text", "what is in this image?"}},
               {{"type", "image_url"},
                {"image_url", {{"url", "data:image/png;base64,AAAA"}, {"detail", "low"}}}}}}},
            {{"role", "assistant"},
             {"content", nullptr},
             {"tool_calls",
              {{{"id", "call_1"},
                {"type", "function"},
                {"function", {{"name", "lookup"}, {"arguments", "{\"q\":\"narwhal\"}"}}}}}}},
            {{"role", "tool"}, {"content", "a whale"}, {"tool_call_id", "call_1"}}}},
          {"tools",
           {{{"type", "function"},
             {"function",
              {{"name", "lookup"}, {"description", "looks things up"}, {"parameters", kSchema}}}}}},
          {"tool_choice", "auto"},
          {"response_format",
           {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", kSchema}}}}},
          {"logprobs", true},
          {"top_logprobs", 2},
          {"max_tokens", 8},
          {"stream", stream}};
}

void ToStruct(const json& object, google::protobuf::Struct* out);

void ToValue(const json& v, google::protobuf::Value* out) {
  if (v.is_object()) {
    ToStruct(v, out->mutable_struct_value());
  } else if (v.is_array()) {
    for (const json& e : v) ToValue(e, out->mutable_list_value()->add_values());
  } else if (v.is_string()) {
    out->set_string_value(v.get<std::string>());
  } else if (v.is_boolean()) {
    out->set_bool_value(v.get<bool>());
  } else if (v.is_number()) {
    out->set_number_value(v.get<double>());
  } else {
    out->set_null_value(google::protobuf::NULL_VALUE);
  }
}

void ToStruct(const json& object, google::protobuf::Struct* out) {
  for (const auto& [key, value] : object.items()) ToValue(value, &(*out->mutable_fields())[key]);
}

// The same request as typed gRPC fields.
pb::GenerateRequest GrpcChat() {
  pb::GenerateRequest r;
  r.set_model("m");
  auto* messages = r.mutable_messages();
  pb::ChatMessage* system = messages->add_messages();
  system->set_role("system");
  system->set_content("be brief");
  pb::ChatMessage* user = messages->add_messages();
  user->set_role("user");
  user->add_content_parts()->set_text("what is in this image?");
  pb::ImageUrl* image = user->add_content_parts()->mutable_image_url();
  image->set_url("data:image/png;base64,AAAA");
  image->set_detail("low");
  pb::ChatMessage* assistant = messages->add_messages();
  assistant->set_role("assistant");
  pb::ToolCall* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_type("function");
  call->mutable_function()->set_name("lookup");
  call->mutable_function()->set_arguments("{\"q\":\"narwhal\"}");
  pb::ChatMessage* tool = messages->add_messages();
  tool->set_role("tool");
  tool->set_content("a whale");
  tool->set_tool_call_id("call_1");
  pb::Tool* lookup = r.add_tools();
  lookup->set_type("function");
  lookup->mutable_function()->set_name("lookup");
  lookup->mutable_function()->set_description("looks things up");
  ToStruct(kSchema, lookup->mutable_function()->mutable_parameters());
  r.mutable_tool_choice()->set_string_value("auto");
  r.mutable_response_format()->set_type("json_schema");
  ToStruct({{"name", "answer"}, {"schema", kSchema}},
           r.mutable_response_format()->mutable_json_schema());
  r.set_logprobs(true);
  r.set_top_logprobs(2);
  r.set_max_tokens(8);
  return r;
}

json ChatChunkWith(const json& delta, const json& logprobs = nullptr,
                   const std::string& finish = "") {
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion.chunk"},
          {"created", 1700000000},
          {"model", "m"},
          {"choices",
           {{{"index", 0},
             {"delta", delta},
             {"logprobs", logprobs},
             {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}}}}};
}

// What the engine streams: reasoning, a token with logprobs, a tool call in
// two pieces, the finish.
std::vector<std::string> ToolCallStream() {
  const json logprobs = {
      {"content",
       {{{"token", "Hi"},
         {"logprob", -0.5},
         {"bytes", {72, 105}},
         {"top_logprobs",
          {{{"token", "Hi"}, {"logprob", -0.5}, {"bytes", {72, 105}}},
           {{"token", "Hey"}, {"logprob", -1.5}, {"bytes", {72, 101, 121}}}}}}}}};
  return {
      ChatChunkWith({{"role", "assistant"}, {"content", ""}}).dump(),
      ChatChunkWith({{"reasoning_content", "thinking"}}).dump(),
      ChatChunkWith({{"content", "Hi"}}, logprobs).dump(),
      ChatChunkWith({{"tool_calls",
                      {{{"index", 0},
                        {"id", "call_9"},
                        {"type", "function"},
                        {"function", {{"name", "lookup"}, {"arguments", ""}}}}}}})
          .dump(),
      ChatChunkWith({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"q\":1}"}}}}}}})
          .dump(),
      ChatChunkWith(json::object(), nullptr, "tool_calls").dump(),
  };
}

// What a client learned from an answer, in one comparable form.
struct Answer {
  std::string text;
  std::string reasoning;
  std::vector<std::string> call_ids, call_names, call_arguments;
  std::vector<std::string> tokens;            // logprob tokens
  std::vector<double> logprobs;               // their logprobs
  std::vector<std::string> bytes;             // their bytes
  std::vector<std::vector<std::string>> top;  // alternatives per token
  std::string finish_reason;

  bool operator==(const Answer&) const = default;
};

void AddCallPiece(Answer* a, size_t index, const std::string& id, const std::string& name,
                  const std::string& arguments) {
  if (a->call_ids.size() <= index) {
    a->call_ids.resize(index + 1);
    a->call_names.resize(index + 1);
    a->call_arguments.resize(index + 1);
  }
  a->call_ids[index] += id;
  a->call_names[index] += name;
  a->call_arguments[index] += arguments;
}

void AddLogprobs(Answer* a, const json& choice) {
  if (!choice.contains("logprobs") || !choice["logprobs"].is_object()) return;
  for (const json& t : choice["logprobs"]["content"]) {
    a->tokens.push_back(t["token"]);
    a->logprobs.push_back(t["logprob"]);
    std::string b;
    for (const json& c : t["bytes"]) b.push_back(static_cast<char>(c.get<int>()));
    a->bytes.push_back(b);
    std::vector<std::string> alts;
    for (const json& alt : t["top_logprobs"]) alts.push_back(alt["token"]);
    a->top.push_back(alts);
  }
}

Answer FromHttpStream(const std::vector<std::string>& events) {
  Answer a;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    const json& d = c["delta"];
    a.text += d.value("content", "");
    a.reasoning += d.value("reasoning_content", "");
    if (d.contains("tool_calls")) {
      for (const json& call : d["tool_calls"]) {
        const json f = call.value("function", json::object());
        AddCallPiece(&a, call["index"], call.value("id", ""), f.value("name", ""),
                     f.value("arguments", ""));
      }
    }
    AddLogprobs(&a, c);
    if (c["finish_reason"].is_string()) a.finish_reason = c["finish_reason"];
  }
  return a;
}

Answer FromHttpBody(const json& body) {
  Answer a;
  const json& c = body["choices"][0];
  const json& m = c["message"];
  if (m["content"].is_string()) a.text = m["content"];
  a.reasoning = m.value("reasoning_content", "");
  if (m.contains("tool_calls")) {
    for (size_t i = 0; i < m["tool_calls"].size(); ++i) {
      const json& call = m["tool_calls"][i];
      AddCallPiece(&a, i, call["id"], call["function"]["name"], call["function"]["arguments"]);
    }
  }
  AddLogprobs(&a, c);
  a.finish_reason = c["finish_reason"];
  return a;
}

template <typename Message>
void AddGrpcLogprobs(Answer* a, const Message& m) {
  for (const pb::TokenLogprob& t : m.logprobs()) {
    a->tokens.push_back(t.token());
    a->logprobs.push_back(t.logprob());
    a->bytes.push_back(t.bytes());
    std::vector<std::string> alts;
    for (const pb::TopLogprob& alt : t.top_logprobs()) alts.push_back(alt.token());
    a->top.push_back(alts);
  }
}

Answer FromGrpcStream(const std::vector<pb::GenerateResponse>& messages) {
  Answer a;
  for (const pb::GenerateResponse& r : messages) {
    if (r.has_final()) {
      a.finish_reason = r.final().finish_reason();
      continue;
    }
    const pb::Delta& d = r.delta();
    a.text += d.text();
    a.reasoning += d.reasoning_content();
    for (const pb::ToolCallDelta& call : d.tool_calls()) {
      AddCallPiece(&a, call.index(), call.id(), call.name(), call.arguments());
    }
    AddGrpcLogprobs(&a, d);
  }
  return a;
}

Answer FromGrpcComplete(const pb::CompleteResponse& r) {
  Answer a;
  a.text = r.text();
  a.reasoning = r.reasoning_content();
  for (int i = 0; i < r.tool_calls_size(); ++i) {
    AddCallPiece(&a, i, r.tool_calls(i).id(), r.tool_calls(i).function().name(),
                 r.tool_calls(i).function().arguments());
  }
  AddGrpcLogprobs(&a, r);
  a.finish_reason = r.finish_reason();
  return a;
}

TEST_F(BothDoorsTest, TypedChatFieldsReachTheEngineAsTheHttpClientsJson) {
  StartBoth();
  auto http = Exchange(Post("/v1/chat/completions", HttpChat(false).dump()));
  ASSERT_TRUE(http);
  ASSERT_EQ(http->status, 200) << http->body;
  pb::CompleteResponse response;
  const grpc::Status status = Complete(GrpcChat(), "", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(fake_.prefill_calls().size(), 2u);
  ASSERT_EQ(fake_.decode_calls().size(), 2u);
  EXPECT_EQ(fake_.prefill_calls()[1].body, fake_.prefill_calls()[0].body);
  EXPECT_EQ(fake_.decode_calls()[1].body, fake_.decode_calls()[0].body);
  // And it is what the client wrote, not only the same on both sides.
  const json sent = fake_.decode_calls()[1].body;  // a copy: the calls are returned by value
  EXPECT_EQ(sent["messages"], HttpChat(false)["messages"]);
  EXPECT_EQ(sent["tools"], HttpChat(false)["tools"]);
  EXPECT_EQ(sent["response_format"], HttpChat(false)["response_format"]);
  EXPECT_EQ(sent["tool_choice"], "auto");
  EXPECT_EQ(sent["logprobs"], true);
  EXPECT_EQ(sent["top_logprobs"], 2);
}

TEST_F(BothDoorsTest, StreamedToolCallsReasoningAndLogprobsReachBothDoorsAlike) {
  StartBoth();
  fake_.QueueDecode(nt::DecodeStep::Stream(ToolCallStream()));
  auto http = Exchange(Post("/v1/chat/completions", HttpChat(true).dump()));
  ASSERT_TRUE(http);
  ASSERT_EQ(http->status, 200) << http->body;
  const Answer over_http = FromHttpStream(Events(http->body));

  fake_.QueueDecode(nt::DecodeStep::Stream(ToolCallStream()));
  std::vector<pb::GenerateResponse> messages;
  const grpc::Status status = Generate(GrpcChat(), &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const Answer over_grpc = FromGrpcStream(messages);

  EXPECT_EQ(over_grpc, over_http);
  // What both carry.
  EXPECT_EQ(over_grpc.reasoning, "thinking");
  EXPECT_EQ(over_grpc.text, "Hi");
  EXPECT_EQ(over_grpc.call_ids, std::vector<std::string>{"call_9"});
  EXPECT_EQ(over_grpc.call_names, std::vector<std::string>{"lookup"});
  EXPECT_EQ(over_grpc.call_arguments, std::vector<std::string>{"{\"q\":1}"});
  EXPECT_EQ(over_grpc.tokens, std::vector<std::string>{"Hi"});
  EXPECT_EQ(over_grpc.bytes, std::vector<std::string>{"Hi"});
  EXPECT_EQ(over_grpc.top, (std::vector<std::vector<std::string>>{{"Hi", "Hey"}}));
  EXPECT_EQ(over_grpc.finish_reason, "tool_calls");
}

TEST_F(BothDoorsTest, AssembledToolCallsReasoningAndLogprobsReachBothDoorsAlike) {
  StartBoth();
  fake_.QueueDecode(nt::DecodeStep::Stream(ToolCallStream()));
  auto http = Exchange(Post("/v1/chat/completions", HttpChat(false).dump()));
  ASSERT_TRUE(http);
  ASSERT_EQ(http->status, 200) << http->body;
  const Answer over_http = FromHttpBody(json::parse(http->body));

  fake_.QueueDecode(nt::DecodeStep::Stream(ToolCallStream()));
  pb::CompleteResponse response;
  const grpc::Status status = Complete(GrpcChat(), "", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const Answer over_grpc = FromGrpcComplete(response);

  EXPECT_EQ(over_grpc, over_http);
  EXPECT_EQ(over_grpc.call_arguments, std::vector<std::string>{"{\"q\":1}"});
  EXPECT_EQ(over_grpc.reasoning, "thinking");
  EXPECT_EQ(over_grpc.tokens, std::vector<std::string>{"Hi"});
}

TEST_F(BothDoorsTest, CompletionLogprobsBecomeTypedToo) {
  StartBoth();
  const json chunk = {{"id", "cmpl-1"},
                      {"object", "text_completion"},
                      {"created", 1700000000},
                      {"model", "m"},
                      {"choices",
                       {{{"index", 0},
                         {"text", " a"},
                         {"logprobs",
                          {{"tokens", {" a"}},
                           {"token_logprobs", {-0.25}},
                           {"top_logprobs", {{{" a", -0.25}, {" b", -2.0}}}},
                           {"text_offset", {0}}}},
                         {"finish_reason", "length"}}}}};
  fake_.QueueDecode(nt::DecodeStep::Stream({chunk.dump()}));
  pb::GenerateRequest r;
  r.set_model("m");
  r.set_prompt("hi");
  r.set_logprobs(true);
  r.set_top_logprobs(2);
  std::vector<pb::GenerateResponse> messages;
  ASSERT_TRUE(Generate(r, &messages).ok());
  // The completions API takes the number of alternatives in `logprobs`.
  EXPECT_EQ(fake_.decode_calls()[0].body["logprobs"], 2);
  ASSERT_FALSE(messages.empty());
  const pb::Delta& d = messages[0].delta();
  ASSERT_EQ(d.logprobs_size(), 1);
  EXPECT_EQ(d.logprobs(0).token(), " a");
  EXPECT_DOUBLE_EQ(d.logprobs(0).logprob(), -0.25);
  EXPECT_EQ(d.logprobs(0).top_logprobs_size(), 2);
}

TEST_F(BothDoorsTest, TypedFieldsThatCannotBeSentAreRefusedWithTheirParam) {
  StartBoth();
  struct Case {
    std::string name;
    pb::GenerateRequest request;
    std::string message;
  };
  std::vector<Case> cases;
  {
    pb::GenerateRequest r;
    r.set_model("m");
    r.set_prompt("hi");
    r.add_tools()->mutable_function()->set_name("lookup");
    cases.push_back({"tools on a completion", r, "tools need messages (a chat request)"});
  }
  {
    pb::GenerateRequest r = GrpcChat();
    r.mutable_messages()->mutable_messages(1)->set_content("and text");
    cases.push_back({"content and parts", r, "messages[1] sets both content and content_parts"});
  }
  {
    pb::GenerateRequest r = GrpcChat();
    r.clear_logprobs();
    cases.push_back({"top_logprobs alone", r, "top_logprobs needs logprobs: true"});
  }
  {
    pb::GenerateRequest r = GrpcChat();
    r.mutable_messages()->mutable_messages(1)->add_content_parts()->mutable_other();
    cases.push_back(
        {"part without type", r, "messages[1].content_parts[2] needs a string \"type\""});
  }
  {
    pb::GenerateRequest r = GrpcChat();
    r.mutable_tool_choice()->set_number_value(3);
    cases.push_back({"numeric tool_choice", r, "tool_choice must be a string or an object"});
  }
  {
    pb::GenerateRequest r = GrpcChat();
    (*r.mutable_tools(0)->mutable_function()->mutable_parameters()->mutable_fields())["x"]
        .set_number_value(std::numeric_limits<double>::infinity());
    cases.push_back(
        {"infinite schema number", r, "tools[0].function.parameters.x must be a finite number"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status s = Complete(c.request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message(), c.message);
    EXPECT_EQ(Info(s).http_status(), 400);
  }
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST(GrpcTypedFieldsTest, HostileChunksGiveNoTypedFieldsAndNeverCrash) {
  // Nested past the bound, not JSON, invalid UTF-8, wrong types: the text
  // path has classified the chunk already; the typed fields stay empty.
  std::string deep = "{\"choices\":[{\"delta\":{\"tool_calls\":";
  for (int i = 0; i < 10000; ++i) deep += "[";
  const std::vector<std::string> chunks = {
      deep,
      "{\"choices\":[{\"delta\":{\"tool_calls\":\"nope\"}}]}",
      "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1,\"function\":7}]}}]}",
      "{\"choices\":[{\"delta\":{\"reasoning_content\":\"\xff\"}}]}",
      "{\"choices\":[{\"logprobs\":{\"content\":[{\"logprob\":\"x\",\"bytes\":[999,-1]}]}}]}",
      "not json \"tool_calls\"",
  };
  for (const std::string& chunk : chunks) {
    EXPECT_TRUE(MayCarryTypedFields(chunk)) << chunk.substr(0, 60);
    pb::Delta delta;
    FillDeltaTypedFields(chunk, &delta);
    EXPECT_TRUE(delta.reasoning_content().empty()) << chunk.substr(0, 60);
    for (const pb::ToolCallDelta& call : delta.tool_calls()) {
      EXPECT_TRUE(call.name().empty() && call.arguments().empty());
    }
    for (const pb::TokenLogprob& t : delta.logprobs()) EXPECT_TRUE(t.bytes().empty());
  }
}

}  // namespace
}  // namespace narwhal::server::http_door_test
