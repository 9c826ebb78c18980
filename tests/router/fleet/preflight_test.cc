// Unit tests of router/preflight (B18) against the scripted engine client and
// the fake clock: pair generation, gate order and skipping, transfer
// classification, bounds, and the report's JSON and table forms.
#include "router/fleet/preflight.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engines/api.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "router/common/settings.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;
using Pairs = std::vector<std::pair<std::string, std::string>>;

using testing::Call;
using testing::FakeClock;
using testing::ScriptedEngines;

// The scripted engines' timing: every prefill, a consumer's first token, the
// rest of its stream, a control call, and what a silent consumer costs.
constexpr double kPrefillS = 0.1;
constexpr double kFirstTokenS = 0.25;
constexpr double kStreamTailS = 0.01;
constexpr double kControlS = 0.001;
constexpr double kSilentS = 1.0;

// The adapter's failures for the legs scripted to fail.
engines::EngineFailure NoHandoff() {
  return testing::Failure(engines::FailureReason::kInvalidResponse,
                          engines::BreakerClass::kKvHandoff, engines::FailureCause::kNoHandoff,
                          "no handoff: response carries no kv_transfer_params");
}
engines::EngineFailure MissingDone() {
  return testing::Failure(engines::FailureReason::kEngineError, engines::BreakerClass::kStream,
                          engines::FailureCause::kUnterminated,
                          "stream ended before the [DONE] terminator");
}

// Engines named by role: "p0" prefill, "d0" decode, anything else both.
Settings PreflightFleet(const std::vector<std::string>& iids) {
  Settings s;
  s.model = "Qwen/Qwen3-0.6B";
  int port = 9000;
  for (const std::string& iid : iids) {
    EngineSettings e;
    e.iid = iid;
    e.url = "http://127.0.0.1:" + std::to_string(port++);
    e.role = iid[0] == 'p' ? Role::kPrefill : iid[0] == 'd' ? Role::kDecode : Role::kBoth;
    s.engines.push_back(e);
  }
  s.engine.health_timeout_s = 1.5;
  s.engine.first_token_timeout_s = 0.75;
  s.serving.request_timeout_s = 30;
  return s;
}

EngineContract Pinned(const std::string& version) {
  EngineContract c;
  c.vllm_version = version;
  return c;
}

const PreflightGate& Gate(const PreflightReport& r, const std::string& name) {
  for (const PreflightGate& g : r.gates) {
    if (g.name == name) return g;
  }
  static const PreflightGate kMissing{"missing", false, false, "no such gate", 0};
  ADD_FAILURE() << "no gate " << name;
  return kMissing;
}

const PreflightCheck* Check(const PreflightReport& r, const std::string& gate,
                            const std::string& iid) {
  for (const PreflightCheck& c : r.checks) {
    if (c.gate == gate && c.iid == iid) return &c;
  }
  return nullptr;
}

const PreflightPair& Transfer(const PreflightReport& r, const std::string& producer,
                              const std::string& consumer) {
  for (const PreflightPair& p : r.transfers) {
    if (p.producer == producer && p.consumer == consumer) return p;
  }
  static const PreflightPair kMissing{};
  ADD_FAILURE() << "no transfer " << producer << " -> " << consumer;
  return kMissing;
}

std::vector<std::string> GateNames(const PreflightReport& r) {
  std::vector<std::string> names;
  for (const PreflightGate& g : r.gates) names.push_back(g.name);
  return names;
}

const std::vector<std::string> kGateOrder = {"reach", "contract", "model", "produce", "consume"};

// --- Pair generation. ---

TEST(PreflightPairsTest, TwoPrefillTwoDecode) {
  const Settings s = PreflightFleet({"p0", "p1", "d0", "d1"});
  EXPECT_EQ(PreflightPairs(s, PairMode::kMesh),
            (Pairs{{"p0", "d0"}, {"p0", "d1"}, {"p1", "d0"}, {"p1", "d1"}}));
  EXPECT_EQ(PreflightPairs(s, PairMode::kRing), (Pairs{{"p0", "d0"}, {"p1", "d1"}}));
}

TEST(PreflightPairsTest, OnePrefillOneDecode) {
  const Settings s = PreflightFleet({"p0", "d0"});
  EXPECT_EQ(PreflightPairs(s, PairMode::kMesh), (Pairs{{"p0", "d0"}}));
  EXPECT_EQ(PreflightPairs(s, PairMode::kRing), (Pairs{{"p0", "d0"}}));
}

TEST(PreflightPairsTest, TwoBothEnginesPairEitherWayNeverWithThemselves) {
  const Settings s = PreflightFleet({"a", "b"});
  EXPECT_EQ(PreflightPairs(s, PairMode::kMesh), (Pairs{{"a", "b"}, {"b", "a"}}));
  EXPECT_EQ(PreflightPairs(s, PairMode::kRing), (Pairs{{"a", "b"}, {"b", "a"}}));
}

TEST(PreflightPairsTest, OneBothOneDecode) {
  // The decode engine cannot produce, and `a` never pairs with itself.
  const Settings s = PreflightFleet({"a", "d0"});
  EXPECT_EQ(PreflightPairs(s, PairMode::kMesh), (Pairs{{"a", "d0"}}));
  EXPECT_EQ(PreflightPairs(s, PairMode::kRing), (Pairs{{"a", "d0"}}));
}

TEST(PreflightPairsTest, ThreeBothEnginesRingIsACycle) {
  const Settings s = PreflightFleet({"e0", "e1", "e2"});
  EXPECT_EQ(PreflightPairs(s, PairMode::kMesh).size(), 6u);
  EXPECT_EQ(PreflightPairs(s, PairMode::kRing), (Pairs{{"e0", "e1"}, {"e1", "e2"}, {"e2", "e0"}}));
}

TEST(PreflightPairsTest, RingCoversTheLargerSide) {
  EXPECT_EQ(PreflightPairs(PreflightFleet({"p0", "d0", "d1", "d2"}), PairMode::kRing),
            (Pairs{{"p0", "d0"}, {"p0", "d1"}, {"p0", "d2"}}));
  EXPECT_EQ(PreflightPairs(PreflightFleet({"p0", "p1", "p2", "d0"}), PairMode::kRing),
            (Pairs{{"p0", "d0"}, {"p1", "d0"}, {"p2", "d0"}}));
}

TEST(PreflightPairsTest, RingCoversABothEngineInEachRole) {
  // P = [a, p1], C = [a, d1]: the round robin gives a>d1 and p1>d1, and `a`
  // (which p1 may feed) is then covered as a consumer.
  EXPECT_EQ(PreflightPairs(PreflightFleet({"a", "p1", "d1"}), PairMode::kRing),
            (Pairs{{"a", "d1"}, {"p1", "d1"}, {"p1", "a"}}));
}

TEST(PreflightPairsTest, EveryPairIsRolePermittedAndRingCoversEveryMeshEngine) {
  const std::vector<std::vector<std::string>> fleets = {{"p0", "d0"},
                                                        {"a", "b"},
                                                        {"a", "d0"},
                                                        {"p0", "a"},
                                                        {"p0", "p1", "d0"},
                                                        {"a", "b", "c", "d0"},
                                                        {"p0", "a", "b", "d0", "d1"},
                                                        {"a"},
                                                        {"p0", "p1", "p2", "d0", "d1"}};
  for (const auto& iids : fleets) {
    const Settings s = PreflightFleet(iids);
    std::map<std::string, Role> roles;
    for (const EngineSettings& e : s.engines) roles[e.iid] = e.role;
    const Pairs mesh = PreflightPairs(s, PairMode::kMesh);
    const Pairs ring = PreflightPairs(s, PairMode::kRing);
    std::set<std::string> mesh_producers, mesh_consumers, ring_producers, ring_consumers;
    for (const Pairs* pairs : {&mesh, &ring}) {
      for (const auto& [p, c] : *pairs) {
        EXPECT_NE(p, c);
        EXPECT_TRUE(CanPrefill(roles[p])) << p;
        EXPECT_TRUE(CanDecode(roles[c])) << c;
      }
    }
    for (const auto& [p, c] : mesh) {
      mesh_producers.insert(p);
      mesh_consumers.insert(c);
    }
    for (const auto& [p, c] : ring) {
      ring_producers.insert(p);
      ring_consumers.insert(c);
    }
    EXPECT_EQ(ring_producers, mesh_producers) << iids.size() << " engines";
    EXPECT_EQ(ring_consumers, mesh_consumers) << iids.size() << " engines";
    const std::set<std::pair<std::string, std::string>> distinct(ring.begin(), ring.end());
    EXPECT_EQ(distinct.size(), ring.size());
    EXPECT_LE(ring.size(), mesh.size());
  }
  EXPECT_TRUE(PreflightPairs(PreflightFleet({"a"}), PairMode::kMesh).empty());
}

TEST(PreflightPairsTest, PairModeNames) {
  PairMode mode = PairMode::kMesh;
  EXPECT_TRUE(ParsePairMode("ring", &mode));
  EXPECT_EQ(mode, PairMode::kRing);
  EXPECT_TRUE(ParsePairMode("mesh", &mode));
  EXPECT_EQ(mode, PairMode::kMesh);
  EXPECT_FALSE(ParsePairMode("star", &mode));
  EXPECT_FALSE(ParsePairMode("", &mode));
  EXPECT_EQ(mode, PairMode::kMesh);
  EXPECT_STREQ(PairModeName(PairMode::kRing), "ring");
  EXPECT_STREQ(PairModeName(PairMode::kMesh), "mesh");
}

// --- Running preflight. ---

// Engines that answer like healthy narwhal-sim processes serving the
// fleet's model unless a test scripts otherwise.
class PreflightRunTest : public ::testing::Test {
 protected:
  PreflightRunTest() {
    client_.SetDefaultPrefill({.latency_s = kPrefillS});
    client_.SetDefaultDecode({.latency_s = kFirstTokenS, .tail_s = kStreamTailS});
    client_.SetServedModel("Qwen/Qwen3-0.6B", 32768);
    client_.set_control_latency(kControlS);
  }
  PreflightReport Run(PairMode mode = PairMode::kMesh) {
    return RunPreflight(settings_, client_, loop_.executor(), clock_, mode);
  }

  Settings settings_ = PreflightFleet({"p0", "p1", "d0", "d1"});
  testing::ControlLoop loop_;  // the control plane's loop
  FakeClock clock_;
  ScriptedEngines client_{clock_, &clock_, kSilentS};
};

TEST_F(PreflightRunTest, HealthyFleetPassesEveryGateInOrder) {
  settings_.engine_contract = Pinned("0.29.1");
  const PreflightReport r = Run();
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(GateNames(r), kGateOrder);
  for (const PreflightGate& g : r.gates) {
    EXPECT_TRUE(g.passed) << g.name << ": " << g.detail;
    EXPECT_FALSE(g.skipped) << g.name;
  }
  EXPECT_EQ(Gate(r, "consume").detail, "4 pair(s) transferred a fresh handoff (mesh)");
  // Checks: reach, contract and model on all four, produce on the producers.
  EXPECT_EQ(r.checks.size(), 4u * 3 + 2);
  ASSERT_NE(Check(r, "produce", "p1"), nullptr);
  EXPECT_EQ(Check(r, "produce", "d0"), nullptr);
  for (const PreflightCheck& c : r.checks) EXPECT_EQ(c.outcome, "passed") << c.gate << c.iid;
  ASSERT_EQ(r.transfers.size(), 4u);
  for (const PreflightPair& p : r.transfers) {
    EXPECT_EQ(p.outcome, "passed");
    EXPECT_EQ(p.detail, "");
    EXPECT_DOUBLE_EQ(p.prefill_s, 0.1);
    EXPECT_DOUBLE_EQ(p.first_token_s, 0.25);
    EXPECT_DOUBLE_EQ(p.duration_s, 0.36);
  }
}

TEST_F(PreflightRunTest, ControlCallsAreBoundedByTheHealthTimeout) {
  settings_.engine_contract = Pinned("0.29.1");
  Run();
  const std::vector<Call> controls = client_.calls("control");
  ASSERT_FALSE(controls.empty());
  std::set<std::string> paths;
  for (const Call& c : controls) {
    EXPECT_DOUBLE_EQ(c.timeout_s, 1.5) << c.path;
    paths.insert(c.path);
  }
  EXPECT_EQ(paths, (std::set<std::string>{"GET /health", "GET /version", "GET /v1/models"}));
}

TEST_F(PreflightRunTest, EveryPairGetsAFreshHandoffAndLegsAreBounded) {
  const PreflightReport r = Run();
  ASSERT_TRUE(r.passed);
  // Two produce checks, then one prefill per pair.
  const std::vector<Call> prefills = client_.calls("prefill");
  const std::vector<Call> decodes = client_.calls("decode");
  ASSERT_EQ(prefills.size(), 2u + 4);
  ASSERT_EQ(decodes.size(), 4u);
  std::set<std::string> prefill_ids, prompts;
  for (const Call& p : prefills) {
    prefill_ids.insert(p.options.backend_request_id);
    prompts.insert(p.body["prompt"].get<std::string>());
    // Each probe leg: the first-token budget; each attempt: the request timeout.
    ASSERT_TRUE(p.options.leg_deadline.has_value());
    EXPECT_EQ(*p.options.leg_deadline, p.at + engines::FromSeconds(0.75));
    EXPECT_EQ(p.options.request_deadline, p.at + engines::FromSeconds(30));
  }
  EXPECT_EQ(prefill_ids.size(), prefills.size());
  EXPECT_EQ(prompts.size(), prefills.size()) << "every probe has a unique prompt";

  std::set<std::string> decoded;
  for (size_t i = 0; i < decodes.size(); ++i) {
    const Call& d = decodes[i];
    // The handoff decoded is the one the pair's own prefill produced, just before.
    const Call& own_prefill = prefills[2 + i];
    EXPECT_EQ(d.handoff_request_id, own_prefill.options.backend_request_id);
    EXPECT_EQ(d.handoff_producer, own_prefill.iid);
    EXPECT_EQ(d.descriptor["remote_request_id"], own_prefill.options.backend_request_id);
    EXPECT_NE(d.iid, d.handoff_producer);  // the consumer
    EXPECT_TRUE(decoded.insert(d.handoff_request_id).second) << "a handoff was reused";
    EXPECT_EQ(d.options.request_deadline, own_prefill.at + engines::FromSeconds(30));
    const int max_tokens = d.body["max_tokens"].get<int>();
    EXPECT_GE(max_tokens, 1);
    EXPECT_LE(max_tokens, 4);
    EXPECT_EQ(d.body["model"], "Qwen/Qwen3-0.6B");
  }
  // The produce gate's handoffs are never decoded.
  EXPECT_EQ(decoded.count(prefills[0].options.backend_request_id), 0u);
  EXPECT_EQ(decoded.count(prefills[1].options.backend_request_id), 0u);
}

TEST_F(PreflightRunTest, RingRunsOnlyRingPairs) {
  const PreflightReport r = Run(PairMode::kRing);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.pairs, PairMode::kRing);
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_EQ(Transfer(r, "p0", "d0").outcome, "passed");
  EXPECT_EQ(Transfer(r, "p1", "d1").outcome, "passed");
  EXPECT_EQ(client_.calls("decode").size(), 2u);
}

TEST_F(PreflightRunTest, DurationsComeFromTheClock) {
  const MonoTime before = clock_.Now();
  const double wall_before = clock_.WallNow();
  const PreflightReport r = Run();
  EXPECT_DOUBLE_EQ(r.started_at, wall_before);
  EXPECT_NEAR(r.duration_s, engines::Seconds(clock_.Now() - before), 1e-6);
  double gates = 0;
  for (const PreflightGate& g : r.gates) gates += g.duration_s;
  EXPECT_NEAR(gates, r.duration_s, 1e-5);
  // Produce: two prefills of 0.1 s.
  EXPECT_NEAR(Gate(r, "produce").duration_s, 0.2, 1e-6);
  EXPECT_NEAR(Check(r, "produce", "p0")->duration_s, 0.1, 1e-6);
}

TEST_F(PreflightRunTest, NoContractPassesTheContractGateWithoutAsking) {
  const PreflightReport r = Run();
  EXPECT_TRUE(Gate(r, "contract").passed);
  EXPECT_FALSE(Gate(r, "contract").skipped);
  EXPECT_EQ(Gate(r, "contract").detail, "no engine_contract configured");
  EXPECT_EQ(Check(r, "contract", "p0"), nullptr);
  for (const Call& c : client_.calls("control")) {
    EXPECT_FALSE(c.path.ends_with(" /version")) << c.path;
  }
}

TEST_F(PreflightRunTest, UnreachableEngineFailsReachAndIsSkippedLater) {
  engines::ControlResponse refused;
  refused.error = "connection refused";
  client_.SetControl("d1", "/health", refused);
  settings_.engine_contract = Pinned("0.29.1");
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(GateNames(r), kGateOrder);
  EXPECT_FALSE(Gate(r, "reach").passed);
  EXPECT_EQ(Gate(r, "reach").detail, "d1: GET /health: connection refused");
  EXPECT_EQ(Check(r, "reach", "d1")->outcome, "failed");
  EXPECT_EQ(Check(r, "contract", "d1")->outcome, "skipped");
  EXPECT_EQ(Check(r, "model", "d1")->outcome, "skipped");
  EXPECT_EQ(Check(r, "model", "d1")->detail, "skipped: failed reach");
  EXPECT_EQ(client_.calls("control", "d1").size(), 1u);  // only /health
  // The rest of the fleet is still checked and transfers where it can.
  EXPECT_TRUE(Gate(r, "contract").passed);
  EXPECT_TRUE(Gate(r, "model").passed);
  EXPECT_EQ(Gate(r, "model").detail, "3 engine(s) serve Qwen/Qwen3-0.6B, 1 skipped");
  EXPECT_TRUE(Gate(r, "consume").passed) << Gate(r, "consume").detail;
  EXPECT_EQ(Transfer(r, "p0", "d0").outcome, "passed");
  EXPECT_EQ(Transfer(r, "p0", "d1").outcome, "skipped");
  EXPECT_EQ(Transfer(r, "p1", "d1").detail, "skipped: consumer d1 failed reach");
  for (const Call& d : client_.calls("decode")) EXPECT_NE(d.iid, "d1");
}

TEST_F(PreflightRunTest, EveryEngineUnreachableSkipsTheLaterGates) {
  engines::ControlResponse refused;
  refused.error = "connection refused";
  for (const EngineSettings& e : settings_.engines) client_.SetControl(e.iid, "/health", refused);
  settings_.engine_contract = Pinned("0.29.1");
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(Gate(r, "reach").passed);
  for (const char* name : {"contract", "model", "produce", "consume"}) {
    EXPECT_TRUE(Gate(r, name).skipped) << name;
    EXPECT_FALSE(Gate(r, name).passed) << name;
  }
  EXPECT_EQ(Gate(r, "produce").detail, "every engine failed an earlier gate");
  EXPECT_EQ(Gate(r, "consume").detail, "every pair has an engine that failed an earlier gate");
  EXPECT_EQ(Transfer(r, "p0", "d0").detail, "skipped: producer p0 failed reach");
  EXPECT_TRUE(client_.calls("prefill").empty());
  EXPECT_TRUE(client_.calls("decode").empty());
}

TEST_F(PreflightRunTest, ContractMismatchSkipsProduceAndConsume) {
  settings_.engine_contract = Pinned("0.29.1");
  engines::ControlResponse old_version;
  old_version.status = 200;
  old_version.body = R"({"version":"0.0.1"})";
  client_.SetControl("d0", "/version", old_version);
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(GateNames(r), kGateOrder);
  const PreflightGate& contract = Gate(r, "contract");
  EXPECT_FALSE(contract.passed);
  EXPECT_EQ(contract.detail, "d0: vllm_version is 0.0.1, pinned 0.29.1");
  EXPECT_EQ(Check(r, "contract", "d0")->outcome, "failed");
  EXPECT_EQ(Check(r, "contract", "d1")->outcome, "passed");
  // model still runs; produce and consume do not.
  EXPECT_TRUE(Gate(r, "model").passed);
  for (const char* name : {"produce", "consume"}) {
    EXPECT_TRUE(Gate(r, name).skipped) << name;
    EXPECT_FALSE(Gate(r, name).passed) << name;
    EXPECT_EQ(Gate(r, name).detail, "contract gate failed");
  }
  EXPECT_TRUE(client_.calls("prefill").empty());
  EXPECT_TRUE(client_.calls("decode").empty());
  EXPECT_EQ(Check(r, "produce", "p0")->outcome, "skipped");
  ASSERT_EQ(r.transfers.size(), 4u);
  for (const PreflightPair& p : r.transfers) EXPECT_EQ(p.outcome, "skipped");
}

TEST_F(PreflightRunTest, WrongModelFailsTheModelGateAndKeepsTheEngineOutOfTransfers) {
  engines::ControlResponse other;
  other.status = 200;
  other.body = R"({"object":"list","data":[{"id":"other/model","object":"model"}]})";
  client_.SetControl("p1", "/v1/models", other);
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(Gate(r, "model").passed);
  EXPECT_EQ(Gate(r, "model").detail,
            "p1: model Qwen/Qwen3-0.6B is not served (engine serves: other/model)");
  EXPECT_EQ(Check(r, "produce", "p1")->detail, "skipped: failed model");
  EXPECT_EQ(Transfer(r, "p1", "d0").detail, "skipped: producer p1 failed model");
  EXPECT_EQ(Transfer(r, "p0", "d1").outcome, "passed");
  EXPECT_TRUE(Gate(r, "produce").passed);
  EXPECT_TRUE(Gate(r, "consume").passed);
}

TEST_F(PreflightRunTest, FailingProducerFailsProduceAndConsume) {
  client_.SetPrefill("p1", {.failure = NoHandoff(), .latency_s = kPrefillS});
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(Gate(r, "produce").passed);
  EXPECT_EQ(Gate(r, "produce").detail, "p1: no handoff: response carries no kv_transfer_params");
  EXPECT_EQ(Check(r, "produce", "p0")->outcome, "passed");
  EXPECT_FALSE(Gate(r, "consume").passed);
  EXPECT_EQ(Gate(r, "consume").detail,
            "p1 -> d0: producer_failed: prefill on p1 failed: no handoff: response carries no "
            "kv_transfer_params (+1 more)");
  for (const char* consumer : {"d0", "d1"}) {
    const PreflightPair& p = Transfer(r, "p1", consumer);
    EXPECT_EQ(p.outcome, "producer_failed");
    EXPECT_DOUBLE_EQ(p.first_token_s, 0);
    EXPECT_DOUBLE_EQ(p.prefill_s, 0.1);
    EXPECT_EQ(Transfer(r, "p0", consumer).outcome, "passed");
  }
  // Each pair tried its own fresh prefill; no decode ran without a handoff.
  EXPECT_EQ(client_.calls("prefill").size(), 2u + 4);
  for (const Call& d : client_.calls("decode")) EXPECT_EQ(d.handoff_producer, "p0");
}

TEST_F(PreflightRunTest, ConsumerWithoutFirstTokenIsAnUnconfirmedTransfer) {
  client_.SetDecode("d1", {.silent = true});
  const PreflightReport r = Run();
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(Gate(r, "produce").passed);
  const PreflightGate& consume = Gate(r, "consume");
  EXPECT_FALSE(consume.passed);
  EXPECT_EQ(consume.detail,
            "p0 -> d1: unconfirmed_transfer: no first token within 1s: no frames at all (+1 more)");
  for (const char* producer : {"p0", "p1"}) {
    const PreflightPair& p = Transfer(r, producer, "d1");
    EXPECT_EQ(p.outcome, "unconfirmed_transfer");
    EXPECT_EQ(p.detail, "no first token within 1s: no frames at all");
    EXPECT_DOUBLE_EQ(p.first_token_s, 0);
    EXPECT_DOUBLE_EQ(p.duration_s, 1.1);
    EXPECT_EQ(Transfer(r, producer, "d0").outcome, "passed");
  }
}

TEST_F(PreflightRunTest, OtherDecodeFailuresAreFailedWithTheirDetail) {
  client_.SetDecode("d0", {.failure = MissingDone()});
  const PreflightReport r = Run(PairMode::kRing);
  EXPECT_FALSE(r.passed);
  const PreflightPair& p = Transfer(r, "p0", "d0");
  EXPECT_EQ(p.outcome, "failed");
  EXPECT_EQ(p.detail, "stream ended before the [DONE] terminator");
  EXPECT_EQ(Transfer(r, "p1", "d1").outcome, "passed");
  EXPECT_EQ(Gate(r, "consume").detail,
            "p0 -> d0: failed: stream ended before the [DONE] terminator");
}

TEST_F(PreflightRunTest, FleetWithoutPairsStillProduces) {
  settings_ = PreflightFleet({"solo"});
  const PreflightReport r = Run();
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(Gate(r, "consume").detail, "no role-permitted pairs to test");
  EXPECT_EQ(Check(r, "produce", "solo")->outcome, "passed");
  EXPECT_TRUE(r.transfers.empty());
}

// --- Report forms. ---

TEST_F(PreflightRunTest, JsonCarriesEveryField) {
  client_.SetDecode("d1", {.silent = true});
  const json j = Run(PairMode::kRing).ToJson();
  EXPECT_EQ(j["passed"], false);
  EXPECT_DOUBLE_EQ(j["started_at"].get<double>(), 1.7e9);
  EXPECT_GT(j["duration_s"].get<double>(), 0);
  EXPECT_EQ(j["pairs"], "ring");
  ASSERT_EQ(j["gates"].size(), 5u);
  for (size_t i = 0; i < kGateOrder.size(); ++i) {
    const json& g = j["gates"][i];
    EXPECT_EQ(g["name"], kGateOrder[i]);
    for (const char* key : {"outcome", "passed", "skipped", "detail", "duration_s"}) {
      EXPECT_TRUE(g.contains(key)) << key;
    }
  }
  EXPECT_EQ(j["gates"][0]["outcome"], "passed");
  EXPECT_EQ(j["gates"][4]["outcome"], "failed");
  EXPECT_EQ(j["gates"][4]["passed"], false);
  const json& check = j["checks"][0];
  EXPECT_EQ(check["gate"], "reach");
  EXPECT_EQ(check["iid"], "p0");
  EXPECT_EQ(check["outcome"], "passed");
  EXPECT_TRUE(check.contains("detail"));
  EXPECT_TRUE(check.contains("duration_s"));
  ASSERT_EQ(j["transfers"].size(), 2u);
  const json& bad = j["transfers"][1];
  EXPECT_EQ(bad["producer"], "p1");
  EXPECT_EQ(bad["consumer"], "d1");
  EXPECT_EQ(bad["outcome"], "unconfirmed_transfer");
  EXPECT_EQ(bad["first_token_s"], 0);
  EXPECT_DOUBLE_EQ(bad["prefill_s"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(j["transfers"][0]["first_token_s"].get<double>(), 0.25);
  EXPECT_TRUE(bad.contains("detail"));
  EXPECT_TRUE(bad.contains("duration_s"));
  // Skipped gates say so.
  settings_.engine_contract = Pinned("9.9.9");
  const json skipped = Run().ToJson();
  EXPECT_EQ(skipped["gates"][3]["outcome"], "skipped");
  EXPECT_EQ(skipped["gates"][3]["skipped"], true);
  EXPECT_EQ(skipped["gates"][3]["passed"], false);
}

TEST_F(PreflightRunTest, TableListsGatesChecksAndTransfersInAlignedColumns) {
  client_.SetDecode("d1", {.silent = true});
  const std::string table = Run().ToTable();
  std::vector<std::string> lines;
  for (size_t start = 0; start < table.size();) {
    const size_t end = table.find('\n', start);
    lines.push_back(table.substr(start, end - start));
    start = end + 1;
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("preflight FAILED in ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("(pairs: mesh)"), std::string::npos);

  auto find_line = [&](const std::string& prefix) -> std::string {
    for (const std::string& l : lines) {
      if (l.rfind(prefix, 0) == 0) return l;
    }
    ADD_FAILURE() << "no line starting with " << prefix << " in\n" << table;
    return "";
  };
  const std::string gate_header = find_line("GATE ");
  const size_t result_col = gate_header.find("RESULT");
  const size_t detail_col = gate_header.find("DETAIL");
  for (const std::string& name : kGateOrder) {
    const std::string line = find_line(name + " ");
    EXPECT_EQ(line.find(name == "consume" ? "FAIL" : "PASS"), result_col) << line;
    EXPECT_GT(line.size(), detail_col) << line;
  }
  EXPECT_NE(find_line("consume ").find("p0 -> d1: unconfirmed_transfer"), std::string::npos);

  const std::string check_header = find_line("ENGINE ");
  EXPECT_NE(check_header.find("GATE"), std::string::npos);
  const std::string transfer_header = find_line("PRODUCER ");
  const size_t transfer_result = transfer_header.find("RESULT");
  const std::string unconfirmed = find_line("p1        d1");
  EXPECT_EQ(unconfirmed.find("UNCONFIRMED TRANSFER"), transfer_result) << unconfirmed;
  EXPECT_NE(unconfirmed.find("no first token within 1s"), std::string::npos);
  const std::string ok = find_line("p0        d0");
  EXPECT_EQ(ok.find("PASS"), transfer_result);
  EXPECT_NE(ok.find("0.250s"), std::string::npos) << ok;
  for (const std::string& l : lines) {
    EXPECT_TRUE(l.empty() || l.back() != ' ') << "trailing blank: [" << l << "]";
  }
}

}  // namespace
}  // namespace narwhal::router
