// The pinned descriptor contract: each rule of engines/descriptor_contract.h
// with the reason it reports, the data-parallel engine id suffix, the
// remote_host policies, and that fields outside the contract stay opaque.
#include "engines/descriptor_contract.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace narwhal::engines {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// What a current vLLM producer returns (connector version 12).
json Descriptor() {
  return json::parse(
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[12,13],[40]],)"
      R"("remote_engine_id":"engine-a","remote_request_id":"cmpl-7f3c-0-9b1e77c2",)"
      R"("remote_host":"10.0.0.11","remote_port":5600,"tp_size":2,"dcp_size":1,"pp_size":1,)"
      R"("remote_num_tokens":14,"remote_blocks_expiry_time":null,"transfer_mode":"pull"})");
}

const ProducerIdentity kAnyProducer{"", "10.0.0.11"};

struct Case {
  const char* field;
  const char* value;  // JSON, or nullptr to remove the field
  const char* reason;
};

std::string Reason(const json& d, const ProducerIdentity& p = kAnyProducer,
                   RemoteHostPolicy policy = RemoteHostPolicy::kPass) {
  return CheckDescriptor(d, p, policy).reason;
}

TEST(DescriptorContractTest, CurrentAndOlderFieldSetsPass) {
  EXPECT_EQ(Reason(Descriptor()), "");
  // The field set before lease heartbeats: no sizes but tp_size, flat ids.
  const json older = json::parse(
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],)"
      R"("remote_engine_id":"e","remote_request_id":"r","remote_host":"localhost",)"
      R"("remote_port":5600,"tp_size":1})");
  EXPECT_EQ(Reason(older), "");
}

TEST(DescriptorContractTest, EachRuleHasItsReason) {
  const std::vector<Case> cases = {
      {"do_remote_prefill", nullptr, "not_remote_prefill"},
      {"do_remote_prefill", "false", "not_remote_prefill"},
      {"do_remote_prefill", "1", "not_remote_prefill"},
      {"do_remote_prefill", "\"true\"", "not_remote_prefill"},
      {"remote_engine_id", nullptr, "missing_engine_id"},
      {"remote_engine_id", "null", "missing_engine_id"},
      {"remote_engine_id", "\"\"", "missing_engine_id"},
      {"remote_engine_id", "7", "missing_engine_id"},
      {"remote_block_ids", nullptr, "malformed_block_ids"},
      {"remote_block_ids", "[1.5]", "malformed_block_ids"},
      {"remote_block_ids", "[true]", "malformed_block_ids"},
      {"remote_block_ids", "[[1],[-2]]", "malformed_block_ids"},
      {"remote_request_id", nullptr, "bad_request_id"},
      {"remote_request_id", "\"\"", "bad_request_id"},
      {"remote_request_id", "42", "bad_request_id"},
      {"remote_host", nullptr, "bad_remote_host"},
      {"remote_host", "null", "bad_remote_host"},
      {"remote_host", "\"\"", "bad_remote_host"},
      {"remote_host", "[\"h\"]", "bad_remote_host"},
      {"remote_port", nullptr, "bad_remote_port"},
      {"remote_port", "\"5600\"", "bad_remote_port"},
      {"remote_port", "5600.0", "bad_remote_port"},
      {"remote_port", "5600.5", "bad_remote_port"},
      {"remote_port", "0", "bad_remote_port"},
      {"remote_port", "-1", "bad_remote_port"},
      {"remote_port", "65536", "bad_remote_port"},
      {"remote_port", "true", "bad_remote_port"},
      {"tp_size", "0", "bad_size"},
      {"tp_size", "2.0", "bad_size"},
      {"tp_size", "\"2\"", "bad_size"},
      {"tp_size", "null", "bad_size"},
      {"dcp_size", "-1", "bad_size"},
      {"pp_size", "false", "bad_size"},
      {"remote_num_tokens", "-3", "bad_size"},
      {"remote_num_tokens", "1.5", "bad_size"},
  };
  for (const Case& c : cases) {
    json d = Descriptor();
    if (c.value == nullptr) {
      d.erase(c.field);
    } else {
      d[c.field] = json::parse(c.value);
    }
    const DescriptorRejection r = CheckDescriptor(d, kAnyProducer, RemoteHostPolicy::kPass);
    EXPECT_EQ(r.reason, c.reason) << c.field << " = " << (c.value ? c.value : "(absent)");
    EXPECT_THAT(r.detail, HasSubstr(c.field)) << c.field;
  }
}

TEST(DescriptorContractTest, EdgeValuesThatPass) {
  for (const Case& c : std::vector<Case>{{"remote_port", "1", ""},
                                         {"remote_port", "65535", ""},
                                         {"remote_block_ids", "[]", ""},
                                         {"remote_block_ids", "[[]]", ""},
                                         {"remote_num_tokens", "0", ""},
                                         {"tp_size", nullptr, ""},
                                         {"dcp_size", nullptr, ""},
                                         {"remote_blocks_expiry_time", "123.5", ""},
                                         {"transfer_mode", "\"push\"", ""},
                                         {"x_future", "{\"a\":[1,\"b\"]}", ""}}) {
    json d = Descriptor();
    if (c.value == nullptr) {
      d.erase(c.field);
    } else {
      d[c.field] = json::parse(c.value);
    }
    EXPECT_EQ(Reason(d), "") << c.field;
  }
}

TEST(DescriptorContractTest, NotAnObject) {
  for (const char* bad : {"{}", "[]", "null", "\"d\"", "3"}) {
    EXPECT_EQ(Reason(json::parse(bad)), "not_an_object") << bad;
  }
}

TEST(DescriptorContractTest, EngineIdMustNameTheConfiguredProducer) {
  const ProducerIdentity a{"engine-a", "10.0.0.11"};
  EXPECT_EQ(Reason(Descriptor(), a), "");
  for (const char* ok : {"engine-a_dp0", "engine-a_dp12"}) {
    json d = Descriptor();
    d["remote_engine_id"] = ok;
    EXPECT_EQ(Reason(d, a), "") << ok;
  }
  for (const char* bad : {"engine-b", "engine-a_dp", "engine-a_dpX", "engine-a_dp1x", "engine-",
                          "ENGINE-A", "engine-a "}) {
    json d = Descriptor();
    d["remote_engine_id"] = bad;
    const DescriptorRejection r = CheckDescriptor(d, a, RemoteHostPolicy::kPass);
    EXPECT_EQ(r.reason, "engine_id_mismatch") << bad;
    EXPECT_THAT(r.detail, HasSubstr("engine-a")) << bad;
  }
}

TEST(DescriptorContractTest, RemoteHostPolicies) {
  json local = Descriptor();
  local["remote_host"] = "localhost";
  const ProducerIdentity p{"", "10.0.0.11"};
  // pass: any non-empty host.
  EXPECT_EQ(Reason(local, p, RemoteHostPolicy::kPass), "");
  // match: only the producer's host.
  EXPECT_EQ(Reason(local, p, RemoteHostPolicy::kMatch), "remote_host_mismatch");
  EXPECT_EQ(Reason(Descriptor(), p, RemoteHostPolicy::kMatch), "");
  // rewrite: the producer's host replaces the advertised one; nothing else
  // in the descriptor changes.
  json rewritten = local;
  EXPECT_TRUE(ApplyRemoteHostPolicy(p, RemoteHostPolicy::kRewrite, &rewritten));
  EXPECT_EQ(rewritten["remote_host"], "10.0.0.11");
  rewritten["remote_host"] = "localhost";
  EXPECT_EQ(rewritten, local);
  // Other policies, or a host that is not a string, are left alone.
  json unchanged = local;
  EXPECT_FALSE(ApplyRemoteHostPolicy(p, RemoteHostPolicy::kPass, &unchanged));
  EXPECT_FALSE(ApplyRemoteHostPolicy(p, RemoteHostPolicy::kMatch, &unchanged));
  EXPECT_EQ(unchanged, local);
  json numeric = Descriptor();
  numeric["remote_host"] = 5;
  EXPECT_FALSE(ApplyRemoteHostPolicy(p, RemoteHostPolicy::kRewrite, &numeric));
  EXPECT_EQ(Reason(numeric, p), "bad_remote_host");
}

// Under `pass` the producer's host is forwarded as is, so a compromised
// producer could send every consumer to any address: unspecified,
// link-local and cloud metadata ones are refused (forbidden_remote_host)
// before any decode request. `match` holds the host to the producer's
// configured one and `rewrite` replaces it, so they never see this rule.
TEST(DescriptorContractTest, PassRefusesUnspecifiedLinkLocalAndMetadataHosts) {
  const ProducerIdentity p{"", "10.0.0.11"};
  for (const char* host : {"169.254.169.254", "2852039166", "0.0.0.0", "fe80::1",
                           "metadata.google.internal", "::ffff:169.254.169.254"}) {
    json d = Descriptor();
    d["remote_host"] = host;
    const DescriptorRejection r = CheckDescriptor(d, p, RemoteHostPolicy::kPass);
    EXPECT_EQ(r.reason, "forbidden_remote_host") << host;
    EXPECT_THAT(r.detail, HasSubstr(std::string("remote_host \"") + host + "\" is "));
    EXPECT_THAT(r.detail, HasSubstr("handoff.remote_host: pass"));
    EXPECT_EQ(Reason(d, p, RemoteHostPolicy::kMatch), "remote_host_mismatch") << host;
  }
  json metadata = Descriptor();
  metadata["remote_host"] = "169.254.169.254";
  EXPECT_EQ(CheckDescriptor(metadata, p, RemoteHostPolicy::kPass).detail,
            "remote_host \"169.254.169.254\" is a cloud metadata address, which a consumer is "
            "never sent to (handoff.remote_host: pass)");
  // rewrite: the producer's configured host replaces it before the check.
  EXPECT_TRUE(ApplyRemoteHostPolicy(p, RemoteHostPolicy::kRewrite, &metadata));
  EXPECT_EQ(Reason(metadata, p, RemoteHostPolicy::kRewrite), "");
  // Loopback (vLLM's default advertisement) and ordinary hosts still pass.
  for (const char* host : {"localhost", "127.0.0.1", "10.0.0.99", "prefill-1.svc"}) {
    json d = Descriptor();
    d["remote_host"] = host;
    EXPECT_EQ(Reason(d, p, RemoteHostPolicy::kPass), "") << host;
  }
  const std::vector<std::string_view> reasons = DescriptorRejectionReasons();
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "forbidden_remote_host"), reasons.end());
}

TEST(DescriptorContractTest, PolicyNames) {
  RemoteHostPolicy p = RemoteHostPolicy::kPass;
  EXPECT_TRUE(ParseRemoteHostPolicy("rewrite", &p));
  EXPECT_EQ(p, RemoteHostPolicy::kRewrite);
  EXPECT_TRUE(ParseRemoteHostPolicy("match", &p));
  EXPECT_EQ(p, RemoteHostPolicy::kMatch);
  EXPECT_TRUE(ParseRemoteHostPolicy("pass", &p));
  EXPECT_EQ(p, RemoteHostPolicy::kPass);
  EXPECT_FALSE(ParseRemoteHostPolicy("Pass", &p));
  EXPECT_FALSE(ParseRemoteHostPolicy("", &p));
}

}  // namespace
}  // namespace narwhal::engines
