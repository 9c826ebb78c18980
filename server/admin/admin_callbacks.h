// Shared helpers of the admin service's callback-API RPCs: finishing a
// unary call inline, a deferred call that finishes exactly once (by its
// work or by shutdown), and absl to gRPC status.
#ifndef NARWHAL_SERVER_ADMIN_ADMIN_CALLBACKS_H_
#define NARWHAL_SERVER_ADMIN_ADMIN_CALLBACKS_H_

#include <absl/status/status.h>
#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <mutex>
#include <string>

namespace narwhal::server {

inline constexpr char kAdminShuttingDown[] = "narwhal-serve is shutting down";

// Finishes the call now with `status`; returns its reactor.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status);

// The same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// A deferred unary call, finished once by its work or by shutdown.
class PendingUnaryCall {
 public:
  PendingUnaryCall(grpc::ServerUnaryReactor* reactor, google::protobuf::Message* response)
      : reactor_(reactor), response_(response) {}
  PendingUnaryCall(const PendingUnaryCall&) = delete;
  PendingUnaryCall& operator=(const PendingUnaryCall&) = delete;

  // Finishes the call unless it already was; on OK `result` becomes the
  // response. The response is touched only here, under the lock, because
  // it is freed once the call finishes.
  void Finish(const grpc::Status& status, const google::protobuf::Message* result);

 private:
  std::mutex mu_;
  grpc::ServerUnaryReactor* const reactor_;
  google::protobuf::Message* const response_;
  bool finished_ = false;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_ADMIN_CALLBACKS_H_
