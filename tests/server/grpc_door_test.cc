// The gRPC door (server/grpc/grpc_door.h) over loopback TCP with real grpc++
// clients: unknown methods, grpc.health.v1, reflection v1 and v1alpha, a
// compressed request, a drain with a call open, the connection cap and the
// x-request-id initial metadata.
#include "server/grpc/grpc_door.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/grpc/health_table.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/grpc_door_for_test.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
namespace pb = narwhal::v1;
namespace health = grpc::health::v1;
namespace refl = grpc::reflection::v1;
using std::chrono_literals::operator""s;
using std::chrono_literals::operator""ms;

router::Settings DoorTestSettings() {
  router::Settings s;
  s.model = "m";
  s.engines = {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
               {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
  return s;
}

grpc::ByteBuffer DoorTestBytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string DoorTestString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

pb::GenerateRequest DoorTestPrompt(const std::string& text = "hello") {
  pb::GenerateRequest r;
  r.set_model("m");
  r.set_prompt(text);
  r.set_max_tokens(4);
  return r;
}

std::string DoorTestMetadata(const grpc::ClientContext& ctx, const std::string& key) {
  const auto& md = ctx.GetServerInitialMetadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// A generic call (any path, raw bytes), driven one operation at a time on
// its own completion queue.
class DoorTestGenericCall {
 public:
  DoorTestGenericCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& path)
      : stub_(channel) {
    ctx_.set_deadline(std::chrono::system_clock::now() + 10s);
    call_ = stub_.PrepareCall(&ctx_, path, &cq_);
    call_->StartCall(Tag(1));
    started_ = Wait(1);
  }
  ~DoorTestGenericCall() {
    if (!finished_) {
      ctx_.TryCancel();
      Finish();
    }
    call_.reset();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  bool started() const { return started_; }
  bool Write(const std::string& bytes) {
    const grpc::ByteBuffer buffer = DoorTestBytes(bytes);
    call_->Write(buffer, Tag(2));
    return Wait(2);
  }
  bool WritesDone() {
    call_->WritesDone(Tag(3));
    return Wait(3);
  }
  bool Read(std::string* out) {
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, Tag(4));
    if (!Wait(4)) return false;
    *out = DoorTestString(buffer);
    return true;
  }
  grpc::Status Finish() {
    grpc::Status status;
    call_->Finish(&status, Tag(5));
    Wait(5);
    finished_ = true;
    return status;
  }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool Wait(intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq_.Next(&tag, &ok)) return false;
    EXPECT_EQ(tag, Tag(want));
    return ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
};

// The names a list_services answer holds.
std::vector<std::string> DoorTestServiceNames(const refl::ServerReflectionResponse& r) {
  std::vector<std::string> names;
  for (const refl::ServiceResponse& s : r.list_services_response().service()) {
    names.push_back(s.name());
  }
  return names;
}

struct DoorTestDrained {
  grpc::Status status{grpc::StatusCode::UNKNOWN, "the call did not end"};
  std::vector<pb::GenerateResponse> responses;
};

class GrpcDoorTest : public ::testing::Test {
 protected:
  // `max_connections` > 0: the door is built with that cap.
  void Start(int max_connections = 0) {
    fake_ = std::make_unique<nt::FakeEngineClient>(&clock_);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, nullptr);
    router_ =
        std::make_unique<router::Router>(settings_, *fake_, *fleet_, clock_, nullptr, nullptr, 7);
    if (max_connections > 0) {
      GrpcDoorOptions options = GrpcDoorOptionsFrom(settings_, nullptr);
      options.max_connections = max_connections;
      door_ = std::make_unique<GrpcDoor>(settings_, *router_, clock_, loops_, "", options);
      auto bound = door_->Bind("127.0.0.1", 0);
      ASSERT_TRUE(bound.ok()) << bound.status();
      port_ = *bound;
      door_->Start();
    } else {
      door_ = nt::StartGrpcDoor(settings_, *router_, clock_, loops_, "", &port_);
      ASSERT_NE(door_, nullptr);
    }
    channel_ = NewChannel();
    stub_ = pb::Inference::NewStub(channel_);
  }

  void TearDown() override {
    nt::StopGrpcDoor(door_);
    router_.reset();
  }

  // A channel of its own (a distinct argument keeps gRPC from sharing the
  // subchannel, hence the connection, with another channel).
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& tag = "") {
    grpc::ChannelArguments args;
    if (!tag.empty()) args.SetString("narwhal.test.channel", tag);
    return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_),
                                     grpc::InsecureChannelCredentials(), args);
  }

  grpc::Status Complete(pb::Inference::Stub& stub, const pb::GenerateRequest& request,
                        pb::CompleteResponse* response, grpc::ClientContext* ctx = nullptr,
                        std::chrono::milliseconds timeout = 10s) {
    grpc::ClientContext local;
    if (ctx == nullptr) ctx = &local;
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    return stub.Complete(ctx, request, response);
  }

  // A Generate over `channel` that is open (sent, not half-closed) when
  // the door drains; once the client saw the GOAWAY, `between` runs, then
  // the client half-closes and reads to the end.
  void GenerateAcrossDrain(const std::shared_ptr<grpc::Channel>& channel,
                           const std::function<void()>& between, DoorTestDrained* out) {
    DoorTestGenericCall call(channel, "/narwhal.v1.Inference/Generate");
    ASSERT_TRUE(call.started());
    ASSERT_TRUE(call.Write(DoorTestPrompt().SerializeAsString()));
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (door_->open_calls() < 1 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(door_->open_calls(), 1);
    ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
    door_->BeginDrain();
    // The client saw the GOAWAY: its channel leaves READY.
    ASSERT_TRUE(
        channel->WaitForStateChange(GRPC_CHANNEL_READY, std::chrono::system_clock::now() + 10s));
    if (between) between();
    ASSERT_TRUE(call.WritesDone());
    std::string bytes;
    while (call.Read(&bytes)) {
      ASSERT_TRUE(out->responses.emplace_back().ParseFromString(bytes));
    }
    out->status = call.Finish();
  }

  router::Settings settings_ = DoorTestSettings();
  nt::FakeClock clock_;
  engines::IoLoops loops_{2};
  std::unique_ptr<nt::FakeEngineClient> fake_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<GrpcDoor> door_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

TEST_F(GrpcDoorTest, UnknownMethodIsUnimplementedAndTheChannelServesOn) {
  Start();
  for (const std::string path : {"/narwhal.v1.Inference/Nope", "/x.Y/Z"}) {
    DoorTestGenericCall call(channel_, path);
    EXPECT_TRUE(call.started());
    call.Write("any bytes");  // may fail: the door answers at the headers
    call.WritesDone();
    const grpc::Status status = call.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << path;
    EXPECT_NE(status.error_message().find(path), std::string::npos) << status.error_message();
  }
  pb::CompleteResponse response;
  const grpc::Status status = Complete(*stub_, DoorTestPrompt(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.text(), "hello world");
  EXPECT_EQ(door_->open_connections(), 1);  // the same connection throughout
}

TEST_F(GrpcDoorTest, HealthCheckAndWatch) {
  Start();
  door_->health().SetServingStatus("", true);
  door_->health().SetServingStatus("narwhal.v1.Inference", false);
  auto stub = health::Health::NewStub(channel_);
  const auto check = [&](const std::string& service, health::HealthCheckResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    health::HealthCheckRequest request;
    request.set_service(service);
    return stub->Check(&ctx, request, out);
  };
  health::HealthCheckResponse response;
  ASSERT_TRUE(check("", &response).ok());
  EXPECT_EQ(response.status(), health::HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("narwhal.v1.Inference", &response).ok());
  EXPECT_EQ(response.status(), health::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(check("nope", &response).error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  health::HealthCheckRequest request;
  request.set_service("narwhal.v1.Inference");
  auto watch = stub->Watch(&ctx, request);
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), health::HealthCheckResponse::NOT_SERVING);
  door_->health().SetServingStatus("narwhal.v1.Inference", true);
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), health::HealthCheckResponse::SERVING);
  door_->health().Shutdown();
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), health::HealthCheckResponse::NOT_SERVING);
  ctx.TryCancel();
  while (watch->Read(&response)) {
  }
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Set after the shutdown: ignored.
  door_->health().SetServingStatus("", true);
  ASSERT_TRUE(check("", &response).ok());
  EXPECT_EQ(response.status(), health::HealthCheckResponse::NOT_SERVING);
}

TEST_F(GrpcDoorTest, ReflectionListsServicesOnV1AndV1alpha) {
  Start();
  refl::ServerReflectionRequest request;
  request.set_list_services("");
  const auto has_ours = [](const std::vector<std::string>& names) {
    bool inference = false;
    bool health = false;
    for (const std::string& n : names) {
      inference = inference || n == "narwhal.v1.Inference";
      health = health || n == "grpc.health.v1.Health";
    }
    return inference && health;
  };

  auto stub = refl::ServerReflection::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->ServerReflectionInfo(&ctx);
  ASSERT_TRUE(stream->Write(request));
  refl::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_TRUE(has_ours(DoorTestServiceNames(response)))
      << ::testing::PrintToString(DoorTestServiceNames(response));
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());

  DoorTestGenericCall alpha(channel_,
                            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  ASSERT_TRUE(alpha.started());
  ASSERT_TRUE(alpha.Write(request.SerializeAsString()));
  std::string bytes;
  ASSERT_TRUE(alpha.Read(&bytes));
  refl::ServerReflectionResponse alpha_response;
  ASSERT_TRUE(alpha_response.ParseFromString(bytes));
  EXPECT_EQ(DoorTestServiceNames(alpha_response), DoorTestServiceNames(response));
  EXPECT_TRUE(has_ours(DoorTestServiceNames(alpha_response)));
  ASSERT_TRUE(alpha.WritesDone());
  EXPECT_FALSE(alpha.Read(&bytes));
  EXPECT_TRUE(alpha.Finish().ok());
}

TEST_F(GrpcDoorTest, CompressedRequestIsUnimplemented) {
  Start();
  grpc::ClientContext ctx;
  ctx.set_compression_algorithm(GRPC_COMPRESS_GZIP);
  pb::CompleteResponse response;
  // Compressible, so gRPC does compress it (it sends a message that would
  // not shrink as is).
  const grpc::Status status =
      Complete(*stub_, DoorTestPrompt(std::string(4000, 'a')), &response, &ctx);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  EXPECT_NE(status.error_message().find("compressed"), std::string::npos) << status.error_message();
  EXPECT_TRUE(fake_->prefill_calls().empty());
}

TEST_F(GrpcDoorTest, DrainLetsAnOpenStreamFinish) {
  Start();
  const auto channel = NewChannel("drained");
  DoorTestDrained r;
  GenerateAcrossDrain(
      channel,
      [&] {
        // A new call goes over a new connection; the drained one stays open for
        // its call.
        pb::CompleteResponse complete;
        const grpc::Status status =
            Complete(*pb::Inference::NewStub(channel), DoorTestPrompt(), &complete);
        EXPECT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(door_->open_connections(), 2);
        fake_->QueuePrefill(nt::PrefillStep::Ok());
        fake_->QueueDecode(nt::DecodeStep::Stream(
            {nt::CompletionChunk(" a"), nt::CompletionChunk(" b", "stop"), nt::UsageChunk(3, 2)}));
      },
      &r);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.responses.size(), 3u);
  EXPECT_EQ(r.responses[0].delta().text(), " a");
  EXPECT_EQ(r.responses[1].delta().text(), " b");
  ASSERT_TRUE(r.responses[2].has_final());
  EXPECT_EQ(r.responses[2].final().finish_reason(), "stop");
  EXPECT_EQ(r.responses[2].final().usage().completion_tokens(), 2u);
}

// Once a drained connection's last call is written, the door shuts only its
// sending half and reads until the client closes: a frame the client sends
// meanwhile (gRPC's BDP ping on receiving data) must not meet a closed
// socket, which resets the connection under the call's last frames (the call
// then ends UNAVAILABLE without its Final, though the door finished it OK).
// Closing at once failed a few percent of these tries.
TEST_F(GrpcDoorTest, DrainedConnectionDeliversTheStreamsEnd) {
  Start();
  int failures = 0;
  std::string last;
  for (int i = 0; i < 200 && !HasFatalFailure(); ++i) {
    DoorTestDrained r;
    GenerateAcrossDrain(NewChannel("try" + std::to_string(i)), nullptr, &r);
    if (!r.status.ok() || r.responses.size() != 3) {
      ++failures;
      last = r.status.error_message() + " after " + std::to_string(r.responses.size());
    }
  }
  EXPECT_EQ(failures, 0) << last;
}

TEST_F(GrpcDoorTest, ConnectionOverTheCapIsClosed) {
  Start(/*max_connections=*/1);
  pb::CompleteResponse response;
  grpc::Status status = Complete(*stub_, DoorTestPrompt(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(door_->open_connections(), 1);

  auto second = pb::Inference::NewStub(NewChannel("second"));
  status = Complete(*second, DoorTestPrompt(), &response, nullptr, 2s);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(door_->open_connections(), 1);

  // The first connection was kept and still serves.
  status = Complete(*stub_, DoorTestPrompt(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(fake_->prefill_calls().size(), 2u);
}

TEST_F(GrpcDoorTest, InitialMetadataCarriesTheRequestId) {
  Start();
  grpc::ClientContext ok_ctx;
  pb::CompleteResponse response;
  const grpc::Status ok = Complete(*stub_, DoorTestPrompt(), &response, &ok_ctx);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(DoorTestMetadata(ok_ctx, "x-request-id"), response.request_id());
  EXPECT_EQ(response.request_id().size(), 32u);

  grpc::ClientContext refused_ctx;
  pb::GenerateRequest wrong = DoorTestPrompt();
  wrong.set_model("other");
  const grpc::Status refused = Complete(*stub_, wrong, &response, &refused_ctx);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string rid = DoorTestMetadata(refused_ctx, "x-request-id");
  EXPECT_EQ(rid.size(), 32u) << rid;
  EXPECT_NE(rid, response.request_id());
  EXPECT_EQ(fake_->prefill_calls().size(), 1u);
}

// B13 through the gRPC door: a client that stops reading holds the engine
// read. Its call stops taking from the request's sink once 64 KiB wait for
// the client, the sink fills, and the router waits instead of relaying 20 MB
// into memory; once the client reads again, every token arrives in order.
TEST_F(GrpcDoorTest, B13_AClientThatStopsReadingHoldsTheEngineRead) {
  Start();
  constexpr int kChunks = 4000;
  std::vector<std::string> chunks;
  for (int i = 0; i < kChunks; ++i) {
    chunks.push_back(
        nt::CompletionChunk(std::string(5000, 'a' + i % 26), i + 1 == kChunks ? "stop" : ""));
  }
  fake_->QueuePrefill(nt::PrefillStep::Ok());
  fake_->QueueDecode(nt::DecodeStep::Stream(std::move(chunks)));
  // The client's own window stays at gRPC's 64 KiB (no BDP growth).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  auto stub = pb::Inference::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  pb::GenerateRequest request = DoorTestPrompt();
  request.set_max_tokens(kChunks);
  auto reader = stub->Generate(&ctx, request);
  pb::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  // Not reading: the relay stops, far short of the stream, and stays there.
  int held = -1;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(20ms);
    const int now = fake_->events_delivered_now();
    if (now == held) break;
    held = now;
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fake_->events_delivered_now(), held);
  EXPECT_LT(held, kChunks / 4) << "the door took what the client did not read";
  // Reading again: everything, in order.
  int deltas = 1;
  std::string last;
  bool final = false;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      ++deltas;
      last = response.delta().text();
    }
    final = final || response.has_final();
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(deltas, kChunks);
  EXPECT_EQ(last, std::string(5000, 'a' + (kChunks - 1) % 26));
  EXPECT_TRUE(final);
}

// A call must send its request — headers, message, end — within
// serving.header_timeout_s (plus a second per 64 KiB received): a call that
// opens and sends nothing is ended DEADLINE_EXCEEDED at the bound, not
// before, while one that sends late but in time is served.
TEST_F(GrpcDoorTest, ARequestThatDoesNotArriveInTimeEndsDeadlineExceeded) {
  Start();
  const auto open_calls_become = [this](int n) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (door_->open_calls() != n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    return door_->open_calls() == n;
  };
  {
    DoorTestGenericCall late(channel_, "/narwhal.v1.Inference/Complete");
    ASSERT_TRUE(late.started());
    ASSERT_TRUE(open_calls_become(1));
    clock_.Advance(9.0);  // under the 10 s bound
    ASSERT_TRUE(late.Write(DoorTestPrompt().SerializeAsString()));
    ASSERT_TRUE(late.WritesDone());
    std::string bytes;
    EXPECT_TRUE(late.Read(&bytes));
    const grpc::Status status = late.Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_TRUE(open_calls_become(0));

  DoorTestGenericCall silent(channel_, "/narwhal.v1.Inference/Complete");
  ASSERT_TRUE(silent.started());
  ASSERT_TRUE(open_calls_become(1));
  clock_.Advance(2.0);  // 2 s into its bound (the first call's 10 s passed)
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(door_->open_calls(), 1);
  clock_.Advance(8.5);
  const grpc::Status status = silent.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_NE(status.error_message().find("did not arrive in time"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(fake_->prefill_calls().size(), 1u);
  EXPECT_TRUE(open_calls_become(0));
}

// A reflection stream (bidirectional) may stay open past that bound: a tool
// asks, waits, asks again on one stream.
TEST_F(GrpcDoorTest, AReflectionStreamMayStayOpenPastTheRequestBound) {
  Start();
  refl::ServerReflectionRequest request;
  request.set_list_services("");
  auto stub = refl::ServerReflection::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->ServerReflectionInfo(&ctx);
  ASSERT_TRUE(stream->Write(request));
  refl::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  clock_.Advance(30.0);
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(DoorTestServiceNames(response).empty());
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace narwhal::server
