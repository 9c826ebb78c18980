// The fleet file's keys for a live fleet (SPEC §13): DNS groups
// (engines[].dns and engines[].port, exactly one of url and dns), the
// `discovery` and `membership` sections, and engine addresses that are
// unique whatever their spelling (localhost, 127.0.0.1, [::1] and
// [::ffff:127.0.0.1] are one host).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/config/address_rules.h"
#include "server/config/config_loader.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using router::Role;
using router::Settings;

json Fleet() {
  return {{"model", "m"},
          {"engines",
           {{{"iid", "p0"}, {"url", "http://10.0.0.1:8000"}, {"role", "prefill"}},
            {{"iid", "d0"}, {"url", "http://10.0.0.2:8000"}, {"role", "decode"}}}}};
}

Settings MustParse(const json& config) {
  absl::StatusOr<Settings> settings = ParseFleetConfig(config.dump());
  EXPECT_TRUE(settings.ok()) << settings.status();
  return settings.ok() ? *settings : Settings{};
}

std::string ErrorOf(const json& config) {
  absl::StatusOr<Settings> settings = ParseFleetConfig(config.dump());
  EXPECT_FALSE(settings.ok()) << "accepted: " << config.dump();
  return settings.ok() ? "" : std::string(settings.status().message());
}

json WithEngine(const json& engine) {
  json config = Fleet();
  config["engines"].push_back(engine);
  return config;
}

// ---------------------------------------------------------------------------
// DNS groups.

TEST(ConfigDnsGroup, IsReadAndPrintedBack) {
  const Settings s = MustParse(WithEngine({{"iid", "decode"},
                                           {"dns", "vllm-decode.llm.svc.cluster.local"},
                                           {"port", 8000},
                                           {"role", "decode"},
                                           {"kv_engine_id", "kv-decode"}}));
  ASSERT_EQ(s.engines.size(), 3u);
  const router::EngineSettings& group = s.engines[2];
  EXPECT_TRUE(group.is_dns_group());
  EXPECT_FALSE(s.engines[0].is_dns_group());
  EXPECT_EQ(group.dns, "vllm-decode.llm.svc.cluster.local");
  EXPECT_EQ(group.port, 8000);
  EXPECT_EQ(group.url, "");
  EXPECT_EQ(group.role, Role::kDecode);
  EXPECT_EQ(group.kv_engine_id, "kv-decode");
  const json printed = SettingsToJson(s);
  EXPECT_EQ(printed["engines"][2],
            json::parse(R"({"iid": "decode", "dns": "vllm-decode.llm.svc.cluster.local",
                            "port": 8000, "role": "decode", "kv_engine_id": "kv-decode"})"));
  EXPECT_FALSE(printed["engines"][0].contains("dns"));
  EXPECT_FALSE(printed["engines"][0].contains("port"));
  const Settings again = MustParse(printed);
  EXPECT_EQ(again.engines[2].dns, group.dns);
  EXPECT_EQ(again.engines[2].port, 8000);
}

TEST(ConfigDnsGroup, ARoleOfTheFleetMayComeFromAGroupAlone) {
  json config = Fleet();
  config["engines"] = {{{"iid", "p"}, {"dns", "prefill.svc"}, {"port", 8000}, {"role", "prefill"}},
                       {{"iid", "d"}, {"dns", "decode.svc"}, {"port", 8000}, {"role", "decode"}}};
  EXPECT_EQ(MustParse(config).engines.size(), 2u);
}

TEST(ConfigDnsGroup, ExactlyOneOfUrlAndDns) {
  EXPECT_EQ(ErrorOf(WithEngine({{"iid", "x"}})),
            "config: engines[2].url is required (or engines[2].dns with engines[2].port)");
  EXPECT_EQ(ErrorOf(WithEngine(
                {{"iid", "x"}, {"url", "http://10.0.0.3:1"}, {"dns", "x.svc"}, {"port", 1}})),
            "config: engines[2].dns must not be set with engines[2].url (an entry is one engine "
            "or one DNS group)");
  EXPECT_EQ(ErrorOf(WithEngine({{"iid", "x"}, {"dns", "x.svc"}})),
            "config: engines[2].port is required with engines[2].dns");
  EXPECT_EQ(ErrorOf(WithEngine({{"iid", "x"}, {"url", "http://10.0.0.3:1"}, {"port", 1}})),
            "config: engines[2].port is only valid with engines[2].dns");
}

TEST(ConfigDnsGroup, NameAndPortAreChecked) {
  auto group = [](const json& dns, const json& port) {
    return WithEngine({{"iid", "g"}, {"dns", dns}, {"port", port}});
  };
  EXPECT_EQ(ErrorOf(group("x.svc", 0)),
            "config: engines[2].port must be between 1 and 65535 (got 0)");
  EXPECT_EQ(ErrorOf(group("x.svc", 65536)),
            "config: engines[2].port must be between 1 and 65535 (got 65536)");
  EXPECT_EQ(ErrorOf(group("x.svc", "80")),
            "config: engines[2].port must be an integer (got string \"80\")");
  EXPECT_EQ(ErrorOf(group("", 80)), "config: engines[2].dns must not be empty");
  EXPECT_EQ(ErrorOf(group(7, 80)), "config: engines[2].dns must be a string (got integer)");
  EXPECT_EQ(ErrorOf(group("http://x.svc", 80)),
            "config: engines[2].dns must be a host name: a host name has only letters, digits, "
            "'-' and '_' between its dots (got \"http://x.svc\")");
  EXPECT_EQ(ErrorOf(group("x..svc", 80)),
            "config: engines[2].dns must be a host name: empty label (got \"x..svc\")");
  EXPECT_EQ(ErrorOf(group("u:p@x.svc", 80)),
            "config: engines[2].dns must be a host name: credentials are not allowed (got "
            "\"***@x.svc\")");
  EXPECT_EQ(ErrorOf(group(std::string(64, 'a') + ".svc", 80)),
            "config: engines[2].dns must be a host name: a label is longer than 63 characters "
            "(got \"" +
                std::string(64, 'a') + ".svc\")");
  EXPECT_EQ(ErrorOf(group(std::string(254, 'a'), 80)),
            "config: engines[2].dns must be at most 253 characters (got 254)");
  // A final dot (a fully qualified name) is fine.
  EXPECT_EQ(MustParse(group("x.svc.cluster.local.", 80)).engines[2].dns, "x.svc.cluster.local.");
}

TEST(ConfigDnsGroup, GroupsAreUniqueAndIidsToo) {
  json config = WithEngine({{"iid", "g1"}, {"dns", "decode.svc"}, {"port", 8000}});
  config["engines"].push_back({{"iid", "g2"}, {"dns", "DECODE.svc."}, {"port", 8000}});
  EXPECT_EQ(ErrorOf(config),
            "config: engines[3].dns \"DECODE.svc.\" port 8000 is a duplicate of engines[2].dns "
            "\"decode.svc\" port 8000 (the same host and port; \"g2\" and \"g1\" are one "
            "engine)");
  config["engines"][3]["port"] = 8001;
  EXPECT_EQ(MustParse(config).engines.size(), 4u);
  // iids are unique across engines and groups.
  config["engines"][3]["iid"] = "p0";
  EXPECT_EQ(ErrorOf(config), "config: engines[3].iid \"p0\" is a duplicate of engines[0].iid");
  // A group named localhost is the loopback host of an engine's URL.
  config = WithEngine({{"iid", "l"}, {"url", "http://127.0.0.1:9000"}});
  config["engines"].push_back({{"iid", "g"}, {"dns", "localhost"}, {"port", 9000}});
  EXPECT_EQ(ErrorOf(config),
            "config: engines[3].dns \"localhost\" port 9000 is a duplicate of engines[2].url "
            "\"http://127.0.0.1:9000\" (the same host and port; \"g\" and \"l\" are one engine)");
}

TEST(ConfigDnsGroup, NoEngineMayTakeAMemberIid) {
  json config = WithEngine({{"iid", "d"}, {"dns", "decode.svc"}, {"port", 8000}});
  config["engines"].push_back({{"iid", "d-10.0.0.9-8000"}, {"url", "http://10.0.0.9:8000"}});
  EXPECT_EQ(ErrorOf(config),
            "config: engines[3].iid \"d-10.0.0.9-8000\" is the iid a member of the DNS group "
            "\"d\" may take (<iid>-<ADDR>-<PORT>)");
  config["engines"][3]["iid"] = "d-fd00--1-8000";  // an IPv6 member
  EXPECT_FALSE(ParseFleetConfig(config.dump()).ok());
  config["engines"][3]["iid"] = "d-10.0.0.9-8001";  // another port: no member
  EXPECT_TRUE(ParseFleetConfig(config.dump()).ok());
  config["engines"][3]["iid"] = "d-extra-8000";  // not an address
  EXPECT_TRUE(ParseFleetConfig(config.dump()).ok());
}

// ---------------------------------------------------------------------------
// discovery and membership.

TEST(ConfigDiscovery, DefaultsAndValues) {
  Settings s = MustParse(Fleet());
  EXPECT_TRUE(s.discovery.dns_servers.empty());
  EXPECT_EQ(s.discovery.dns_refresh_s, 5);
  EXPECT_EQ(s.discovery.dns_timeout_s, 2);
  json config = Fleet();
  config["discovery"] = {{"dns_servers", {"10.96.0.10:53", "[fd00::10]:53", "dns.local:5353"}},
                         {"dns_refresh_s", 30},
                         {"dns_timeout_s", 0.5}};
  s = MustParse(config);
  EXPECT_EQ(s.discovery.dns_servers,
            (std::vector<std::string>{"10.96.0.10:53", "[fd00::10]:53", "dns.local:5353"}));
  EXPECT_EQ(s.discovery.dns_refresh_s, 30);
  EXPECT_EQ(s.discovery.dns_timeout_s, 0.5);
}

TEST(ConfigDiscovery, EachValueIsChecked) {
  auto with = [](const json& discovery) {
    json config = Fleet();
    config["discovery"] = discovery;
    return config;
  };
  EXPECT_EQ(ErrorOf(with({{"dns_servers", {"10.96.0.10"}}})),
            "config: discovery.dns_servers[0] must be HOST:PORT: missing :PORT (got "
            "\"10.96.0.10\")");
  EXPECT_EQ(ErrorOf(with({{"dns_servers", {"10.96.0.10:53", 53, "h:0"}}})),
            "config: discovery.dns_servers[1] must be a string (got integer); "
            "discovery.dns_servers[2] must be HOST:PORT: PORT must be 1..65535 (got \"h:0\")");
  EXPECT_EQ(ErrorOf(with({{"dns_servers", "10.96.0.10:53"}})),
            "config: discovery.dns_servers must be an array (got string)");
  json many = json::array();
  for (int i = 0; i < 17; ++i) many.push_back("10.0.0.1:" + std::to_string(53 + i));
  EXPECT_EQ(ErrorOf(with({{"dns_servers", many}})),
            "config: discovery.dns_servers must have at most 16 entries (got 17)");
  EXPECT_EQ(ErrorOf(with({{"dns_refresh_s", 0}})),
            "config: discovery.dns_refresh_s must be > 0 (got 0)");
  EXPECT_EQ(ErrorOf(with({{"dns_timeout_s", 0}})),
            "config: discovery.dns_timeout_s must be > 0 (got 0)");
  EXPECT_EQ(ErrorOf(with({{"dns_refresh_s", 1}, {"dns_timeout_s", 2}})),
            "config: discovery.dns_timeout_s must be <= discovery.dns_refresh_s (1) (got 2)");
  EXPECT_EQ(ErrorOf(with({{"dns_timeout_s", 6}})),
            "config: discovery.dns_timeout_s must be <= discovery.dns_refresh_s (5) (got 6)");
  EXPECT_EQ(ErrorOf(with({{"dns_refresh_s", 1}, {"dns_timeout_s", "x"}})),
            "config: discovery.dns_timeout_s must be a number of seconds (got string)");
  EXPECT_EQ(ErrorOf(with({{"dns_server", {}}})), "config: discovery.dns_server: unknown key");
}

TEST(ConfigMembership, DefaultsAndValues) {
  Settings s = MustParse(Fleet());
  EXPECT_TRUE(s.membership.join_checks);
  EXPECT_EQ(s.membership.drain_timeout_s, 30);
  EXPECT_EQ(s.membership.remember_s, 600);
  EXPECT_EQ(s.membership.config_poll_s, 2);
  json config = Fleet();
  config["membership"] = {
      {"join_checks", false}, {"drain_timeout_s", 0}, {"remember_s", 0}, {"config_poll_s", 0}};
  s = MustParse(config);
  EXPECT_FALSE(s.membership.join_checks);
  EXPECT_EQ(s.membership.drain_timeout_s, 0);
  EXPECT_EQ(s.membership.remember_s, 0);
  EXPECT_EQ(s.membership.config_poll_s, 0);
}

TEST(ConfigMembership, EachValueIsChecked) {
  auto with = [](const json& membership) {
    json config = Fleet();
    config["membership"] = membership;
    return config;
  };
  EXPECT_EQ(ErrorOf(with({{"join_checks", 1}})),
            "config: membership.join_checks must be true or false (got integer 1)");
  EXPECT_EQ(ErrorOf(with({{"join_checks", "true"}})),
            "config: membership.join_checks must be true or false (got string \"true\")");
  EXPECT_EQ(ErrorOf(with({{"join_checks", nullptr}})),
            "config: membership.join_checks must be true or false (got null)");
  EXPECT_EQ(ErrorOf(with({{"drain_timeout_s", -1}})),
            "config: membership.drain_timeout_s must be >= 0 (got -1)");
  EXPECT_EQ(ErrorOf(with({{"remember_s", 1e8}})),
            "config: membership.remember_s must be <= 10000000 (got 100000000)");
  EXPECT_EQ(ErrorOf(with({{"config_poll_s", -0.5}})),
            "config: membership.config_poll_s must be >= 0 (got -0.5)");
  EXPECT_EQ(ErrorOf(with({{"config_poll_s", 86401}})),
            "config: membership.config_poll_s must be <= 86400 (got 86401)");
}

// ---------------------------------------------------------------------------
// Engine URLs that name one engine under different spellings.

TEST(ConfigEngineAliases, LoopbackSpellingsAreOneHost) {
  for (const char* alias :
       {"http://localhost:8000", "http://LOCALHOST:8000/", "http://localhost.:8000",
        "http://[::1]:8000", "http://[::ffff:127.0.0.1]:8000", "http://127.1:8000",
        "http://[0:0:0:0:0:0:0:1]:8000"}) {
    json config = WithEngine({{"iid", "a"}, {"url", "http://127.0.0.1:8000"}});
    config["engines"].push_back({{"iid", "b"}, {"url", alias}});
    const std::string message = ErrorOf(config);
    EXPECT_NE(message.find("engines[3].url"), std::string::npos) << alias << ": " << message;
    EXPECT_NE(message.find("is a duplicate of engines[2].url \"http://127.0.0.1:8000\" (the "
                           "same host and port; \"b\" and \"a\" are one engine)"),
              std::string::npos)
        << alias << ": " << message;
  }
  // The exact message.
  json config = WithEngine({{"iid", "a"}, {"url", "http://127.0.0.1:8000"}});
  config["engines"].push_back({{"iid", "b"}, {"url", "http://localhost:8000/"}});
  EXPECT_EQ(ErrorOf(config),
            "config: engines[3].url \"http://localhost:8000\" is a duplicate of engines[2].url "
            "\"http://127.0.0.1:8000\" (the same host and port; \"b\" and \"a\" are one engine)");
}

TEST(ConfigEngineAliases, OtherAddressSpellingsAreOneHost) {
  const std::vector<std::pair<std::string, std::string>> same = {
      {"http://10.0.0.5:80", "http://[::ffff:10.0.0.5]:80"},
      {"http://10.0.0.5:80", "http://[::FFFF:a00:5]:80"},
      {"http://10.0.0.5:80", "http://10.0.5:80"},
      {"http://10.0.0.5:80", "http://10.0.0.5:0080"},
      {"http://[fd00::1]:80", "http://[FD00:0:0::1]:80"},
      {"http://Engine-0.svc:80", "http://engine-0.SVC.:80"},
  };
  for (const auto& [first, second] : same) {
    json config = WithEngine({{"iid", "a"}, {"url", first}});
    config["engines"].push_back({{"iid", "b"}, {"url", second}});
    EXPECT_FALSE(ParseFleetConfig(config.dump()).ok()) << first << " vs " << second;
  }
  // Different hosts (names are not resolved), or the same host on another port.
  const std::vector<std::pair<std::string, std::string>> different = {
      {"http://127.0.0.1:8000", "http://127.0.0.2:8000"},
      {"http://127.0.0.1:8000", "http://127.0.0.1:8001"},
      {"http://localhost:8000", "http://myhost:8000"},
      {"http://10.0.0.5:80", "http://[fd00::a00:5]:80"},
      {"http://engine-0:80", "http://engine-0.svc:80"},
  };
  for (const auto& [first, second] : different) {
    json config = WithEngine({{"iid", "a"}, {"url", first}});
    config["engines"].push_back({{"iid", "b"}, {"url", second}});
    EXPECT_TRUE(ParseFleetConfig(config.dump()).ok()) << first << " vs " << second;
  }
}

TEST(ConfigEngineAliases, HostIdentity) {
  using config_file::HostIdentity;
  EXPECT_EQ(HostIdentity("localhost"), "loopback");
  EXPECT_EQ(HostIdentity("a.localhost"), "loopback");
  EXPECT_EQ(HostIdentity("127.0.0.1"), "loopback");
  EXPECT_EQ(HostIdentity("2130706433"), "loopback");
  EXPECT_EQ(HostIdentity("0x7f.0.0.1"), "loopback");
  EXPECT_EQ(HostIdentity("::1"), "loopback");
  EXPECT_EQ(HostIdentity("::ffff:127.0.0.1"), "loopback");
  EXPECT_EQ(HostIdentity("::ffff:10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(HostIdentity("FD00:0000::0001"), "fd00::1");
  EXPECT_EQ(HostIdentity("Host.Example."), "host.example");
  EXPECT_EQ(HostIdentity("deadbeef"), "deadbeef");  // a name, not hex
  EXPECT_EQ(HostIdentity("127.0.0.2"), "127.0.0.2");
}

TEST(ConfigEngineAliases, DefaultPortIsNotImplied) {
  // An engine URL names its port: a URL without one is refused, so
  // "http://h" and "http://h:80" never meet in the duplicate check.
  json config = WithEngine({{"iid", "a"}, {"url", "http://h"}});
  EXPECT_EQ(ErrorOf(config),
            "config: engines[2].url must be http(s)://host:port: missing :PORT (got \"http://h\")");
}

}  // namespace
}  // namespace narwhal::server
