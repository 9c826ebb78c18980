// Starting and stopping narwhal-sim: the binary's command line, signals and
// restarts (through SimProcess), and the in-process SimEngine.
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "engines/sim/sim_engine.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;

bool Healthy(const std::string& host, int port) {
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(2));
  httplib::Result result = client.Get("/health");
  return result && result->status == 200;
}

TEST(SimProcessTest, StartsOnAFreePortWithItsEngineId) {
  auto sim = SimProcess::Start({"--engine-id", "life0"});
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_GT((*sim)->port(), 0);
  EXPECT_EQ((*sim)->engine_id(), "life0");
  EXPECT_EQ((*sim)->url(), "http://127.0.0.1:" + std::to_string((*sim)->port()));
  EXPECT_TRUE(Healthy((*sim)->host(), (*sim)->port()));
}

TEST(SimProcessTest, BadArgumentsExitWithTwo) {
  auto sim = SimProcess::Start({"--role", "judge"});
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("exited with 2"), std::string::npos)
      << sim.status();
}

TEST(SimProcessTest, SigtermExitsCleanly) {
  auto sim = SimProcess::Start({});
  ASSERT_TRUE(sim.ok()) << sim.status();
  (*sim)->Kill(SIGTERM);
  std::optional<int> status = (*sim)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_FALSE((*sim)->running());
}

TEST(SimProcessTest, SigtermDuringASilentStreamExitsPromptly) {
  auto sim = SimProcess::Start({});
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_TRUE((*sim)->SetFaults(json::parse(
                                    R"({"faults":[{"kind":"silent_before_first_token"}]})"))
                  .ok());
  const std::string host = (*sim)->host();
  const int port = (*sim)->port();
  std::thread client([host, port] {
    PostCapture(host, port, "/v1/completions",
                CompletionBody("x", 3, true).dump());
  });
  // Wait (bounded) until the silent request is in progress.
  absl::StatusOr<json> records;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::SleepFor(absl::Milliseconds(20));
    records = (*sim)->Requests();
  } while (records.ok() && records->empty() && absl::Now() < deadline);
  const absl::Time start = absl::Now();
  (*sim)->Kill(SIGTERM);
  std::optional<int> status = (*sim)->Wait(absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  client.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(SimProcessTest, RestartComesBackOnTheSamePort) {
  auto sim = SimProcess::Start({"--engine-id", "again"});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const int port = (*sim)->port();
  ASSERT_TRUE((*sim)->SetFaults(json::parse(
                                    R"({"faults":[{"kind":"drop_connection","times":-1}]})"))
                  .ok());
  (*sim)->Kill(SIGKILL);
  (*sim)->Wait(absl::Seconds(5));
  EXPECT_FALSE(Healthy("127.0.0.1", port));
  ASSERT_TRUE((*sim)->Restart().ok());
  EXPECT_EQ((*sim)->port(), port);
  EXPECT_TRUE(Healthy("127.0.0.1", port));
  absl::StatusOr<json> faults = (*sim)->Faults();
  ASSERT_TRUE(faults.ok());
  EXPECT_TRUE((*faults)["faults"].empty());
  // A running engine restarts too.
  ASSERT_TRUE((*sim)->Restart().ok());
  EXPECT_TRUE(Healthy("127.0.0.1", port));
}

TEST(SimProcessTest, SecondEngineOnATakenPortFails) {
  auto first = SimProcess::Start({});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      SimProcess::Start({"--port", std::to_string((*first)->port())});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("exited with 1"), std::string::npos)
      << second.status();
}

TEST(SimProcessTest, DestructorReapsTheChild) {
  pid_t pid = -1;
  {
    auto sim = SimProcess::Start({});
    ASSERT_TRUE(sim.ok()) << sim.status();
    pid = (*sim)->pid();
  }
  // Reaped: the pid no longer names a child of ours.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SimEngineTest, TwoEnginesInOneProcess) {
  sim::SimOptions a;
  a.engine_id = "a";
  sim::SimOptions b;
  b.engine_id = "b";
  sim::SimEngine first(a);
  sim::SimEngine second(b);
  ASSERT_TRUE(first.Start().ok());
  ASSERT_TRUE(second.Start().ok());
  EXPECT_NE(first.port(), second.port());
  EXPECT_TRUE(Healthy("127.0.0.1", first.port()));
  EXPECT_TRUE(Healthy("127.0.0.1", second.port()));
  EXPECT_FALSE(first.Start().ok());
  first.Stop();
  first.Stop();  // idempotent
  EXPECT_FALSE(Healthy("127.0.0.1", first.port()));
  EXPECT_TRUE(Healthy("127.0.0.1", second.port()));
}

TEST(SimEngineTest, DuplicatePortFails) {
  sim::SimEngine first{sim::SimOptions{}};
  ASSERT_TRUE(first.Start().ok());
  sim::SimOptions options;
  options.port = first.port();
  sim::SimEngine second(options);
  const absl::Status status = second.Start();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(std::to_string(first.port())), std::string::npos);
}

TEST(SimEngineTest, StopEndsSilentStreamsAndIdleConnections) {
  sim::SimEngine engine{sim::SimOptions{}};
  ASSERT_TRUE(engine.Start().ok());
  const int port = engine.port();
  // An idle keep-alive connection.
  httplib::Client idle("127.0.0.1", port);
  idle.set_keep_alive(true);
  ASSERT_TRUE(idle.Get("/health"));
  // Three silent streams.
  httplib::Client control("127.0.0.1", port);
  ASSERT_EQ(control
                .Post("/sim/faults",
                      R"({"faults":[{"kind":"silent_before_first_token","times":3}]})",
                      "application/json")
                ->status,
            200);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([port] {
      HttpCaptureOptions options;
      options.read_timeout = absl::Seconds(30);
      PostCapture("127.0.0.1", port, "/v1/completions",
                  CompletionBody("x", 3, true).dump(), options);
    });
  }
  // Wait (bounded) until all three are being served.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    httplib::Result result = control.Get("/sim/requests");
    ASSERT_TRUE(result);
    int open = 0;
    const json records = json::parse(result->body);
    for (const json& r : records["requests"]) {
      open += r["path"] == "/v1/completions" && r["end"].is_null();
    }
    if (open == 3 || absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_LT(absl::Now(), deadline) << "the silent streams did not start";
  const absl::Time start = absl::Now();
  engine.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (std::thread& t : clients) t.join();
}

TEST(SimEngineTest, ServesTheSameTextAsTheGenerator) {
  sim::SimOptions options;
  options.model = "m";
  options.token_interval_ms = 0;
  sim::SimEngine engine(options);
  ASSERT_TRUE(engine.Start().ok());
  httplib::Client client("127.0.0.1", engine.port());
  httplib::Result result = client.Post(
      "/v1/completions", R"({"model":"m","prompt":"in process","max_tokens":5})",
      "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(json::parse(result->body)["choices"][0]["text"],
            sim::GenerateText("in process", 5));
}

}  // namespace
}  // namespace narwhal::testing
