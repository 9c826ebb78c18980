#include "server/grpc/grpc_credentials.h"

#include <grpcpp/security/server_credentials.h>

namespace narwhal::server {

std::shared_ptr<grpc::ServerCredentials> ListenerCredentials(const TlsPem* pem) {
  if (pem == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({pem->private_key, pem->cert_chain});
  return grpc::SslServerCredentials(options);
}

}  // namespace narwhal::server
