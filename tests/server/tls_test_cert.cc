#include "tests/server/tls_test_cert.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace narwhal::testing {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

namespace {

struct CertSpec {
  std::string common_name;
  std::string subject_alt_name;  // empty: none
  long not_before_s = -3600;
  long not_after_s = 24 * 3600;
  bool ca = false;
};

Owned<EVP_PKEY> ReadKey(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Owned<EVP_PKEY>(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                             : nullptr);
}

Owned<X509> ReadCert(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Owned<X509>(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

// A fresh key and a certificate per `spec`, signed by `issuer` (its
// certificate and key PEM) or, when null, by itself; written into `dir`.
absl::StatusOr<TestCertificate> MakeCertificate(const CertSpec& spec, const TestCertificate* issuer,
                                                const std::string& dir, const std::string& name) {
  const auto fail = [](const char* what) { return absl::InternalError(what); };
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return fail("cannot generate a P-256 key");
  Owned<X509> issuer_cert;
  Owned<EVP_PKEY> issuer_key;
  if (issuer != nullptr) {
    issuer_cert = ReadCert(issuer->cert_pem);
    issuer_key = ReadKey(issuer->key_pem);
    if (!issuer_cert || !issuer_key) return fail("cannot read the issuer's PEM");
  }
  Owned<X509> cert(X509_new());
  uint64_t serial = 0;
  if (!cert || RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial) != 1) {
    return fail("cannot make a certificate");
  }
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), spec.not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), spec.not_after_s);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1,
                             -1, 0);
  X509* signer = issuer_cert ? issuer_cert.get() : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  const auto add = [&](int nid, const std::string& value) {
    Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
    return ext && X509_add_ext(cert.get(), ext.get(), -1) == 1;
  };
  bool ok = add(NID_basic_constraints, spec.ca ? "critical,CA:TRUE" : "critical,CA:FALSE") &&
            add(NID_subject_key_identifier, "hash");
  if (ok && spec.ca) ok = add(NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
  if (ok && issuer != nullptr) ok = add(NID_authority_key_identifier, "keyid:always");
  if (ok && !spec.subject_alt_name.empty()) ok = add(NID_subject_alt_name, spec.subject_alt_name);
  if (!ok) return fail("cannot add the certificate's extensions");
  EVP_PKEY* signing_key = issuer_key ? issuer_key.get() : key.get();
  if (X509_sign(cert.get(), signing_key, EVP_sha256()) == 0) return fail("cannot sign");

  TestCertificate out;
  Owned<BIO> cert_bio(BIO_new(BIO_s_mem()));
  Owned<BIO> key_bio(BIO_new(BIO_s_mem()));
  if (!cert_bio || !key_bio || PEM_write_bio_X509(cert_bio.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1) {
    return fail("cannot write PEM");
  }
  out.cert_pem = BioText(cert_bio.get());
  out.key_pem = BioText(key_bio.get());
  out.cert_file = dir + "/" + name + ".crt";
  out.key_file = dir + "/" + name + ".key";
  if (!WriteTextFile(out.cert_file, out.cert_pem) || !WriteTextFile(out.key_file, out.key_pem)) {
    return fail("cannot write the PEM files");
  }
  return out;
}

}  // namespace

absl::StatusOr<TestCertificate> MakeSelfSignedCertificate(const std::string& dir,
                                                          const std::string& name) {
  // CA:TRUE, so that a client can trust it as its own anchor.
  return MakeCertificate(CertSpec{.common_name = "localhost",
                                  .subject_alt_name = "DNS:localhost,IP:127.0.0.1",
                                  .not_before_s = -3600,
                                  .not_after_s = 24 * 3600,
                                  .ca = true},
                         nullptr, dir, name);
}

absl::StatusOr<TestCertificate> MakeTestCa(const std::string& dir, const std::string& name) {
  return MakeCertificate(CertSpec{.common_name = name + " CA",
                                  .subject_alt_name = "",
                                  .not_before_s = -3600,
                                  .not_after_s = 24 * 3600,
                                  .ca = true},
                         nullptr, dir, name);
}

absl::StatusOr<TestCertificate> MakeSignedCertificate(const TestCertificate& ca,
                                                      const std::string& dir,
                                                      const std::string& name,
                                                      const LeafOptions& options) {
  return MakeCertificate(CertSpec{.common_name = options.common_name,
                                  .subject_alt_name = options.subject_alt_name,
                                  .not_before_s = options.not_before_s,
                                  .not_after_s = options.not_after_s,
                                  .ca = false},
                         &ca, dir, name);
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* root = std::getenv("TMPDIR");
  std::string pattern =
      std::string(root != nullptr && *root != '\0' ? root : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  return std::string(buf.data());
}

bool WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace narwhal::testing
