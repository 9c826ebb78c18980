#include "server/admin/admin_callbacks.h"

namespace narwhal::server {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void PendingUnaryCall::Finish(const grpc::Status& status, const google::protobuf::Message* result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (status.ok() && result != nullptr) response_->CopyFrom(*result);
  reactor_->Finish(status);
}

}  // namespace narwhal::server
