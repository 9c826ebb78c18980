// ClassifyEvent / StreamClassifier: what each upstream SSE payload is (B11, B12).
#include "engines/stream_event.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/http/stream_classifier.h"

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

// vLLM's return_token_ids fields (B29): choice 0's generated ids and the
// prompt's, wherever the endpoint puts them.
TEST(StreamEventTest, TokenIdsAreReadFromBothEndpointsShapes) {
  StreamEvent e = Classify(
      R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,)"
      R"("text":" a b","token_ids":[7,4294967295],"prompt_token_ids":[1,2,3]}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 2);
  EXPECT_TRUE(e.has_token_ids);
  EXPECT_EQ(e.token_ids, std::vector<uint32_t>({7, 4294967295u}));
  EXPECT_TRUE(e.has_prompt_token_ids);
  EXPECT_EQ(e.prompt_token_ids, std::vector<uint32_t>({1, 2, 3}));
  EXPECT_TRUE(e.token_fields);

  e = Classify(R"({"id":"c","object":"chat.completion.chunk","prompt_token_ids":[9,8],)"
               R"("choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.prompt_token_ids, std::vector<uint32_t>({9, 8}));
  EXPECT_FALSE(e.has_token_ids);

  // Ids of other choices are counted, never taken as choice 0's.
  e = Classify(R"({"choices":[{"index":0,"text":"x","token_ids":[5]},)"
               R"({"index":1,"text":"y","token_ids":[6,6]}]})");
  EXPECT_EQ(e.tokens, 3);
  EXPECT_EQ(e.token_ids, std::vector<uint32_t>({5}));
}

TEST(StreamEventTest, TokenIdsThatAreNotIdsAreNotTaken) {
  for (const char* ids : {"[1,-1]", "[1,4294967296]", "[1.5]", "[\"7\"]", "[[1]]", "{}", "7"}) {
    const std::string data =
        std::string(R"({"choices":[{"index":0,"text":"x","token_ids":)") + ids + "}]}";
    const StreamEvent e = Classify(data);
    EXPECT_NE(e.kind, EventKind::kMalformed) << data;
    EXPECT_FALSE(e.has_token_ids) << data;
    EXPECT_TRUE(e.token_ids.empty()) << data;
    EXPECT_TRUE(e.token_fields) << data;
  }
  // Reused: the previous event's ids never leak into the next.
  StreamClassifier c;
  StreamEvent e;
  c.Classify(R"({"choices":[{"index":0,"text":"x","token_ids":[5]}]})", &e);
  c.Classify(R"({"choices":[{"index":0,"text":"y"}]})", &e);
  EXPECT_FALSE(e.has_token_ids);
  EXPECT_TRUE(e.token_ids.empty());
  EXPECT_FALSE(e.token_fields);
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
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":"abc","token_ids":[101,102,103],"finish_reason":null}]})");
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
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"text":"A","finish_reason":null},)"
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
  EXPECT_EQ(e.cached_tokens, -1);  // no prompt_tokens_details
}

TEST(StreamEventTest, UsageCarriesPromptTokensDetailsCachedTokens) {
  StreamEvent e = Classify(
      R"({"choices":[],"usage":{"prompt_tokens":14,"total_tokens":16,"completion_tokens":2,)"
      R"("prompt_tokens_details":{"cached_tokens":13}}})");
  EXPECT_EQ(e.prompt_tokens, 14);
  EXPECT_EQ(e.cached_tokens, 13);
  e = Classify(R"({"choices":[],"usage":{"prompt_tokens":14,"prompt_tokens_details":null}})");
  EXPECT_EQ(e.cached_tokens, -1);
  e = Classify(R"({"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":"3"}}})");
  EXPECT_EQ(e.cached_tokens, -1);
  EXPECT_EQ(e.kind, EventKind::kMetadata);
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
  for (const char* code :
       {"200", "399", "600", "0", "-503", "503.0", "\"503\"", "\"internal\"", "null", "true"}) {
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
  for (const char* data : {"{\"choices\":[", "not json", "{\"a\":1} trailing", "{'a':1}", "", "   ",
                           "{\"choices\":[{\"text\":\"x\"}]"}) {
    const StreamEvent e = Classify(data);
    EXPECT_EQ(e.kind, EventKind::kMalformed) << data;
    EXPECT_EQ(e.tokens, 0) << data;
  }
}

TEST(StreamEventTest, NonObjectJsonIsMalformed) {
  for (const char* data :
       {"[1,2]", "\"text\"", "42", "null", "true", "[{\"choices\":[{\"text\":\"x\"}]}]"}) {
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

// --- strings and keys -------------------------------------------------------------

TEST(StreamEventTest, EveryEscapeIsUnescaped) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":"\t\/\b\f\r\u0041\u00e9\u20ac\ud83d\ude00 \"\\"}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "\t/\b\f\rA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \"\\");
}

TEST(StreamEventTest, RawUtf8TextIsKept) {
  const StreamEvent e =
      Classify("{\"choices\":[{\"index\":0,\"text\":\"caf\xc3\xa9 \xe6\x97\xa5\"}]}");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "caf\xc3\xa9 \xe6\x97\xa5");
}

TEST(StreamEventTest, EscapedNulInTextIsKept) {
  const StreamEvent e = Classify(R"({"choices":[{"index":0,"text":"a\u0000b"}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, std::string("a\0b", 3));
}

TEST(StreamEventTest, EscapedKeysAreMatchedUnescaped) {
  const StreamEvent e = Classify(
      R"({"ch\u006fices":[{"index":0,"te\u0078t":"x","finish_\u0072eason":"st\u006fp"}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "x");
  EXPECT_EQ(e.finish_reason, "stop");
}

TEST(StreamEventTest, EscapedFinishReasonAndErrorMessage) {
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool\u005fcalls"}]})")
                .finish_reason,
            "tool_calls");
  const StreamEvent e = Classify(R"({"error":{"message":"bad \"x\"\nline","code":400}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_message, "bad \"x\"\nline");
}

TEST(StreamEventTest, TextAndDeltaContentOfChoiceZeroAreBothKept) {
  const StreamEvent e = Classify(R"({"choices":[{"index":0,"text":"a","delta":{"content":"b"}}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
  EXPECT_EQ(e.text, "ab");
}

TEST(StreamEventTest, MessageContentIsTextToo) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "hi");
}

// --- member order and nesting -------------------------------------------------------

TEST(StreamEventTest, MemberOrderDoesNotMatter) {
  const StreamEvent e = Classify(
      R"({"usage":{"completion_tokens":5,"prompt_tokens":7},"model":"m",)"
      R"("choices":[{"finish_reason":"stop","delta":{"content":"."},"index":0}],"id":"x"})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, ".");
  EXPECT_EQ(e.finish_reason, "stop");
  EXPECT_EQ(e.completion_tokens, 5);
  EXPECT_EQ(e.prompt_tokens, 7);
}

TEST(StreamEventTest, NestedMembersElsewhereAreSkipped) {
  // "text", "content", "token_ids" and "usage" only count where they belong.
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"",)"
      R"("function":{"content":"no","text":"no"}},)"
      R"("logprobs":{"content":[{"token":"no","text":"no","token_ids":[1,2],)"
      R"("top_logprobs":[{"token":"no","logprob":-0.25,"bytes":[110,111]}]}]},)"
      R"("extra":{"text":"no","delta":{"content":"no"},"usage":{"completion_tokens":9}}}],)"
      R"("meta":{"choices":[{"text":"no"}],"usage":{"prompt_tokens":9},"error":"no"}})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.tokens, 0);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(e.completion_tokens, -1);
  EXPECT_EQ(e.prompt_tokens, -1);
}

TEST(StreamEventTest, ChoiceZeroIsTheFirstElementNotIndexZero) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":1,"text":"B","finish_reason":"length"},{"index":0,"text":"A"}]})");
  EXPECT_EQ(e.tokens, 2);
  EXPECT_EQ(e.text, "B");
  EXPECT_EQ(e.finish_reason, "length");
  // A non-object element still takes position 0.
  const StreamEvent f = Classify(R"({"choices":[null,{"index":0,"text":"A"}]})");
  EXPECT_EQ(f.kind, EventKind::kToken);
  EXPECT_EQ(f.tokens, 1);
  EXPECT_EQ(f.text, "");
}

TEST(StreamEventTest, TokenIdsCountEveryElement) {
  const StreamEvent e =
      Classify(R"({"choices":[{"index":0,"token_ids":[1,"x",null,[2,3],{"a":4}]}]})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 5);
  // Token ids of every choice add up; a choice without them counts one.
  const StreamEvent f =
      Classify(R"({"choices":[{"index":0,"text":"a","token_ids":[1,2]},{"index":1,"text":"b"}]})");
  EXPECT_EQ(f.tokens, 3);
}

TEST(StreamEventTest, NonArrayTokenIdsAndToolCallsCountNothing) {
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"token_ids":null}]})").kind, EventKind::kMetadata);
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"token_ids":{"a":1}}]})").kind,
            EventKind::kMetadata);
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"delta":{"tool_calls":null}}]})").kind,
            EventKind::kMetadata);
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"delta":{"tool_calls":{"id":"x"}}}]})").kind,
            EventKind::kMetadata);
}

TEST(StreamEventTest, NonStringFieldsAreIgnored) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":7,"finish_reason":["stop"],"delta":{"content":{"a":"b"}}}]})");
  EXPECT_EQ(e.kind, EventKind::kMetadata);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(e.finish_reason, "");
  EXPECT_EQ(Classify(R"({"choices":{"text":"x"}})").kind, EventKind::kMetadata);
}

TEST(StreamEventTest, DuplicateMembersAreReadInOrder) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":"a","text":"b","finish_reason":"stop","finish_reason":"length",)"
      R"("finish_reason":null}],"usage":{"completion_tokens":1,"completion_tokens":2,)"
      R"("completion_tokens":"3"}})");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 1);
  EXPECT_EQ(e.text, "ab");
  EXPECT_EQ(e.finish_reason, "length");
  EXPECT_EQ(e.completion_tokens, 2);
  // A string `code` anywhere in the error object makes it 500.
  EXPECT_EQ(Classify(R"({"error":{"code":"x","code":503}})").error_status, 500);
  EXPECT_EQ(Classify(R"({"error":{"code":503,"code":"x"}})").error_status, 500);
  EXPECT_EQ(Classify(R"({"error":{"code":503,"code":null}})").error_status, 503);
}

TEST(StreamEventTest, WhitespaceAroundTokens) {
  const StreamEvent e = Classify(
      " \t{ \"choices\" :\n[ { \"index\" : 0 ,\r\n \"text\" : \"x\" , \"token_ids\" : [ 1 , 2 ] } "
      "] "
      ", \"usage\" : { \"completion_tokens\" : 3 } }\n ");
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.tokens, 2);
  EXPECT_EQ(e.text, "x");
  EXPECT_EQ(e.completion_tokens, 3);
  // Only spaces and tabs may come before the object.
  EXPECT_EQ(Classify("\n{}").kind, EventKind::kMalformed);
  EXPECT_EQ(Classify("\t[DONE]\t").kind, EventKind::kDone);
  EXPECT_EQ(Classify("[DONE]\n").kind, EventKind::kMalformed);
}

// --- numbers --------------------------------------------------------------------

TEST(StreamEventTest, UsageNumbersBeyondInt64) {
  auto usage = [](const std::string& n) {
    return Classify(R"({"choices":[],"usage":{"completion_tokens":)" + n + "}}").completion_tokens;
  };
  EXPECT_EQ(usage("9223372036854775807"), 9223372036854775807LL);
  EXPECT_EQ(usage("9223372036854775808"), 9223372036854775807LL) << "uint64 saturates";
  EXPECT_EQ(usage("18446744073709551615"), 9223372036854775807LL);
  EXPECT_EQ(usage("18446744073709551616"), -1) << "beyond uint64: a float, ignored";
  EXPECT_EQ(usage("123456789012345678901234567890"), -1);
  EXPECT_EQ(usage("-9223372036854775808"), -9223372036854775807LL - 1);
  EXPECT_EQ(usage("-9223372036854775809"), -1);
  EXPECT_EQ(usage("-3"), -3);
  EXPECT_EQ(usage("-0"), 0);
  EXPECT_EQ(usage("123456789012345678"), 123456789012345678LL);
  EXPECT_EQ(usage("1234567890123456789"), 1234567890123456789LL);
  EXPECT_EQ(usage("2.0"), -1);
  EXPECT_EQ(usage("2e0"), -1);
  EXPECT_EQ(usage("1e-400"), -1) << "an underflow is a valid float";
  EXPECT_EQ(Classify(R"({"choices":[],"usage":{"completion_tokens":1e400}})").kind,
            EventKind::kMalformed)
      << "an overflow is not a number";
}

TEST(StreamEventTest, HugeErrorCodesAre500) {
  for (const char* code : {"100001", "9223372036854775807", "9223372036854775808",
                           "18446744073709551616", "-9223372036854775809", "4e2", "1e-999"}) {
    const StreamEvent e = Classify(std::string(R"({"error":{"message":"m","code":)") + code + "}}");
    EXPECT_EQ(e.kind, EventKind::kError) << code;
    EXPECT_EQ(e.error_status, 500) << code;
  }
}

TEST(StreamEventTest, LegacyFlatErrorCodeRules) {
  EXPECT_EQ(Classify(R"({"object":"error","message":"m","code":"400"})").error_status, 500);
  EXPECT_EQ(Classify(R"({"code":429,"message":"m","object":"error"})").error_status, 429);
  // A nested error object's code wins over the top-level one.
  EXPECT_EQ(Classify(R"({"code":429,"object":"error","error":{"message":"m"}})").error_status, 500);
  // "object" other than "error" is not an error.
  EXPECT_EQ(Classify(R"({"object":"text_completion","message":"m","code":400})").kind,
            EventKind::kMetadata);
}

TEST(StreamEventTest, ErrorShapesThatAreNotErrors) {
  for (const char* error : {"null", "[]", "[{\"message\":\"m\"}]", "5", "false"}) {
    const StreamEvent e =
        Classify(std::string(R"({"error":)") + error + R"(,"choices":[{"index":0,"text":"hi"}]})");
    EXPECT_EQ(e.kind, EventKind::kToken) << error;
    EXPECT_EQ(e.error_status, 0) << error;
  }
  const StreamEvent e = Classify(R"({"error":{}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 500);
  EXPECT_EQ(e.error_message, "");
}

TEST(StreamEventTest, ErrorMessageFallsBackToTopLevelMessage) {
  const StreamEvent e = Classify(R"({"message":"top","error":{"code":503}})");
  EXPECT_EQ(e.kind, EventKind::kError);
  EXPECT_EQ(e.error_status, 503);
  EXPECT_EQ(e.error_message, "top");
}

// --- malformed input ------------------------------------------------------------

TEST(StreamEventTest, InvalidJsonAnywhereIsMalformed) {
  // Each breaks the document in a part the classifier does not copy out.
  for (const char* data : {
           R"({"id":01,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":1.,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":.5,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":+1,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":-,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":1e,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":0x1,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":NaN,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":1e400,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":nul,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":tru,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":truex,"choices":[{"index":0,"text":"x"}]})",
           R"({"id":"\x","choices":[{"index":0,"text":"x"}]})",
           R"({"id":"\u12G4","choices":[{"index":0,"text":"x"}]})",
           R"({"id":[1,2},"choices":[{"index":0,"text":"x"}]})",
           R"({"id":{"a":1],"choices":[{"index":0,"text":"x"}]})",
           R"({"id":[1 2],"choices":[{"index":0,"text":"x"}]})",
           R"({"id":["a":1],"choices":[{"index":0,"text":"x"}]})",
           R"({"id":[1,],"choices":[{"index":0,"text":"x"}]})",
           R"({"id":{"a":1,},"choices":[{"index":0,"text":"x"}]})",
           R"({"id":{"a"},"choices":[{"index":0,"text":"x"}]})",
           R"({"id":{1:2},"choices":[{"index":0,"text":"x"}]})",
           R"({"id" "x","choices":[{"index":0,"text":"x"}]})",
           R"({"id":"x" "choices":[{"index":0,"text":"x"}]})",
           R"({"choices":[{"index":0,"text":"x"}],})",
           R"({"choices":[{"index":0,"text":"x"}]}})",
           R"({"choices":[{"index":0,"text":"x"}]}{})",
           R"({"choices":[{"index":0,"text":"x"}]}[DONE])",
           R"({"choices":["index":0,"text":"x"]})",
           R"({"choices":[{"index":0,"text":"x"]}})",
           R"({"choices":[{"index":0,"text":"x"}})",
       }) {
    const StreamEvent e = Classify(data);
    EXPECT_EQ(e.kind, EventKind::kMalformed) << data;
    EXPECT_EQ(e.tokens, 0) << data;
  }
}

// Text that is not valid Unicode is what an engine meant as text (a
// detokenizer cut inside a character, Python's json writing an unpaired
// surrogate): the event is classified as repaired with U+FFFD, and the
// repaired payload is what every door relays (hardening: gRPC Generate
// dropped such tokens while reporting success).
TEST(StreamEventTest, InvalidUnicodeIsRepairedWithReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    std::string data;
    std::string text;
  };
  for (const Case& c : std::vector<Case>{
           {"{\"choices\":[{\"index\":0,\"text\":\"a\xff\"}]}", "a" + fffd},
           {"{\"choices\":[{\"index\":0,\"text\":\"\xc3\"}]}", fffd},             // truncated
           {"{\"choices\":[{\"index\":0,\"text\":\"\xc0\xaf\"}]}", fffd + fffd},  // overlong
           {"{\"choices\":[{\"index\":0,\"text\":\"\xed\xa0\x80\"}]}",
            fffd + fffd + fffd},  // surrogate
           {"{\"choices\":[{\"index\":0,\"text\":\"\xf4\x90\x80\x80\"}]}",
            fffd + fffd + fffd + fffd},  // past U+10FFFF
           {R"({"choices":[{"index":0,"text":"x\udcff"}]})", "x" + fffd},
           {R"({"choices":[{"index":0,"text":"\ud800y"}]})", fffd + "y"},
           {R"({"choices":[{"index":0,"delta":{"content":"\udc00\ud83d\ude00"}}]})",
            fffd + "\xF0\x9F\x98\x80"},  // a lone low surrogate, then a pair
           {"{\"id\":\"\xfe\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}", "x"},
       }) {
    StreamClassifier classifier;
    StreamEvent e;
    const std::string_view relayed = classifier.Classify(c.data, &e);
    EXPECT_EQ(e.kind, EventKind::kToken) << c.data;
    EXPECT_EQ(e.tokens, 1) << c.data;
    EXPECT_EQ(e.text, c.text) << c.data;
    // What is relayed is valid JSON carrying the same text.
    EXPECT_NE(relayed, c.data);
    const nlohmann::json parsed = nlohmann::json::parse(relayed, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << relayed;
    // And the thread's classifier agrees.
    StreamEvent thread_event;
    EXPECT_EQ(ClassifyEvent(c.data, &thread_event), relayed);
    EXPECT_EQ(thread_event.text, c.text);
  }
  // Valid text is relayed as it came, not copied.
  StreamClassifier classifier;
  StreamEvent e;
  const std::string valid = R"({"choices":[{"index":0,"text":"\ud83d\ude00 caf\u00e9"}]})";
  EXPECT_EQ(classifier.Classify(valid, &e).data(), valid.data());
  // An escaped backslash before "ud800" is text, not a surrogate escape.
  const std::string backslash = R"({"choices":[{"index":0,"text":"\\ud800"}]})";
  EXPECT_EQ(classifier.Classify(backslash, &e).data(), backslash.data());
  EXPECT_EQ(e.text, "\\ud800");
  // A key that is not valid Unicode is repaired too, and no longer a known key.
  EXPECT_EQ(classifier.Classify("{\"choices\":[{\"index\":0,\"te\xffxt\":\"x\"}]}", &e).size(),
            std::string("{\"choices\":[{\"index\":0,\"te\xEF\xBF\xBDxt\":\"x\"}]}").size());
  EXPECT_EQ(e.kind, EventKind::kMetadata);
}

TEST(StreamEventTest, ControlCharactersInStringsAreMalformed) {
  EXPECT_EQ(Classify("{\"choices\":[{\"index\":0,\"text\":\"a\nb\"}]}").kind,
            EventKind::kMalformed);
  EXPECT_EQ(Classify("{\"choices\":[{\"index\":0,\"text\":\"a\x01\"}]}").kind,
            EventKind::kMalformed);
  EXPECT_EQ(Classify("{\"choices\":[{\"index\":0,\"text\":\"a\x7f\"}]}").kind, EventKind::kToken)
      << "DEL needs no escape";
}

TEST(StreamEventTest, NulBytesAreMalformed) {
  EXPECT_EQ(Classify(std::string_view("{}\0", 3)).kind, EventKind::kMalformed);
  EXPECT_EQ(Classify(std::string_view("{\"a\":\0}", 7)).kind, EventKind::kMalformed);
  EXPECT_EQ(Classify(std::string_view("{\"a\":\"\0\"}", 8)).kind, EventKind::kMalformed);
}

TEST(StreamEventTest, MalformedEventCarriesNoPartialFields) {
  const StreamEvent e = Classify(
      R"({"choices":[{"index":0,"text":"x","finish_reason":"stop"}],"usage":{"completion_tokens":3},)"
      R"("error":{"message":"m","code":503},"id":01})");
  EXPECT_EQ(e.kind, EventKind::kMalformed);
  EXPECT_EQ(e.tokens, 0);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(e.finish_reason, "");
  EXPECT_EQ(e.completion_tokens, -1);
  EXPECT_EQ(e.prompt_tokens, -1);
  EXPECT_EQ(e.error_status, 0);
  EXPECT_EQ(e.error_message, "");
}

// Nesting: `depth` containers in all, the root object included.
std::string Nested(int depth, char open, char close) {
  // {"choices":[{"index":0,"text":"x","logprobs":<depth - 3 containers>}]}
  std::string inner;
  for (int i = 0; i < depth - 3; ++i) inner += open == '[' ? "[" : "{\"a\":";
  inner += open == '[' ? "" : "1";
  inner += std::string(depth - 3, close);
  return R"({"choices":[{"index":0,"text":"x","logprobs":)" + inner + "}]}";
}

TEST(StreamEventTest, NestingUpToTheLimitIsAccepted) {
  EXPECT_EQ(Classify(Nested(128, '[', ']')).kind, EventKind::kToken);
  EXPECT_EQ(Classify(Nested(128, '{', '}')).kind, EventKind::kToken);
  EXPECT_EQ(Classify(Nested(129, '[', ']')).kind, EventKind::kMalformed);
  EXPECT_EQ(Classify(Nested(129, '{', '}')).kind, EventKind::kMalformed);
}

TEST(StreamEventTest, VeryDeepPayloadIsMalformed) {
  for (const char open : {'[', '{'}) {
    const StreamEvent e = Classify(Nested(100000, open, open == '[' ? ']' : '}'));
    EXPECT_EQ(e.kind, EventKind::kMalformed) << open;
    EXPECT_EQ(e.tokens, 0);
    EXPECT_EQ(e.text, "");
  }
  // Deep inside token_ids and tool_calls, which are counted.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"token_ids":[1,)" + deep + "]}]}").kind,
            EventKind::kMalformed);
  EXPECT_EQ(Classify(R"({"choices":[{"index":0,"delta":{"tool_calls":)" + deep + "}}]}").kind,
            EventKind::kMalformed);
  // Unbalanced.
  EXPECT_EQ(Classify("{\"a\":" + std::string(100000, '[')).kind, EventKind::kMalformed);
  EXPECT_EQ(Classify("{\"a\":" + std::string(100000, ']') + "}").kind, EventKind::kMalformed);
}

// --- StreamClassifier -------------------------------------------------------------

TEST(StreamClassifierTest, AgreesWithClassifyEventAcrossReuse) {
  const std::vector<std::string> chunks = {
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})",
      R"({"choices":[{"index":0,"delta":{"content":" Paris"}}]})",
      "not json",
      R"({"error":{"message":"boom","code":503}})",
      R"({"choices":[{"index":0,"text":"abc","token_ids":[1,2,3],"finish_reason":"stop"}]})",
      R"({"choices":[],"usage":{"prompt_tokens":14,"completion_tokens":2}})",
      "[DONE]",
  };
  StreamClassifier classifier;
  StreamEvent a;
  for (int round = 0; round < 3; ++round) {
    for (const std::string& chunk : chunks) {
      classifier.Classify(chunk, &a);
      const StreamEvent b = Classify(chunk);
      EXPECT_EQ(a.kind, b.kind) << chunk;
      EXPECT_EQ(a.tokens, b.tokens) << chunk;
      EXPECT_EQ(a.text, b.text) << chunk;
      EXPECT_EQ(a.finish_reason, b.finish_reason) << chunk;
      EXPECT_EQ(a.completion_tokens, b.completion_tokens) << chunk;
      EXPECT_EQ(a.prompt_tokens, b.prompt_tokens) << chunk;
      EXPECT_EQ(a.error_status, b.error_status) << chunk;
      EXPECT_EQ(a.error_message, b.error_message) << chunk;
    }
  }
}

TEST(StreamClassifierTest, LargePayloadThenSmallOnes) {
  StreamClassifier classifier;
  StreamEvent e;
  const std::string big(3 * 1024 * 1024, 'x');
  classifier.Classify(R"({"choices":[{"index":0,"text":")" + big + R"("}]})", &e);
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, big);
  classifier.Classify(R"({"choices":[{"index":0,"text":"y"}]})", &e);
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "y");
  // Payload sizes around the initial buffer size.
  for (size_t n : {4000u, 4095u, 4096u, 4097u, 8200u, 70000u, 100u}) {
    const std::string text(n, 'z');
    classifier.Classify(R"({"choices":[{"index":0,"text":")" + text + R"("}]})", &e);
    EXPECT_EQ(e.kind, EventKind::kToken) << n;
    EXPECT_EQ(e.text.size(), n);
  }
}

TEST(StreamClassifierTest, MovedClassifiersKeepWorking) {
  StreamClassifier a;
  StreamEvent e;
  a.Classify(R"({"choices":[{"index":0,"text":"1"}]})", &e);
  StreamClassifier b(std::move(a));
  b.Classify(R"({"choices":[{"index":0,"text":"2"}]})", &e);
  EXPECT_EQ(e.text, "2");
  a = std::move(b);
  a.Classify(R"({"choices":[{"index":0,"text":"3"}]})", &e);
  EXPECT_EQ(e.text, "3");
  b.Classify(R"({"choices":[{"index":0,"text":"4"}]})", &e);  // moved from: still usable
  EXPECT_EQ(e.kind, EventKind::kToken);
  EXPECT_EQ(e.text, "4");
}

TEST(StreamClassifierTest, InputIsNotModifiedAndMayEndAnywhere) {
  // The payload is a view into a larger buffer: nothing past it is read as JSON.
  const std::string buffer = R"({"choices":[{"index":0,"text":"x"}]}{"trailing":1})";
  const std::string_view first(buffer.data(), buffer.find("}{") + 1);
  StreamClassifier classifier;
  StreamEvent e;
  classifier.Classify(first, &e);
  EXPECT_EQ(e.kind, EventKind::kToken);
  classifier.Classify(first.substr(0, first.size() - 1), &e);
  EXPECT_EQ(e.kind, EventKind::kMalformed);
  EXPECT_EQ(buffer, R"({"choices":[{"index":0,"text":"x"}]}{"trailing":1})");
}

// Random and mutated payloads: classification never crashes, always yields a
// kind, and its fields agree with the kind.
TEST(StreamClassifierTest, HostileInputs) {
  const std::vector<std::string> seeds = {
      R"({"id":"cmpl-1","object":"text_completion","created":1754400001,"model":"Qwen/Qwen3-0.6B",)"
      R"("choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":null}]})",
      R"({"choices":[{"index":0,"delta":{"content":"a\n\"q\" \u00e9\\","tool_calls":[]}}],"usage":null})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]})",
      R"({"choices":[{"index":0,"text":"abc","token_ids":[101,102,103],"finish_reason":"stop"}]})",
      R"({"choices":[],"usage":{"prompt_tokens":14,"total_tokens":16,"completion_tokens":2}})",
      R"({"error": {"message": "Service Unavailable", "type": "x", "param": null, "code": 503}})",
      R"({"object":"error","message":"m","type":"BadRequestError","param":null,"code":400})",
      R"({"choices":[{"index":0,"logprobs":{"content":[{"token":"a","logprob":-1.5e-3,"bytes":[97]}]}}]})",
      "[DONE]",
  };
  const std::string alphabet = "{}[],:\"\\ 0123456789-+.eEtrufalsn\t\r\n'x\x01\xff\xc3\xa9";
  std::mt19937 rng(20240611);
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  StreamClassifier classifier;
  StreamEvent e;
  int kinds[5] = {};
  for (int i = 0; i < 5000; ++i) {
    std::string data = seeds[pick(seeds.size())];
    if (i % 10 == 0) {  // random bytes
      data.resize(pick(400));
      for (char& c : data) c = static_cast<char>(rng());
      if (!data.empty() && pick(2) == 0) data[0] = '{';
    } else {
      for (int edits = 1 + static_cast<int>(pick(4)); edits > 0; --edits) {
        const size_t at = pick(data.size() + 1);
        switch (pick(6)) {
          case 0:
            if (at < data.size()) data[at] = alphabet[pick(alphabet.size())];
            break;
          case 1:
            data.insert(at, 1, alphabet[pick(alphabet.size())]);
            break;
          case 2:
            if (at < data.size()) data.erase(at, 1 + pick(8));
            break;
          case 3:
            data.resize(at);  // truncated
            break;
          case 4:
            data.insert(at, data.substr(pick(data.size() + 1), pick(40)));
            break;
          default:
            if (at < data.size()) data[at] = static_cast<char>(rng());
            break;
        }
      }
    }
    classifier.Classify(data, &e);
    const int kind = static_cast<int>(e.kind);
    ASSERT_GE(kind, 0);
    ASSERT_LE(kind, 4);
    ++kinds[kind];
    if (e.kind == EventKind::kToken) {
      EXPECT_GT(e.tokens, 0);
    } else {
      EXPECT_EQ(e.tokens, 0);
    }
    if (e.kind == EventKind::kError) {
      EXPECT_GE(e.error_status, 400);
      EXPECT_LE(e.error_status, 599);
    } else {
      EXPECT_EQ(e.error_status, 0);
    }
    if (e.kind == EventKind::kMalformed || e.kind == EventKind::kDone) {
      EXPECT_TRUE(e.text.empty() && e.finish_reason.empty() && e.error_message.empty());
      EXPECT_EQ(e.completion_tokens, -1);
      EXPECT_EQ(e.prompt_tokens, -1);
    }
    // Deterministic, whatever the previous payload left in the buffers.
    const StreamEvent again = Classify(data);
    EXPECT_EQ(again.kind, e.kind);
    EXPECT_EQ(again.tokens, e.tokens);
    EXPECT_EQ(again.text, e.text);
  }
  // The mutations exercise every outcome.
  for (int k = 0; k < 5; ++k) EXPECT_GT(kinds[k], 0) << EventKindName(static_cast<EventKind>(k));
}

}  // namespace
}  // namespace narwhal::engines
