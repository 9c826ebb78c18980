// The gRPC door (server/grpc/grpc_door.h) on 127.0.0.1 for in-process
// tests: started on a free port, and stopped (every connection closed).
#ifndef NARWHAL_TESTS_SERVER_GRPC_DOOR_FOR_TEST_H_
#define NARWHAL_TESTS_SERVER_GRPC_DOOR_FOR_TEST_H_

#include <memory>
#include <string>

#include "engines/clock.h"
#include "engines/http/io_loops.h"
#include "router/common/settings.h"
#include "router/router.h"
#include "server/grpc/grpc_door.h"

namespace narwhal::testing {

// The door listening on 127.0.0.1; *port gets its port (0 when it could not
// bind: the door is then null).
inline std::unique_ptr<server::GrpcDoor> StartGrpcDoor(const router::Settings& settings,
                                                       router::Router& router,
                                                       const engines::Clock& clock,
                                                       engines::IoLoops& loops,
                                                       const std::string& api_key, int* port,
                                                       server::TlsServerContext* tls = nullptr) {
  auto door = std::make_unique<server::GrpcDoor>(settings, router, clock, loops, api_key,
                                                 server::GrpcDoorOptionsFrom(settings, tls));
  auto bound = door->Bind("127.0.0.1", 0);
  *port = bound.ok() ? *bound : 0;
  if (!bound.ok()) return nullptr;
  door->Start();
  return door;
}

inline void StopGrpcDoor(std::unique_ptr<server::GrpcDoor>& door) {
  if (!door) return;
  door->StopAccepting();
  door->Join();
  door.reset();
}

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_SERVER_GRPC_DOOR_FOR_TEST_H_
