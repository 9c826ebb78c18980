// ClassifyEvent: what each upstream SSE payload is (B11, B12).
#include "engines/stream_event.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace narwhal::engines {
namespace {

StreamEvent Classify(std::string_view data) {
  StreamEvent event;
  ClassifyEvent(data, &event);
  return event;
}

// --- generated output ---------------------------------------------------------

TEST(StreamEventTest, CompletionsTextIsAToken) {
  const StreamEvent e = Classify(
      R"({"id":"cmpl-1","object":"text_completion","created":1754400001,"model":"Qwen/Qwen3-0.6B",)"
      R"("choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null,"stop_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
  EXPECT_EQ(e.text, " Paris");
  EXPECT_EQ(e.finish_reason, "");
  EXPECT_EQ(e.completion_tokens, -1);
  EXPECT_EQ(e.prompt_tokens, -1);
}

TEST(StreamEventTest, ChatContentIsAToken) {
  const StreamEvent e = Classify(
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",)"
      R"("choices":[{"index":0,"delta":{"content":" Paris"},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
  EXPECT_EQ(e.text, " Paris");
}

TEST(StreamEventTest, TextIsUnescaped) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"delta":{"content":"a\n\"q\" \u00e9\\"}}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "a\n\"q\" \xc3\xa9\\");
}

TEST(StreamEventTest, ReasoningIsAToken) {
  for (const char* field : {"reasoning", "reasoning_content"}) {
    const StreamEvent e = Classify(std::string(R"({"choices":[{"index":0,"delta":{")") + field +
                                   R"(":"Let me think"},"finish_reason":null}]})");
    EXPECT_EQ(e.kind, EventKind::kToken) << field;
    EXPECT_EQ(e.tokens, 1) << field;
    EXPECT_EQ(e.text, "") << field << ": only content is extracted as text";
  }
}

TEST(StreamEventTest, RefusalIsAToken) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"delta":{"refusal":"I can't"},"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
}

TEST(StreamEventTest, ToolCallsAreAToken) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
}

TEST(StreamEventTest, EmptyToolCallsAreMetadata) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"delta":{"tool_calls":[]},"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.tokens, 0);
}

TEST(StreamEventTest, TokenIdsCountTokens) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"abc","token_ids":[101,102,103],"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 3);
  EXPECT_EQ(e.text, "abc");
}

TEST(StreamEventTest, TokenIdsWithEmptyTextAreTokens) {
  // Token-ID dialects: a token may decode to no visible text.
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"","token_ids":[7,8],"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 2);
}

TEST(StreamEventTest, EmptyTokenIdsWithTextCountOne) {
  const StreamEvent e = Classify(R"({"choices":[{"index":0,"text":"x","token_ids":[]}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
}

TEST(StreamEventTest, SeveralChoicesCountEachAndTextComesFromChoiceZero) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":"A","finish_reason":null},)"
      R"({"index":1,"text":"B","finish_reason":"length"},{"index":2,"text":""}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 2);
  EXPECT_EQ(e.text, "A");
  EXPECT_EQ(e.finish_reason, "") << "finish_reason is choice 0's only";
}

TEST(StreamEventTest, FinalContentChunkCarriesFinishReason) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"stop","stop_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, ".");
  EXPECT_EQ(e.finish_reason, "stop");
}

TEST(StreamEventTest, UsageNullOnContentChunkIsIgnored) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"hi","finish_reason":null}],"usage":null})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.completion_tokens, -1);
}

TEST(StreamEventTest, ErrorNullIsNotAnError) {
  const StreamEvent e = Classify(R"({"error":null,"choices":[{"index":0,"text":"hi"}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
}

// --- metadata -----------------------------------------------------------------

TEST(StreamEventTest, RoleOnlyDeltaIsMetadata) {
  const StreamEvent e = Classify(
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",)"
      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.tokens, 0);
  EXPECT_EQ(e.text, "");
}

TEST(StreamEventTest, NullContentIsMetadata) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
}

TEST(StreamEventTest, EmptyTextIsMetadata) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.tokens, 0);
}

TEST(StreamEventTest, UsageOnlyChunkIsMetadataWithUsage) {
  const StreamEvent e = Classify(
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],)"
      R"("usage":{"prompt_tokens":14,"total_tokens":16,"completion_tokens":2}})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.tokens, 0);
  EXPECT_EQ(e.completion_tokens, 2);
  EXPECT_EQ(e.prompt_tokens, 14);
}

TEST(StreamEventTest, FinishReasonOnlyIsMetadata) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.finish_reason, "length");
}

TEST(StreamEventTest, EmptyObjectIsMetadata) {
  EXPECT_EQ(Classify("{}").kind, EventKind::kMetadata);
}

// --- terminator -----------------------------------------------------------------

TEST(StreamEventTest, DoneTerminator) {
  EXPECT_EQ(Classify("[DONE]").kind, EventKind::kDone);
  EXPECT_EQ(Classify(" [DONE] ").kind, EventKind::kDone);
  EXPECT_EQ(Classify("[DONE]x").kind, EventKind::kMalformed);
  EXPECT_EQ(Classify("[done]").kind, EventKind::kMalformed);
}

// --- errors ---------------------------------------------------------------------

TEST(StreamEventTest, NestedErrorWithIntegerCodeKeepsIt) {
  const StreamEvent e = Classify(
      R"({"error": {"message": "Service Unavailable", "type": "ServiceUnavailableError", "param": null, "code": 503}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 503);
  EXPECT_EQ(e.error_message, "Service Unavailable");
  EXPECT_EQ(e.tokens, 0);
}

TEST(StreamEventTest, NestedErrorCodeOrderDoesNotMatter) {
  const StreamEvent e = Classify(R"({"error":{"code":429,"message":"busy"}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 429);
  EXPECT_EQ(e.error_message, "busy");
}

TEST(StreamEventTest, ErrorCodeOutsideErrorRangeIs500) {
  for (const char* code : {"200", "399", "600", "0", "-503", "503.0", "\"503\"", "\"internal\"",
                           "null", "true"}) {
    const StreamEvent e =
        Classify(std::string(R"({"error":{"message":"m","type":"t","code":)") + code + "}}");
    EXPECT_EQ(e.kind, EventKind::kError) << code;
    EXPECT_EQ(e.error_status, 500) << code;
  }
}

TEST(StreamEventTest, ErrorCodeBoundsAreKept) {
  EXPECT_EQ(Classify(R"({"error":{"message":"m","code":400}})").error_status, 400);
  EXPECT_EQ(Classify(R"({"error":{"message":"m","code":599}})").error_status, 599);
}

TEST(StreamEventTest, ErrorWithoutCodeIs500) {
  const StreamEvent e = Classify(R"({"error":{"message":"Internal server error"}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 500);
  EXPECT_EQ(e.error_message, "Internal server error");
}

TEST(StreamEventTest, FlatLegacyErrorKeepsItsCode) {
  const StreamEvent e = Classify(
      R"({"object":"error","message":"Stream options can only be defined when `stream=True`.",)"
      R"("type":"BadRequestError","param":null,"code":400})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 400);
  EXPECT_EQ(e.error_message, "Stream options can only be defined when `stream=True`.");
}

TEST(StreamEventTest, FlatLegacyErrorInsideErrorObject) {
  // vLLM's in-stream legacy variant nests the flat shape under "error".
  const StreamEvent e = Classify(
      R"({"error": {"object": "error", "message": "bad", "type": "BadRequestError", "param": null, "code": 400}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 400);
  EXPECT_EQ(e.error_message, "bad");
}

TEST(StreamEventTest, StringErrorIs500) {
  const StreamEvent e = Classify(R"({"error":"Unauthorized"})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 500);
  EXPECT_EQ(e.error_message, "Unauthorized");
}

TEST(StreamEventTest, ErrorObjectWinsOverChoices) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"x"}],"error":{"message":"late","code":502}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 502);
  EXPECT_EQ(e.tokens, 0);
}

// --- malformed ------------------------------------------------------------------

TEST(StreamEventTest, MalformedJson) {
  for (const char* data : {"{\"choices\":[", "not json", "{\"a\":1} trailing", "{'a':1}", "",
                           "   ", "{\"choices\":[{\"text\":\"x\"}]"}) {
    const StreamEvent e = Classify(data);
    EXPECT_EQ(e.kind, EventKind::kMalformed) << data;
    EXPECT_EQ(e.tokens, 0) << data;
  }
}

TEST(StreamEventTest, NonObjectJsonIsMalformed) {
  for (const char* data : {"[1,2]", "\"text\"", "42", "null", "true",
                           "[{\"choices\":[{\"text\":\"x\"}]}]"}) {
    EXPECT_EQ(Classify(data).kind, EventKind::kMalformed) << data;
  }
}

// --- buffer reuse -----------------------------------------------------------------

TEST(StreamEventTest, ReusedEventIsClearedFirst) {
  StreamEvent e;
  ClassifyEvent(R"({"choices":[{"index":0,"text":"first","finish_reason":"stop"}],)"
                R"("usage":{"prompt_tokens":3,"completion_tokens":1}})",
                &e);
  ASSERT_EQ(e.kind, EventKind::kToken);
  ClassifyEvent(R"({"error":{"message":"boom","code":503}})", &e);
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(e.finish_reason, "");
  EXPECT_EQ(e.completion_tokens, -1);
  EXPECT_EQ(e.prompt_tokens, -1);
  EXPECT_EQ(e.tokens, 0);
  ClassifyEvent(R"({"choices":[{"index":0,"text":"second"}]})", &e);
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "second");
  EXPECT_EQ(e.error_status, 0);
  EXPECT_EQ(e.error_message, "");
}

TEST(StreamEventTest, EventKindNames) {
  EXPECT_EQ(EventKindName(EventKind::kToken), "token");
  EXPECT_EQ(EventKindName(EventKind::kMetadata), "metadata");
  EXPECT_EQ(EventKindName(EventKind::kError), "error");
  EXPECT_EQ(EventKindName(EventKind::kDone), "done");
  EXPECT_EQ(EventKindName(EventKind::kMalformed), "malformed");
}

}  // namespace
}  // namespace narwhal::engines
