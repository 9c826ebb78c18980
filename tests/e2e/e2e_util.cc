#include "tests/e2e/e2e_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace narwhal::testing {

std::map<std::string, std::unique_ptr<SimProcess>>* E2eTest::sims_ = nullptr;

json Completion(const std::string& prompt, int max_tokens, bool stream, const json& extra) {
  json body = {
      {"model", kModel}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
  body.update(extra);
  return body;
}

json Chat(const std::string& content, int max_tokens, bool stream, const json& extra) {
  json body = {{"model", kModel},
               {"messages", json::array({{{"role", "user"}, {"content", content}}})},
               {"max_tokens", max_tokens},
               {"stream", stream}};
  body.update(extra);
  return body;
}

json FleetConfig(const std::vector<std::tuple<std::string, std::string, std::string>>& engines,
                 const json& overrides) {
  json list = json::array();
  for (const auto& [iid, url, role] : engines) {
    list.push_back({{"iid", iid}, {"url", url}, {"role", role}});
  }
  json config = {
      {"model", kModel},
      {"engines", list},
      {"serving",
       {{"max_attempts", 1},
        {"request_timeout_s", 30},
        {"prefill_timeout_s", 10},
        {"graceful_timeout_s", 5},
        {"retry_base_s", 0.02},
        {"retry_cap_s", 0.05}}},
      {"engine",
       {{"first_token_timeout_s", 1},
        {"decode_read_timeout_s", 1},
        {"connect_timeout_s", 2},
        {"health_timeout_s", 2}}},
      // Breaker ejection would take shared engines out of later requests.
      {"recovery", {{"eject_after", 1000000}, {"liveness_interval_s", 0}}},
  };
  config.merge_patch(overrides);
  return config;
}

std::vector<MetricSample> ParseMetrics(const std::string& text) {
  std::vector<MetricSample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.empty() || line.front() == '#') continue;
    MetricSample s;
    size_t value_at = 0;
    const size_t brace = line.find('{');
    const size_t space = line.find(' ');
    if (brace != absl::string_view::npos && brace < space) {
      s.name = std::string(line.substr(0, brace));
      const size_t close = line.rfind('}');
      if (close == absl::string_view::npos) continue;
      absl::string_view labels = line.substr(brace + 1, close - brace - 1);
      // name="value" pairs; values here never hold '",' sequences.
      for (absl::string_view pair : absl::StrSplit(labels, "\",", absl::SkipEmpty())) {
        const size_t eq = pair.find('=');
        if (eq == absl::string_view::npos) continue;
        std::string value(pair.substr(eq + 1));
        if (!value.empty() && value.front() == '"') value.erase(0, 1);
        if (!value.empty() && value.back() == '"') value.pop_back();
        s.labels[std::string(absl::StripAsciiWhitespace(pair.substr(0, eq)))] = value;
      }
      value_at = close + 1;
    } else {
      s.name = std::string(line.substr(0, space));
      value_at = space;
    }
    absl::string_view rest = absl::StripAsciiWhitespace(line.substr(value_at));
    rest = rest.substr(0, rest.find(' '));  // drop a timestamp
    if (!absl::SimpleAtod(rest, &s.value)) continue;
    samples.push_back(std::move(s));
  }
  return samples;
}

double MetricSum(const std::vector<MetricSample>& samples, const std::string& name,
                 const std::map<std::string, std::string>& labels) {
  double sum = 0;
  for (const MetricSample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (match) sum += s.value;
  }
  return sum;
}

std::string SimBlocksText(const std::string& tag, int blocks) {
  constexpr size_t kBlockChars = 64;
  const size_t size = static_cast<size_t>(blocks) * kBlockChars;
  std::string text;
  while (text.size() < size) text += tag + "; ";
  text.resize(size);
  return text;
}

double ScrapedMetric(ServeProcess& router, const std::string& name,
                     const std::map<std::string, std::string>& labels) {
  return MetricSum(ParseMetrics(HttpGet(router.http_port(), "/metrics").body), name, labels);
}

std::string HttpResult::header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

namespace {

httplib::Client LoopbackClient(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(15));
  client.set_write_timeout(std::chrono::seconds(5));
  return client;
}

}  // namespace

HttpCaptureOptions WithHeaders(httplib::Headers headers) {
  HttpCaptureOptions options;
  options.headers = std::move(headers);
  return options;
}

HttpResult HttpGet(int port, const std::string& path, const httplib::Headers& headers) {
  httplib::Client client = LoopbackClient(port);
  HttpResult out;
  if (httplib::Result r = client.Get(path, headers)) {
    out.status = r->status;
    out.body = r->body;
    out.headers = r->headers;
  }
  return out;
}

HttpResult HttpPostRaw(int port, const std::string& path, const std::string& body,
                       const std::string& content_type, const httplib::Headers& headers) {
  httplib::Client client = LoopbackClient(port);
  HttpResult out;
  if (httplib::Result r = client.Post(path, headers, body, content_type)) {
    out.status = r->status;
    out.body = r->body;
    out.headers = r->headers;
  }
  return out;
}

std::string Header(const HttpCapture& capture, const std::string& name) {
  for (const auto& [k, v] : capture.headers) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

json ErrorOf(const std::string& body) {
  json parsed = json::parse(body, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("error") || !parsed["error"].is_object()) {
    return nullptr;
  }
  return parsed["error"];
}

namespace {

std::string ChoiceText(const json& event) {
  if (!event.is_object() || !event.contains("choices") || !event["choices"].is_array() ||
      event["choices"].empty()) {
    return "";
  }
  const json& c = event["choices"][0];
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
      c["delta"]["content"].is_string()) {
    return c["delta"]["content"].get<std::string>();
  }
  if (c.contains("message") && c["message"].is_object() && c["message"].contains("content") &&
      c["message"]["content"].is_string()) {
    return c["message"]["content"].get<std::string>();
  }
  return "";
}

}  // namespace

std::vector<json> TokenEvents(const HttpCapture& capture) {
  std::vector<json> out;
  for (const std::string& data : capture.data_events()) {
    json event = json::parse(data, nullptr, false);
    if (!ChoiceText(event).empty()) out.push_back(std::move(event));
  }
  return out;
}

std::string StreamedText(const HttpCapture& capture) {
  std::string text;
  for (const std::string& data : capture.data_events()) {
    text += ChoiceText(json::parse(data, nullptr, false));
  }
  return text;
}

std::string ResponseText(const std::string& body) {
  return ChoiceText(json::parse(body, nullptr, false));
}

json TerminalErrorEvent(const HttpCapture& capture) {
  if (capture.events.empty()) return nullptr;
  json last = json::parse(capture.events.back(), nullptr, false);
  if (!last.is_object() || !last.contains("error")) return nullptr;
  return last["error"];
}

std::string Describe(const HttpCapture& capture) {
  std::string body = capture.body;
  if (body.size() > 2000) body = body.substr(0, 2000) + "...";
  return absl::StrCat("HTTP ", capture.status, " (", httplib::to_string(capture.error),
                      ", x-request-id ", Header(capture, "x-request-id"), ") body: ", body);
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout, absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (done()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(poll);
  }
}

std::vector<json> SimRequests(SimProcess& sim, const std::string& phase) {
  std::vector<json> out;
  absl::StatusOr<json> records = sim.Requests();
  EXPECT_TRUE(records.ok()) << records.status();
  if (!records.ok() || !records->is_array()) return out;
  for (const json& r : *records) {
    if (!r.contains("phase") || !r["phase"].is_string()) continue;
    if (phase.empty() || r["phase"] == phase) out.push_back(r);
  }
  return out;
}

void ExpectJournalRowShape(const json& row) {
  ASSERT_TRUE(row.is_object()) << row.dump();
  for (const char* key :
       {"rid",        "client_rid",   "api",      "stream",           "arrived",
        "terminal",   "reason",       "status",   "error_type",       "error",
        "ttft_s",     "first_byte_s", "tpot_s",   "duration_s",       "prefill_iid",
        "decode_iid", "crossed",      "attempts", "attempt_failures", "output_tokens"}) {
    EXPECT_TRUE(row.contains(key)) << "journal row lacks \"" << key << "\": " << row.dump();
  }
  static const std::set<std::string> kTerminals = {"completed", "failed",  "rejected",
                                                   "expired",   "invalid", "cancelled"};
  EXPECT_TRUE(row.value("terminal", json()).is_string() &&
              kTerminals.count(row["terminal"].get<std::string>()) == 1)
      << row.dump();
  EXPECT_TRUE(row.value("rid", json()).is_string()) << row.dump();
  EXPECT_TRUE(row.value("arrived", json()).is_number()) << row.dump();
  EXPECT_TRUE(row.value("attempt_failures", json()).is_array()) << row.dump();
  for (const json& f : row.value("attempt_failures", json::array())) {
    for (const char* key : {"attempt", "phase", "iid", "reason", "status", "transient",
                            "output_started", "retry_scheduled", "retry_reason"}) {
      EXPECT_TRUE(f.contains(key))
          << "attempt_failures entry lacks \"" << key << "\": " << row.dump();
    }
  }
}

std::unique_ptr<RawClient> RawClient::Post(int port, const std::string& path,
                                           const std::string& body) {
  auto client = std::unique_ptr<RawClient>(new RawClient());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return client;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return client;
  }
  const std::string request =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return client;
    }
    sent += static_cast<size_t>(n);
  }
  client->fd_ = fd;
  return client;
}

RawClient::~RawClient() { Close(); }

void RawClient::ReadFor(absl::Duration timeout) {
  ReadUntil([](const std::string&) { return false; }, timeout);
}

bool RawClient::ReadUntil(const std::function<bool(const std::string&)>& done,
                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (fd_ >= 0) {
    if (done(received_)) return true;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p = {fd_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n <= 0) continue;
    char chunk[4096];
    const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return done(received_);
    received_.append(chunk, static_cast<size_t>(got));
  }
  return done(received_);
}

absl::Time RawClient::Close() {
  const absl::Time now = absl::Now();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  return now;
}

// --- fixture ---

SimProcess& E2eTest::Sim(const std::string& iid) {
  if (sims_ == nullptr) sims_ = new std::map<std::string, std::unique_ptr<SimProcess>>();
  auto it = sims_->find(iid);
  if (it != sims_->end() && it->second->running()) return *it->second;
  const std::string role = iid[0] == 'p' ? "prefill" : iid[0] == 'd' ? "decode" : "both";
  absl::StatusOr<std::unique_ptr<SimProcess>> sim =
      SimProcess::Start({"--engine-id", iid, "--role", role, "--model", kModel,
                         "--token-interval-ms", "2", "--max-silence-s", "20", "--threads", "64"});
  if (!sim.ok()) {
    ADD_FAILURE() << "cannot start narwhal-sim " << iid << ": " << sim.status();
    std::abort();
  }
  SimProcess& ref = **sim;
  (*sims_)[iid] = std::move(*sim);
  return ref;
}

void E2eTest::TearDownTestSuite() {
  if (sims_ != nullptr) sims_->clear();
}

void E2eTest::SetUp() {
  if (sims_ == nullptr) return;
  for (auto& [iid, sim] : *sims_) {
    if (!sim->running()) continue;
    EXPECT_TRUE(sim->ClearFaults().ok()) << iid;
    EXPECT_TRUE(sim->ClearRequests().ok()) << iid;
  }
}

void E2eTest::TearDown() {
  for (auto& router : routers_) {
    if (!router->running()) continue;
    const std::string seen = WaitInflightZero(*router, absl::Seconds(5));
    const std::vector<MetricSample> samples = ParseMetrics(seen);
    for (const MetricSample& s : samples) {
      if (s.name == "narwhal_engine_inflight" || s.name == "narwhal_inflight") {
        EXPECT_EQ(s.value, 0) << s.name << " of "
                              << (s.labels.count("iid") ? s.labels.at("iid") : "") << " "
                              << (s.labels.count("phase") ? s.labels.at("phase") : "")
                              << " is not back to 0 after the test";
      }
    }
    bool has_engine_inflight = false;
    for (const MetricSample& s : samples)
      has_engine_inflight |= s.name == "narwhal_engine_inflight";
    EXPECT_TRUE(has_engine_inflight) << "no narwhal_engine_inflight series on /metrics";

    if (!skip_journal_count_check_) {
      const size_t expected = static_cast<size_t>(sent_[router.get()]);
      std::vector<json> rows = router->WaitJournalRows(expected, absl::Seconds(10));
      // A moment more, so an extra row would show.
      absl::SleepFor(absl::Milliseconds(50));
      rows = router->TerminalRows();
      EXPECT_EQ(rows.size(), expected)
          << "journal rows vs generation requests sent (one row per request)";
      std::set<std::string> rids;
      for (const json& row : rows) {
        ExpectJournalRowShape(row);
        if (row.is_object() && row.contains("rid") && row["rid"].is_string()) {
          EXPECT_TRUE(rids.insert(row["rid"].get<std::string>()).second)
              << "two journal rows for rid " << row["rid"];
        }
      }
      for (const json& event : router->EventRows()) {
        EXPECT_TRUE(event["event"].is_string()) << event.dump();
      }
    }
  }
  // Every upstream exchange the routers opened has ended (B7: every
  // connection closed, also on failure and cancel paths).
  if (sims_ != nullptr) {
    for (auto& [iid, sim] : *sims_) {
      if (!sim->running()) continue;
      std::vector<json> open;
      WaitUntil(
          [&] {
            open.clear();
            for (const json& r : SimRequests(*sim)) {
              if (r["end"].is_null()) open.push_back(r);
            }
            return open.empty();
          },
          absl::Seconds(5));
      for (const json& r : open) {
        ADD_FAILURE() << "engine " << iid << " still has an open " << r["phase"]
                      << " request after the test: " << r.dump();
      }
    }
  }
  for (auto& router : routers_) {
    if (!router->running()) continue;
    const std::optional<int> code = router->Stop(absl::Seconds(15));
    EXPECT_EQ(code, std::optional<int>(0))
        << "narwhal-serve did not exit 0 on SIGTERM" << router->StderrTail();
  }
  if (HasFailure()) {
    for (auto& router : routers_) {
      router->keep_scratch(true);
      std::cerr << "router scratch dir (config, journal, stderr): " << router->scratch_dir()
                << router->StderrTail(3000) << "\n";
    }
  }
  if (sims_ != nullptr) {
    for (auto& [iid, sim] : *sims_) {
      if (sim->running()) sim->ClearFaults().IgnoreError();
    }
  }
}

ServeProcess& E2eTest::StartRouter(const std::vector<std::string>& iids, const json& overrides,
                                   const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::tuple<std::string, std::string, std::string>> engines;
  for (const std::string& iid : iids) {
    const std::string role = iid[0] == 'p' ? "prefill" : iid[0] == 'd' ? "decode" : "both";
    engines.emplace_back(iid, SimUrl(iid), role);
  }
  return StartRouterWith(engines, overrides, env);
}

ServeProcess& E2eTest::StartRouterWith(
    const std::vector<std::tuple<std::string, std::string, std::string>>& engines,
    const json& overrides, const std::vector<std::pair<std::string, std::string>>& env) {
  ServeOptions options;
  options.config = FleetConfig(engines, overrides);
  options.env = env;
  return Adopt(ServeProcess::Start(options));
}

ServeProcess& E2eTest::Adopt(absl::StatusOr<std::unique_ptr<ServeProcess>> serve) {
  if (!serve.ok()) {
    ADD_FAILURE() << "cannot start narwhal-serve: " << serve.status();
    std::abort();
  }
  routers_.push_back(std::move(*serve));
  sent_[routers_.back().get()] = 0;
  return *routers_.back();
}

HttpCapture E2eTest::Send(ServeProcess& router, const std::string& path, const json& body,
                          HttpCaptureOptions options) {
  return SendRaw(router, path, body.dump(), std::move(options));
}

HttpCapture E2eTest::SendRaw(ServeProcess& router, const std::string& path, const std::string& body,
                             HttpCaptureOptions options) {
  ++sent_[&router];
  return PostCapture("127.0.0.1", router.http_port(), path, body, options);
}

void E2eTest::CountRequest(ServeProcess& router, int n) { sent_[&router] += n; }

int E2eTest::CountedRequests(ServeProcess& router) const {
  auto it = sent_.find(&router);
  return it == sent_.end() ? 0 : it->second;
}

json E2eTest::JournalRow(ServeProcess& router, const HttpCapture& capture) {
  const std::string rid = Header(capture, "x-request-id");
  EXPECT_FALSE(rid.empty()) << "no x-request-id header: " << Describe(capture);
  return JournalRowFor(router, rid);
}

json E2eTest::JournalRowFor(ServeProcess& router, const std::string& rid) {
  absl::StatusOr<json> row = router.WaitJournalRow(rid, absl::Seconds(10));
  EXPECT_TRUE(row.ok()) << row.status();
  if (!row.ok()) return json::object();
  ExpectJournalRowShape(*row);
  EXPECT_EQ(router.JournalRowsFor(rid).size(), 1u) << "journal rows for " << rid;
  return *row;
}

std::vector<MetricSample> E2eTest::Metrics(ServeProcess& router) {
  HttpResult r = HttpGet(router.http_port(), "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  return ParseMetrics(r.body);
}

std::string E2eTest::WaitInflightZero(ServeProcess& router, absl::Duration timeout) {
  std::string text;
  WaitUntil(
      [&] {
        HttpResult r = HttpGet(router.http_port(), "/metrics");
        if (r.status != 200) return false;
        text = r.body;
        for (const MetricSample& s : ParseMetrics(text)) {
          if ((s.name == "narwhal_engine_inflight" || s.name == "narwhal_inflight") &&
              s.value != 0) {
            return false;
          }
        }
        return true;
      },
      timeout, absl::Milliseconds(20));
  return text;
}

void E2eTest::SetFaults(const std::string& iid, const json& rules) {
  absl::Status s = Sim(iid).SetFaults(rules);
  ASSERT_TRUE(s.ok()) << iid << ": " << s;
}

std::unique_ptr<E2eTest::Occupation> E2eTest::Occupy(ServeProcess& router, const std::string& phase,
                                                     const std::vector<std::string>& iids,
                                                     int hold_ms) {
  auto occupation = std::make_unique<Occupation>();
  const json rule = phase == "prefill"
                        ? json{{"kind", "delay_headers"}, {"phase", "prefill"}, {"ms", hold_ms}}
                        : json{{"kind", "silent_before_first_token"}, {"phase", "decode"}};
  for (const std::string& iid : iids) {
    SetFaults(iid, json::array({rule}));
    Sim(iid).ClearRequests().IgnoreError();
  }
  CountRequest(router);
  Occupation* o = occupation.get();
  o->client = RawClient::Post(router.http_port(), kCompletions,
                              Completion("occupy one engine", 4, true).dump());
  EXPECT_TRUE(o->client->connected());
  WaitUntil(
      [&] {
        for (const std::string& iid : iids) {
          for (const json& r : SimRequests(Sim(iid), phase)) {
            if (r["end"].is_null()) {
              o->busy = iid;
              return true;
            }
          }
        }
        return false;
      },
      absl::Seconds(10));
  EXPECT_FALSE(o->busy.empty()) << "no engine took the occupying " << phase << " leg";
  for (const std::string& iid : iids) {
    if (iid == o->busy) continue;
    o->idle.push_back(iid);
    EXPECT_TRUE(Sim(iid).ClearFaults().ok());
  }
  return occupation;
}

CommandResult RunShell(const std::string& command, absl::Duration timeout) {
  return RunCommand({"/bin/sh", "-c", command}, timeout);
}

}  // namespace narwhal::testing
