// ListenOn: the listening socket of every listener (the HTTP door, the gRPC
// door, the health listener) — HOST an address or a name resolved once,
// SO_REUSEADDR but not SO_REUSEPORT, so a second server on the same port
// fails to bind instead of sharing it.
#ifndef NARWHAL_SERVER_NET_LISTEN_SOCKET_H_
#define NARWHAL_SERVER_NET_LISTEN_SOCKET_H_

#include <absl/status/statusor.h>

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <string_view>

namespace narwhal::server {

// Opens `acceptor` on `host:port` (port 0 picks a free port) with a listen
// backlog of `backlog`; returns the bound port, or UnavailableError "cannot
// bind the <what> listener to HOST:PORT (why)" with the acceptor closed.
absl::StatusOr<int> ListenOn(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host,
                             int port, std::string_view what, int backlog = 1024);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_NET_LISTEN_SOCKET_H_
