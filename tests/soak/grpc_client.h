// The soak's gRPC client: narwhal.v1.Inference Generate and Complete over a
// few shared channels (blocking stubs, one call per client thread), with an
// abort at a chosen moment (ClientContext::TryCancel from a timer thread).
#ifndef NARWHAL_TESTS_SOAK_GRPC_CLIENT_H_
#define NARWHAL_TESTS_SOAK_GRPC_CLIENT_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "tests/soak/request_record.h"

namespace narwhal::soak {

class GrpcClients {
 public:
  GrpcClients(const std::string& target, int channels);
  ~GrpcClients();
  GrpcClients(const GrpcClients&) = delete;
  GrpcClients& operator=(const GrpcClients&) = delete;

  int channels() const;
  // Runs record->plan (Generate when streaming, else Complete) on channel
  // plan.channel and fills in what the client saw. Thread-safe.
  void Run(absl::Duration hard_timeout, RequestRecord* record);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_GRPC_CLIENT_H_
