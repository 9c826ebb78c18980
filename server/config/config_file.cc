#include "server/config/config_file.h"

#include <openssl/evp.h>

#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "server/config/config_loader.h"

namespace narwhal::server {

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // SHA-256 of memory cannot fail short of an allocation failure, which
  // leaves `length` 0: the digest is then "", unequal to any real one.
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    return "";
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<router::Settings> ConfigFile::Load() {
  absl::StatusOr<std::string> text = ReadFleetConfigText(path_);
  if (!text.ok()) return text.status();
  std::string sha256 = Sha256Hex(*text);
  changed_ = sha256_.empty() || sha256 != sha256_;
  sha256_ = std::move(sha256);
  return ParseFleetConfigText(*text, path_);
}

absl::StatusOr<bool> ConfigFile::Changed() const {
  absl::StatusOr<std::string> text = ReadFleetConfigText(path_);
  if (!text.ok()) return text.status();
  return sha256_.empty() || Sha256Hex(*text) != sha256_;
}

}  // namespace narwhal::server
