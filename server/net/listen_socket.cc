#include "server/net/listen_socket.h"

namespace narwhal::server {

absl::StatusOr<int> ListenOn(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host,
                             int port, std::string_view what, int backlog) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(port));
  } else {
    tcp::resolver resolver(acceptor.get_executor());
    const auto results = resolver.resolve(host, std::to_string(port), ec);
    if (!ec && results.empty()) ec = asio::error::host_not_found;
    if (!ec) endpoint = results.begin()->endpoint();
  }
  if (!ec) acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(backlog, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    return absl::UnavailableError("cannot bind the " + std::string(what) + " listener to " + host +
                                  ":" + std::to_string(port) + " (" + ec.message() + ")");
  }
  return static_cast<int>(acceptor.local_endpoint().port());
}

}  // namespace narwhal::server
