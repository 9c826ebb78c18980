#include "server/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/config/bounded_file.h"

namespace narwhal::server {
namespace {

constexpr char kCertKey[] = "tls.cert_file";
constexpr char kKeyKey[] = "tls.key_file";
constexpr size_t kMaxPemFileBytes = size_t{1} << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// `key "path"`, printable whatever bytes the path holds.
std::string Named(const char* key, const std::string& path) {
  return absl::StrCat(key, " \"", absl::CHexEscape(path), "\"");
}

// OpenSSL's reason for the last error on this thread (and clears the queue).
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  const char* reason = code == 0 ? nullptr : ERR_reason_error_string(code);
  ERR_clear_error();
  return reason == nullptr ? std::string("unknown error") : std::string(reason);
}

// The whole file, or why it cannot be read (appended to *errors).
std::optional<std::string> ReadPemFile(const char* key, const std::string& path,
                                       std::vector<std::string>* errors) {
  absl::StatusOr<std::string> text = config_file::ReadBoundedFile(path, kMaxPemFileBytes);
  if (text.ok()) return std::move(*text);
  errors->push_back(absl::StrCat(Named(key, path), ": cannot read: ", text.status().message()));
  return std::nullopt;
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The leaf (first) certificate of a PEM chain; every certificate must parse.
X509Ptr ParseChain(const std::string& path, const std::string& pem,
                   std::vector<std::string>* errors) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  X509Ptr leaf;
  int count = 0;
  while (bio) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!cert) break;
    if (!leaf) leaf = std::move(cert);
    ++count;
  }
  const unsigned long last = ERR_peek_last_error();
  // The read that ends the loop fails with "no start line" at the end of the
  // text; anything else is a certificate that does not parse.
  const bool clean_end = last == 0 || (ERR_GET_LIB(last) == ERR_LIB_PEM &&
                                        ERR_GET_REASON(last) == PEM_R_NO_START_LINE);
  if (count == 0) {
    errors->push_back(
        clean_end ? absl::StrCat(Named(kCertKey, path), " holds no PEM certificate")
                  : absl::StrCat(Named(kCertKey, path),
                                 " is not a PEM certificate chain: ", OpenSslReason()));
    ERR_clear_error();
    return nullptr;
  }
  if (!clean_end) {
    errors->push_back(absl::StrCat(Named(kCertKey, path), ": certificate ", count + 1,
                                   " does not parse: ", OpenSslReason()));
    return nullptr;
  }
  ERR_clear_error();
  return leaf;
}

// Asked for a passphrase: the key is encrypted, which is not supported.
int RefusePassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* asked) {
  *static_cast<bool*>(asked) = true;
  return -1;
}

PkeyPtr ParseKey(const std::string& path, const std::string& pem,
                 std::vector<std::string>* errors) {
  if (pem.find("-----BEGIN ") == std::string::npos) {
    errors->push_back(absl::StrCat(Named(kKeyKey, path), " holds no PEM private key"));
    return nullptr;
  }
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  bool asked = false;
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, RefusePassphrase, &asked)
                  : nullptr);
  if (key) {
    ERR_clear_error();
    return key;
  }
  if (asked) {
    errors->push_back(absl::StrCat(Named(kKeyKey, path),
                                   " is encrypted (a passphrase-protected key is not supported)"));
  } else {
    errors->push_back(
        absl::StrCat(Named(kKeyKey, path), " is not a PEM private key: ", OpenSslReason()));
  }
  ERR_clear_error();
  return nullptr;
}

}  // namespace

absl::StatusOr<TlsPem> LoadTlsFiles(const std::string& cert_file, const std::string& key_file) {
  std::vector<std::string> errors;
  std::optional<std::string> cert_pem = ReadPemFile(kCertKey, cert_file, &errors);
  std::optional<std::string> key_pem = ReadPemFile(kKeyKey, key_file, &errors);
  X509Ptr leaf = cert_pem ? ParseChain(cert_file, *cert_pem, &errors) : nullptr;
  PkeyPtr key = key_pem ? ParseKey(key_file, *key_pem, &errors) : nullptr;
  if (leaf && key && X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    errors.push_back(absl::StrCat(Named(kKeyKey, key_file), " does not match the certificate in ",
                                  Named(kCertKey, cert_file)));
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  return TlsPem{std::move(*cert_pem), std::move(*key_pem)};
}

}  // namespace narwhal::server
