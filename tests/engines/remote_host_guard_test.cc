// The hosts a descriptor may not name under handoff.remote_host: pass
// (engines/remote_host_guard.h): unspecified, link-local and cloud metadata
// addresses and names, in every spelling a C resolver reads; loopback and
// ordinary hosts stay allowed.
#include "engines/remote_host_guard.h"

#include <string>

#include <gtest/gtest.h>

namespace narwhal::engines {
namespace {

TEST(RemoteHostGuardTest, OrdinaryHostsAndLoopbackAreAllowed) {
  for (const char* host :
       {"10.0.0.11", "192.168.1.20", "172.16.0.5", "8.8.8.8", "127.0.0.1", "localhost", "::1",
        "[::1]", "2001:db8::7", "prefill-0.engines.svc.cluster.local", "node-a",
        "169.253.255.255", "169.255.0.1", "100.100.100.201", "fe7f::1", "fec0::1",
        "metadata.example.com", "not-metadata"}) {
    EXPECT_EQ(ForbiddenRemoteHostKind(host), "") << host;
  }
}

TEST(RemoteHostGuardTest, UnspecifiedAddressesAreRefused) {
  for (const char* host : {"0.0.0.0", "0", "0.1.2.3", "::", "[::]", "::ffff:0.0.0.0", "0x0"}) {
    EXPECT_EQ(ForbiddenRemoteHostKind(host), "an unspecified address") << host;
  }
}

TEST(RemoteHostGuardTest, LinkLocalAddressesAreRefused) {
  for (const char* host : {"169.254.0.1", "169.254.10.20", "169.254.255.255", "fe80::1",
                           "FE80::1%eth0", "[fe80::abcd]", "febf::1", "::ffff:169.254.1.1",
                           "64:ff9b::169.254.1.1"}) {
    EXPECT_EQ(ForbiddenRemoteHostKind(host), "a link-local address") << host;
  }
}

TEST(RemoteHostGuardTest, CloudMetadataAddressesInEverySpellingAreRefused) {
  for (const char* host :
       {"169.254.169.254", "169.254.169.254.", "2852039166", "0xa9.0xfe.0xa9.0xfe",
        "0251.0376.0251.0376", "169.254.43518", "::ffff:169.254.169.254", "[::ffff:a9fe:a9fe]",
        "::169.254.169.254", "100.100.100.200", "fd00:ec2::254", "[FD00:EC2::254]"}) {
    EXPECT_EQ(ForbiddenRemoteHostKind(host), "a cloud metadata address") << host;
  }
}

TEST(RemoteHostGuardTest, CloudMetadataNamesAreRefused) {
  for (const char* host : {"metadata", "metadata.google.internal", "Metadata.Google.Internal.",
                           "metadata.goog", "instance-data", "instance-data.ec2.internal"}) {
    EXPECT_EQ(ForbiddenRemoteHostKind(host), "a cloud metadata host name") << host;
  }
}

// A C resolver stops at a NUL: what it would read is what is judged.
TEST(RemoteHostGuardTest, BytesAfterANulDoNotHideTheAddress) {
  EXPECT_EQ(ForbiddenRemoteHostKind(std::string("169.254.169.254\0.example.com", 28)),
            "a cloud metadata address");
  EXPECT_EQ(ForbiddenRemoteHostKind(std::string("10.0.0.1\0", 9)), "");
}

}  // namespace
}  // namespace narwhal::engines
