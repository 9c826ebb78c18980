// Shared pieces of the end-to-end tests: a fixture that owns a small set of
// real narwhal-sim engines (started lazily, reused by the tests of a
// process, faults and request logs cleared between tests) and starts
// narwhal-serve routers over them; HTTP, SSE, metrics and journal helpers.
#ifndef NARWHAL_TESTS_E2E_E2E_UTIL_H_
#define NARWHAL_TESTS_E2E_E2E_UTIL_H_

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/fakes/command.h"
#include "tests/fakes/http_capture.h"
#include "tests/fakes/serve_process.h"
#include "tests/fakes/sim_process.h"

namespace narwhal::testing {

using json = nlohmann::json;

inline constexpr char kModel[] = "Qwen/Qwen3-0.6B";
inline constexpr char kCompletions[] = "/v1/completions";
inline constexpr char kChat[] = "/v1/chat/completions";

// A completions body: {"model", "prompt", "max_tokens", "stream"} + extra.
json Completion(const std::string& prompt, int max_tokens, bool stream,
                const json& extra = json::object());
// A chat body with one user message.
json Chat(const std::string& content, int max_tokens, bool stream,
          const json& extra = json::object());

// The fleet config of `engines` (iid -> url, role), with SPEC §3 keys in
// `overrides` merged over the test defaults (short engine timeouts, no
// retries, small graceful drain, breaker ejection effectively off).
json FleetConfig(const std::vector<std::tuple<std::string, std::string, std::string>>& engines,
                 const json& overrides = json::object());

// A parsed Prometheus text exposition sample.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
std::vector<MetricSample> ParseMetrics(const std::string& text);
// Sum of the samples named `name` whose labels include `labels`.
double MetricSum(const std::vector<MetricSample>& samples, const std::string& name,
                 const std::map<std::string, std::string>& labels = {});
// `blocks` full prefix-cache blocks of narwhal-sim text for `tag` (64
// characters = 16 of its tokens each), nothing after them.
std::string SimBlocksText(const std::string& tag, int blocks);
// The same over a live router's GET /metrics (0 when the scrape fails).
double ScrapedMetric(ServeProcess& router, const std::string& name,
                     const std::map<std::string, std::string>& labels = {});

// Capture options that send `headers` with the request.
HttpCaptureOptions WithHeaders(httplib::Headers headers);

// Simple GET; status 0 when the exchange failed.
struct HttpResult {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  std::string header(const std::string& name) const;
};
HttpResult HttpGet(int port, const std::string& path, const httplib::Headers& headers = {});
HttpResult HttpPostRaw(int port, const std::string& path, const std::string& body,
                       const std::string& content_type = "application/json",
                       const httplib::Headers& headers = {});

std::string Header(const HttpCapture& capture, const std::string& name);
// The error object of an error body ({"error": {...}}), or null.
json ErrorOf(const std::string& body);
// The JSON payloads of the token-carrying events (choices[0] text or
// delta content non-empty).
std::vector<json> TokenEvents(const HttpCapture& capture);
// Concatenated choice-0 text of streamed chunks (text or delta.content).
std::string StreamedText(const HttpCapture& capture);
// Choice-0 text of a non-streaming response (text or message.content).
std::string ResponseText(const std::string& body);
// The terminal error event of a committed stream, or null.
json TerminalErrorEvent(const HttpCapture& capture);
std::string Describe(const HttpCapture& capture);

// Waits until `done()` holds, polling; false at the timeout.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
               absl::Duration poll = absl::Milliseconds(10));

// The records of `sim`'s request log with `phase` ("prefill", "decode", or
// "" for every inference request).
std::vector<json> SimRequests(SimProcess& sim, const std::string& phase = "");

// SPEC §9 keys every terminal journal row carries.
void ExpectJournalRowShape(const json& row);

// A raw client connection, for clients that go away at a moment of the
// test's choosing (before any response byte, say).
class RawClient {
 public:
  // Connects to 127.0.0.1:port and sends `path` with `body` (POST, JSON).
  static std::unique_ptr<RawClient> Post(int port, const std::string& path,
                                         const std::string& body);
  ~RawClient();
  bool connected() const { return fd_ >= 0; }
  // Reads what arrives within `timeout` (appended to received()).
  void ReadFor(absl::Duration timeout);
  // Reads until `done(received())` or the timeout; true when done.
  bool ReadUntil(const std::function<bool(const std::string&)>& done, absl::Duration timeout);
  const std::string& received() const { return received_; }
  // Closes the connection now; returns when.
  absl::Time Close();

 private:
  int fd_ = -1;
  std::string received_;
};

// The fixture of the end-to-end suites.
//
// Engines (started on first use, shared by the tests of one process):
//   p0, p1 (prefill), d0, d1 (decode), b0 (both).
// Every test starts its own routers (StartRouter) and each router its own
// journal. TearDown checks, for every router the test started: every
// engine's in-flight gauge is back to 0, the journal holds exactly one
// well-formed row per generation request sent through Send()/Stream(), and
// then stops the router.
class E2eTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;

  // The shared engine `iid` (starting it if needed); fails the test when it
  // cannot start.
  static SimProcess& Sim(const std::string& iid);
  static std::string SimUrl(const std::string& iid) { return Sim(iid).url(); }

  // Starts a router whose fleet is the shared engines `iids` (with their
  // roles), with `overrides` merged into the config. Fatal on failure.
  ServeProcess& StartRouter(const std::vector<std::string>& iids,
                            const json& overrides = json::object(),
                            const std::vector<std::pair<std::string, std::string>>& env = {});
  // Takes a router started by hand (ServeProcess::Start with options of the
  // test's own) into the fixture's care: TearDown checks and stops it. Fatal
  // when it did not start.
  ServeProcess& Adopt(absl::StatusOr<std::unique_ptr<ServeProcess>> serve);
  // Same, with an explicit engine list (iid, url, role).
  ServeProcess& StartRouterWith(
      const std::vector<std::tuple<std::string, std::string, std::string>>& engines,
      const json& overrides = json::object(),
      const std::vector<std::pair<std::string, std::string>>& env = {});

  // POSTs a generation request to the router and counts it (TearDown
  // expects one journal row per counted request).
  HttpCapture Send(ServeProcess& router, const std::string& path, const json& body,
                   HttpCaptureOptions options = {});
  HttpCapture SendRaw(ServeProcess& router, const std::string& path, const std::string& body,
                      HttpCaptureOptions options = {});
  // Counts a request sent some other way (RawClient, gRPC, ...).
  void CountRequest(ServeProcess& router, int n = 1);
  int CountedRequests(ServeProcess& router) const;

  // Waits for the journal row of the request behind `capture`
  // (x-request-id) and checks its SPEC §9 shape.
  json JournalRow(ServeProcess& router, const HttpCapture& capture);
  json JournalRowFor(ServeProcess& router, const std::string& rid);

  // GET /metrics, parsed; fails the test on error.
  std::vector<MetricSample> Metrics(ServeProcess& router);

  // Waits (at most `timeout`) until every narwhal_engine_inflight sample and
  // narwhal_inflight are 0; returns the text seen last.
  std::string WaitInflightZero(ServeProcess& router, absl::Duration timeout);

  // Sets fault rules on a sim (fatal on failure).
  static void SetFaults(const std::string& iid, const json& rules);

  // Puts one in-flight leg of `phase` on one of `iids` and says which engine
  // holds it: a streaming request (from a raw client) whose prefill leg is
  // held by delay_headers (`hold_ms`) or whose decode leg is held by
  // silent_before_first_token. The other engines' rules are cleared.
  // Release() hangs the client up (the request ends cancelled); the router's
  // first-token timeout must outlast the occupation.
  struct Occupation {
    std::string busy;
    std::vector<std::string> idle;
    std::unique_ptr<RawClient> client;
    void Release() {
      if (client) client->Close();
    }
  };
  std::unique_ptr<Occupation> Occupy(ServeProcess& router, const std::string& phase,
                                     const std::vector<std::string>& iids, int hold_ms = 10000);

  // Routers started by this test (stopped in TearDown).
  std::vector<std::unique_ptr<ServeProcess>> routers_;
  std::map<const ServeProcess*, int> sent_;
  bool skip_journal_count_check_ = false;

  static std::map<std::string, std::unique_ptr<SimProcess>>* sims_;
};

// Runs `command` through /bin/sh; its exit code and stdout (stderr in err).
CommandResult RunShell(const std::string& command, absl::Duration timeout = absl::Seconds(120));

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_E2E_E2E_UTIL_H_
