// Per-link health end to end (README "KV handoff integrity"): narwhal-serve
// in front of real narwhal-sim engines where one consumer fails every decode
// of one producer's handoffs (a `remote_engine_id` fault rule) and works
// with every other producer. The link is held — not either engine — seen
// through ListLinks, narwhal_link_held, WatchEvents, the log and the engines'
// request logs; a link probe readmits it once the pair works again.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;

class ServeLinksTest : public E2eTest {
 protected:
  static pb::ListLinksResponse ListLinks(ServeProcess& router) {
    auto stub = pb::Admin::NewStub(
        grpc::CreateChannel(router.admin_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::ListLinksResponse response;
    const grpc::Status s = stub->ListLinks(&context, pb::ListLinksRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  static std::map<std::string, pb::Link> LinksByName(ServeProcess& router) {
    std::map<std::string, pb::Link> out;
    const pb::ListLinksResponse response = ListLinks(router);
    for (const pb::Link& l : response.links()) out[l.producer() + "->" + l.consumer()] = l;
    return out;
  }
  // The kinds of the events WatchEvents replays (since_seq 0) up to one of
  // kind `until`.
  static std::vector<pb::Event> EventsUntil(ServeProcess& router, const std::string& until) {
    auto stub = pb::Admin::NewStub(
        grpc::CreateChannel(router.admin_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::WatchEventsRequest request;
    request.set_since_seq(0);
    auto reader = stub->WatchEvents(&context, request);
    std::vector<pb::Event> events;
    pb::Event event;
    while (reader->Read(&event)) {
      events.push_back(event);
      if (event.kind() == until) break;
    }
    context.TryCancel();
    return events;
  }
  double LinkHeld(ServeProcess& router, const std::string& producer, const std::string& consumer) {
    return MetricSum(Metrics(router), "narwhal_link_held",
                     {{"producer", producer}, {"consumer", consumer}});
  }
};

TEST_F(ServeLinksTest, AConsumerFailingOnlyWithOneProducerGetsItsLinkHeldAndBothEnginesServe) {
  // Least-loaded placement spreads sequential requests over every pair:
  // prefill alternates p0/p1, decode cycles d0/d1/d2, so p0->d0 is every 6th
  // request. Releases are off: a release leg holds a decode reservation on
  // d1 or d2 while it runs, which would steer the next decode to d0.
  SetFaults("d0", {{"faults",
                    {{{"kind", "http_status"},
                      {"status", 500},
                      {"message", "KV transfer from p0 failed"},
                      {"phase", "decode"},
                      {"remote_engine_id", "p0"},
                      {"times", -1}}}}});
  ServeProcess& router =
      StartRouter({"p0", "p1", "d0", "d1", "d2"},
                  {{"recovery", {{"eject_after", 3}, {"readmit_interval_s", 0.3}}},
                   {"placement", {{"prefill", "least_loaded"}}},
                   {"handoff", {{"release", "off"}}},
                   {"links", {{"hold_after", 3}, {"window_s", 60}}}});
  // A link is listed once a crossed decode used it, and exported only while
  // it is held.
  for (const std::string p : {"p0", "p1"}) {
    for (const std::string c : {"d0", "d1", "d2"}) {
      EXPECT_EQ(MetricSum(Metrics(router), "narwhal_link_held", {{"producer", p}, {"consumer", c}}),
                0);
    }
  }
  EXPECT_EQ(ListLinks(router).links_size(), 0);

  int failed = 0;
  for (int k = 0; k < 13; ++k) {
    const HttpCapture c =
        Send(router, kCompletions, Completion("link " + std::to_string(k), 3, false));
    if (c.status != 200) ++failed;
  }
  EXPECT_EQ(failed, 3);  // p0->d0 at requests 0, 6 and 12
  ASSERT_TRUE(WaitUntil([&] { return LinkHeld(router, "p0", "d0") == 1; }, absl::Seconds(5)));

  std::map<std::string, pb::Link> links = LinksByName(router);
  const pb::Link& held = links["p0->d0"];
  EXPECT_EQ(held.state(), "held");
  EXPECT_GE(held.failures(), 3);
  EXPECT_EQ(held.successes(), 0);
  EXPECT_NE(held.last_failure().find("KV transfer from p0 failed"), std::string::npos)
      << held.last_failure();
  EXPECT_NE(held.cause().find("consecutive failed decodes"), std::string::npos) << held.cause();
  EXPECT_GT(held.since(), 1e9);  // unix seconds
  for (const auto& [name, l] : links) {
    if (name != "p0->d0") {
      EXPECT_EQ(l.state(), "serving") << name;
    }
  }
  EXPECT_GT(links["p1->d0"].successes(), 0);
  EXPECT_GT(links["p0->d1"].successes() + links["p0->d2"].successes(), 0);

  // Neither engine left placement.
  const std::vector<MetricSample> m = Metrics(router);
  for (const std::string iid : {"p0", "p1", "d0", "d1", "d2"}) {
    EXPECT_EQ(MetricSum(m, "narwhal_engine_in_placement", {{"iid", iid}}), 1) << iid;
  }
  EXPECT_EQ(MetricSum(m, "narwhal_engine_ejections_total"), 0);

  // From now on every request succeeds; d0 keeps decoding p1's handoffs and
  // gets none of p0's.
  ASSERT_TRUE(Sim("d0").ClearRequests().ok());
  for (int k = 13; k < 31; ++k) {
    const HttpCapture c =
        Send(router, kCompletions, Completion("link " + std::to_string(k), 3, false));
    EXPECT_EQ(c.status, 200) << Describe(c);
  }
  int from_p0 = 0;
  int from_p1 = 0;
  for (const json& r : SimRequests(Sim("d0"), "decode")) {
    const json& body = r["body"];
    if (!body.is_object() || body.value("prompt", "").find("verification") != std::string::npos) {
      continue;  // probes
    }
    const std::string producer =
        body.contains("kv_transfer_params") && body["kv_transfer_params"].is_object()
            ? body["kv_transfer_params"].value("remote_engine_id", "")
            : "";
    from_p0 += producer == "p0";
    from_p1 += producer == "p1";
  }
  EXPECT_EQ(from_p0, 0);
  EXPECT_GT(from_p1, 0);

  // WatchEvents and the log carry the hold with its cause.
  const std::vector<pb::Event> events = EventsUntil(router, "link_held");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind(), "link_held");
  EXPECT_EQ(events.back().producer(), "p0");
  EXPECT_EQ(events.back().iid(), "d0");
  for (const pb::Event& e : events) {
    EXPECT_NE(e.kind(), "engine_ejected") << e.iid();
    EXPECT_NE(e.kind(), "engine_hold_started") << e.iid();
  }
  EXPECT_NE(router.StderrTail().find("link p0->d0 held out of decode placement"),
            std::string::npos);

  // The pair works again: a link probe readmits the link.
  ASSERT_TRUE(Sim("d0").ClearFaults().ok());
  ASSERT_TRUE(WaitUntil([&] { return LinkHeld(router, "p0", "d0") == 0; }, absl::Seconds(15)));
  const pb::Link back = LinksByName(router)["p0->d0"];
  EXPECT_EQ(back.state(), "serving");
  EXPECT_EQ(back.cause(), "probe passed");
  EXPECT_EQ(EventsUntil(router, "link_readmitted").back().kind(), "link_readmitted");
}

}  // namespace
}  // namespace narwhal::testing
