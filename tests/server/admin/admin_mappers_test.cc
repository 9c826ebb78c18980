// The admin edge of fleet events: FillEvent maps a typed event to its Event
// message and says the same as the journal's wire form (PublishedEventJson)
// for every kind: each typed field once, and in `fields` only what no typed
// field holds.
#include "server/admin/admin_mappers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace narwhal::server {
namespace {

namespace pb = narwhal::admin::v1;
using json = nlohmann::json;
using router::FleetEvent;
using router::FleetEventKind;

// Every field a kind may carry, filled.
FleetEvent Full(FleetEventKind kind) {
  FleetEvent e;
  e.kind = kind;
  e.iid = "d0";
  e.hold_kind = router::HoldKind::kInference;
  e.cause = "stream";
  e.evidence = "health";
  e.probe_kind = router::ProbeKind::kInference;
  e.producer = "p0";
  e.detail = "why";
  e.source = "dns:decode";
  e.url = "http://10.0.0.7:8000";
  switch (kind) {
    case FleetEventKind::kLinkHeld:
    case FleetEventKind::kLinkProbe:
    case FleetEventKind::kLinkReadmitted:
      e.consumer = "d0";
      e.link_outcome = router::LinkProbeOutcome::kFailed;
      break;
    case FleetEventKind::kPreflight: {
      e.iid.clear();
      router::PreflightSummary p;
      p.passed = false;
      p.trigger = "admin";
      p.pairs = router::PairMode::kRing;
      p.duration_s = 1.5;
      p.gates = {{"health", "passed"}, {"transfers", "failed"}};
      p.transfers = 4;
      p.transfers_passed = 3;
      e.preflight = p;
      break;
    }
    default:
      e.outcome = router::ProbeOutcome::kFailed;
  }
  return e;
}

// A protobuf Value as JSON, for comparing with the wire form.
json AsJson(const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kStringValue:
      return v.string_value();
    case google::protobuf::Value::kNumberValue:
      return v.number_value();
    case google::protobuf::Value::kBoolValue:
      return v.bool_value();
    case google::protobuf::Value::kStructValue: {
      json out = json::object();
      for (const auto& [k, item] : v.struct_value().fields()) out[k] = AsJson(item);
      return out;
    }
    default:
      return nullptr;
  }
}

TEST(AdminMappersTest, EveryKindSaysWhatItsWireFormSays) {
  for (FleetEventKind kind : router::kAllFleetEventKinds) {
    const router::PublishedEvent published{42, 1.7e9 + 0.25, Full(kind)};
    const json wire = router::PublishedEventJson(published);
    pb::Event event;
    FillEvent(published, &event);
    const std::string name(router::FleetEventKindName(kind));
    SCOPED_TRACE(name);
    EXPECT_EQ(event.seq(), wire.at("seq").get<long long>());
    EXPECT_EQ(event.at(), wire.at("at").get<double>());
    EXPECT_EQ(event.kind(), wire.at("event").get<std::string>());
    // The typed fields: each equals its wire field (absent there: empty).
    const std::pair<const char*, std::string> typed[] = {{"iid", event.iid()},
                                                         {"hold_kind", event.hold_kind()},
                                                         {"cause", event.cause()},
                                                         {"evidence", event.evidence()},
                                                         {"probe_kind", event.probe_kind()},
                                                         {"outcome", event.outcome()},
                                                         {"producer", event.producer()},
                                                         {"detail", event.detail()},
                                                         {"source", event.source()},
                                                         {"url", event.url()}};
    std::set<std::string> covered = {"seq", "at", "event"};
    for (const auto& [key, value] : typed) {
      covered.insert(key);
      EXPECT_EQ(value, wire.value(key, std::string())) << key;
    }
    // `fields`: exactly the wire fields no typed field holds.
    json rest = json::object();
    for (const auto& [key, value] : wire.items()) {
      if (!covered.count(key)) rest[key] = value;
    }
    json fields = json::object();
    for (const auto& [key, value] : event.fields().fields()) fields[key] = AsJson(value);
    EXPECT_EQ(fields, rest);
  }
}

TEST(AdminMappersTest, LinkAndPreflightEventsKeepTheirOwnFields) {
  pb::Event event;
  FillEvent({1, 0, Full(FleetEventKind::kLinkProbe)}, &event);
  EXPECT_EQ(event.outcome(), "failed");
  EXPECT_EQ(event.producer(), "p0");
  EXPECT_EQ(event.fields().fields().at("consumer").string_value(), "d0");

  FillEvent({2, 0, Full(FleetEventKind::kPreflight)}, &event);
  EXPECT_EQ(event.iid(), "");
  EXPECT_EQ(event.outcome(), "failed");
  EXPECT_EQ(event.fields().fields().at("pairs").string_value(), "ring");
  EXPECT_EQ(
      event.fields().fields().at("gates").struct_value().fields().at("transfers").string_value(),
      "failed");
}

}  // namespace
}  // namespace narwhal::server
