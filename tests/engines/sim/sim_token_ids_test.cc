// Token ids on a real narwhal-sim: vLLM's return_token_ids in the four
// response forms, the autoregressive continuation a router relies on to
// resume a broken stream (prompt = prompt ids + the ids already generated),
// token-id prompts in KV handoffs and in the prefix cache.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engines/sim/sim_tokenizer.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;
using OrderedJson = nlohmann::ordered_json;
using Ids = std::vector<uint32_t>;
using sim::GenerateIds;
using sim::SimTokenize;
using sim::TokensText;

std::unique_ptr<SimProcess> StartIdsSim(std::vector<std::string> args) {
  auto sim = SimProcess::Start(std::move(args));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

std::vector<std::string> Keys(const OrderedJson& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return keys;
}

std::vector<OrderedJson> OrderedEvents(const HttpCapture& capture) {
  std::vector<OrderedJson> events;
  for (const std::string& event : capture.data_events()) {
    events.push_back(OrderedJson::parse(event));
  }
  return events;
}

Ids Tail(const Ids& ids, size_t from) {
  return Ids(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
}

Ids Concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

json WithTokenIds(json body, const json& value = true) {
  body["return_token_ids"] = value;
  return body;
}

// What a completions or chat stream generated: its text and its token ids
// (the concatenated deltas), and the prompt ids of its first chunk.
struct Streamed {
  std::string text;
  Ids ids;
  Ids prompt_ids;
  int prompt_id_chunks = 0;  // chunks that carried prompt_token_ids
};

Streamed Collect(const HttpCapture& capture) {
  Streamed out;
  out.text = StreamText(capture);
  for (const json& event : JsonEvents(capture)) {
    if (event.contains("prompt_token_ids")) {
      ++out.prompt_id_chunks;
      out.prompt_ids = event["prompt_token_ids"].get<Ids>();
    }
    if (!event.contains("choices") || event["choices"].empty()) continue;
    const json& choice = event["choices"][0];
    if (choice.contains("prompt_token_ids")) {
      ++out.prompt_id_chunks;
      out.prompt_ids = choice["prompt_token_ids"].get<Ids>();
    }
    if (choice.contains("token_ids")) {
      const Ids delta = choice["token_ids"].get<Ids>();
      out.ids.insert(out.ids.end(), delta.begin(), delta.end());
    }
  }
  return out;
}

class SimTokenIdsTest : public OneSimTest<SimTokenIdsTest> {
 public:
  static constexpr char kEngineId[] = "ids0";
};

TEST_F(SimTokenIdsTest, CompletionBodyCarriesBothInItsChoice) {
  const std::string prompt = "The quick brown fox";
  const JsonReply reply =
      PostJson(*sim_, "/v1/completions", WithTokenIds(CompletionBody(prompt, 6, false)));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const OrderedJson body = OrderedJson::parse(reply.body);
  const OrderedJson& choice = body["choices"][0];
  EXPECT_EQ(Keys(choice),
            (std::vector<std::string>{"index", "text", "logprobs", "finish_reason", "stop_reason",
                                      "token_ids", "prompt_logprobs", "prompt_token_ids"}));
  EXPECT_FALSE(body.contains("prompt_token_ids"));
  const Ids prompt_ids = choice["prompt_token_ids"].get<Ids>();
  EXPECT_EQ(prompt_ids, SimTokenize(prompt));
  EXPECT_EQ(prompt_ids.size(), body["usage"]["prompt_tokens"].get<size_t>());
  const Ids ids = choice["token_ids"].get<Ids>();
  EXPECT_EQ(ids, GenerateIds(prompt_ids, 6));
  EXPECT_EQ(TokensText(ids), choice["text"].get<std::string>());
  EXPECT_EQ(choice["text"], sim::GenerateText(prompt, 6));
}

TEST_F(SimTokenIdsTest, FieldsAreLeftOutUnlessRequested) {
  for (const json& value : {json(false), json(nullptr)}) {
    const JsonReply completion =
        PostJson(*sim_, "/v1/completions", WithTokenIds(CompletionBody("plain", 3, false), value));
    ASSERT_EQ(completion.status, 200) << completion.body;
    EXPECT_FALSE(completion.json["choices"][0].contains("token_ids")) << completion.body;
    EXPECT_FALSE(completion.json["choices"][0].contains("prompt_token_ids")) << completion.body;
    const JsonReply chat =
        PostJson(*sim_, "/v1/chat/completions", WithTokenIds(ChatBody("plain", 3, false), value));
    ASSERT_EQ(chat.status, 200) << chat.body;
    EXPECT_FALSE(chat.json["choices"][0].contains("token_ids")) << chat.body;
    EXPECT_FALSE(chat.json.contains("prompt_token_ids")) << chat.body;
  }
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const json body =
        path == "/v1/completions" ? CompletionBody("plain", 3, true) : ChatBody("plain", 3, true);
    const HttpCapture capture = PostStream(*sim_, path, body);
    ASSERT_TRUE(capture.saw_done()) << capture.body;
    EXPECT_EQ(capture.body.find("token_ids"), std::string::npos) << capture.body;
  }
}

TEST_F(SimTokenIdsTest, ReturnTokenIdsMustBeABoolean) {
  for (const json& value : {json("yes"), json(1), json::array(), json::object()}) {
    for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
      const json body =
          path == "/v1/completions" ? CompletionBody("x", 2, false) : ChatBody("x", 2, false);
      const JsonReply reply = PostJson(*sim_, path, WithTokenIds(body, value));
      EXPECT_EQ(reply.status, 400) << path << " " << value.dump();
      EXPECT_EQ(reply.json["error"]["message"],
                "return_token_ids: Input should be a valid boolean");
    }
  }
}

TEST_F(SimTokenIdsTest, CompletionStreamCarriesPromptIdsFirstAndDeltasAfter) {
  const std::string prompt = "stream me please";
  json body = WithTokenIds(CompletionBody(prompt, 5, true));
  body["stream_options"] = {{"include_usage", true}};
  const HttpCapture capture = PostStream(*sim_, "/v1/completions", body);
  ASSERT_TRUE(capture.saw_done()) << capture.body;
  const std::vector<OrderedJson> events = OrderedEvents(capture);
  ASSERT_EQ(events.size(), 6u) << capture.body;  // 5 tokens and the usage chunk
  const Ids expected = GenerateIds(SimTokenize(prompt), 5);
  for (size_t i = 0; i < 5; ++i) {
    const OrderedJson& choice = events[i]["choices"][0];
    std::vector<std::string> keys = {"index", "text", "logprobs", "finish_reason", "stop_reason"};
    if (i == 0) keys.push_back("prompt_token_ids");
    keys.push_back("token_ids");
    EXPECT_EQ(Keys(choice), keys) << i;
    EXPECT_EQ(choice["token_ids"].get<Ids>(), Ids{expected[i]}) << i;
    EXPECT_EQ(choice["text"].get<std::string>(), sim::TokenText(expected[i])) << i;
    EXPECT_FALSE(events[i].contains("prompt_token_ids"));
  }
  EXPECT_EQ(events[0]["choices"][0]["prompt_token_ids"].get<Ids>(), SimTokenize(prompt));
  EXPECT_TRUE(events[5]["choices"].empty());
  EXPECT_FALSE(events[5].contains("prompt_token_ids"));
  const Streamed streamed = Collect(capture);
  EXPECT_EQ(streamed.ids, expected);
  EXPECT_EQ(streamed.prompt_id_chunks, 1);
}

TEST_F(SimTokenIdsTest, ChatBodyCarriesPromptIdsAtTheTopLevel) {
  json body = WithTokenIds(ChatBody("Capital of France?", 4, false));
  body["messages"] = {{{"role", "system"}, {"content", "Be brief. "}},
                      {{"role", "user"}, {"content", "Capital of France?"}}};
  const JsonReply reply = PostJson(*sim_, "/v1/chat/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const OrderedJson full = OrderedJson::parse(reply.body);
  EXPECT_EQ(Keys(full), (std::vector<std::string>{"id", "object", "created", "model", "choices",
                                                  "service_tier", "system_fingerprint", "usage",
                                                  "prompt_token_ids", "kv_transfer_params"}));
  EXPECT_EQ(Keys(full["choices"][0]),
            (std::vector<std::string>{"index", "message", "logprobs", "finish_reason",
                                      "stop_reason", "token_ids"}));
  const Ids prompt_ids = SimTokenize("Be brief. Capital of France?");
  EXPECT_EQ(full["prompt_token_ids"].get<Ids>(), prompt_ids);
  const Ids ids = full["choices"][0]["token_ids"].get<Ids>();
  EXPECT_EQ(ids, GenerateIds(prompt_ids, 4));
  EXPECT_EQ(TokensText(ids), full["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(SimTokenIdsTest, ChatStreamCarriesPromptIdsOnTheRoleChunk) {
  const HttpCapture capture =
      PostStream(*sim_, "/v1/chat/completions", WithTokenIds(ChatBody("hello", 3, true)));
  ASSERT_TRUE(capture.saw_done()) << capture.body;
  const std::vector<OrderedJson> events = OrderedEvents(capture);
  ASSERT_EQ(events.size(), 4u) << capture.body;  // role, 3 tokens
  EXPECT_EQ(Keys(events[0]), (std::vector<std::string>{"id", "object", "created", "model",
                                                       "choices", "prompt_token_ids"}));
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(events[0]["choices"][0].contains("token_ids"));
  EXPECT_EQ(events[0]["prompt_token_ids"].get<Ids>(), SimTokenize("hello"));
  const Ids expected = GenerateIds(SimTokenize("hello"), 3);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_FALSE(events[i].contains("prompt_token_ids")) << i;
    const OrderedJson& choice = events[i]["choices"][0];
    EXPECT_EQ(Keys(choice).back(), "token_ids") << i;
    EXPECT_EQ(choice["token_ids"].get<Ids>(), Ids{expected[i - 1]}) << i;
    EXPECT_EQ(choice["delta"]["content"].get<std::string>(), sim::TokenText(expected[i - 1]));
  }
  const Streamed streamed = Collect(capture);
  EXPECT_EQ(streamed.text, TokensText(expected));
  EXPECT_EQ(streamed.prompt_id_chunks, 1);
}

// Generates `n` tokens for `request` (completions or chat) with token ids,
// then resumes it after k tokens for several k over /v1/completions, as a
// router continuing a broken stream does, streaming and not.
void ExpectContinuation(SimProcess& sim, const std::string& path, const json& request) {
  constexpr int kN = 12;
  const JsonReply original = PostJson(sim, path, WithTokenIds(request));
  ASSERT_EQ(original.status, 200) << original.body;
  const bool chat = path == "/v1/chat/completions";
  const json& choice = original.json["choices"][0];
  const Ids prompt_ids =
      (chat ? original.json["prompt_token_ids"] : choice["prompt_token_ids"]).get<Ids>();
  const Ids ids = choice["token_ids"].get<Ids>();
  const std::string text =
      chat ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
  ASSERT_EQ(ids.size(), static_cast<size_t>(kN));
  ASSERT_EQ(TokensText(ids), text);

  // The stream of the same request agrees with the body.
  json streaming = WithTokenIds(request);
  streaming["stream"] = true;
  const Streamed whole = Collect(PostStream(sim, path, streaming));
  EXPECT_EQ(whole.ids, ids);
  EXPECT_EQ(whole.prompt_ids, prompt_ids);
  EXPECT_EQ(whole.text, text);

  for (int k : {1, 5, 11}) {
    const Ids prompt = Concat(prompt_ids, Ids(ids.begin(), ids.begin() + k));
    const std::string rest_text = TokensText(Tail(ids, k));
    ASSERT_EQ(text.substr(text.size() - rest_text.size()), rest_text);
    const json resume = {{"model", kSimModel},
                         {"prompt", prompt},
                         {"max_tokens", kN - k},
                         {"return_token_ids", true}};
    const JsonReply body = PostJson(sim, "/v1/completions", resume);
    ASSERT_EQ(body.status, 200) << body.body;
    EXPECT_EQ(body.json["choices"][0]["text"], rest_text) << "k=" << k;
    EXPECT_EQ(body.json["choices"][0]["token_ids"].get<Ids>(), Tail(ids, k)) << "k=" << k;
    EXPECT_EQ(body.json["choices"][0]["prompt_token_ids"].get<Ids>(), prompt);
    EXPECT_EQ(body.json["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(body.json["usage"]["completion_tokens"], kN - k);

    json resume_stream = resume;
    resume_stream["stream"] = true;
    const HttpCapture capture = PostStream(sim, "/v1/completions", resume_stream);
    ASSERT_TRUE(capture.saw_done()) << capture.body;
    const Streamed rest = Collect(capture);
    EXPECT_EQ(rest.text, rest_text) << "k=" << k;
    EXPECT_EQ(rest.ids, Tail(ids, k)) << "k=" << k;
    EXPECT_EQ(rest.prompt_ids, prompt);
    EXPECT_EQ(text.substr(0, text.size() - rest.text.size()) + rest.text, text);
  }
}

TEST_F(SimTokenIdsTest, ACompletionContinuesFromItsTokenIds) {
  ExpectContinuation(*sim_, "/v1/completions",
                     CompletionBody("Tell me about narwhals and their tusks.", 12, false));
}

TEST_F(SimTokenIdsTest, AChatContinuesFromItsTokenIds) {
  json body = ChatBody("Where do narwhals live?", 12, false);
  body["messages"] = {{{"role", "system"}, {"content", "You know the arctic. "}},
                      {{"role", "user"}, {"content", "Where do narwhals live?"}}};
  ExpectContinuation(*sim_, "/v1/chat/completions", body);
}

TEST_F(SimTokenIdsTest, ATokenIdPromptContinuesToo) {
  ExpectContinuation(*sim_, "/v1/completions",
                     {{"model", kSimModel},
                      {"prompt", json::array({json::array({5, 151643, 77, 151706})})},
                      {"max_tokens", 12}});
}

TEST_F(SimTokenIdsTest, TokenIdPromptsWithGeneratedIds) {
  const Ids prompt = {5, sim::kGeneratedIdBase, 151706, 42, 4294967295u};
  const JsonReply reply = PostJson(
      *sim_, "/v1/completions",
      {{"model", kSimModel}, {"prompt", prompt}, {"max_tokens", 4}, {"return_token_ids", true}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(reply.json["choices"][0]["prompt_token_ids"].get<Ids>(), prompt);
  EXPECT_EQ(reply.json["choices"][0]["token_ids"].get<Ids>(), GenerateIds(prompt, 4));
  EXPECT_EQ(reply.json["choices"][0]["text"], TokensText(GenerateIds(prompt, 4)));

  // /tokenize answers a token-id prompt with its ids.
  const JsonReply tokens = PostJson(*sim_, "/tokenize", {{"model", kSimModel}, {"prompt", prompt}});
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(tokens.json["tokens"].get<Ids>(), prompt);
  EXPECT_EQ(tokens.json["count"], 5);

  // Ids outside 0..2^32-1 are not token ids.
  for (const json& bad :
       {json::array({1, -1}), json::array({4294967296ULL}), json::array({json::array({1, -7})})}) {
    const JsonReply refused =
        PostJson(*sim_, "/v1/completions", {{"model", kSimModel}, {"prompt", bad}});
    EXPECT_EQ(refused.status, 400) << bad.dump();
  }
}

TEST_F(SimTokenIdsTest, FaultedStreamsCarryTheIdsOfWhatTheySend) {
  ASSERT_TRUE(
      sim_->SetFaults(
              json{{"faults", {{{"kind", "error_in_stream"}, {"after_tokens", 2}, {"code", 500}}}}})
          .ok());
  const HttpCapture errored =
      PostStream(*sim_, "/v1/chat/completions", WithTokenIds(ChatBody("doomed", 6, true)));
  const Ids expected = GenerateIds(SimTokenize("doomed"), 6);
  Streamed streamed = Collect(errored);
  EXPECT_EQ(streamed.ids, Ids(expected.begin(), expected.begin() + 2)) << errored.body;
  EXPECT_EQ(streamed.prompt_ids, SimTokenize("doomed"));
  EXPECT_TRUE(errored.saw_done());

  ASSERT_TRUE(
      sim_->SetFaults(json{{"faults", {{{"kind", "close_before_done"}, {"tokens", 3}}}}}).ok());
  const HttpCapture closed =
      PostStream(*sim_, "/v1/completions", WithTokenIds(CompletionBody("doomed", 6, true)));
  EXPECT_FALSE(closed.saw_done());
  streamed = Collect(closed);
  EXPECT_EQ(streamed.ids, Ids(expected.begin(), expected.begin() + 3)) << closed.body;
  EXPECT_EQ(streamed.text, TokensText(streamed.ids));
  EXPECT_EQ(streamed.prompt_ids, SimTokenize("doomed"));

  // Resuming the cut stream from what arrived completes it.
  const JsonReply rest = PostJson(*sim_, "/v1/completions",
                                  {{"model", kSimModel},
                                   {"prompt", Concat(streamed.prompt_ids, streamed.ids)},
                                   {"max_tokens", 3},
                                   {"return_token_ids", true}});
  ASSERT_EQ(rest.status, 200) << rest.body;
  EXPECT_EQ(streamed.text + rest.json["choices"][0]["text"].get<std::string>(),
            sim::GenerateText("doomed", 6));
}

TEST(SimTokenIdsHandoffTest, ATokenIdPromptIsHandedOffAndDecoded) {
  auto producer = StartIdsSim({"--engine-id", "p0", "--role", "prefill"});
  auto consumer =
      StartIdsSim({"--engine-id", "d0", "--role", "decode", "--prefix-cache-blocks", "100"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  // A continuation's prompt: a text prompt's ids and 7 generated ones.
  const Ids head = SimTokenize(std::string(140, 'n'));    // 35 ids
  const Ids prompt = Concat(head, GenerateIds(head, 7));  // 42 ids, 2 full blocks
  const json body = {{"model", kSimModel},
                     {"prompt", prompt},
                     {"max_tokens", 5},
                     {"stream", true},
                     {"return_token_ids", true}};
  const JsonReply pre =
      PostJson(*producer, "/v1/completions", PrefillBody(body), {{"X-Request-Id", "tid-1"}});
  ASSERT_EQ(pre.status, 200) << pre.body;
  const json& descriptor = pre.json["kv_transfer_params"];
  ASSERT_TRUE(descriptor.is_object()) << pre.body;
  EXPECT_EQ(descriptor["remote_num_tokens"], prompt.size());
  EXPECT_EQ(pre.json["choices"][0]["token_ids"].get<Ids>(), GenerateIds(prompt, 1));
  EXPECT_EQ(pre.json["choices"][0]["prompt_token_ids"].get<Ids>(), prompt);

  json decode = body;
  decode["kv_transfer_params"] = descriptor;
  decode["stream_options"] = {{"include_usage", true}};
  const HttpCapture capture =
      PostStream(*consumer, "/v1/completions", decode, WithRequestId("tid-1"));
  ASSERT_TRUE(capture.saw_done()) << capture.body;
  const Streamed streamed = Collect(capture);
  const Ids whole = GenerateIds(head, 12);
  EXPECT_EQ(streamed.ids, Tail(whole, 7));
  EXPECT_EQ(streamed.text, TokensText(Tail(whole, 7)));
  const std::vector<json> events = JsonEvents(capture);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], prompt.size() - 1);
  absl::StatusOr<json> kv = producer->Kv();
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)["consumed"].size(), 1u);

  // The consumer cached the pulled prompt and what it generated (47 ids: 2
  // blocks): the same ids computed there again hit both blocks.
  const JsonReply local = PostJson(
      *consumer, "/v1/completions",
      {{"model", kSimModel}, {"prompt", Concat(prompt, Tail(whole, 7))}, {"max_tokens", 1}});
  ASSERT_EQ(local.status, 200) << local.body;
  EXPECT_EQ(local.json["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
}

TEST(SimTokenIdsCacheTest, TokenIdPromptsAreCachedByTheirIds) {
  auto sim = StartIdsSim({"--engine-id", "c0", "--prefix-cache-blocks", "100"});
  ASSERT_NE(sim, nullptr);
  auto cached = [&](const json& prompt, int max_tokens) {
    const JsonReply reply =
        PostJson(*sim, "/v1/completions",
                 {{"model", kSimModel}, {"prompt", prompt}, {"max_tokens", max_tokens}});
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  Ids prompt;
  for (uint32_t i = 0; i < 40; ++i) prompt.push_back(1000 + i);  // 2 full blocks
  EXPECT_EQ(cached(prompt, 24), 0);
  // Prompt and generated ids were cached: 64 ids, 4 blocks. A continuation
  // after 10 generated ids (50 ids) finds 3 of them.
  const Ids generated = GenerateIds(prompt, 24);
  EXPECT_EQ(cached(Concat(prompt, Ids(generated.begin(), generated.begin() + 10)), 2), 48);
  // The ids' text form is a different prompt (49 ids of text).
  std::string as_text;
  for (uint32_t id : prompt) as_text += (as_text.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(cached(as_text, 1), 0);

  // A text prompt's reply is cached as text: the next turn, sent as text,
  // finds the prompt and the reply.
  const std::string turn(128, 't');  // 32 ids
  const JsonReply first = PostJson(*sim, "/v1/completions", CompletionBody(turn, 16, false));
  ASSERT_EQ(first.status, 200);
  const std::string next = turn + first.json["choices"][0]["text"].get<std::string>() + " more?";
  const int expected_blocks =
      static_cast<int>((turn + first.json["choices"][0]["text"].get<std::string>()).size() / 64);
  EXPECT_EQ(cached(next, 1), expected_blocks * 16);
}

}  // namespace
}  // namespace narwhal::testing
