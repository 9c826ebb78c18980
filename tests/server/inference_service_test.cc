// narwhal.v1.Inference over an in-process channel, on the real router core
// with a scripted engine client and a fake clock: the translation of
// requests, the stream of deltas, the status table and ErrorInfo, deadlines,
// cancellation and authentication.
#include "server/grpc/inference_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engines/http/io_loops.h"
#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/grpc_door_for_test.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
namespace pb = narwhal::v1;
using std::chrono_literals::operator""s;
using std::chrono_literals::operator""ms;

router::Settings ServiceSettings() {
  router::Settings s;
  s.model = "m";
  s.engines = {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
               {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
  return s;
}

class InferenceServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& api_key = "") {
    fake_ = std::make_unique<nt::FakeEngineClient>(&clock_);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, nullptr);
    router_ =
        std::make_unique<router::Router>(settings_, *fake_, *fleet_, clock_, nullptr, nullptr, 7);
    int port = 0;
    door_ = nt::StartGrpcDoor(settings_, *router_, clock_, loops_, api_key, &port);
    ASSERT_NE(door_, nullptr);
    stub_ = pb::Inference::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    nt::StopGrpcDoor(door_);
    router_.reset();
  }

  static pb::GenerateRequest Prompt(const std::string& text = "hello") {
    pb::GenerateRequest r;
    r.set_model("m");
    r.set_prompt(text);
    r.set_max_tokens(4);
    return r;
  }

  struct StreamResult {
    std::vector<pb::Delta> deltas;
    std::optional<pb::Final> final;
    grpc::Status status;
  };

  StreamResult Generate(const pb::GenerateRequest& request, grpc::ClientContext* ctx = nullptr) {
    grpc::ClientContext local;
    if (ctx == nullptr) ctx = &local;
    StreamResult out;
    auto reader = stub_->Generate(ctx, request);
    pb::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) out.deltas.push_back(response.delta());
      if (response.has_final()) out.final = response.final();
    }
    out.status = reader->Finish();
    return out;
  }

  // The ErrorInfo in a status's rich details.
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

  router::Settings settings_ = ServiceSettings();
  nt::FakeClock clock_;
  engines::IoLoops loops_{2};
  std::unique_ptr<nt::FakeEngineClient> fake_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<GrpcDoor> door_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

TEST_F(InferenceServiceTest, GenerateStreamsDeltasThenFinal) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok(250ms));
  fake_->QueueDecode(nt::DecodeStep::Stream(
      {nt::CompletionChunk(" a"), nt::CompletionChunk(" b", "length"), nt::UsageChunk(3, 2)},
      250ms));
  const StreamResult r = Generate(Prompt());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.deltas.size(), 2u);  // the usage chunk is metadata, not a delta
  EXPECT_EQ(r.deltas[0].text(), " a");
  EXPECT_EQ(r.deltas[0].token_index(), 0u);
  EXPECT_EQ(r.deltas[1].text(), " b");
  EXPECT_EQ(r.deltas[1].token_index(), 1u);
  EXPECT_EQ(r.deltas[1].finish_reason(), "length");
  ASSERT_TRUE(r.final.has_value());
  EXPECT_EQ(r.final->finish_reason(), "length");
  EXPECT_EQ(r.final->usage().prompt_tokens(), 3u);
  EXPECT_EQ(r.final->usage().completion_tokens(), 2u);
  EXPECT_EQ(r.final->usage().total_tokens(), 5u);
  EXPECT_DOUBLE_EQ(r.final->ttft_s(), 0.25);  // B9, fake clock
  EXPECT_DOUBLE_EQ(r.final->first_byte_s(), 0.5);
  EXPECT_EQ(r.final->request_id().size(), 32u);
  // The prompt became a completions body that asks for usage upstream.
  const auto prefills = fake_->prefill_calls();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].api, engines::Api::kCompletions);
  EXPECT_EQ(prefills[0].body["prompt"], "hello");
  EXPECT_EQ(prefills[0].body["max_tokens"], 4);
}

TEST_F(InferenceServiceTest, CompleteReturnsTheAssembledChat) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(
      nt::DecodeStep::Stream({nt::ChatRoleChunk(), nt::ChatChunk("Hi"),
                              nt::ChatChunk(" there", "stop"), nt::UsageChunk(4, 2)}));
  pb::GenerateRequest request;
  request.set_model("m");
  auto* m = request.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("hello");
  grpc::ClientContext ctx;
  pb::CompleteResponse response;
  const grpc::Status status = stub_->Complete(&ctx, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.text(), "Hi there");
  EXPECT_EQ(response.finish_reason(), "stop");
  EXPECT_EQ(response.usage().completion_tokens(), 2u);
  EXPECT_FALSE(response.request_id().empty());
  EXPECT_EQ(fake_->prefill_calls().at(0).api, engines::Api::kChatCompletions);
  EXPECT_EQ(fake_->prefill_calls().at(0).body["messages"][0]["content"], "hello");
}

TEST_F(InferenceServiceTest, B10_EngineFaultBeforeOutputIsUnavailableWithErrorInfo) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Fail(
      engines::ClassifyEngineStatus(engines::Phase::kPrefill, "p0", 503, "busy", false)));
  const StreamResult r = Generate(Prompt());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(r.deltas.empty());
  const pb::ErrorInfo info = Info(r.status);
  EXPECT_EQ(info.http_status(), 502);
  EXPECT_EQ(info.type(), "prefill");
  EXPECT_EQ(info.message().rfind("engine returned HTTP 503", 0), 0u) << info.message();
  EXPECT_FALSE(info.output_started());
  EXPECT_EQ(info.request_id().size(), 32u);
}

TEST_F(InferenceServiceTest, B16_FailureAfterOutputSaysOutputStarted) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  engines::EngineFailure silent = nt::MakeEngineFailure(
      engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
      engines::FailureCause::kReadTimeout,
      "engine went silent between tokens: nothing arrived within the 10s read timeout", true);
  fake_->QueueDecode(nt::DecodeStep::FailAfter({nt::CompletionChunk(" a")}, silent));
  const StreamResult r = Generate(Prompt());
  ASSERT_EQ(r.deltas.size(), 1u);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const pb::ErrorInfo info = Info(r.status);
  EXPECT_EQ(info.http_status(), 504);
  EXPECT_EQ(info.type(), "decode");
  EXPECT_TRUE(info.output_started());
  EXPECT_EQ(info.message().rfind("engine went silent between tokens", 0), 0u);
}

TEST_F(InferenceServiceTest, WrongModelIsNotFoundWithoutTouchingEngines) {
  Start();
  pb::GenerateRequest request = Prompt();
  request.set_model("other");
  const StreamResult r = Generate(request);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Info(r.status).http_status(), 404);
  EXPECT_EQ(Info(r.status).type(), "invalid_request_error");
  EXPECT_TRUE(fake_->prefill_calls().empty());
}

TEST_F(InferenceServiceTest, MissingInputAndRouterOwnedExtraFieldsAreInvalidArgument) {
  Start();
  pb::GenerateRequest no_input;
  no_input.set_model("m");
  EXPECT_EQ(Generate(no_input).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pb::GenerateRequest owned = Prompt();
  (*owned.mutable_extra()->mutable_fields())["stream"].set_bool_value(false);
  const StreamResult r = Generate(owned);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(Info(r.status).message().find("extra.stream"), std::string::npos);
  EXPECT_TRUE(fake_->prefill_calls().empty());
}

TEST_F(InferenceServiceTest, ExtraFieldsPassThroughButNeverKvTransferParams) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  pb::GenerateRequest request = Prompt();
  request.set_temperature(0.5);
  request.add_stop("\n");
  auto& fields = *request.mutable_extra()->mutable_fields();
  fields["logprobs"].set_number_value(2);
  fields["vendor_knob"].set_string_value("x");
  (*fields["kv_transfer_params"].mutable_struct_value()->mutable_fields())["remote_host"]
      .set_string_value("evil.example");
  ASSERT_TRUE(Generate(request).status.ok());
  for (const nlohmann::json& body :
       {fake_->prefill_calls().at(0).body, fake_->decode_calls().at(0).body}) {
    EXPECT_EQ(body["logprobs"], 2);  // an integer, as engines expect
    EXPECT_EQ(body["vendor_knob"], "x");
    EXPECT_DOUBLE_EQ(body["temperature"].get<double>(), 0.5);
    EXPECT_EQ(body["stop"], nlohmann::json::array({"\n"}));
  }
  // The client's kv_transfer_params reached no engine (SPEC §4).
  EXPECT_FALSE(fake_->decode_calls().at(0).body.dump().find("evil.example") != std::string::npos);
  EXPECT_FALSE(fake_->prefill_calls().at(0).body.dump().find("evil.example") != std::string::npos);
}

TEST_F(InferenceServiceTest, B19_ClientCancelAbortsTheLegs) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(nt::DecodeStep::BlockAfter({nt::CompletionChunk(" a")}));
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Prompt());
  pb::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));  // the first token
  ctx.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The router ends the request and the blocked decode saw its cancel.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline &&
         (fake_->decode_calls().empty() || !fake_->decode_calls()[0].saw_cancel)) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(fake_->decode_calls().empty());
  EXPECT_TRUE(fake_->decode_calls()[0].saw_cancel);
}

TEST_F(InferenceServiceTest, GrpcDeadlineBoundsTheRequest) {
  Start();
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  ASSERT_TRUE(Generate(Prompt(), &ctx).status.ok());
  const auto prefills = fake_->prefill_calls();
  ASSERT_EQ(prefills.size(), 1u);
  // serving.request_timeout_s is 600 s; the 20 s gRPC deadline wins (gRPC
  // carries it as a timeout rounded up to its wire units, hence the slack).
  const double left = engines::Seconds(prefills[0].request_deadline - prefills[0].started);
  EXPECT_GT(left, 15);
  EXPECT_LT(left, 21);
}

TEST_F(InferenceServiceTest, ApiKeyIsRequiredWhenConfigured) {
  Start("secret");
  EXPECT_EQ(Generate(Prompt()).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer secret");
  EXPECT_TRUE(Generate(Prompt(), &ctx).status.ok());
}

}  // namespace
}  // namespace narwhal::server
