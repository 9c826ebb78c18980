// Reading a file named in the configuration (the fleet file itself, the TLS
// PEM files) without letting the file decide how long or how much: only a
// regular file is opened (a FIFO, a device or a socket given as a path would
// block start-up or a reload forever), and at most a fixed number of bytes
// is read.
//
// The path is checked with stat() first, which follows symbolic links: a
// Kubernetes ConfigMap or Secret mounts each key as a symlink to a regular
// file, and that is a regular file here. The file is then opened
// non-blocking and checked again on the open descriptor, so a path swapped
// for a FIFO between the two steps is refused too instead of hanging.
#ifndef NARWHAL_SERVER_CONFIG_BOUNDED_FILE_H_
#define NARWHAL_SERVER_CONFIG_BOUNDED_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace narwhal::server::config_file {

// The whole content of the regular file at `path`, of at most `max_bytes`
// bytes. Failures carry only the reason, for the caller to prefix with what
// the file is (e.g. "config fleet.json: cannot read: "):
//  - the errno text with a status derived from it (NotFound,
//    PermissionDenied, ...) when stat, open or read fails;
//  - InvalidArgument "not a regular file (a FIFO)" (a directory, a socket, a
//    character device, ...) for anything but a regular file;
//  - InvalidArgument "larger than N bytes" when the file holds more.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_BOUNDED_FILE_H_
