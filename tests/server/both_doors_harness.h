// Both doors on one router (tests/server/http_door_harness.h plus the gRPC
// Inference service on an in-process channel), for tests that send the same
// request through HTTP and gRPC.
#ifndef NARWHAL_TESTS_SERVER_BOTH_DOORS_HARNESS_H_
#define NARWHAL_TESTS_SERVER_BOTH_DOORS_HARNESS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "server/grpc/inference_service.h"
#include "tests/server/grpc_door_for_test.h"
#include "tests/server/http_door_harness.h"

namespace narwhal::server::http_door_test {

namespace pb = narwhal::v1;

class BothDoorsTest : public HttpDoorTest {
 protected:
  void StartBoth(const std::string& api_key = "") {
    Start(FastOptions(), api_key);
    int port = 0;
    grpc_door_ =
        narwhal::testing::StartGrpcDoor(settings_, *router_, clock_, loops_, api_key, &port);
    ASSERT_NE(grpc_door_, nullptr);
    stub_ = pb::Inference::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    narwhal::testing::StopGrpcDoor(grpc_door_);
    HttpDoorTest::TearDown();
  }

  grpc::Status Complete(const pb::GenerateRequest& request, const std::string& authorization = "",
                        pb::CompleteResponse* response = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    pb::CompleteResponse ignored;
    return stub_->Complete(&ctx, request, response != nullptr ? response : &ignored);
  }

  // Every message of a Generate call, and its status.
  grpc::Status Generate(const pb::GenerateRequest& request,
                        std::vector<pb::GenerateResponse>* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader =
        stub_->Generate(&ctx, request);
    for (pb::GenerateResponse r; reader->Read(&r);) out->push_back(r);
    return reader->Finish();
  }

  static pb::ErrorInfo Info(const grpc::Status& status) {
    google::rpc::Status details;
    EXPECT_TRUE(details.ParseFromString(status.error_details()));
    pb::ErrorInfo info;
    if (details.details_size() == 1) {
      EXPECT_TRUE(details.details(0).UnpackTo(&info));
    }
    return info;
  }

  std::unique_ptr<GrpcDoor> grpc_door_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

}  // namespace narwhal::server::http_door_test

#endif  // NARWHAL_TESTS_SERVER_BOTH_DOORS_HARNESS_H_
