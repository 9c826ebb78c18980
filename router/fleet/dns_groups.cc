#include "router/fleet/dns_groups.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <utility>

#include "router/common/log.h"
#include "router/fleet/dns_group.h"

namespace narwhal::router {

DnsGroups::DnsGroups(FleetAdmin& fleet, const Clock& clock, Metrics* metrics,
                     engines::Executor executor, ResolverFactory resolvers)
    : fleet_(fleet),
      clock_(clock),
      metrics_(metrics),
      executor_(std::move(executor)),
      resolvers_(std::move(resolvers)) {}

DnsGroups::~DnsGroups() { Stop(); }

void DnsGroups::SetGroups(const Settings& settings) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, Group> next;
  for (const EngineSettings& e : settings.engines) {
    if (!e.is_dns_group()) continue;
    Group g;
    g.entry = e;
    if (auto it = groups_.find(e.iid); it != groups_.end()) g.failing = it->second.failing;
    next[e.iid] = std::move(g);
    if (metrics_ != nullptr) {
      for (const char* result : {"ok", "empty", "failed"}) {
        metrics_->discovery_lookups_total.Add({{"group", e.iid}, {"result", result}});
      }
    }
  }
  for (const auto& [iid, group] : groups_) {
    if (next.count(iid) == 0) gone_.push_back(iid);
  }
  groups_ = std::move(next);
  if (settings.discovery.dns_servers != servers_) {
    servers_ = settings.discovery.dns_servers;
    servers_changed_ = true;
  }
  refresh_s_ = settings.discovery.dns_refresh_s;
  timeout_s_ = settings.discovery.dns_timeout_s;
  // A change is looked up at once, not at the next refresh.
  if (timer_ != nullptr) {
    boost::asio::post(executor_, [timer = timer_] { timer->Cancel(); });
  }
}

void DnsGroups::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return;
  started_ = true;
  timer_ = clock_.NewTimer(executor_);
  boost::asio::co_spawn(executor_, Loop(), boost::asio::detached);
}

void DnsGroups::Stop() {
  std::future<void> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stop_) return;
    stop_ = true;
    ended = ended_.get_future();
    boost::asio::post(executor_, [timer = timer_] { timer->Cancel(); });
  }
  // Bounded: a lookup in flight ends within its timeout.
  if (ended.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    LogError("dns groups: the refresh loop did not end within 30 s");
  }
}

void DnsGroups::Count(const std::string& group, const char* result) {
  if (metrics_ == nullptr) return;
  metrics_->discovery_lookups_total.Add({{"group", group}, {"result", result}}).Increment();
}

engines::Awaitable<void> DnsGroups::Loop() {
  while (true) {
    double refresh_s = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      refresh_s = refresh_s_;
    }
    co_await Refresh();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    co_await engines::AsyncWaitUntil(*timer_, clock_.Now() + engines::FromSeconds(refresh_s),
                                     boost::asio::use_awaitable);
  }
  // The resolver ends on its own loop, with nothing of it in flight.
  resolver_.reset();
  ended_.set_value();
}

engines::Awaitable<void> DnsGroups::Refresh() {
  std::vector<Group> groups;
  std::vector<std::string> gone;
  double timeout_s = 2;
  bool new_resolver = false;
  std::vector<std::string> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [iid, group] : groups_) groups.push_back(group);
    gone.swap(gone_);
    timeout_s = timeout_s_;
    new_resolver = servers_changed_ || resolver_ == nullptr;
    servers_changed_ = false;
    servers = servers_;
  }
  // A group the config no longer names leaves with its members.
  for (const std::string& iid : gone) {
    const MembershipChange change = fleet_.Reconcile(MemberSource{SourceKind::kDns, iid}, {});
    if (!change.left.empty()) {
      LogInfo("dns group " + iid + " is gone from the config: " +
              std::to_string(change.left.size()) + " member(s) leave");
    }
  }
  if (groups.empty()) co_return;
  if (new_resolver) {
    absl::StatusOr<std::unique_ptr<DnsResolver>> made = resolvers_(servers);
    if (!made.ok()) {
      LogError("dns groups: cannot make a resolver: " + std::string(made.status().message()));
      resolver_.reset();
      co_return;
    }
    resolver_ = std::move(*made);
  }
  if (resolver_ == nullptr) co_return;
  for (const Group& g : groups) {
    const EngineSettings& entry = g.entry;
    const MemberSource source{SourceKind::kDns, entry.iid};
    const DnsAnswer answer = co_await resolver_->Resolve(entry.dns, timeout_s);
    bool was_failing = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = groups_.find(entry.iid);
      if (it == groups_.end()) continue;  // removed meanwhile
      was_failing = it->second.failing;
      it->second.failing = answer.kind == DnsAnswer::Kind::kFailed;
    }
    switch (answer.kind) {
      case DnsAnswer::Kind::kFailed:
        Count(entry.iid, "failed");
        // Nothing changes; one line per episode.
        if (!was_failing) {
          LogWarning("dns group " + entry.iid + " (" + entry.dns +
                     "): lookup failed, members "
                     "unchanged until a lookup answers: " +
                     answer.error);
        }
        continue;
      case DnsAnswer::Kind::kNoAddress:
        Count(entry.iid, "empty");
        break;
      case DnsAnswer::Kind::kAddresses:
        Count(entry.iid, "ok");
        break;
    }
    if (was_failing)
      LogInfo("dns group " + entry.iid + " (" + entry.dns + "): lookups answer again");
    std::vector<EngineSettings> members;
    for (const DnsGroupMember& m : DnsGroupMembers(entry.iid, entry.port, answer.addresses)) {
      EngineSettings e;
      e.iid = m.iid;
      e.url = m.url;
      e.role = entry.role;
      e.kv_engine_id = entry.kv_engine_id;
      e.kv_events = MemberEndpoint(entry.kv_events, m.host);
      e.kv_events_replay = MemberEndpoint(entry.kv_events_replay, m.host);
      members.push_back(std::move(e));
    }
    const MembershipChange change = fleet_.Reconcile(source, members);
    if (!change.empty()) {
      LogInfo("dns group " + entry.iid + " (" + entry.dns + "): " + std::to_string(members.size()) +
              " address(es); joined " + std::to_string(change.joined.size()) + ", left " +
              std::to_string(change.left.size()));
    }
  }
}

}  // namespace narwhal::router
