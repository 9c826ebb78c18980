// The credentials of the router's gRPC listeners (inference and admin):
// TLS with the certificate and key of `tls.*` when they are set, else
// plaintext (h2c). Clients are not asked for a certificate.
#ifndef NARWHAL_SERVER_GRPC_GRPC_CREDENTIALS_H_
#define NARWHAL_SERVER_GRPC_GRPC_CREDENTIALS_H_

#include <memory>

#include "server/tls_files.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc

namespace narwhal::server {

// `pem` null: insecure (plaintext) credentials.
std::shared_ptr<grpc::ServerCredentials> ListenerCredentials(const TlsPem* pem);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_CREDENTIALS_H_
