#include "router/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace narwhal::router {

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError("cannot open journal " + path + ": " +
                                      std::strerror(errno));
  }
  return std::unique_ptr<Journal>(new Journal(fd));
}

Journal::~Journal() { ::close(fd_); }

void Journal::Write(const nlohmann::json& row) {
  std::string line =
      row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // never throws
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // disk full or similar: the request itself is unaffected
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ++rows_;
}

long long Journal::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_;
}

}  // namespace narwhal::router
