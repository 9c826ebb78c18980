// How the fleet-file loader (server/config/config_loader.h) words what it reports:
// values shown as they appear in the file (ASCII, truncated, never with
// credentials), numbers, key paths, and the ranked list of every violation.
#ifndef NARWHAL_SERVER_CONFIG_ERROR_REPORT_H_
#define NARWHAL_SERVER_CONFIG_ERROR_REPORT_H_

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace narwhal::server::config_file {

inline constexpr size_t kMaxReportedErrors = 20;
inline constexpr size_t kMaxShownChars = 80;

// A JSON value as it would appear in the file, ASCII-only and truncated, so it
// is safe to put in a one-line log message.
std::string Show(const nlohmann::json& value);
std::string Quote(const std::string& s);
// `text` with everything between its scheme ("http://", if any) and its last
// '@' replaced by "***": a URL or address shown without its credentials.
std::string WithoutUserinfo(absl::string_view text);
// A bound or a configured value: integers without a fraction, else the
// shortest text that reads back as the same double.
std::string FormatNumber(double v);
std::string TypeName(const nlohmann::json& v);
bool IsAnnotation(std::string_view key);
std::string JoinPath(const std::string& path, const std::string& key);
// `text` made safe for a one-line log message: bytes outside printable ASCII
// become \xHH, and the result is truncated.
std::string Printable(const std::string& text);

// All violations found so far. Each carries the rank of the top-level key it
// is about (0: the document itself), and Join() lists them by rank, in the
// order found within one rank.
class Errors {
 public:
  void Add(int rank, std::string message) { messages_.push_back({rank, std::move(message)}); }
  bool empty() const { return messages_.empty(); }

  // "<label>: e1; e2; ..." capped at kMaxReportedErrors.
  std::string Join(absl::string_view label) const {
    std::vector<std::pair<int, std::string>> sorted = messages_;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> shown;
    for (size_t i = 0; i < sorted.size() && i < kMaxReportedErrors; ++i) {
      shown.push_back(sorted[i].second);
    }
    if (sorted.size() > kMaxReportedErrors) {
      shown.push_back(absl::StrCat("(", sorted.size() - kMaxReportedErrors, " more errors)"));
    }
    return absl::StrCat(label, ": ", absl::StrJoin(shown, "; "));
  }

 private:
  std::vector<std::pair<int, std::string>> messages_;
};

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_ERROR_REPORT_H_
