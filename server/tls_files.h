// The certificate and private key of the router's TLS listeners
// (`tls.cert_file`, `tls.key_file`), read and checked with OpenSSL.
//
// LoadTlsFiles() is the one check, used by the config loader (so
// narwhal-serve and narwhal-check refuse a bad pair before anything is
// bound) and again by narwhal-serve when it builds its listeners from the
// files' contents. A pair is good when both files are regular files of at
// most 1 MiB, the certificate file holds at least one PEM certificate (the
// leaf first, then its chain) and nothing else that fails to parse, the key
// file holds one unencrypted PEM private key, and that key is the leaf
// certificate's. Messages name the key and the path, never file contents.
//
// Thread-safe (OpenSSL 3 needs no global set-up).
#ifndef NARWHAL_SERVER_TLS_FILES_H_
#define NARWHAL_SERVER_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace narwhal::server {

// The PEM text of a checked pair, as the files held it.
struct TlsPem {
  std::string cert_chain;
  std::string private_key;
};

// Reads and checks the pair. Failures are InvalidArgument; the message lists
// every problem found (joined by "; "), each starting with the key path, e.g.
// `tls.key_file "/etc/narwhal/key.pem": cannot read: No such file or
// directory` or `tls.key_file "k.pem" does not match the certificate in
// tls.cert_file "c.pem"`.
absl::StatusOr<TlsPem> LoadTlsFiles(const std::string& cert_file, const std::string& key_file);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_TLS_FILES_H_
