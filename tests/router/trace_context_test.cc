// W3C Trace Context (router/trace_context.h): which traceparents are
// continued, what a leg's child traceparent is, and which tracestates pass.
#include "router/trace_context.h"

#include <gtest/gtest.h>

#include <string>

namespace narwhal::router {
namespace {

constexpr const char* kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kParent = "00f067aa0ba902b7";

std::string Traceparent(std::string version, std::string trace, std::string parent,
                        std::string flags) {
  return version + "-" + trace + "-" + parent + "-" + flags;
}

TEST(TraceContextTest, AValidTraceparentIsContinuedWithItsFlagsAndTracestate) {
  auto t = ParseTraceparent(Traceparent("00", kTrace, kParent, "01"), "congo=t61rcWkgMzE");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, kTrace);
  EXPECT_EQ(t->parent_id, kParent);
  EXPECT_EQ(t->flags, 0x01);
  EXPECT_TRUE(t->continued());
  EXPECT_EQ(t->tracestate, "congo=t61rcWkgMzE");
  EXPECT_EQ(t->ChildTraceparent("b7ad6b7169203331"),
            std::string("00-") + kTrace + "-b7ad6b7169203331-01");
}

TEST(TraceContextTest, InvalidTraceparentsAreIgnored) {
  const std::string zeros32(32, '0');
  const std::string zeros16(16, '0');
  for (const std::string& bad : {
           std::string(),
           std::string("garbage"),
           Traceparent("00", kTrace, kParent, "01") + "-extra",  // version 00 is 55 long
           Traceparent("ff", kTrace, kParent, "01"),             // version ff is invalid
           Traceparent("0g", kTrace, kParent, "01"),
           Traceparent("00", zeros32, kParent, "01"),  // all-zero trace id
           Traceparent("00", kTrace, zeros16, "01"),   // all-zero parent id
           Traceparent("00", "4BF92F3577B34DA6A3CE929D0E0E4736", kParent, "01"),  // upper case
           Traceparent("00", kTrace, kParent, "0x"),
           std::string("00_") + kTrace + "-" + kParent + "-01",
           Traceparent("00", std::string(kTrace).substr(1), kParent, "01"),
       }) {
    EXPECT_FALSE(ParseTraceparent(bad, "a=b").has_value()) << bad;
  }
}

TEST(TraceContextTest, ALaterVersionIsReadAsVersionZeroKeepingOnlySampled) {
  auto t = ParseTraceparent(Traceparent("cc", kTrace, kParent, "ff") + "-what-comes-later", "");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, kTrace);
  EXPECT_EQ(t->flags, 0x01);
  // ... but what follows its 55 characters must start with '-'.
  EXPECT_FALSE(ParseTraceparent(Traceparent("cc", kTrace, kParent, "01") + "x", "").has_value());
}

TEST(TraceContextTest, ATracestateTooLongOrNotPrintableIsDropped) {
  const std::string tp = Traceparent("00", kTrace, kParent, "00");
  EXPECT_EQ(ParseTraceparent(tp, std::string(512, 'a'))->tracestate, std::string(512, 'a'));
  EXPECT_EQ(ParseTraceparent(tp, std::string(513, 'a'))->tracestate, "");
  EXPECT_EQ(ParseTraceparent(tp, "a=b\r\nx: y")->tracestate, "");
  EXPECT_EQ(ParseTraceparent(tp, "a=b")->flags, 0x00);
}

TEST(TraceContextTest, ANewTraceUsesTheRandomIdAndIsNotSampled) {
  const TraceContext t = NewTrace(kTrace);
  EXPECT_EQ(t.trace_id, kTrace);
  EXPECT_FALSE(t.continued());
  EXPECT_EQ(t.flags, 0);
  EXPECT_EQ(t.ChildTraceparent(kParent), std::string("00-") + kTrace + "-" + kParent + "-00");
  EXPECT_EQ(TraceContext{}.ChildTraceparent(kParent), "");
}

}  // namespace
}  // namespace narwhal::router
