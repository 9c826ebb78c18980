// The gRPC door's translation into admission (server/grpc/grpc_call): a
// Generate or Complete call — raw message, metadata, deadline — as the
// DoorRequest and DoorBody admission reads, and through RequestAdmission
// into the router::Request or refusal the door answers with. No channel.
#include "server/grpc/grpc_call.h"

#include <grpcpp/impl/grpc_library.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::server {
namespace {

using engines::Api;
using ::narwhal::testing::ErrorTypeOf;
using ::narwhal::testing::HttpStatus;
using ::narwhal::testing::ReasonOf;
using std::chrono_literals::operator""s;
using SystemClock = std::chrono::system_clock;

grpc::ByteBuffer Bytes(const std::string& bytes) {
  static grpc::internal::GrpcLibraryInitializer grpc_library;
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer Message(const narwhal::v1::GenerateRequest& request) {
  return Bytes(request.SerializeAsString());
}

narwhal::v1::GenerateRequest Prompt(const std::string& text) {
  narwhal::v1::GenerateRequest r;
  r.set_model("m");
  r.set_prompt(text);
  return r;
}

router::Settings CallSettings() {
  router::Settings s;
  s.model = "m";
  s.serving.max_request_bytes = 1024;
  return s;
}

class CountingBook : public AdmissionBook {
 public:
  std::string NewRequestId() override { return "r" + std::to_string(++ids); }
  void RecordRefused(const router::Request& request, const router::Outcome& outcome) override {
    reasons.push_back(ReasonOf(outcome));
    apis.push_back(request.api);
  }
  int ids = 0;
  std::vector<std::string> reasons;
  std::vector<Api> apis;
};

const SystemClock::time_point kNoDeadline = SystemClock::time_point::max();

TEST(GrpcCallTest, DecodesWithinTheLimitAndSaysWhyNot) {
  const GrpcCall ok = DecodeGrpcCall(Message(Prompt("hi")), /*stream=*/true, 1024);
  EXPECT_TRUE(ok.decoded);
  EXPECT_TRUE(ok.stream);
  EXPECT_EQ(ok.message.prompt(), "hi");

  const narwhal::v1::GenerateRequest big = Prompt(std::string(2000, 'x'));
  const GrpcCall large = DecodeGrpcCall(Message(big), false, 1024);
  EXPECT_FALSE(large.decoded);
  EXPECT_EQ(large.error.reason, router::Reason::kTooLarge);
  const DoorBody large_body = GrpcDoorBody(large, false, CallSettings());
  ASSERT_TRUE(large_body.refusal.has_value());
  EXPECT_EQ(large_body.refusal->reason, router::Reason::kTooLarge);
  EXPECT_EQ(large_body.refusal->message,
            "request message of " + std::to_string(big.ByteSizeLong()) +
                " bytes exceeds serving.max_request_bytes (1024 bytes)");

  const GrpcCall garbage = DecodeGrpcCall(Bytes("\xff\xff\xff"), false, 1024);
  EXPECT_FALSE(garbage.decoded);
  EXPECT_EQ(garbage.error.reason, router::Reason::kMalformedMessage);
  const DoorBody garbage_body = GrpcDoorBody(garbage, false, CallSettings());
  ASSERT_TRUE(garbage_body.refusal.has_value());
  EXPECT_EQ(garbage_body.refusal->reason, router::Reason::kMalformedMessage);
  EXPECT_EQ(garbage_body.refusal->message,
            "request message is not valid protobuf (malformed or truncated)");

  // A client that left before its message arrived sent nothing wrong.
  const DoorBody gone = GrpcDoorBody(garbage, /*client_gone=*/true, CallSettings());
  ASSERT_TRUE(gone.refusal.has_value());
  EXPECT_EQ(gone.refusal->reason, router::Reason::kCancelled);
  EXPECT_EQ(gone.refusal->message, "client went away before its request arrived");
}

TEST(GrpcCallTest, MetadataAndMessageBecomeTheDoorRequest) {
  narwhal::v1::GenerateRequest chat;
  chat.set_model("m");
  chat.mutable_messages()->add_messages()->set_role("user");
  const GrpcCall call = DecodeGrpcCall(Message(chat), false, 1024);
  GrpcMetadata md;
  DoorRequest door = GrpcDoorRequest(call, md, kNoDeadline, SystemClock::now());
  EXPECT_EQ(door.door, router::Door::kGrpc);
  EXPECT_EQ(door.api, Api::kChatCompletions);
  EXPECT_FALSE(door.stream);
  EXPECT_FALSE(door.authorization.has_value());
  EXPECT_EQ(door.client_request_id, "");
  EXPECT_FALSE(door.client_time_left.has_value());

  md.emplace("authorization", "Bearer k");
  md.emplace("x-request-id", "from-metadata");
  const SystemClock::time_point now = SystemClock::now();
  door = GrpcDoorRequest(call, md, now + 7s, now);
  ASSERT_TRUE(door.authorization.has_value());
  EXPECT_EQ(*door.authorization, "Bearer k");
  EXPECT_EQ(door.client_request_id, "from-metadata");
  ASSERT_TRUE(door.client_time_left.has_value());
  EXPECT_EQ(*door.client_time_left, std::chrono::duration_cast<engines::MonoClock::duration>(7s));
}

TEST(GrpcCallTest, TheMessagesRequestIdWinsEvenWhenItIsDropped) {
  GrpcMetadata md;
  md.emplace("x-request-id", "from-metadata");
  narwhal::v1::GenerateRequest r = Prompt("hi");
  r.set_request_id("from-message");
  GrpcCall call = DecodeGrpcCall(Message(r), false, 1024);
  EXPECT_EQ(GrpcDoorRequest(call, md, kNoDeadline, SystemClock::now()).client_request_id,
            "from-message");
  // One that is not sane is the client's all the same (admission drops it).
  r.set_request_id("not sane");
  call = DecodeGrpcCall(Message(r), false, 1024);
  EXPECT_EQ(GrpcDoorRequest(call, md, kNoDeadline, SystemClock::now()).client_request_id,
            "not sane");
  // Undecodable: only the metadata is left.
  call = DecodeGrpcCall(Bytes("\xff"), false, 1024);
  EXPECT_EQ(GrpcDoorRequest(call, md, kNoDeadline, SystemClock::now()).client_request_id,
            "from-metadata");
}

TEST(GrpcCallTest, BodyIsTranslatedAndValidated) {
  const router::Settings settings = CallSettings();
  const DoorBody streamed =
      GrpcDoorBody(DecodeGrpcCall(Message(Prompt("hi")), true, 1024), false, settings);
  ASSERT_FALSE(streamed.refusal.has_value()) << streamed.refusal->message;
  EXPECT_EQ(streamed.api, Api::kCompletions);
  EXPECT_TRUE(streamed.stream);
  EXPECT_EQ(streamed.body["prompt"], "hi");
  EXPECT_EQ(streamed.body["stream_options"]["include_usage"], true);

  narwhal::v1::GenerateRequest other = Prompt("hi");
  other.set_model("n");
  const DoorBody model = GrpcDoorBody(DecodeGrpcCall(Message(other), false, 1024), false, settings);
  ASSERT_TRUE(model.refusal.has_value());
  EXPECT_EQ(model.refusal->reason, router::Reason::kModelNotFound);
  EXPECT_EQ(model.refusal->message, "The model `n` does not exist.");

  narwhal::v1::GenerateRequest none;
  none.set_model("m");
  const DoorBody input = GrpcDoorBody(DecodeGrpcCall(Message(none), false, 1024), false, settings);
  ASSERT_TRUE(input.refusal.has_value());
  EXPECT_EQ(input.refusal->reason, router::Reason::kInvalidRequest);
  EXPECT_EQ(input.refusal->message, "prompt or messages is required");
}

TEST(GrpcCallTest, AdmittedAsARouterRequest) {
  const router::Settings settings = CallSettings();
  narwhal::testing::FakeClock clock;
  CountingBook book;
  const RequestAdmission admission(settings, clock, "k", book);
  GrpcMetadata md;
  md.emplace("authorization", "Bearer k");
  narwhal::v1::GenerateRequest r = Prompt("hi");
  r.set_request_id("c-1");
  r.set_max_tokens(8);
  const GrpcCall call = DecodeGrpcCall(Message(r), /*stream=*/true, 1024);
  const SystemClock::time_point now = SystemClock::now();
  const AdmissionResult result = admission.Admit(GrpcDoorRequest(call, md, now + 2s, now), [&] {
    return GrpcDoorBody(call, false, settings);
  });
  ASSERT_TRUE(result.admitted());
  EXPECT_EQ(result.request.rid, "r1");
  EXPECT_EQ(result.request.client_rid, "c-1");
  EXPECT_EQ(result.request.door, router::Door::kGrpc);
  EXPECT_TRUE(result.request.stream);
  EXPECT_EQ(result.request.body["max_tokens"], 8);
  EXPECT_EQ(result.request.deadline, result.request.arrived + 2s);

  // Wrong key: refused first, with the API the message's input selects.
  GrpcMetadata wrong;
  wrong.emplace("authorization", "Bearer x");
  narwhal::v1::GenerateRequest chat;
  chat.mutable_messages()->add_messages()->set_role("user");
  const GrpcCall chat_call = DecodeGrpcCall(Message(chat), false, 1024);
  const AdmissionResult refused =
      admission.Admit(GrpcDoorRequest(chat_call, wrong, kNoDeadline, now),
                      [&] { return GrpcDoorBody(chat_call, false, settings); });
  ASSERT_FALSE(refused.admitted());
  EXPECT_EQ(HttpStatus(refused.outcome), 401);
  EXPECT_EQ(book.reasons, std::vector<std::string>{"unauthorized"});
  EXPECT_EQ(book.apis, std::vector<Api>{Api::kChatCompletions});
}

}  // namespace
}  // namespace narwhal::server
