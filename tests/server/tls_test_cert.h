// Certificates made at test time (OpenSSL's C API), for the TLS tests of the
// listeners and of TLS to engines: P-256 keys and certificates for
// `localhost` and 127.0.0.1 (unless told otherwise), valid from an hour ago
// for a day, written as PEM files. Self-signed ones, and a test CA that signs
// server and client certificates (an expired one too).
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

// A fresh CA: a self-signed CA certificate ("<name> CA") and its key.
absl::StatusOr<TestCertificate> MakeTestCa(const std::string& dir, const std::string& name = "ca");

// What a certificate signed by a test CA says.
struct LeafOptions {
  std::string common_name = "localhost";
  std::string subject_alt_name = "DNS:localhost,IP:127.0.0.1";  // X509v3 form
  long not_before_s = -3600;                                    // relative to now
  long not_after_s = 24 * 3600;  // relative to now; negative: already expired
};

// A fresh key and a certificate `ca` signed (`ca` from MakeTestCa), usable
// by a server and by a client, written into `dir`.
absl::StatusOr<TestCertificate> MakeSignedCertificate(const TestCertificate& ca,
                                                      const std::string& dir,
                                                      const std::string& name,
                                                      const LeafOptions& options = {});

// A fresh directory under $TMPDIR (or /tmp) named "<prefix>XXXXXX".
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

// Writes `text` to `path` (replacing it).
bool WriteTextFile(const std::string& path, const std::string& text);

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_SERVER_TLS_TEST_CERT_H_
