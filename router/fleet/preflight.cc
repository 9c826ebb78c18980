#include "router/fleet/preflight.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "engines/run_blocking.h"
#include "router/fleet/contract_check.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

// Why later gates skip an engine.
constexpr char kUnreachable[] = "failed reach";
constexpr char kWrongModel[] = "failed model";
constexpr char kContractFailed[] = "skipped: contract gate failed";

double Elapsed(const Clock& clock, MonoTime since) { return engines::Seconds(clock.Now() - since); }

// Durations in reports are kept to the microsecond.
double Micros(double s) { return std::round(s * 1e6) / 1e6; }

std::string FormatDuration(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3fs", s);
  return buf;
}

// A random tag that makes this run's prompts (and so their prefix-cache
// entries) and backend request ids unique.
std::string RunTag() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// Timestamps the first generated token of a decode stream; the client judges
// the stream itself (first-token budget, [DONE]).
class FirstTokenObserver : public engines::DecodeObserver {
 public:
  explicit FirstTokenObserver(const Clock& clock) : clock_(clock) {}

  bool OnEvent(std::string_view, const engines::StreamEvent& event) override {
    if (event.kind == engines::EventKind::kToken && !first_token_) first_token_ = clock_.Now();
    return true;
  }

  const std::optional<MonoTime>& first_token() const { return first_token_; }

 private:
  const Clock& clock_;
  std::optional<MonoTime> first_token_;
};

// "first failure (+N more)", or the passing summary.
std::string GateDetail(const std::vector<std::string>& failures, const std::string& summary) {
  if (failures.empty()) return summary;
  std::string detail = failures.front();
  if (failures.size() > 1) detail += " (+" + std::to_string(failures.size() - 1) + " more)";
  return detail;
}

std::string Skipped(size_t n) { return n == 0 ? "" : ", " + std::to_string(n) + " skipped"; }

class Preflight {
 public:
  Preflight(const Settings& settings, engines::AsyncEngineClient& client,
            engines::Executor executor, const Clock& clock, PairMode mode)
      : settings_(settings),
        client_(client),
        executor_(std::move(executor)),
        clock_(clock),
        mode_(mode),
        tag_(RunTag()),
        excluded_(settings.engines.size()) {}

  PreflightReport Run() {
    PreflightReport report;
    report.pairs = mode_;
    report.started_at = clock_.WallNow();
    const MonoTime started = clock_.Now();

    // reach: every engine.
    report.gates.push_back(EngineGate(
        "reach", &report,
        [&](const engines::EngineTarget& t) {
          return engines::RunBlocking(executor_, CheckReach(client_, t, settings_));
        },
        /*producers_only=*/false, kUnreachable));
    // contract: reachable engines, when pinned.
    if (settings_.engine_contract) {
      report.gates.push_back(EngineGate(
          "contract", &report,
          [&](const engines::EngineTarget& t) {
            return engines::RunBlocking(executor_, CheckContract(client_, t, settings_));
          },
          /*producers_only=*/false, nullptr));
    } else {
      PreflightGate gate;
      gate.name = "contract";
      gate.detail = "no engine_contract configured";
      report.gates.push_back(gate);
    }
    // A mismatch (not a gate skipped for want of reachable engines) stops
    // every transfer.
    const bool contract_failed = !report.gates.back().passed && !report.gates.back().skipped;
    // model: reachable engines; a failure keeps the engine out of transfers.
    report.gates.push_back(EngineGate(
        "model", &report,
        [&](const engines::EngineTarget& t) {
          return engines::RunBlocking(executor_, CheckModel(client_, t, settings_));
        },
        /*producers_only=*/false, kWrongModel));

    if (contract_failed) {
      SkipTransfers(&report);
    } else {
      report.gates.push_back(EngineGate(
          "produce", &report, [&](const engines::EngineTarget& t) { return Produce(t); },
          /*producers_only=*/true, nullptr));
      report.gates.push_back(ConsumeGate(&report));
    }

    report.passed = std::all_of(report.gates.begin(), report.gates.end(),
                                [](const PreflightGate& g) { return g.passed; });
    report.duration_s = Micros(Elapsed(clock_, started));
    return report;
  }

 private:
  engines::EngineTarget Target(size_t i) const {
    return {settings_.engines[i].iid, settings_.engines[i].url};
  }

  int IndexOf(const std::string& iid) const {
    for (size_t i = 0; i < settings_.engines.size(); ++i) {
      if (settings_.engines[i].iid == iid) return static_cast<int>(i);
    }
    return -1;
  }

  // A fresh probe body: a prompt no other probe used.
  json ProbeBody(const std::string& id, int max_tokens) const {
    return {{"model", settings_.model},
            {"prompt", id + " narwhal preflight: verify the KV handoff"},
            {"max_tokens", max_tokens}};
  }

  std::string NextId() { return "narwhal-preflight-" + tag_ + "-" + std::to_string(++counter_); }

  engines::LegOptions PrefillLeg(const std::string& id, MonoTime attempt_deadline) const {
    engines::LegOptions o;
    o.backend_request_id = id + "-p";
    o.request_deadline = attempt_deadline;
    o.leg_deadline = clock_.Now() + engines::FromSeconds(settings_.engine.first_token_timeout_s);
    return o;
  }

  // produce: a one-token prefill that must return a descriptor.
  std::string Produce(const engines::EngineTarget& producer) {
    const std::string id = NextId();
    const MonoTime deadline =
        clock_.Now() + engines::FromSeconds(settings_.serving.request_timeout_s);
    const json body = ProbeBody(id, 1);
    const engines::PrefillOutcome out = engines::RunBlocking(
        executor_,
        client_.Prefill(producer, engines::Api::kCompletions, body, PrefillLeg(id, deadline)));
    return out.ok() ? "" : out.failure->detail;
  }

  // Runs `check` on every eligible engine (all engines, or prefill-capable
  // ones) not excluded by an earlier gate. A failing engine is excluded from
  // later gates when `exclude_reason` is set.
  PreflightGate EngineGate(const std::string& name, PreflightReport* report,
                           const std::function<std::string(const engines::EngineTarget&)>& check,
                           bool producers_only, const char* exclude_reason) {
    PreflightGate gate;
    gate.name = name;
    const MonoTime gate_started = clock_.Now();
    std::vector<std::string> failures;
    size_t tested = 0, skipped = 0;
    for (size_t i = 0; i < settings_.engines.size(); ++i) {
      if (producers_only && !CanPrefill(settings_.engines[i].role)) continue;
      PreflightCheck c;
      c.gate = name;
      c.iid = settings_.engines[i].iid;
      if (!excluded_[i].empty()) {
        c.outcome = "skipped";
        c.detail = "skipped: " + excluded_[i];
        ++skipped;
      } else {
        const MonoTime t0 = clock_.Now();
        c.detail = check(Target(i));
        c.duration_s = Micros(Elapsed(clock_, t0));
        c.outcome = c.detail.empty() ? "passed" : "failed";
        ++tested;
        if (!c.detail.empty()) {
          failures.push_back(c.iid + ": " + c.detail);
          if (exclude_reason != nullptr) excluded_[i] = exclude_reason;
        }
      }
      report->checks.push_back(std::move(c));
    }
    gate.duration_s = Micros(Elapsed(clock_, gate_started));
    if (tested == 0 && skipped > 0) {
      gate.passed = false;
      gate.skipped = true;
      gate.detail = "every engine failed an earlier gate";
      return gate;
    }
    gate.passed = failures.empty();
    std::string summary;
    if (name == "reach") {
      summary = std::to_string(tested) + " engine(s) answered GET /health";
    } else if (name == "contract") {
      summary = std::to_string(tested) + " engine(s) match vllm_version " +
                settings_.engine_contract->vllm_version;
    } else if (name == "model") {
      summary = std::to_string(tested) + " engine(s) serve " + settings_.model;
    } else {
      summary = std::to_string(tested) + " producer(s) exported a handoff";
    }
    gate.detail = GateDetail(failures, summary + Skipped(skipped));
    return gate;
  }

  // One pair: a fresh handoff from the producer, decoded by the consumer.
  PreflightPair Transfer(const engines::EngineTarget& producer,
                         const engines::EngineTarget& consumer) {
    PreflightPair p;
    p.producer = producer.iid;
    p.consumer = consumer.iid;
    const MonoTime started = clock_.Now();
    const MonoTime deadline = started + engines::FromSeconds(settings_.serving.request_timeout_s);
    const std::string id = NextId();
    const json body = ProbeBody(id, 2);

    const engines::PrefillOutcome pre = engines::RunBlocking(
        executor_,
        client_.Prefill(producer, engines::Api::kCompletions, body, PrefillLeg(id, deadline)));
    p.prefill_s = Micros(Elapsed(clock_, started));
    if (!pre.ok()) {
      p.outcome = "producer_failed";
      p.detail = "prefill on " + producer.iid + " failed: " + pre.failure->detail;
      p.duration_s = p.prefill_s;
      return p;
    }

    engines::LegOptions leg;
    leg.backend_request_id = id + "-d";
    leg.request_deadline = deadline;
    FirstTokenObserver observer(clock_);
    const MonoTime dispatched = clock_.Now();
    const engines::DecodeOutcome dec = engines::RunBlocking(
        executor_,
        client_.Decode(consumer, *pre.result, body, /*client_streams=*/false, leg, observer));
    p.duration_s = Micros(Elapsed(clock_, started));
    if (observer.first_token()) {
      p.first_token_s = Micros(engines::Seconds(*observer.first_token() - dispatched));
    }
    if (dec.ok()) {
      p.outcome = "passed";
    } else if (dec.failure->cause == engines::FailureCause::kFirstTokenTimeout) {
      p.outcome = "unconfirmed_transfer";
      p.detail = dec.failure->detail;
    } else {
      p.outcome = "failed";
      p.detail = dec.failure->detail;
    }
    return p;
  }

  PreflightGate ConsumeGate(PreflightReport* report) {
    PreflightGate gate;
    gate.name = "consume";
    const MonoTime gate_started = clock_.Now();
    const auto pairs = PreflightPairs(settings_, mode_);
    std::vector<std::string> failures;
    size_t tested = 0, skipped = 0;
    for (const auto& [producer, consumer] : pairs) {
      const int pi = IndexOf(producer), ci = IndexOf(consumer);
      PreflightPair p;
      if (!excluded_[pi].empty() || !excluded_[ci].empty()) {
        p.producer = producer;
        p.consumer = consumer;
        p.outcome = "skipped";
        p.detail = !excluded_[pi].empty() ? "skipped: producer " + producer + " " + excluded_[pi]
                                          : "skipped: consumer " + consumer + " " + excluded_[ci];
        ++skipped;
      } else {
        p = Transfer(Target(pi), Target(ci));
        ++tested;
        if (p.outcome != "passed") {
          failures.push_back(producer + " -> " + consumer + ": " + p.outcome + ": " + p.detail);
        }
      }
      report->transfers.push_back(std::move(p));
    }
    gate.duration_s = Micros(Elapsed(clock_, gate_started));
    if (tested == 0 && skipped > 0) {
      gate.passed = false;
      gate.skipped = true;
      gate.detail = "every pair has an engine that failed an earlier gate";
      return gate;
    }
    gate.passed = failures.empty();
    gate.detail =
        GateDetail(failures, pairs.empty() ? std::string("no role-permitted pairs to test")
                                           : std::to_string(tested) +
                                                 " pair(s) transferred a fresh handoff (" +
                                                 PairModeName(mode_) + ")" + Skipped(skipped));
    return gate;
  }

  // After a contract failure: produce and consume are reported skipped.
  void SkipTransfers(PreflightReport* report) {
    for (const char* name : {"produce", "consume"}) {
      PreflightGate gate;
      gate.name = name;
      gate.passed = false;
      gate.skipped = true;
      gate.detail = "contract gate failed";
      report->gates.push_back(gate);
    }
    for (const EngineSettings& e : settings_.engines) {
      if (!CanPrefill(e.role)) continue;
      PreflightCheck c;
      c.gate = "produce";
      c.iid = e.iid;
      c.outcome = "skipped";
      c.detail = kContractFailed;
      report->checks.push_back(std::move(c));
    }
    for (const auto& [producer, consumer] : PreflightPairs(settings_, mode_)) {
      PreflightPair p;
      p.producer = producer;
      p.consumer = consumer;
      p.outcome = "skipped";
      p.detail = kContractFailed;
      report->transfers.push_back(std::move(p));
    }
  }

  const Settings& settings_;
  engines::AsyncEngineClient& client_;
  const engines::Executor executor_;
  const Clock& clock_;
  const PairMode mode_;
  const std::string tag_;
  long long counter_ = 0;
  // Per engine (config order): why later gates skip it; empty = eligible.
  std::vector<std::string> excluded_;
};

// --- Table rendering. ---

std::string Upper(std::string s) {
  for (char& c : s) c = c == '_' ? ' ' : static_cast<char>(std::toupper(c));
  return s;
}

std::string CheckWord(const std::string& outcome) {
  if (outcome == "passed") return "PASS";
  if (outcome == "failed") return "FAIL";
  if (outcome == "skipped") return "SKIP";
  return Upper(outcome);
}

// Left-aligned columns separated by two spaces; no trailing blanks.
void AppendTable(const std::vector<std::vector<std::string>>& rows, std::string* out) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    *out += line + "\n";
  }
}

}  // namespace

const char* PairModeName(PairMode mode) { return mode == PairMode::kRing ? "ring" : "mesh"; }

bool ParsePairMode(std::string_view name, PairMode* mode) {
  if (name == "mesh") {
    *mode = PairMode::kMesh;
  } else if (name == "ring") {
    *mode = PairMode::kRing;
  } else {
    return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> PreflightPairs(const Settings& settings,
                                                                PairMode mode) {
  std::vector<std::string> producers, consumers;
  for (const EngineSettings& e : settings.engines) {
    if (CanPrefill(e.role)) producers.push_back(e.iid);
    if (CanDecode(e.role)) consumers.push_back(e.iid);
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  if (mode == PairMode::kMesh) {
    for (const std::string& p : producers) {
      for (const std::string& c : consumers) {
        if (p != c) pairs.emplace_back(p, c);
      }
    }
    return pairs;
  }
  if (producers.empty() || consumers.empty()) return pairs;

  std::set<std::pair<std::string, std::string>> chosen;
  auto add = [&](const std::string& p, const std::string& c) {
    if (chosen.insert({p, c}).second) pairs.emplace_back(p, c);
  };
  const size_t n = std::max(producers.size(), consumers.size());
  for (size_t k = 0; k < n; ++k) {
    const std::string& p = producers[k % producers.size()];
    for (size_t j = 0; j < consumers.size(); ++j) {
      const std::string& c = consumers[(k + j) % consumers.size()];
      if (c != p) {
        add(p, c);
        break;
      }
    }
  }
  // Cover whoever is still missing in a role it can take with someone.
  auto appears = [&](const std::string& iid, bool as_producer) {
    return std::any_of(pairs.begin(), pairs.end(),
                       [&](const auto& pc) { return (as_producer ? pc.first : pc.second) == iid; });
  };
  for (const std::string& p : producers) {
    if (appears(p, true)) continue;
    for (const std::string& c : consumers) {
      if (c != p) {
        add(p, c);
        break;
      }
    }
  }
  for (const std::string& c : consumers) {
    if (appears(c, false)) continue;
    for (const std::string& p : producers) {
      if (p != c) {
        add(p, c);
        break;
      }
    }
  }
  return pairs;
}

PreflightReport RunPreflight(const Settings& settings, engines::AsyncEngineClient& client,
                             const engines::Executor& executor, const Clock& clock,
                             PairMode pairs) {
  return Preflight(settings, client, executor, clock, pairs).Run();
}

json PreflightReport::ToJson() const {
  json gates_json = json::array();
  for (const PreflightGate& g : gates) {
    gates_json.push_back({{"name", g.name},
                          {"outcome", g.skipped  ? "skipped"
                                      : g.passed ? "passed"
                                                 : "failed"},
                          {"passed", g.passed},
                          {"skipped", g.skipped},
                          {"detail", g.detail},
                          {"duration_s", g.duration_s}});
  }
  json checks_json = json::array();
  for (const PreflightCheck& c : checks) {
    checks_json.push_back({{"gate", c.gate},
                           {"iid", c.iid},
                           {"outcome", c.outcome},
                           {"detail", c.detail},
                           {"duration_s", c.duration_s}});
  }
  json transfers_json = json::array();
  for (const PreflightPair& p : transfers) {
    transfers_json.push_back({{"producer", p.producer},
                              {"consumer", p.consumer},
                              {"outcome", p.outcome},
                              {"detail", p.detail},
                              {"prefill_s", p.prefill_s},
                              {"first_token_s", p.first_token_s},
                              {"duration_s", p.duration_s}});
  }
  return {{"passed", passed},
          {"started_at", started_at},
          {"duration_s", duration_s},
          {"pairs", PairModeName(pairs)},
          {"gates", std::move(gates_json)},
          {"checks", std::move(checks_json)},
          {"transfers", std::move(transfers_json)}};
}

std::string PreflightReport::ToTable() const {
  std::string out = std::string("preflight ") + (passed ? "PASSED" : "FAILED") + " in " +
                    FormatDuration(duration_s) + " (pairs: " + PairModeName(pairs) + ")\n\n";

  std::vector<std::vector<std::string>> rows = {{"GATE", "RESULT", "DURATION", "DETAIL"}};
  for (const PreflightGate& g : gates) {
    rows.push_back({g.name,
                    g.skipped  ? "SKIP"
                    : g.passed ? "PASS"
                               : "FAIL",
                    g.skipped ? "-" : FormatDuration(g.duration_s), g.detail});
  }
  AppendTable(rows, &out);

  if (!checks.empty()) {
    out += "\n";
    rows = {{"ENGINE", "GATE", "RESULT", "DURATION", "DETAIL"}};
    for (const PreflightCheck& c : checks) {
      rows.push_back({c.iid, c.gate, CheckWord(c.outcome),
                      c.outcome == "skipped" ? "-" : FormatDuration(c.duration_s), c.detail});
    }
    AppendTable(rows, &out);
  }

  if (!transfers.empty()) {
    out += "\n";
    rows = {{"PRODUCER", "CONSUMER", "RESULT", "PREFILL", "FIRST TOKEN", "DURATION", "DETAIL"}};
    for (const PreflightPair& p : transfers) {
      const bool ran = p.outcome != "skipped";
      const bool decoded = p.outcome != "skipped" && p.outcome != "producer_failed";
      rows.push_back({p.producer, p.consumer, CheckWord(p.outcome),
                      ran ? FormatDuration(p.prefill_s) : "-",
                      decoded && p.first_token_s > 0 ? FormatDuration(p.first_token_s) : "-",
                      ran ? FormatDuration(p.duration_s) : "-", p.detail});
    }
    AppendTable(rows, &out);
  }
  return out;
}

}  // namespace narwhal::router
