// Which client request ids are kept (echoed, journaled, carried to engines).
#include "server/client_request_id.h"

#include <gtest/gtest.h>

namespace narwhal::server {
namespace {

TEST(ClientRequestIdTest, KeepsTokenIdsUpToTheBound) {
  EXPECT_EQ(SaneClientRequestId("trace-42.a"), "trace-42.a");
  EXPECT_EQ(SaneClientRequestId("0af7651916cd43dd8448eb211c80319c"),
            "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(SaneClientRequestId("a:b_c~d+e/f=g@h"), "a:b_c~d+e/f=g@h");
  const std::string longest(kMaxClientRequestIdBytes, 'x');
  EXPECT_EQ(SaneClientRequestId(longest), longest);
}

TEST(ClientRequestIdTest, DropsEmptyLongAndNonTokenIds) {
  EXPECT_EQ(SaneClientRequestId(""), "");
  EXPECT_EQ(SaneClientRequestId(std::string(kMaxClientRequestIdBytes + 1, 'x')), "");
  for (const char* bad : {"has space", "quote\"", "semi;colon", "comma,", "tab\t", "new\nline",
                          "back\\slash", "caf\xc3\xa9"}) {
    EXPECT_EQ(SaneClientRequestId(bad), "") << bad;
  }
}

}  // namespace
}  // namespace narwhal::server
