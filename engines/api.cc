#include "engines/api.h"

#include <algorithm>
#include <cctype>

namespace narwhal::engines {

std::string_view ApiPath(Api api) {
  return api == Api::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

std::string_view ApiLabel(Api api) { return api == Api::kCompletions ? "completions" : "chat"; }

bool IsTlsEngineUrl(std::string_view url) { return url.substr(0, 8) == "https://"; }

bool ParseEngineUrl(const std::string& url, std::string* host, int* port) {
  const std::string_view scheme = IsTlsEngineUrl(url) ? "https://" : "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return false;
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = rest.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = rest.substr(colon + 1);
  if (p.empty() || p.size() > 5 ||
      !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return false;
  }
  const int n = std::stoi(p);
  if (n < 1 || n > 65535) return false;
  *host = h;
  *port = n;
  return true;
}

}  // namespace narwhal::engines
