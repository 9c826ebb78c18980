// The accepted socket behind an httplib server request.
//
// httplib 0.11 hands handlers no socket, yet a server must notice a client
// that went away while it is not writing (B19: a request held before its first
// token) and a simulator must be able to drop a connection without a
// response. PeerSocket finds the accepted socket by its local and peer ports.
//
// Cost: a lookup scans the process's open descriptors (one getsockname per
// descriptor) unless the calling thread's cached match still fits, which is
// the common case: an httplib worker serves one keep-alive connection at a
// time. Checks are a single non-blocking syscall.
#ifndef NARWHAL_ENGINES_SIM_PEER_SOCKET_H_
#define NARWHAL_ENGINES_SIM_PEER_SOCKET_H_

namespace narwhal::engines {

class PeerSocket {
 public:
  PeerSocket() = default;

  // The accepted socket with these ports, or an invalid PeerSocket.
  static PeerSocket Find(int local_port, int remote_port);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // True once the peer closed or reset its side (data it may have pipelined
  // does not count as closed). False for an invalid PeerSocket.
  bool PeerClosed() const;

  // Ends the connection at once, both directions, without a response (the
  // peer reads end-of-stream); the owning server's later close() sends a
  // reset. The descriptor itself stays owned by the server.
  void Abort() const;

 private:
  explicit PeerSocket(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_SIM_PEER_SOCKET_H_
