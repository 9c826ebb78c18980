#include "server/config/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace narwhal::server::config_file {
namespace {

absl::Status ErrnoError(int error_number) {
  return absl::Status(absl::ErrnoToStatusCode(error_number), std::strerror(error_number));
}

// What a file that is not a regular file is, for the message.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown kind";
}

absl::Status NotRegular(mode_t mode) {
  return absl::InvalidArgumentError(absl::StrCat("not a regular file (", KindOf(mode), ")"));
}

absl::Status TooLarge(size_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat("larger than ", max_bytes, " bytes"));
}

}  // namespace

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  // Checked before opening: opening a FIFO for reading blocks until a writer
  // comes, which may be never.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError(errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(st.st_mode);
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) return TooLarge(max_bytes);

  // O_NONBLOCK: should the path have become a FIFO since the stat, the open
  // returns at once and the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) return ErrnoError(errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(st.st_mode);

  // The size may have changed since the stat (a file being written): the
  // read itself is bounded, one byte past the limit telling "larger".
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size) < max_bytes ? static_cast<size_t>(st.st_size)
                                                           : max_bytes);
  char buf[65536];
  while (true) {
    const size_t room = max_bytes + 1 - text.size();
    const ssize_t n = ::read(fd, buf, room < sizeof buf ? room : sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) return TooLarge(max_bytes);
  }
  return text;
}

}  // namespace narwhal::server::config_file
