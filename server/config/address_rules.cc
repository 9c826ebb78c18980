#include "server/config/address_rules.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/config/error_report.h"

namespace narwhal::server::config_file {

// Why `text` is not a valid HOST:PORT with a port in [min_port, 65535], or
// nullopt when it is. HOST is a hostname, an IPv4 literal or [IPv6]. On
// success *host and *port (when given) are set.
std::optional<std::string> HostPortError(std::string_view text, int min_port,
                                         std::string_view* host_out, int* port_out) {
  if (text.find('@') != std::string_view::npos) return "credentials are not allowed";
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return "unterminated [IPv6] host";
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return "missing :PORT";
    port = rest.substr(1);
    if (host.empty() || host.find(':') == std::string_view::npos ||
        host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos) {
      return "invalid IPv6 address";
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return "missing :PORT";
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return "IPv6 hosts must be in [brackets]";
    if (host.empty()) return "missing host";
    if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789.-_") != std::string_view::npos) {
      return "invalid host";
    }
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos) {
    return "PORT must be a number";
  }
  const int value = std::stoi(std::string(port));
  if (value < min_port || value > 65535) {
    return absl::StrCat("PORT must be ", min_port, "..65535");
  }
  if (host_out != nullptr) *host_out = host;
  if (port_out != nullptr) *port_out = value;
  return std::nullopt;
}

// Why `url` is not "http://host:port" or "https://host:port" (optionally
// with a trailing "/"), or nullopt when it is; then *normalized is the URL
// without the trailing "/" and *identity is HostIdentity(host) and the port,
// for duplicates (the scheme is not part of it: one port serves one).
std::optional<std::string> EngineUrlError(const std::string& url, std::string* normalized,
                                          std::string* identity) {
  if (url.find('@') != std::string::npos) return "credentials are not allowed";
  const std::string_view kScheme = url.rfind("https://", 0) == 0 ? "https://" : "http://";
  if (url.rfind(kScheme, 0) != 0) return "must start with http:// or https://";
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return "a query or fragment is not allowed";
  }
  if (rest.find('/') != std::string_view::npos) return "a path is not allowed";
  std::string_view host;
  int port = 0;
  if (std::optional<std::string> error = HostPortError(rest, 1, &host, &port)) return error;
  *normalized = std::string(kScheme) + std::string(rest);
  *identity = absl::StrCat(HostIdentity(host), " ", port);
  return std::nullopt;
}

// Spellings of one address are one identity; names other than localhost are
// not resolved (the router resolves them when it connects, and a name may
// change its address).
std::string HostIdentity(std::string_view host) {
  std::string lower(host);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.size() > 1 && lower.back() == '.') lower.pop_back();  // "h." is the FQDN "h"
  if (lower == "localhost" || absl::EndsWith(lower, ".localhost")) return "loopback";
  char text[INET6_ADDRSTRLEN];
  in6_addr v6{};
  if (lower.find(':') != std::string::npos && ::inet_pton(AF_INET6, lower.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return "loopback";
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      in_addr v4{};
      std::memcpy(&v4, &v6.s6_addr[12], sizeof v4);
      return HostIdentity(::inet_ntop(AF_INET, &v4, text, sizeof text));
    }
    return ::inet_ntop(AF_INET6, &v6, text, sizeof text);
  }
  // inet_aton's forms are what the resolver takes for a numeric host too
  // ("127.1", "0x7f.0.0.1", "2130706433").
  in_addr v4{};
  if (!lower.empty() && lower.find_first_not_of("0123456789abcdefx.") == std::string::npos &&
      ::inet_aton(lower.c_str(), &v4) != 0) {
    if (v4.s_addr == htonl(INADDR_LOOPBACK)) return "loopback";
    return ::inet_ntop(AF_INET, &v4, text, sizeof text);
  }
  return lower;
}

// Why `name` is not a DNS name (labels of [A-Za-z0-9_-], 1 to 63 characters
// each, at most 253 in all, an optional final dot), or nullopt.
std::optional<std::string> DnsNameError(std::string_view name) {
  if (name.find('@') != std::string_view::npos) return "credentials are not allowed";
  std::string_view rest = name;
  if (rest.size() > 1 && rest.back() == '.') rest.remove_suffix(1);
  if (rest.empty()) return "empty name";
  if (rest.size() > 253) return "longer than 253 characters";
  for (const absl::string_view label :
       absl::StrSplit(absl::string_view(rest.data(), rest.size()), '.')) {
    if (label.empty()) return "empty label";
    if (label.size() > 63) return "a label is longer than 63 characters";
    if (label.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
        absl::string_view::npos) {
      return "a host name has only letters, digits, '-' and '_' between its dots";
    }
  }
  return std::nullopt;
}

bool IsEnvVarName(const std::string& s) {
  if (s.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsIidChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

std::optional<std::string> ZmqEndpointError(std::string_view endpoint) {
  constexpr std::string_view kScheme = "tcp://";
  if (endpoint.substr(0, kScheme.size()) != kScheme) return "the scheme must be tcp://";
  const std::string_view rest = endpoint.substr(kScheme.size());
  const std::string_view host = rest.substr(0, rest.rfind(':'));
  if (host == "*" || host == "0.0.0.0" || host == "[::]") {
    return "a bind wildcard names no engine (vLLM binds it; the router connects to the engine's "
           "address)";
  }
  return HostPortError(rest, 1);
}

}  // namespace narwhal::server::config_file
