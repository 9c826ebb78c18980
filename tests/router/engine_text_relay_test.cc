// What a client gets when an engine's answer is hostile: the router core with
// the real HTTP adapter (BeastEngineClient) against scripted loopback engines
// (tests/engines/http/raw_engine.h).
//  - An engine 4xx whose body holds invalid UTF-8, or a multibyte message cut
//    by the length bound, ends the request with the engine's status (B10),
//    `invalid_request_error`, and a well-formed UTF-8 message that
//    serialises strictly; the journal row agrees with the client.
//  - A decode stream that invents choice indexes ends the request with a 502
//    naming the bound, before the engine could send the rest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engines/engine_failure.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "tests/engines/http/raw_engine.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using server::ErrorType;
using server::ErrorTypeName;
using json = nlohmann::json;
using nt::RawEngine;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD
const std::string kEuro = "\xE2\x82\xAC";  // three bytes

std::string Response(int status, std::string_view body, std::string_view type) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + std::string(type) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         std::string(body);
}

std::string Chunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + std::string(data) + "\r\n";
}

// A producer answer with a descriptor.
std::string PrefillOk() {
  const json body = {{"id", "cmpl-p"},
                     {"choices", json::array({{{"index", 0}, {"text", "x"}}})},
                     {"kv_transfer_params",
                      {{"do_remote_prefill", true},
                       {"remote_engine_id", "p0"},
                       {"remote_request_id", "cmpl-p-1a2b3c4d"},
                       {"remote_block_ids", json::array({1, 2})},
                       {"remote_host", "127.0.0.1"},
                       {"remote_port", 1}}}};
  return Response(200, body.dump(), "application/json");
}

// Strict serialisation of the client's error document (throws on bad UTF-8).
std::string ClientErrorBody(const Outcome& o) {
  return json{{"error",
               {{"message", o.message},
                {"type", std::string(ErrorTypeName(nt::ErrorTypeOf(o)))},
                {"code", nt::HttpStatus(o)}}}}
      .dump();
}

class EngineTextRelayTest : public ::testing::Test {
 protected:
  EngineTextRelayTest() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    journal_path_ = ::testing::TempDir() + "narwhal_relay_" + std::string(info->name()) + "_" +
                    std::to_string(::getpid()) + ".jsonl";
    std::remove(journal_path_.c_str());
  }

  ~EngineTextRelayTest() override {
    router_.reset();
    fleet_.reset();
    journal_.reset();
    std::remove(journal_path_.c_str());
  }

  void Start(const RawEngine& producer, const RawEngine& consumer) {
    settings_.model = "m";
    settings_.engines = {EngineSettings{"p0", producer.url(), Role::kPrefill},
                         EngineSettings{"d0", consumer.url(), Role::kDecode}};
    metrics_ = std::make_unique<Metrics>(registry_);
    auto journal = Journal::Open(journal_path_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<Fleet>(settings_, clock_, metrics_.get(), journal_.get());
    router_ = std::make_unique<Router>(settings_, client_, *fleet_, clock_, metrics_.get(),
                                       journal_.get(), /*seed=*/7, &journal_status_);
  }

  Outcome Run(bool stream, std::string* rid_out = nullptr) {
    Request r;
    r.rid = router_->NewRequestId();
    r.api = engines::Api::kCompletions;
    r.stream = stream;
    r.body = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}, {"stream", stream}};
    r.arrived = clock_.Now();
    r.arrived_wall = clock_.WallNow();
    r.deadline = r.arrived + 20s;
    if (rid_out != nullptr) *rid_out = r.rid;
    auto sink = std::make_shared<nt::TestSink>();
    router_->Submit(std::move(r), sink, loops_.Next());
    const auto until = std::chrono::steady_clock::now() + 20s;
    nt::Chunk c;
    while (std::chrono::steady_clock::now() < until) {
      if (sink->Next(&c, 100ms) == nt::TestSink::Pop::kEnd) return sink->outcome();
    }
    ADD_FAILURE() << "the request did not end";
    return Outcome{};
  }

  json Row(const std::string& rid) {
    journal_->Flush();
    for (const json& row : nt::ReadJournal(journal_path_)) {
      if (row.value("rid", "") == rid) return row;
    }
    ADD_FAILURE() << "no journal row for " << rid;
    return json::object();
  }

  engines::IoLoops loops_{2};
  RealClock clock_;
  engines::BeastEngineClient client_{engines::HttpEngineClientOptions{}, clock_};
  Settings settings_;
  prometheus::Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<Fleet> fleet_;
  const server::StatusTableJournal journal_status_{};
  std::unique_ptr<Router> router_;
  std::string journal_path_;
};

TEST_F(EngineTextRelayTest, B10_Prefill400WithInvalidUtf8ReachesTheClientAs400) {
  RawEngine producer([](RawEngine::Connection& c) {
    c.Send(Response(400, "context \xFF\xFE too long \xC3", "text/plain"));
  });
  RawEngine consumer([](RawEngine::Connection&) {});
  Start(producer, consumer);
  for (const bool stream : {false, true}) {
    std::string rid;
    const Outcome o = Run(stream, &rid);
    EXPECT_EQ(nt::HttpStatus(o), 400) << stream;
    EXPECT_EQ(nt::ErrorTypeOf(o), ErrorType::kInvalidRequest) << stream;
    EXPECT_TRUE(engines::IsValidUtf8(o.message)) << stream;
    EXPECT_THAT(o.message, HasSubstr("context " + kFffd + kFffd + " too long " + kFffd));
    EXPECT_THAT(o.message, Not(HasSubstr("json.exception")));
    EXPECT_NO_THROW(ClientErrorBody(o));
    const json row = Row(rid);
    EXPECT_EQ(row["status"], 400);
    EXPECT_EQ(row["error_type"], "invalid_request_error");
  }
  EXPECT_EQ(consumer.requests(), 0);
}

TEST_F(EngineTextRelayTest, B10_Decode400WithMultibyteMessageCutAtTheLimit) {
  std::string message;
  while (message.size() < 2000) message += kEuro;
  RawEngine producer([](RawEngine::Connection& c) { c.Send(PrefillOk()); });
  RawEngine consumer([&](RawEngine::Connection& c) {
    c.Send(Response(400, R"({"error":{"message":")" + message + R"(","code":400}})",
                    "application/json"));
  });
  Start(producer, consumer);
  std::string rid;
  const Outcome o = Run(/*stream=*/false, &rid);
  EXPECT_EQ(nt::HttpStatus(o), 400);
  EXPECT_EQ(nt::ErrorTypeOf(o), ErrorType::kInvalidRequest);
  EXPECT_TRUE(engines::IsValidUtf8(o.message));
  EXPECT_LE(o.message.size(), engines::kMaxEngineTextBytes + 64);
  EXPECT_THAT(o.message, EndsWith("..."));
  EXPECT_NO_THROW(ClientErrorBody(o));
  EXPECT_EQ(Row(rid)["status"], 400);
}

TEST_F(EngineTextRelayTest, InventedChoiceIndexesEndTheRequestWith502) {
  // 100k chunks, each with a new choice index, for a non-streaming client
  // (assembled) and a streaming one (relayed).
  size_t total = 0;
  std::string chunks;
  for (int i = 0; i < 100000; ++i) {
    chunks += Chunk("data: " +
                    json{{"choices", json::array({{{"index", i}, {"text", "t"}}})}}.dump() +
                    "\n\n");
  }
  total = chunks.size();
  RawEngine producer([](RawEngine::Connection& c) { c.Send(PrefillOk()); });
  RawEngine consumer([&](RawEngine::Connection& c) {
    c.Send("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           chunks + Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
  });
  Start(producer, consumer);
  for (const bool stream : {false, true}) {
    const size_t sent_before = consumer.bytes_sent();
    const Outcome o = Run(stream);
    EXPECT_EQ(nt::HttpStatus(o), 502) << stream;
    EXPECT_THAT(o.message, HasSubstr("decode chunk has choice index 16")) << stream;
    EXPECT_LT(consumer.bytes_sent() - sent_before, total / 2) << stream;
  }
}

}  // namespace
}  // namespace narwhal::router
