// Self-signed certificates made at test time (OpenSSL's C API), for the TLS
// tests of the listeners: a P-256 key and a certificate for `localhost` and
// 127.0.0.1, valid from an hour ago for a day, written as PEM files.
#ifndef NARWHAL_TESTS_SERVER_TLS_TEST_CERT_H_
#define NARWHAL_TESTS_SERVER_TLS_TEST_CERT_H_

#include <string>

#include "absl/status/statusor.h"

namespace narwhal::testing {

struct TestCertificate {
  std::string cert_file;  // <dir>/<name>.crt
  std::string key_file;   // <dir>/<name>.key
  std::string cert_pem;
  std::string key_pem;
};

// A fresh key and certificate, written into the existing directory `dir`.
absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(const std::string& dir,
                                                          const std::string& name = "server");

// A fresh directory under $TMPDIR (or /tmp) named "<prefix>XXXXXX".
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

// Writes `text` to `path` (replacing it).
bool WriteTextFile(const std::string& path, const std::string& text);

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_SERVER_TLS_TEST_CERT_H_
