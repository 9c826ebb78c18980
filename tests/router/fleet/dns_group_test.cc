// B24 DNS groups, the pure parts: a group's members from an answer's
// addresses, the name check, and how an answer's addresses are normalised
// and bounded.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "router/fleet/dns_group.h"
#include "router/fleet/dns_resolver.h"

namespace narwhal::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(DnsGroupMembersTest, B24_OneMemberPerAddressWithIidAndUrl) {
  EXPECT_THAT(DnsGroupMembers("decode", 8000, {"10.0.0.7", "10.0.0.12"}),
              ElementsAre(DnsGroupMember{"decode-10.0.0.7-8000", "http://10.0.0.7:8000", "10.0.0.7"},
                          DnsGroupMember{"decode-10.0.0.12-8000", "http://10.0.0.12:8000", "10.0.0.12"}));
}

TEST(DnsGroupMembersTest, B24_Ipv6InBracketsInTheUrlAndDashesInTheIid) {
  EXPECT_THAT(DnsGroupMembers("p", 80, {"fd00::1", "2001:db8::a:b"}),
              ElementsAre(DnsGroupMember{"p-fd00--1-80", "http://[fd00::1]:80", "[fd00::1]"},
                          DnsGroupMember{"p-2001-db8--a-b-80", "http://[2001:db8::a:b]:80",
                                         "[2001:db8::a:b]"}));
}

TEST(DnsGroupMembersTest, B24_OnlyTheAddressIsRewritten) {
  // The group iid is already a valid iid ([A-Za-z0-9._-]) and is kept as
  // configured; only the address's characters are rewritten.
  EXPECT_THAT(DnsGroupMembers("vllm_decode.a", 1, {"::ffff:10.0.0.1"}),
              ElementsAre(DnsGroupMember{"vllm_decode.a---ffff-10.0.0.1-1",
                                         "http://[::ffff:10.0.0.1]:1", "[::ffff:10.0.0.1]"}));
}

TEST(DnsGroupMembersTest, B26_KvEventEndpointsNameEachMemberAtTheGroupsPort) {
  EXPECT_EQ(MemberEndpoint("tcp://vllm-prefill.llm.svc:5557", "10.0.0.7"), "tcp://10.0.0.7:5557");
  EXPECT_EQ(MemberEndpoint("tcp://vllm-prefill:5558", "[fd00::1]"), "tcp://[fd00::1]:5558");
  EXPECT_EQ(MemberEndpoint("", "10.0.0.7"), "") << "no endpoint, none for the members";
}

TEST(DnsGroupMembersTest, B24_NoAddressesNoMembers) {
  EXPECT_THAT(DnsGroupMembers("decode", 8000, {}), IsEmpty());
}

TEST(CheckDnsNameTest, AcceptsHostNamesAndOneTrailingDot) {
  EXPECT_EQ(CheckDnsName("vllm-decode.llm.svc.cluster.local"), "");
  EXPECT_EQ(CheckDnsName("vllm-decode.llm.svc.cluster.local."), "");
  EXPECT_EQ(CheckDnsName("_http._tcp.engines.test"), "");
  EXPECT_EQ(CheckDnsName("localhost"), "");
}

TEST(CheckDnsNameTest, RefusesBadNames) {
  EXPECT_THAT(CheckDnsName(""), HasSubstr("empty"));
  EXPECT_THAT(CheckDnsName("."), HasSubstr("empty"));
  EXPECT_THAT(CheckDnsName("a..b"), HasSubstr("empty label"));
  EXPECT_THAT(CheckDnsName(".a"), HasSubstr("empty label"));
  EXPECT_THAT(CheckDnsName("a b.test"), HasSubstr("letters, digits"));
  EXPECT_THAT(CheckDnsName("a/b.test"), HasSubstr("letters, digits"));
  EXPECT_THAT(CheckDnsName(std::string(64, 'a') + ".test"), HasSubstr("63"));
  EXPECT_EQ(CheckDnsName(std::string(63, 'a') + ".test"), "");
}

TEST(CheckDnsNameTest, RefusesNamesLongerThan253Bytes) {
  // Four labels of 63 bytes and three dots: 255 bytes; trim to the bound.
  const std::string label(63, 'a');
  std::string name = label + "." + label + "." + label + "." + label;
  name.resize(kMaxDnsNameBytes);  // ends in a 61-byte label
  EXPECT_EQ(CheckDnsName(name), "");
  EXPECT_EQ(CheckDnsName(name + "."), "");
  EXPECT_THAT(CheckDnsName(name + "b"), HasSubstr("254 bytes long, more than 253"));
}

TEST(DnsAnswerTest, AddressesAreDeduplicatedAndSortedIpv4First) {
  const DnsAnswer answer = DnsAnswer::Addresses(
      {"fd00::2", "10.0.0.10", "10.0.0.9", "fd00:0::1", "10.0.0.9", "fd00::2", "9.9.9.9"});
  EXPECT_EQ(answer.kind, DnsAnswer::Kind::kAddresses);
  EXPECT_THAT(answer.addresses, ElementsAre("9.9.9.9", "10.0.0.9", "10.0.0.10", "fd00::1", "fd00::2"));
}

TEST(DnsAnswerTest, NoAddressesIsNoAddress) {
  EXPECT_EQ(DnsAnswer::Addresses({}).kind, DnsAnswer::Kind::kNoAddress);
}

TEST(DnsAnswerTest, TextThatIsNoAddressFails) {
  const DnsAnswer answer = DnsAnswer::Addresses({"10.0.0.1", "[fd00::1]"});
  EXPECT_EQ(answer.kind, DnsAnswer::Kind::kFailed);
  EXPECT_THAT(answer.error, HasSubstr("[fd00::1]"));
}

TEST(DnsAnswerTest, MoreThanTheCapFailsAndTheCapItselfPasses) {
  std::vector<std::string> addresses;
  for (size_t i = 0; i < kMaxDnsAddresses; ++i) {
    addresses.push_back("10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256));
  }
  const DnsAnswer at_cap = DnsAnswer::Addresses(addresses);
  EXPECT_EQ(at_cap.kind, DnsAnswer::Kind::kAddresses);
  EXPECT_EQ(at_cap.addresses.size(), kMaxDnsAddresses);
  addresses.push_back("10.9.9.9");
  addresses.push_back("10.0.0.0");  // a duplicate does not count twice
  const DnsAnswer over = DnsAnswer::Addresses(addresses);
  EXPECT_EQ(over.kind, DnsAnswer::Kind::kFailed);
  EXPECT_THAT(over.error, HasSubstr("1025 addresses, more than the 1024"));
}

TEST(DnsAnswerTest, KindNames) {
  EXPECT_EQ(DnsAnswerKindName(DnsAnswer::Kind::kAddresses), "addresses");
  EXPECT_EQ(DnsAnswerKindName(DnsAnswer::Kind::kNoAddress), "no_address");
  EXPECT_EQ(DnsAnswerKindName(DnsAnswer::Kind::kFailed), "failed");
}

}  // namespace
}  // namespace narwhal::router
