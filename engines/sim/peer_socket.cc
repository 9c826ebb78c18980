#include "engines/sim/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace narwhal::engines {
namespace {

int PortOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
  return -1;
}

bool Matches(int fd, int local_port, int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (PortOf(addr) != remote_port) return false;
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return PortOf(addr) == local_port;
}

}  // namespace

PeerSocket PeerSocket::Find(int local_port, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return PeerSocket();
  thread_local int cached_fd = -1;
  if (cached_fd >= 0 && Matches(cached_fd, local_port, remote_port)) {
    return PeerSocket(cached_fd);
  }
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return PeerSocket();
  int found = -1;
  const int dir_fd = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == dir_fd) continue;
    if (Matches(fd, local_port, remote_port)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  cached_fd = found;
  return PeerSocket(found);
}

bool PeerSocket::PeerClosed() const {
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;
}

void PeerSocket::Abort() const {
  if (fd_ < 0) return;
  linger lg{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  shutdown(fd_, SHUT_RDWR);
}

}  // namespace narwhal::engines
