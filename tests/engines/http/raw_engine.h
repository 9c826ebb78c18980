// RawEngine: a loopback HTTP/1.1 engine that answers every request with
// bytes a test writes itself — malformed, oversized or hostile responses a
// real engine (or narwhal-sim) never sends: invalid UTF-8, a million header
// fields, an endless SSE event, a body far past any bound.
//
// One thread accepts connections one at a time, reads each request (head and
// Content-Length body) and runs the test's script on it, then closes the
// connection. Writes are blocking with a small send buffer, so a script
// learns how much of an oversized response the peer took before it closed
// the connection: bytes_sent() stays far below the response size when the
// peer stopped reading early. Every wait is bounded.
#ifndef NARWHAL_TESTS_ENGINES_RAW_ENGINE_H_
#define NARWHAL_TESTS_ENGINES_RAW_ENGINE_H_

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace narwhal::testing {

class RawEngine {
 public:
  // One accepted connection, as the script sees it.
  class Connection {
   public:
    Connection(int fd, std::atomic<size_t>* sent) : fd_(fd), sent_(sent) {}

    // The request as received: head and body.
    const std::string& request() const { return request_; }

    // Writes all of `bytes`; false once the peer has gone (reset, closed) or
    // the write timed out.
    bool Send(std::string_view bytes) {
      while (!bytes.empty()) {
        const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return false;
        *sent_ += static_cast<size_t>(n);
        bytes.remove_prefix(static_cast<size_t>(n));
      }
      return true;
    }

    // Writes `piece` again and again, `total` bytes in all (the last copy
    // cut to fit), or until the peer has gone. True when all was written.
    bool SendRepeated(std::string_view piece, size_t total) {
      std::string block;
      while (block.size() < 64 * 1024) block.append(piece);
      size_t left = total;
      while (left > 0) {
        const size_t n = std::min(left, block.size());
        if (!Send(std::string_view(block).substr(0, n))) return false;
        left -= n;
      }
      return true;
    }

    // Reads the request; false on EOF, error or timeout.
    bool ReadRequest() {
      char buf[16 * 1024];
      size_t head_end = std::string::npos;
      while (head_end == std::string::npos) {
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) return false;
        request_.append(buf, static_cast<size_t>(n));
        head_end = request_.find("\r\n\r\n");
      }
      const size_t want = head_end + 4 + ContentLength(request_.substr(0, head_end));
      while (request_.size() < want) {
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) return false;
        request_.append(buf, static_cast<size_t>(n));
      }
      return true;
    }

   private:
    static size_t ContentLength(std::string head) {
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const size_t at = head.find("\r\ncontent-length:");
      if (at == std::string::npos) return 0;
      return static_cast<size_t>(std::stoull(head.substr(at + 17)));
    }

    int fd_;
    std::atomic<size_t>* sent_;
    std::string request_;
  };

  using Script = std::function<void(Connection&)>;

  explicit RawEngine(Script script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::listen(listen_fd_, 16) == 0 &&
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { Serve(); });
  }

  ~RawEngine() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  RawEngine(const RawEngine&) = delete;
  RawEngine& operator=(const RawEngine&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // Bytes written to peers so far, over all connections.
  size_t bytes_sent() const { return sent_.load(); }
  // Requests read so far.
  int requests() const { return requests_.load(); }
  // Scripts that ran to their end.
  int finished() const { return finished_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      pollfd pfd{listen_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      // A small send buffer: the peer's reads, not the kernel, pace the
      // script's writes. Bounded waits: a stuck peer cannot hang the test.
      const int sndbuf = 16 * 1024;
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
      timeval tv{10, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      Connection connection(fd, &sent_);
      if (connection.ReadRequest()) {
        ++requests_;
        script_(connection);
        ++finished_;
      }
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
    }
  }

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> sent_{0};
  std::atomic<int> requests_{0};
  std::atomic<int> finished_{0};
  std::thread thread_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_ENGINES_RAW_ENGINE_H_
