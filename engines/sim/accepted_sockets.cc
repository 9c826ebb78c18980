#include "engines/sim/accepted_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

namespace narwhal::sim {
namespace {

int LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
  return -1;
}

bool Connected(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
}

}  // namespace

int ShutdownAcceptedSockets(int local_port) {
  if (local_port <= 0) return 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  const int dir_fd = dirfd(dir);
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == dir_fd) continue;
    if (LocalPort(fd) == local_port && Connected(fd)) {
      shutdown(fd, SHUT_RDWR);
      ++count;
    }
  }
  closedir(dir);
  return count;
}

}  // namespace narwhal::sim
