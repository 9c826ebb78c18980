// The fleet file as a live input: re-read on demand (SIGHUP, the admin
// ReloadConfig RPC, the membership.config_poll_s poll) and told apart from
// the last read by its content.
//
// Content, not metadata: a Kubernetes ConfigMap update replaces the
// `..data` symlink of the mounted volume with one to a new directory, so the
// configured path keeps its name while the inode, mtime and size it leads to
// may all change — or not change when the content did (and change when it
// did not). The SHA-256 of the bytes is compared instead.
//
// Each read is the start-up read (server/config/bounded_file.h): a regular
// file (symlinks followed) of at most 16 MiB; Load() then parses and
// validates it exactly as LoadFleetConfig() does, so `narwhal-check
// --validate-only`, a reload and start-up judge a file alike.
//
// Not thread-safe: one owner (the control plane) reads it.
#ifndef NARWHAL_SERVER_CONFIG_CONFIG_FILE_H_
#define NARWHAL_SERVER_CONFIG_CONFIG_FILE_H_

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "router/common/settings.h"

namespace narwhal::server {

class ConfigFile {
 public:
  explicit ConfigFile(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  // Reads the file and parses it as the fleet file. Whatever the verdict of
  // the parse, a file that could be read becomes the last content seen
  // (sha256(), changed()): an invalid file is reported once, not again at
  // every poll until it changes. Errors are LoadFleetConfig()'s: "config
  // PATH: cannot read: why" or "config PATH: <key path> ...".
  absl::StatusOr<router::Settings> Load();

  // Reads the file and tells whether its content differs from the last
  // content Load() saw (true before the first Load()). Remembers nothing.
  absl::StatusOr<bool> Changed() const;

  // The hex SHA-256 of the content the last Load() read ("" before one).
  const std::string& sha256() const { return sha256_; }
  // Whether the last Load() read content that differs from the Load()
  // before it (true for the first).
  bool changed() const { return changed_; }

 private:
  std::string path_;
  std::string sha256_;
  bool changed_ = false;
};

// The hex SHA-256 of `bytes`.
std::string Sha256Hex(std::string_view bytes);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CONFIG_CONFIG_FILE_H_
