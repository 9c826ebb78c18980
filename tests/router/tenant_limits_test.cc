// Each tenant's own limits (router/tenant_limits): the in-flight bound and
// its holds, the token bucket on the fake clock and the Retry-After it
// computes, what a reload's new limits do to a tenant's state, and the
// per-tenant metrics.
#include "router/tenant_limits.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <string>
#include <vector>

#include "router/common/metrics.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::router {
namespace {

TenantSettings Tenant(std::string name, int max_inflight, double rate = 0, double burst = 0) {
  TenantSettings t;
  t.name = std::move(name);
  t.key = "k-" + t.name;
  t.max_inflight = max_inflight;
  t.requests_per_s = rate;
  t.burst = burst;
  return t;
}

std::string Exposition(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

class TenantLimitsTest : public ::testing::Test {
 protected:
  narwhal::testing::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_{registry_};
  TenantLimits limits_{clock_, &metrics_};
};

TEST_F(TenantLimitsTest, InFlightBeyondTheTenantsBoundIsRefusedUntilAHoldIsReleased) {
  const TenantSettings a = Tenant("a", 2);
  TenantGrant first = limits_.Acquire(a);
  TenantGrant second = limits_.Acquire(a);
  ASSERT_TRUE(first.admitted());
  ASSERT_TRUE(second.admitted());
  EXPECT_EQ(limits_.InFlight("a"), 2);

  TenantGrant third = limits_.Acquire(a);
  EXPECT_FALSE(third.admitted());
  EXPECT_EQ(third.refused, Reason::kTenantInflightLimit);
  EXPECT_EQ(third.hold, nullptr);
  EXPECT_EQ(third.retry_after_s, 1);
  EXPECT_NE(third.message.find("tenant a in-flight limit reached (2)"), std::string::npos)
      << third.message;

  // Another tenant is not affected.
  EXPECT_TRUE(limits_.Acquire(Tenant("b", 1)).admitted());

  // Released once: a second Release and the destructor give nothing more.
  first.hold->Release();
  first.hold->Release();
  first.hold.reset();
  EXPECT_EQ(limits_.InFlight("a"), 1);
  TenantGrant again = limits_.Acquire(a);
  EXPECT_TRUE(again.admitted());
  EXPECT_EQ(limits_.InFlight("a"), 2);
  EXPECT_FALSE(limits_.Acquire(a).admitted());
}

TEST_F(TenantLimitsTest, AHoldDroppedUnservedGivesItsPlaceBack) {
  const TenantSettings a = Tenant("a", 1);
  { TenantGrant grant = limits_.Acquire(a); }
  EXPECT_EQ(limits_.InFlight("a"), 0);
  EXPECT_TRUE(limits_.Acquire(a).admitted());
}

TEST_F(TenantLimitsTest, WithoutAnInFlightBoundRequestsAreStillCounted) {
  const TenantSettings a = Tenant("a", 0);
  std::vector<TenantGrant> grants;
  for (int i = 0; i < 50; ++i) {
    grants.push_back(limits_.Acquire(a));
    ASSERT_TRUE(grants.back().admitted());
  }
  EXPECT_EQ(limits_.InFlight("a"), 50);
  EXPECT_NE(Exposition(registry_).find("narwhal_tenant_inflight{tenant=\"a\"} 50"),
            std::string::npos);
}

TEST_F(TenantLimitsTest, TheBucketStartsFullRefillsAtTheRateAndNamesTheWait) {
  // 2 per second, room for 3.
  const TenantSettings a = Tenant("a", 0, 2, 3);
  std::vector<TenantGrant> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(limits_.Acquire(a));
    ASSERT_TRUE(held.back().admitted()) << i;
  }
  TenantGrant refused = limits_.Acquire(a);
  EXPECT_EQ(refused.refused, Reason::kTenantRateLimit);
  EXPECT_EQ(refused.retry_after_s, 1);  // 0.5 s to the next token, rounded up
  EXPECT_NE(refused.message.find("tenant a rate limit reached (2 requests per second)"),
            std::string::npos)
      << refused.message;
  EXPECT_EQ(limits_.InFlight("a"), 3);  // a refusal holds nothing

  clock_.Advance(0.49);
  EXPECT_FALSE(limits_.Acquire(a).admitted());
  clock_.Advance(0.02);  // 0.51 s: one token
  EXPECT_TRUE(limits_.Acquire(a).admitted());
  EXPECT_FALSE(limits_.Acquire(a).admitted());

  // A long rest fills the bucket to its size, not beyond.
  clock_.Advance(100);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limits_.Acquire(a).admitted()) << i;
  EXPECT_FALSE(limits_.Acquire(a).admitted());
}

TEST_F(TenantLimitsTest, RetryAfterIsTheWholeSecondsUntilTheNextToken) {
  // One request per 10 s.
  const TenantSettings a = Tenant("a", 0, 0.1, 1);
  ASSERT_TRUE(limits_.Acquire(a).admitted());
  EXPECT_EQ(limits_.Acquire(a).retry_after_s, 10);
  clock_.Advance(2.5);
  EXPECT_EQ(limits_.Acquire(a).retry_after_s, 8);  // 7.5 s, rounded up
  clock_.Advance(7.5);
  EXPECT_TRUE(limits_.Acquire(a).admitted());
}

TEST_F(TenantLimitsTest, ANewGenerationsLimitsApplyToTheStateTheTenantHas) {
  TenantSettings a = Tenant("a", 3, 1, 5);
  std::vector<TenantGrant> held;
  for (int i = 0; i < 3; ++i) held.push_back(limits_.Acquire(a));
  // Reloaded: in flight down to 2 (the 3 held stay held), burst down to 1.
  a.max_inflight = 2;
  a.burst = 1;
  EXPECT_EQ(limits_.Acquire(a).refused, Reason::kTenantInflightLimit);
  held[0].hold->Release();
  held[1].hold->Release();
  // One place free now; the bucket (2 tokens left) was cut to the new size 1.
  EXPECT_TRUE(limits_.Acquire(a).admitted());
  held.pop_back();  // frees the third place
  EXPECT_EQ(limits_.Acquire(a).refused, Reason::kTenantRateLimit);
}

TEST_F(TenantLimitsTest, ThrottlesAreCountedPerTenantAndLimit) {
  const TenantSettings a = Tenant("a", 1, 1, 1);
  TenantGrant held = limits_.Acquire(a);
  ASSERT_TRUE(held.admitted());
  EXPECT_FALSE(limits_.Acquire(a).admitted());  // in flight
  held.hold->Release();
  EXPECT_FALSE(limits_.Acquire(a).admitted());  // rate
  EXPECT_FALSE(limits_.Acquire(a).admitted());  // rate
  const std::string text = Exposition(registry_);
  EXPECT_NE(text.find("narwhal_tenant_throttled_total{limit=\"inflight\",tenant=\"a\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("narwhal_tenant_throttled_total{limit=\"rate\",tenant=\"a\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("narwhal_tenant_inflight{tenant=\"a\"} 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace narwhal::router
