// The forms the fleet file's addresses and names must have: HOST:PORT
// listeners, engine URLs, environment-variable names and engine ids.
#ifndef NARWHAL_SERVER_CONFIG_ADDRESS_RULES_H_
#define NARWHAL_SERVER_CONFIG_ADDRESS_RULES_H_

#include <optional>
#include <string>
#include <string_view>

namespace narwhal::server::config_file {

// Why `text` is not a valid HOST:PORT with a port in [min_port, 65535], or
// nullopt when it is. HOST is a hostname, an IPv4 literal or [IPv6]. On
// success *host_out and *port_out (when given) are set.
std::optional<std::string> HostPortError(std::string_view text, int min_port,
                                         std::string_view* host_out = nullptr,
                                         int* port_out = nullptr);
// Why `url` is not a valid engine URL (http://host:port, optional trailing
// "/"), or nullopt; then *normalized is the URL without the trailing "/" and
// *identity is HostIdentity(host) and the port, for duplicates.
std::optional<std::string> EngineUrlError(const std::string& url, std::string* normalized,
                                          std::string* identity);
// The host as the duplicate check compares it, without resolving names:
// lower case without a final dot; "loopback" for localhost (and
// *.localhost), 127.0.0.1 in any numeric spelling, ::1 and
// ::ffff:127.0.0.1; other IPv4 addresses dotted (also when IPv4-mapped or
// spelled as inet_aton takes them, e.g. 10.1 or 0x0a000001); IPv6 addresses
// in their RFC 5952 form.
std::string HostIdentity(std::string_view host);
// Why `endpoint` is not a ZeroMQ TCP endpoint the router can connect to
// (tcp://HOST:PORT, port 1-65535, HOST not a bind wildcard), or nullopt.
std::optional<std::string> ZmqEndpointError(std::string_view endpoint);
// Why `name` is not a DNS host name, or nullopt.
std::optional<std::string> DnsNameError(std::string_view name);
bool IsEnvVarName(const std::string& s);
bool IsIidChar(char c);

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_ADDRESS_RULES_H_
