// HttpDoorTest: the HTTP front door (server/http/openai_shim) on loopback, on the
// real router core with a scripted engine client (tests/fakes), a journal in
// a temporary file and short timeouts; plus request builders for raw
// clients (tests/server/raw_http_client.h).
#ifndef NARWHAL_TESTS_SERVER_HTTP_DOOR_HARNESS_H_
#define NARWHAL_TESTS_SERVER_HTTP_DOOR_HARNESS_H_

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "router/common/journal.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/http/openai_shim.h"
#include "server/status_table.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/raw_http_client.h"

namespace narwhal::server::http_door_test {

namespace nt = narwhal::testing;
using json = nlohmann::json;
using Ms = std::chrono::milliseconds;
using nt::RawHttpClient;
using nt::RawResponse;
using SteadyClock = std::chrono::steady_clock;
using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

inline router::Settings TestSettings() {
  router::Settings s;
  s.model = "m";
  s.engines = {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
               {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
  return s;
}

inline HttpDoorOptions FastOptions() {
  HttpDoorOptions o;
  o.max_connections = 1000;
  o.max_header_bytes = 8192;
  o.max_headers = 20;
  o.max_body_bytes = 64 * 1024;
  o.header_timeout = 300ms;
  o.keepalive_timeout = 300ms;
  o.write_timeout = 2s;
  o.linger_timeout = 300ms;
  o.linger_bytes = 16 << 20;
  return o;
}

inline std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

inline std::string Post(const std::string& path, const std::string& body,
                        const std::string& extra = "", const std::string& version = "1.1") {
  return "POST " + path + " HTTP/" + version + "\r\nHost: t\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

inline std::string Completion(bool stream) {
  return json{{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}, {"stream", stream}}.dump();
}

// The `data:` payloads of an SSE body, in order.
inline std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end + 2;
  }
  return out;
}

class HttpDoorTest : public ::testing::Test {
 protected:
  void Start(HttpDoorOptions options = FastOptions(), const std::string& api_key = "") {
    char path[] = "/tmp/http_door_journal_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    journal_path_ = path;
    auto journal = router::Journal::Open(journal_path_, journal_options_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<router::Fleet>(settings_, *door_clock_, nullptr);
    // The fake engines are up: each passes its start-up check (readiness).
    for (const router::EngineSettings& e : settings_.engines) {
      fleet_->control().RecordSuccess(e.iid, router::Success::kHealth);
    }
    router_ = std::make_unique<router::Router>(settings_, fake_, *fleet_, *door_clock_, nullptr,
                                               journal_.get(), 7, &journal_status_);
    shim_ = std::make_unique<OpenAiShim>(settings_, *router_, *fleet_, *door_clock_, registry_,
                                         api_key, loops_, options);
    absl::StatusOr<int> port = shim_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    shim_->Start();
  }

  void TearDown() override {
    if (shim_) {
      shim_->StopAccepting();
      shim_->Join();
    }
    shim_.reset();
    router_.reset();
    fleet_.reset();
    journal_.reset();
    if (!journal_path_.empty()) ::unlink(journal_path_.c_str());
  }

  std::unique_ptr<RawHttpClient> Connect() {
    auto c = std::make_unique<RawHttpClient>(port_);
    EXPECT_TRUE(c->connected());
    return c;
  }

  // One request on a fresh connection.
  std::optional<RawResponse> Exchange(const std::string& request) {
    auto c = Connect();
    c->Send(request);
    return c->Read();
  }

  // Request rows of the journal, in order.
  std::vector<json> JournalRows() const {
    journal_->Flush();  // rows are written by the journal's own thread
    std::vector<json> rows;
    std::ifstream in(journal_path_);
    for (std::string line; std::getline(in, line);) {
      json row = json::parse(line, nullptr, false);
      if (row.is_object() && row.contains("rid")) rows.push_back(std::move(row));
    }
    return rows;
  }

  // Until every generation response has ended (bounded).
  bool WaitIdle(Ms timeout = 3000ms) { return shim_->WaitIdle(SteadyClock::now() + timeout); }

  // Until the door counts `n` open connections (bounded).
  bool WaitOpenConnections(int n, Ms timeout = 3000ms) {
    const auto deadline = SteadyClock::now() + timeout;
    while (shim_->open_connections() != n) {
      if (SteadyClock::now() > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }

  engines::IoLoops loops_{2};  // outlives everything that runs on it
  engines::RealClock clock_;
  // The clock of the fleet, the router and the door: `clock_` unless a test
  // points it at a fake clock (one that outlives TearDown) before Start().
  const engines::Clock* door_clock_ = &clock_;
  router::Settings settings_ = TestSettings();
  nt::FakeEngineClient fake_;
  prometheus::Registry registry_;
  std::string journal_path_;
  router::JournalOptions journal_options_;  // set before Start()
  std::unique_ptr<router::Journal> journal_;
  std::unique_ptr<router::Fleet> fleet_;
  const StatusTableJournal journal_status_{};
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<OpenAiShim> shim_;
  int port_ = 0;
};

}  // namespace narwhal::server::http_door_test

#endif  // NARWHAL_TESTS_SERVER_HTTP_DOOR_HARNESS_H_
