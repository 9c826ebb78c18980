// RawHttpClient: a loopback HTTP/1.x client for front-door tests that need
// control over every byte: partial heads, trickled bytes, pipelined requests
// in one write, conflicting framings, disconnects at chosen moments.
//
// Blocking POSIX socket; every read is bounded by a timeout (poll), so a door
// that never answers fails the test instead of hanging it. Responses are
// parsed with Beast's parser fed from what arrived; bytes past one response
// stay buffered for the next (pipelining).
#ifndef NARWHAL_TESTS_SERVER_RAW_HTTP_CLIENT_H_
#define NARWHAL_TESTS_SERVER_RAW_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace narwhal::testing {

struct RawResponse {
  int status = 0;
  unsigned version = 11;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  bool keep_alive = false;
  bool chunked = false;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawHttpClient {
 public:
  using Ms = std::chrono::milliseconds;

  explicit RawHttpClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawHttpClient() { Close(); }
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  bool connected() const { return connected_; }

  // False once the peer is gone.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Sends without waiting for room: false when the socket buffer is full or
  // the peer is gone.
  bool TrySend(std::string_view bytes) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(bytes.size());
  }

  // The next whole response, or nullopt when the connection ended or nothing
  // complete arrived within `timeout`. `head_only`: stop after the head.
  std::optional<RawResponse> Read(Ms timeout = Ms(5000), bool head_only = false) {
    namespace http = boost::beast::http;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    parser.eager(true);
    while (true) {
      if (!pending_.empty()) {
        boost::beast::error_code ec;
        const size_t used = parser.put(boost::asio::buffer(pending_), ec);
        pending_.erase(0, used);
        if (ec && ec != http::error::need_more) return std::nullopt;
        if (parser.is_done() || (head_only && parser.is_header_done())) break;
      }
      const int got = Receive(deadline);
      if (got < 0) return std::nullopt;  // timeout
      if (got == 0) {                    // end of file: may end a body
        boost::beast::error_code ec;
        if (parser.got_some()) parser.put_eof(ec);
        if (!parser.is_done() || ec) return std::nullopt;
        break;
      }
    }
    RawResponse r;
    const auto& m = parser.get();
    r.status = m.result_int();
    r.version = m.version();
    for (const auto& f : m) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = std::string(f.value());
    }
    r.body = m.body();
    r.keep_alive = m.keep_alive();
    r.chunked = m.chunked();
    return r;
  }

  // Reads (and keeps) bytes until the peer closes; true when it closed (end of
  // file or reset) within `timeout`.
  bool WaitClosed(Ms timeout = Ms(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const int got = Receive(deadline);
      if (got < 0) return false;
      if (got == 0) return true;
    }
  }

  // Everything received and not parsed yet.
  const std::string& pending() const { return pending_; }

  // Half-close: the client sends nothing more.
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset (SO_LINGER 0), as a crashed client would.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    Close();
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  // >0 bytes appended, 0 end of file (or reset), -1 timeout.
  int Receive(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return -1;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return 0;
    pending_.append(buf, static_cast<size_t>(n));
    return static_cast<int>(n);
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string pending_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_SERVER_RAW_HTTP_CLIENT_H_
