#include "tests/soak/soak_options.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace narwhal::soak {
namespace {

template <typename T>
absl::Status ReadNumber(const std::string& name, const std::string& text, T* out) {
  if (!absl::SimpleAtoi(text, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a number: \"", text, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SoakOptions> ParseSoakOptions(int argc, char** argv) {
  SoakOptions o;
  if (const char* env = std::getenv("NARWHAL_SOAK_SECONDS"); env != nullptr && *env != '\0') {
    if (absl::Status s = ReadNumber("NARWHAL_SOAK_SECONDS", env, &o.seconds); !s.ok()) return s;
  }
  if (const char* env = std::getenv("NARWHAL_SOAK_SEED"); env != nullptr && *env != '\0') {
    if (absl::Status s = ReadNumber("NARWHAL_SOAK_SEED", env, &o.seed); !s.ok()) return s;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--keep") {
      o.keep = true;
      continue;
    }
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, ": missing value"));
    const std::string value = argv[++i];
    absl::Status s;
    if (flag == "--seconds") {
      s = ReadNumber(flag, value, &o.seconds);
    } else if (flag == "--seed") {
      s = ReadNumber(flag, value, &o.seed);
    } else if (flag == "--streams") {
      s = ReadNumber(flag, value, &o.streams);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag ", flag, "; usage: narwhal_soak [--seconds N] [--seed N] "
          "[--streams N] [--keep]"));
    }
    if (!s.ok()) return s;
  }
  if (o.seconds < 20) return absl::InvalidArgumentError("--seconds must be >= 20");
  if (o.streams < 1 || o.streams > 2000) {
    return absl::InvalidArgumentError("--streams must be 1..2000");
  }
  if (o.seed == 0) {
    o.seed = static_cast<uint64_t>(
        std::chrono::system_clock::now().time_since_epoch().count() & 0x7fffffffffff);
  }
  // More streams, the same request rate: engines pace tokens slower in
  // proportion, so 512 streams are 512 concurrent answers that the two
  // cores still carry (a request stays well inside the router's timeout).
  o.token_interval_ms = std::max(o.token_interval_ms, o.token_interval_ms * o.streams / 200);
  o.warmup_s = std::clamp(o.seconds / 2, 10, 60);
  o.rss_window_s = std::clamp(o.seconds / 12, 5, 30);
  return o;
}

}  // namespace narwhal::soak
