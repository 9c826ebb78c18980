// grpc.reflection.v1.ServerReflection on both gRPC listeners, next to the
// v1alpha service gRPC 1.51 provides (reflection clients try v1 first). It
// answers from the process's generated descriptor pool, like v1alpha:
//   list_services                  the services this listener serves;
//   file_by_filename               that file;
//   file_containing_symbol         the file defining a service, method,
//                                  message, enum or extension;
//   file_containing_extension      the file defining that extension;
//   all_extension_numbers_of_type  the extension numbers of a message type.
// A file answer carries the file and every file it depends on, transitively,
// each once. What the pool does not hold is a NOT_FOUND error answer, a
// request with none of these set INVALID_ARGUMENT; the stream stays open
// either way. A name in an error message is cut to 128 printable bytes; a
// request is at most the listener's gRPC message limit, and a stream has one
// request in flight at a time.
#ifndef NARWHAL_SERVER_GRPC_GRPC_REFLECTION_H_
#define NARWHAL_SERVER_GRPC_GRPC_REFLECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "server/grpc/h2_call.h"

namespace narwhal::server {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: the fully qualified names this listener serves.
  explicit ReflectionV1Service(std::vector<std::string> services);

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to one request.
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

  // The names ListServices reports: `services` plus grpc.health.v1.Health
  // and both reflection services.
  static std::vector<std::string> WithStandardServices(std::vector<std::string> services);

 private:
  const std::vector<std::string> services_;
};

// The gRPC door's ServerReflectionInfo call, for grpc.reflection.v1 and
// v1alpha alike (their messages are the same on the wire): each request is
// answered by `service` in order; the call ends OK when the client's side
// does. A request that does not decode ends it INVALID_ARGUMENT; a client
// that sends requests without reading the answers is cut off
// (RESOURCE_EXHAUSTED) once 4 MiB of answers wait.
std::unique_ptr<H2CallHandler> NewReflectionCall(const ReflectionV1Service& service,
                                                 std::weak_ptr<H2Call> call);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_REFLECTION_H_
