// narwhal.v1.Inference refusing messages it cannot take — invalid UTF-8 in a
// string field, truncated or malformed protobuf, over
// serving.max_request_bytes, missing — over loopback TCP, with raw bytes
// sent by a generic client: each is refused with INVALID_ARGUMENT and an
// ErrorInfo, journaled `terminal: invalid` with the status, and never
// reaches an engine.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/http/io_loops.h"
#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/common/journal.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/grpc/inference_service.h"
#include "server/status_table.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/grpc_door_for_test.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
namespace pb = narwhal::v1;
using json = nlohmann::json;
using std::chrono_literals::operator""s;

constexpr char kGenerate[] = "/narwhal.v1.Inference/Generate";
constexpr char kComplete[] = "/narwhal.v1.Inference/Complete";

router::Settings TestSettings() {
  router::Settings s;
  s.model = "m";
  s.engines = {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
               {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
  s.serving.max_request_bytes = 64 * 1024;  // the gRPC bound is then 64 KiB + 1 MiB
  return s;
}

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Prompt(const std::string& text, const std::string& request_id = "") {
  pb::GenerateRequest r;
  r.set_model("m");
  r.set_prompt(text);
  r.set_max_tokens(4);
  if (!request_id.empty()) r.set_request_id(request_id);
  return r.SerializeAsString();
}

// Field 2 (prompt), length-delimited, holding `raw` as is.
std::string RawPrompt(const std::string& raw) {
  pb::GenerateRequest r;
  r.set_model("m");
  std::string out = r.SerializeAsString();
  out += '\x12';
  out += static_cast<char>(raw.size());  // < 128
  out += raw;
  return out;
}

class GrpcRefusalTest : public ::testing::Test {
 protected:
  void Start(const std::string& api_key = "") {
    char path[] = "/tmp/grpc_refusal_journal_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    journal_path_ = path;
    auto journal = router::Journal::Open(journal_path_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, nullptr);
    router_ = std::make_unique<router::Router>(settings_, fake_, *fleet_, clock_, nullptr,
                                               journal_.get(), 7, &journal_status_);
    int port = 0;
    door_ = nt::StartGrpcDoor(settings_, *router_, clock_, loops_, api_key, &port);
    ASSERT_NE(door_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    nt::StopGrpcDoor(door_);
    router_.reset();
    journal_.reset();
    if (!journal_path_.empty()) ::unlink(journal_path_.c_str());
  }

  // Complete with `message` as its request bytes.
  grpc::Status CallComplete(const std::string& message, pb::CompleteResponse* out = nullptr,
                            const std::string& api_key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
    const grpc::ByteBuffer request = Bytes(message);
    grpc::ByteBuffer response;
    const grpc::internal::RpcMethod method(kComplete, grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), method, &ctx, request, &response);
    if (s.ok() && out != nullptr) {
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(response.Dump(&slices).ok());
      std::string bytes;
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
      EXPECT_TRUE(out->ParseFromString(bytes));
    }
    return s;
  }

  // Generate with `message` as its request bytes; the number of messages
  // received goes to `*messages`.
  grpc::Status CallGenerate(const std::string& message, int* messages = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    const grpc::internal::RpcMethod method(kGenerate, grpc::internal::RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), method, &ctx,
                                                                      Bytes(message)));
    grpc::ByteBuffer response;
    int n = 0;
    while (reader->Read(&response)) ++n;
    if (messages != nullptr) *messages = n;
    return reader->Finish();
  }

  static pb::ErrorInfo Info(const grpc::Status& status) {
    google::rpc::Status details;
    EXPECT_TRUE(details.ParseFromString(status.error_details()));
    pb::ErrorInfo info;
    EXPECT_EQ(details.details_size(), 1);
    if (details.details_size() == 1) {
      EXPECT_TRUE(details.details(0).UnpackTo(&info));
    }
    EXPECT_EQ(details.code(), static_cast<int>(status.error_code()));
    return info;
  }

  std::vector<json> JournalRows() const {
    journal_->Flush();
    std::vector<json> rows;
    std::ifstream in(journal_path_);
    for (std::string line; std::getline(in, line);) {
      json row = json::parse(line, nullptr, false);
      if (row.is_object() && row.contains("rid")) rows.push_back(std::move(row));
    }
    return rows;
  }

  // The refusal as the client and the journal see it.
  void ExpectRefused(const grpc::Status& s, int http_status, const std::string& reason,
                     const std::string& message_part, bool stream) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(message_part), std::string::npos) << s.error_message();
    const pb::ErrorInfo info = Info(s);
    EXPECT_EQ(info.http_status(), http_status);
    EXPECT_EQ(info.type(), "invalid_request_error");
    EXPECT_FALSE(info.output_started());
    EXPECT_EQ(info.request_id().size(), 32u);
    const std::vector<json> rows = JournalRows();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["terminal"], "invalid");
    EXPECT_EQ(rows[0]["status"], http_status);
    EXPECT_EQ(rows[0]["reason"], reason);
    EXPECT_EQ(rows[0]["rid"], info.request_id());
    EXPECT_EQ(rows[0]["stream"], stream);
    EXPECT_TRUE(fake_.prefill_calls().empty());
  }

  router::Settings settings_ = TestSettings();
  engines::IoLoops loops_{2};
  engines::RealClock clock_;
  nt::FakeEngineClient fake_;
  std::string journal_path_;
  std::unique_ptr<router::Journal> journal_;
  std::unique_ptr<router::Fleet> fleet_;
  const StatusTableJournal journal_status_{};
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<GrpcDoor> door_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcRefusalTest, RawBytesOfAValidRequestAreServed) {
  Start();
  pb::CompleteResponse response;
  const grpc::Status s = CallComplete(Prompt("hello", "client-1"), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.request_id().size(), 32u);
  int messages = 0;
  ASSERT_TRUE(CallGenerate(Prompt("hello"), &messages).ok());
  EXPECT_GE(messages, 1);  // at least the Final
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["terminal"], "completed");
  EXPECT_EQ(rows[0]["client_rid"], "client-1");
}

TEST_F(GrpcRefusalTest, InvalidUtf8InAStringFieldIsInvalidArgumentAndJournaled) {
  Start();
  ExpectRefused(CallComplete(RawPrompt("bad \xff\xfe utf-8")), 400, "malformed_message", "UTF-8",
                /*stream=*/false);
}

TEST_F(GrpcRefusalTest, InvalidUtf8OnGenerateIsInvalidArgumentAndJournaled) {
  Start();
  int messages = -1;
  ExpectRefused(CallGenerate(RawPrompt("\xc3\x28"), &messages), 400, "malformed_message", "UTF-8",
                /*stream=*/true);
  EXPECT_EQ(messages, 0);
}

TEST_F(GrpcRefusalTest, InvalidUtf8InsideExtraIsRefused) {
  Start();
  pb::GenerateRequest r;
  r.set_model("m");
  r.set_prompt("hi");
  std::string bytes = r.SerializeAsString();
  // extra (16) = Struct{fields: {"k": Value{string_value: "\xff"}}}.
  const std::string value = std::string("\x1a\x01\xff", 3);  // Value.string_value (3)
  const std::string entry = std::string("\x0a\x01k", 3) + "\x12" + static_cast<char>(value.size()) +
                            value;  // key 1, value 2
  const std::string fields = "\x0a" + std::string(1, static_cast<char>(entry.size())) + entry;
  bytes += std::string("\x82\x01", 2) + static_cast<char>(fields.size()) + fields;
  ExpectRefused(CallComplete(bytes), 400, "malformed_message", "UTF-8", /*stream=*/false);
}

TEST_F(GrpcRefusalTest, TruncatedMessageIsInvalidArgumentAndJournaled) {
  Start();
  const std::string whole = Prompt("a prompt that is cut short");
  ExpectRefused(CallComplete(whole.substr(0, whole.size() - 5)), 400, "malformed_message",
                "malformed or truncated", /*stream=*/false);
}

TEST_F(GrpcRefusalTest, GarbageBytesAreInvalidArgumentAndJournaled) {
  Start();
  int messages = -1;
  ExpectRefused(
      CallGenerate(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11), &messages), 400,
      "malformed_message", "not valid protobuf", /*stream=*/true);
  EXPECT_EQ(messages, 0);
}

TEST_F(GrpcRefusalTest, MessageOverMaxRequestBytesIs413AndJournaled) {
  Start();
  const std::string big = Prompt(std::string(settings_.serving.max_request_bytes + 100, 'x'));
  ExpectRefused(CallComplete(big), 413, "too_large", "serving.max_request_bytes (65536 bytes)",
                /*stream=*/false);
}

TEST_F(GrpcRefusalTest, MessageOverMaxRequestBytesOnGenerateIs413AndJournaled) {
  Start();
  // Well past the limit, still under the server's own receive bound.
  const std::string big = Prompt(std::string(settings_.serving.max_request_bytes * 4, 'x'));
  ASSERT_LT(big.size(), static_cast<size_t>(GrpcMaxReceiveBytes(settings_)));
  int messages = -1;
  ExpectRefused(CallGenerate(big, &messages), 413, "too_large", "serving.max_request_bytes",
                /*stream=*/true);
  EXPECT_EQ(messages, 0);
}

TEST_F(GrpcRefusalTest, MessageAtTheLimitIsServed) {
  Start();
  std::string at_limit = Prompt("");
  at_limit = Prompt(std::string(settings_.serving.max_request_bytes - at_limit.size() - 8, 'x'));
  ASSERT_LE(at_limit.size(), static_cast<size_t>(settings_.serving.max_request_bytes));
  const grpc::Status s = CallComplete(at_limit);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(GrpcRefusalTest, ReceiveBoundSitsAboveTheProjectLimit) {
  router::Settings s = TestSettings();
  s.serving.max_request_bytes = 4194304;
  EXPECT_EQ(GrpcMaxReceiveBytes(s), 2 * 4194304);
  s.serving.max_request_bytes = 1024;
  EXPECT_EQ(GrpcMaxReceiveBytes(s), 1024 + (1 << 20));
  s.serving.max_request_bytes = 1LL << 30;
  EXPECT_EQ(GrpcMaxReceiveBytes(s), 2147483647);
}

TEST_F(GrpcRefusalTest, EmptyMessageIsAnOrdinaryBadRequest) {
  Start();
  ExpectRefused(CallComplete(""), 400, "invalid_request", "prompt or messages is required",
                /*stream=*/false);
}

TEST_F(GrpcRefusalTest, ApiKeyIsCheckedBeforeTheMessage) {
  Start("k3y");
  grpc::Status s = CallComplete(RawPrompt("\xff"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  s = CallComplete(RawPrompt("\xff"), nullptr, "k3y");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["terminal"], "rejected");
  EXPECT_EQ(rows[0]["status"], 401);
  EXPECT_EQ(rows[1]["terminal"], "invalid");
  EXPECT_EQ(rows[1]["status"], 400);
}

}  // namespace
}  // namespace narwhal::server
