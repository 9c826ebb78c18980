// The fleet file loader (server/config/config_loader.h): ParseFleetConfig on the
// text, and LoadFleetConfig on the same text written to a temporary file
// (the path serve and check take), which must give the same verdict.
//
// Input: the file's text.
//
// Checked: nothing throws; a refusal is InvalidArgument with a message that
// starts with "config: " (or "config PATH: ") and says something after it,
// and is bounded (at most 20 reports, each naming a key path); an accepted
// file has a model and at least one engine with a normalised
// "http://host:port" URL and unique iids, and round-trips as the header
// promises: ParseFleetConfig(SettingsToJson(s).dump()) gives settings whose
// JSON form is the same.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "router/common/settings.h"
#include "server/config/config_loader.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using narwhal::fuzz::Printable;
using narwhal::fuzz::Show;

// One temporary file per process, rewritten for each input.
class TempFile {
 public:
  TempFile() {
    const char* dir = std::getenv("TMPDIR");
    path_ =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/narwhal-fuzz-config-XXXXXX";
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0) narwhal::fuzz::CheckFailed(__FILE__, __LINE__, "mkstemp", path_);
  }
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  const std::string& Write(std::string_view text) {
    FUZZ_CHECK(::ftruncate(fd_, 0) == 0);
    size_t at = 0;
    while (at < text.size()) {
      const ssize_t n = ::pwrite(fd_, text.data() + at, text.size() - at, static_cast<off_t>(at));
      FUZZ_CHECK(n > 0);
      at += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void CheckRefusal(const absl::Status& status, std::string_view label, size_t text_size) {
  FUZZ_CHECK_MSG(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
  const std::string message(status.message());
  FUZZ_CHECK_MSG(message.compare(0, label.size(), label) == 0 && message.size() > label.size() + 2,
                 Printable(message));
  // 20 reports and a count; each a key path (at most the file's own bytes)
  // and a fixed text with values shown truncated.
  FUZZ_CHECK_MSG(message.size() <= label.size() + 21 * (400 + text_size),
                 std::to_string(message.size()));
}

void CheckAccepted(const narwhal::router::Settings& s, std::string_view text) {
  FUZZ_CHECK(!s.model.empty());
  FUZZ_CHECK(!s.engines.empty());
  std::set<std::string> iids;
  for (const narwhal::router::EngineSettings& e : s.engines) {
    FUZZ_CHECK_MSG(iids.insert(e.iid).second, e.iid);
    FUZZ_CHECK_MSG(e.url.rfind("http://", 0) == 0 && e.url.back() != '/', e.url);
  }
  FUZZ_CHECK(s.serving.max_attempts >= 1 && s.serving.max_attempts <= 3);
  FUZZ_CHECK(s.serving.max_request_bytes >= 1024 && s.serving.max_request_bytes <= (1LL << 30));
  FUZZ_CHECK(s.serving.max_header_bytes >= 1024 && s.serving.max_header_bytes <= (1 << 20));
  FUZZ_CHECK(s.serving.max_headers >= 1 && s.serving.max_headers <= 10000);

  const nlohmann::json effective = narwhal::server::SettingsToJson(s);
  std::string dumped;
  FUZZ_CHECK_MSG(narwhal::fuzz::Serialises(effective, &dumped), Show(effective));
  const absl::StatusOr<narwhal::router::Settings> again = narwhal::server::ParseFleetConfig(dumped);
  FUZZ_CHECK_MSG(again.ok(), std::string(again.status().message()) + "\n  for " +
                                 Printable(dumped, 2000) + "\n  from " + Printable(text, 2000));
  FUZZ_CHECK_MSG(narwhal::server::SettingsToJson(*again) == effective, Printable(dumped, 2000));
}

void Run(const uint8_t* bytes, size_t size) {
  static TempFile file;
  const std::string_view text(reinterpret_cast<const char*>(bytes), size);
  const absl::StatusOr<narwhal::router::Settings> parsed = narwhal::server::ParseFleetConfig(text);
  if (parsed.ok()) {
    CheckAccepted(*parsed, text);
  } else {
    CheckRefusal(parsed.status(), "config: ", size);
  }

  const std::string& path = file.Write(text);
  const absl::StatusOr<narwhal::router::Settings> loaded = narwhal::server::LoadFleetConfig(path);
  FUZZ_CHECK_MSG(loaded.ok() == parsed.ok(), std::string(loaded.status().message()));
  if (loaded.ok()) {
    FUZZ_CHECK(narwhal::server::SettingsToJson(*loaded) ==
               narwhal::server::SettingsToJson(*parsed));
  } else {
    const std::string label = "config " + path + ": ";
    CheckRefusal(loaded.status(), label, size);
    // The same reports after the label.
    FUZZ_CHECK(loaded.status().message().substr(label.size()) ==
               parsed.status().message().substr(std::string_view("config: ").size()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Run(data, size);
  } catch (const std::exception& e) {
    narwhal::fuzz::CheckFailed(__FILE__, __LINE__, "no exception escapes", e.what());
  }
  return 0;
}
