// The NIXL connector rules: leg bodies (B1, B4, B5), descriptor extraction
// (B2), validation (B3) and the detached parameters() copy (B6).
#include "engines/http/connector.h"

#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engines/prefill_result.h"

namespace narwhal::engines {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

const json& PlaceholderParams() {
  static const json kPlaceholder = json::parse(
      R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
      R"("remote_block_ids":null,"remote_host":null,"remote_port":null})");
  return kPlaceholder;
}

// What a vLLM producer returns, plus a field no current vLLM knows.
json ProducerDescriptor() {
  return json::parse(
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[12,13],[40]],)"
      R"("remote_engine_id":"4d2c0a8e-5b1f-4f7e-9d7a-1c2b3a4d5e6f",)"
      R"("remote_request_id":"chatcmpl-7f3c-9b1e77c2","remote_host":"10.0.0.11","remote_port":5600,)"
      R"("tp_size":2,"dcp_size":1,"pp_size":1,"remote_num_tokens":14,)"
      R"("remote_blocks_expiry_time":null,"transfer_mode":"pull",)"
      R"("x_future_field":{"nested":[1,"two",{"three":3.5}],"flag":true}})");
}

PrefillResult Handoff(json descriptor = ProducerDescriptor(), Api api = Api::kChatCompletions,
                      std::string connector = "NixlConnector") {
  return PrefillResult("p0", "http://127.0.0.1:9001", api, "rid-prefill-1", std::move(connector),
                       std::move(descriptor));
}

// A chat client body with every kind of field the legs must treat.
json ClientChatBody() {
  return json::parse(R"({
    "model": "Qwen/Qwen3-0.6B",
    "messages": [{"role": "user", "content": "Capital of France?"}],
    "stream": true,
    "stream_options": {"include_usage": true, "continuous_usage_stats": false},
    "max_tokens": 64,
    "max_completion_tokens": 64,
    "min_tokens": 4,
    "min_completion_tokens": 2,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "seed": 7,
    "stop": ["\n\n"],
    "logprobs": true,
    "top_logprobs": 2,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "chat_template_kwargs": {"enable_thinking": false},
    "cache_salt": "s1",
    "vllm_xargs": {"custom": 1},
    "kv_transfer_params": {"remote_host": "evil.example", "remote_port": 1, "do_remote_prefill": true}
  })");
}

// --- B1 -------------------------------------------------------------------------

TEST(ConnectorTest, B1_PrefillBodyEditsExactly) {
  const json client = ClientChatBody();
  const json before = client;
  json expected = client;
  expected["stream"] = false;
  expected.erase("stream_options");
  expected.erase("min_tokens");
  expected.erase("min_completion_tokens");
  expected["max_tokens"] = 1;
  expected["max_completion_tokens"] = 1;
  expected["kv_transfer_params"] = PlaceholderParams();

  EXPECT_EQ(BuildPrefillBody(client), expected);
  EXPECT_EQ(client, before) << "the client body must not be modified";
}

TEST(ConnectorTest, B1_PrefillBodyKeepsEveryOtherField) {
  const json body = BuildPrefillBody(ClientChatBody());
  for (const char* key : {"model", "messages", "temperature", "top_p", "top_k", "seed", "stop",
                          "logprobs", "top_logprobs", "tools", "chat_template_kwargs",
                          "cache_salt", "vllm_xargs"}) {
    EXPECT_EQ(body.at(key), ClientChatBody().at(key)) << key;
  }
}

TEST(ConnectorTest, B1_MaxCompletionTokensOnlyWhenPresent) {
  const json client = json::parse(R"({"model":"m","prompt":"hi","max_tokens":50})");
  const json body = BuildPrefillBody(client);
  EXPECT_FALSE(body.contains("max_completion_tokens"));
  EXPECT_EQ(body.at("max_tokens"), 1);
}

TEST(ConnectorTest, B1_MaxTokensSetWhenClientOmittedIt) {
  const json body = BuildPrefillBody(json::parse(R"({"model":"m","prompt":"hi"})"));
  EXPECT_EQ(body.at("max_tokens"), 1);
  EXPECT_EQ(body.at("stream"), false);
  EXPECT_FALSE(body.contains("max_completion_tokens"));
  EXPECT_EQ(body.at("kv_transfer_params"), PlaceholderParams());
}

TEST(ConnectorTest, B1_PlaceholderReplacesAnyClientTransferParams) {
  for (const char* client_params :
       {R"({"remote_host":"evil.example","remote_block_ids":[1]})", "null", "\"junk\"", "[1,2]"}) {
    json client = json::parse(R"({"model":"m","prompt":"hi"})");
    client["kv_transfer_params"] = json::parse(client_params);
    EXPECT_EQ(BuildPrefillBody(client).at("kv_transfer_params"), PlaceholderParams())
        << client_params;
  }
}

// --- B4 / B5 --------------------------------------------------------------------

TEST(ConnectorTest, B4_DecodeBodyForStreamingClient) {
  const json client = ClientChatBody();
  json expected = client;
  expected["stream"] = true;
  expected["kv_transfer_params"] = ProducerDescriptor();
  // A streaming client's own stream_options, limits and sampling are kept.
  EXPECT_EQ(BuildDecodeBody(client, Handoff(), /*same_worker=*/false, /*client_streams=*/true),
            expected);
}

TEST(ConnectorTest, B4_DecodeBodyForNonStreamingClientAddsUsage) {
  json client = ClientChatBody();
  client["stream"] = false;
  client.erase("stream_options");
  json expected = client;
  expected["stream"] = true;
  expected["stream_options"] = {{"include_usage", true}};
  expected["kv_transfer_params"] = ProducerDescriptor();
  EXPECT_EQ(BuildDecodeBody(client, Handoff(), false, /*client_streams=*/false), expected);
}

TEST(ConnectorTest, B4_StreamingClientWithoutStreamOptionsGetsNone) {
  const json client = json::parse(R"({"model":"m","prompt":"hi","stream":true,"max_tokens":8})");
  const json body = BuildDecodeBody(client, Handoff(ProducerDescriptor(), Api::kCompletions),
                                    false, /*client_streams=*/true);
  EXPECT_FALSE(body.contains("stream_options"));
  EXPECT_EQ(body.at("max_tokens"), 8);
}

TEST(ConnectorTest, B4_StreamIsAlwaysTrueUpstream) {
  json client = json::parse(R"({"model":"m","prompt":"hi"})");
  EXPECT_EQ(BuildDecodeBody(client, Handoff(), false, false).at("stream"), true);
  client["stream"] = false;
  EXPECT_EQ(BuildDecodeBody(client, Handoff(), false, false).at("stream"), true);
}

TEST(ConnectorTest, B4_DescriptorSentVerbatimIncludingOpaqueFields) {
  const json body = BuildDecodeBody(ClientChatBody(), Handoff(), false, true);
  EXPECT_EQ(body.at("kv_transfer_params"), ProducerDescriptor());
  EXPECT_EQ(body.at("kv_transfer_params").at("x_future_field").dump(),
            R"({"flag":true,"nested":[1,"two",{"three":3.5}]})");
  EXPECT_EQ(body.at("kv_transfer_params").at("remote_host"), "10.0.0.11");
  EXPECT_EQ(body.at("kv_transfer_params").at("remote_blocks_expiry_time"), nullptr);
}

TEST(ConnectorTest, B5_SameWorkerStripsTransferParamsIncludingClients) {
  const json client = ClientChatBody();
  ASSERT_TRUE(client.contains("kv_transfer_params"));
  const json body = BuildDecodeBody(client, Handoff(), /*same_worker=*/true, true);
  EXPECT_FALSE(body.contains("kv_transfer_params"));
  json expected = client;
  expected.erase("kv_transfer_params");
  expected["stream"] = true;
  EXPECT_EQ(body, expected);
}

TEST(ConnectorTest, B5_SameWorkerWithoutClientParams) {
  const json client = json::parse(R"({"model":"m","prompt":"hi","stream":false})");
  const json body = BuildDecodeBody(client, Handoff(), true, false);
  EXPECT_FALSE(body.contains("kv_transfer_params"));
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_EQ(body.at("stream_options"), json({{"include_usage", true}}));
}

// --- B2 -------------------------------------------------------------------------

std::optional<json> Extract(const std::string& response, std::string* error) {
  return ExtractDescriptor(json::parse(response), error);
}

TEST(ConnectorTest, B2_TopLevelDescriptor) {
  std::string error;
  auto d = Extract(R"({"id":"c","choices":[{"index":0,"text":"T"}],"kv_transfer_params":)" +
                       ProducerDescriptor().dump() + "}",
                   &error);
  ASSERT_TRUE(d.has_value()) << error;
  EXPECT_EQ(*d, ProducerDescriptor());
}

TEST(ConnectorTest, B2_ChoiceZeroDescriptor) {
  std::string error;
  auto d = Extract(R"({"choices":[{"index":0,"text":"T","kv_transfer_params":{"remote_engine_id":"c0"}},)"
                   R"({"index":1,"kv_transfer_params":{"remote_engine_id":"c1"}}]})",
                   &error);
  ASSERT_TRUE(d.has_value()) << error;
  EXPECT_EQ(d->at("remote_engine_id"), "c0");
}

TEST(ConnectorTest, B2_NullTopLevelFallsBackToChoiceZero) {
  std::string error;
  auto d = Extract(R"({"kv_transfer_params":null,)"
                   R"("choices":[{"index":0,"kv_transfer_params":{"remote_engine_id":"c0"}}]})",
                   &error);
  ASSERT_TRUE(d.has_value()) << error;
  EXPECT_EQ(d->at("remote_engine_id"), "c0");
}

TEST(ConnectorTest, B2_TopLevelWinsOverChoiceZero) {
  std::string error;
  auto d = Extract(R"({"kv_transfer_params":{"remote_engine_id":"top"},)"
                   R"("choices":[{"index":0,"kv_transfer_params":{"remote_engine_id":"c0"}}]})",
                   &error);
  ASSERT_TRUE(d.has_value()) << error;
  EXPECT_EQ(d->at("remote_engine_id"), "top");
}

TEST(ConnectorTest, B2_NoReadableDescriptor) {
  struct Case {
    const char* response;
    const char* reason;
  };
  const Case cases[] = {
      {R"({"choices":[{"index":0,"text":"T"}],"kv_transfer_params":null})", "no kv_transfer_params"},
      {R"({"choices":[{"index":0,"text":"T"}]})", "no kv_transfer_params"},
      {R"({"choices":[]})", "no kv_transfer_params"},
      {R"({"choices":[{"index":1}, {"kv_transfer_params":{"remote_engine_id":"c1"}}]})",
       "no kv_transfer_params"},
      {R"({"choices":["x"]})", "no kv_transfer_params"},
      {R"({"choices":{"kv_transfer_params":{"remote_engine_id":"c0"}}})", "no kv_transfer_params"},
      {R"({"choices":[{"kv_transfer_params":null}]})", "no kv_transfer_params"},
      {R"({"kv_transfer_params":"opaque-string"})", "not a JSON object"},
      {R"({"kv_transfer_params":[1,2]})", "not a JSON object"},
      {R"({"kv_transfer_params":7})", "not a JSON object"},
      {R"({"choices":[{"kv_transfer_params":true}]})", "not a JSON object"},
      {R"({"kv_transfer_params":{}})", "empty"},
      {R"([{"kv_transfer_params":{"remote_engine_id":"x"}}])", "not a JSON object"},
      {R"("text")", "not a JSON object"},
      {"null", "not a JSON object"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_FALSE(Extract(c.response, &error).has_value()) << c.response;
    EXPECT_THAT(error, HasSubstr(c.reason)) << c.response;
  }
}

// --- B3 -------------------------------------------------------------------------

json WithBlocks(const std::string& block_ids) {
  json d = ProducerDescriptor();
  d["remote_block_ids"] = json::parse(block_ids);
  return d;
}

TEST(ConnectorTest, B3_ValidDescriptor) {
  EXPECT_EQ(ValidateDescriptorShape(ProducerDescriptor()), "");
  EXPECT_TRUE(ValidateContinuation(Handoff(), "NixlConnector", Api::kChatCompletions).ok());
}

TEST(ConnectorTest, B3_EngineIdentityRequired) {
  json missing = ProducerDescriptor();
  missing.erase("remote_engine_id");
  EXPECT_THAT(ValidateDescriptorShape(missing), HasSubstr("remote_engine_id"));
  for (const char* bad : {"null", "\"\"", "42", "true", "[\"e\"]", "{\"id\":\"e\"}"}) {
    json d = ProducerDescriptor();
    d["remote_engine_id"] = json::parse(bad);
    EXPECT_THAT(ValidateDescriptorShape(d), HasSubstr("remote_engine_id")) << bad;
  }
}

TEST(ConnectorTest, B3_WellFormedBlockIds) {
  for (const char* ok : {"[1,2,3]", "[0]", "[]", "[[12,13],[40]]", "[[1]]", "[[],[2]]", "[[]]",
                         "[18446744073709551615]"}) {
    EXPECT_EQ(ValidateDescriptorShape(WithBlocks(ok)), "") << ok;
  }
}

TEST(ConnectorTest, B3_MalformedBlockIds) {
  for (const char* bad :
       {"[-1]", "[1,-2]", "[[1],[-3]]", "[true]", "[1,false]", "[[true]]", "[1.5]", "[2.0]",
        "[[1.0]]", "[\"3\"]", "[[1,\"x\"]]", "[[1],2]", "[1,[2]]", "[[[1]]]", "[null]",
        "[{\"id\":1}]", "5", "\"1,2\"", "{}", "true", "null"}) {
    EXPECT_THAT(ValidateDescriptorShape(WithBlocks(bad)), HasSubstr("remote_block_ids")) << bad;
  }
  json missing = ProducerDescriptor();
  missing.erase("remote_block_ids");
  EXPECT_THAT(ValidateDescriptorShape(missing), HasSubstr("remote_block_ids"));
}

TEST(ConnectorTest, B3_NotAnObject) {
  for (const char* bad : {"{}", "[]", "null", "\"d\"", "3"}) {
    EXPECT_NE(ValidateDescriptorShape(json::parse(bad)), "") << bad;
  }
}

TEST(ConnectorTest, B3_ConnectorMismatch) {
  const DescriptorRejection r = ValidateContinuation(
      Handoff(ProducerDescriptor(), Api::kChatCompletions, "LMCacheConnectorV1"), "NixlConnector",
      Api::kChatCompletions);
  EXPECT_EQ(r.reason, "connector_mismatch");
  const std::string& why = r.detail;
  EXPECT_THAT(why, HasSubstr("connector"));
  EXPECT_THAT(why, HasSubstr("LMCacheConnectorV1"));
  EXPECT_THAT(why, HasSubstr("NixlConnector"));
}

TEST(ConnectorTest, B3_EndpointMismatch) {
  const DescriptorRejection r = ValidateContinuation(
      Handoff(ProducerDescriptor(), Api::kCompletions), "NixlConnector", Api::kChatCompletions);
  EXPECT_EQ(r.reason, "endpoint_mismatch");
  const std::string& why = r.detail;
  EXPECT_THAT(why, HasSubstr("endpoint"));
  EXPECT_THAT(why, HasSubstr("/v1/completions"));
  EXPECT_THAT(why, HasSubstr("/v1/chat/completions"));
}

TEST(ConnectorTest, B3_ShapeIsCheckedByContinuation) {
  json d = ProducerDescriptor();
  d.erase("remote_engine_id");
  EXPECT_THAT(ValidateContinuation(Handoff(d), "NixlConnector", Api::kChatCompletions).detail,
              HasSubstr("remote_engine_id"));
  EXPECT_THAT(ValidateContinuation(Handoff(WithBlocks("[true]")), "NixlConnector",
                                   Api::kChatCompletions)
                  .detail,
              HasSubstr("remote_block_ids"));
}

TEST(ConnectorTest, B3_OpaqueFieldsRetainedAndUnchecked) {
  // Fields the contract does not type (and unknown keys) pass with any value
  // and survive validation unchanged.
  json d = ProducerDescriptor();
  d["remote_blocks_expiry_time"] = "soon";
  d["transfer_mode"] = 7;
  d["unknown"] = json::array({json::object()});
  const PrefillResult handoff = Handoff(d);
  EXPECT_TRUE(ValidateContinuation(handoff, "NixlConnector", Api::kChatCompletions).ok());
  EXPECT_EQ(handoff.descriptor(), d);
  EXPECT_EQ(BuildDecodeBody(ClientChatBody(), handoff, false, true).at("kv_transfer_params"), d);
}

TEST(ConnectorTest, ContinuationChecksTheProducersEngineIdAndHost) {
  const PrefillResult named("p0", "http://10.0.0.11:8000", Api::kChatCompletions, "rid",
                            "NixlConnector", ProducerDescriptor(), "some-other-engine");
  EXPECT_EQ(ValidateContinuation(named, "NixlConnector", Api::kChatCompletions).reason,
            "engine_id_mismatch");
  const PrefillResult right("p0", "http://10.0.0.11:8000", Api::kChatCompletions, "rid",
                            "NixlConnector", ProducerDescriptor(),
                            "4d2c0a8e-5b1f-4f7e-9d7a-1c2b3a4d5e6f");
  EXPECT_TRUE(ValidateContinuation(right, "NixlConnector", Api::kChatCompletions).ok());
  // The descriptor's host 10.0.0.11 is the producer's: match passes; a
  // producer elsewhere does not.
  EXPECT_TRUE(ValidateContinuation(right, "NixlConnector", Api::kChatCompletions,
                                   RemoteHostPolicy::kMatch)
                  .ok());
  const PrefillResult elsewhere("p0", "http://10.0.0.99:8000", Api::kChatCompletions, "rid",
                                "NixlConnector", ProducerDescriptor());
  EXPECT_EQ(ValidateContinuation(elsewhere, "NixlConnector", Api::kChatCompletions,
                                 RemoteHostPolicy::kMatch)
                .reason,
            "remote_host_mismatch");
  EXPECT_TRUE(ValidateContinuation(elsewhere, "NixlConnector", Api::kChatCompletions).ok());
}

// B3 under the default `pass`: a producer that names the cloud metadata
// address is refused before the consumer gets anything.
TEST(ConnectorTest, B3_ContinuationToAMetadataAddressIsRefusedUnderPass) {
  json d = ProducerDescriptor();
  d["remote_host"] = "169.254.169.254";
  const DescriptorRejection r =
      ValidateContinuation(Handoff(d), "NixlConnector", Api::kChatCompletions);
  EXPECT_EQ(r.reason, "forbidden_remote_host");
  EXPECT_FALSE(ValidateDescriptorShape(d).empty());
}

TEST(ConnectorTest, HandoffIsSingleUseAcrossCopies) {
  const PrefillResult handoff = Handoff();
  const PrefillResult copy = handoff;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_FALSE(copy.claimed());
  EXPECT_TRUE(handoff.Claim());
  EXPECT_TRUE(copy.claimed());
  EXPECT_FALSE(copy.Claim());
  EXPECT_FALSE(handoff.Claim());
  // A fresh result is its own handoff.
  EXPECT_TRUE(Handoff().Claim());
}

// --- B6 -------------------------------------------------------------------------

TEST(ConnectorTest, B6_ParametersReturnsADetachedCopy) {
  const PrefillResult handoff = Handoff();
  json copy = handoff.parameters();
  EXPECT_EQ(copy, ProducerDescriptor());
  copy["remote_host"] = "attacker.example";
  copy["remote_block_ids"][0][0] = 999;
  copy.erase("remote_engine_id");
  EXPECT_EQ(handoff.descriptor(), ProducerDescriptor());
  EXPECT_EQ(handoff.parameters(), ProducerDescriptor());
  EXPECT_EQ(BuildDecodeBody(ClientChatBody(), handoff, false, true).at("kv_transfer_params"),
            ProducerDescriptor());
}

TEST(ConnectorTest, B6_PrefillResultBindsItsProducer) {
  const PrefillResult handoff = Handoff();
  EXPECT_EQ(handoff.producer_iid(), "p0");
  EXPECT_EQ(handoff.producer_url(), "http://127.0.0.1:9001");
  EXPECT_EQ(handoff.endpoint(), Api::kChatCompletions);
  EXPECT_EQ(handoff.backend_request_id(), "rid-prefill-1");
  EXPECT_EQ(handoff.connector(), "NixlConnector");
}

TEST(ConnectorTest, ApiPathsAndLabels) {
  EXPECT_EQ(ApiPath(Api::kCompletions), "/v1/completions");
  EXPECT_EQ(ApiPath(Api::kChatCompletions), "/v1/chat/completions");
  EXPECT_EQ(ApiLabel(Api::kCompletions), "completions");
  EXPECT_EQ(ApiLabel(Api::kChatCompletions), "chat");
}

}  // namespace
}  // namespace narwhal::engines
