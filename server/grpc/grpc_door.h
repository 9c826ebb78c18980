// GrpcDoor: the gRPC listener (listen.grpc) — HTTP/2 by nghttp2 on the data
// plane's event loops (server/grpc/h2_connection.h), serving
//   narwhal.v1.Inference                       Generate, Complete
//                                              (server/grpc/inference_service.h)
//   grpc.health.v1.Health                      Check, Watch (server/grpc/health_table.h)
//   grpc.reflection.v1 and v1alpha             ServerReflectionInfo
//                                              (server/grpc/grpc_reflection.h)
// One listener on the first loop; accepted connections are spread
// round-robin over the loops, and every call of a connection runs on its
// loop. With a TlsServerContext the door speaks TLS (ALPN h2).
//
// Bounds: at most max_connections client connections (one more is closed at
// once), the per-connection bounds of H2ConnectionOptions.
//
// Life cycle: Bind, Start; at shutdown BeginDrain (GOAWAY: clients open new
// calls elsewhere, open calls go on), WaitIdle, StopAccepting (closes the
// listener and every connection, cancelling what is left), Join. The loops
// must run until Join returned. Thread-safe.
#ifndef NARWHAL_SERVER_GRPC_GRPC_DOOR_H_
#define NARWHAL_SERVER_GRPC_GRPC_DOOR_H_

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include "engines/clock.h"
#include "engines/http/io_loops.h"
#include "router/common/settings.h"
#include "router/router.h"
#include "server/grpc/h2_connection.h"

namespace narwhal::server {

class GrpcHealthTable;

struct GrpcDoorOptions {
  H2ConnectionOptions connection;
  int max_connections = 4096;
};

// The door's bounds from `settings` (serving.*) and `tls` (may be null).
GrpcDoorOptions GrpcDoorOptionsFrom(const router::Settings& settings, TlsServerContext* tls);

class GrpcDoor {
 public:
  // `api_key` empty = no client authentication.
  GrpcDoor(const router::Settings& settings, router::Router& router, const engines::Clock& clock,
           engines::IoLoops& loops, std::string api_key, GrpcDoorOptions options);
  ~GrpcDoor();
  GrpcDoor(const GrpcDoor&) = delete;
  GrpcDoor& operator=(const GrpcDoor&) = delete;

  // Binds `host:port` (port 0 picks a free port); returns the bound port.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Starts accepting on the loops.
  void Start();
  // The door's grpc.health.v1 statuses (set by server/grpc/grpc_health.h).
  GrpcHealthTable& health();
  // GOAWAY on every connection: no new calls on them.
  void BeginDrain();
  // Waits until no call is open, at most until `deadline`. False on timeout.
  bool WaitIdle(engines::MonoTime deadline);
  // Closes the listener and every connection (open calls are cancelled).
  void StopAccepting();
  // Waits until the accept loop and every connection have ended (after
  // StopAccepting). Never call it on a loop thread.
  void Join();

  int open_connections() const;
  int open_calls() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_DOOR_H_
