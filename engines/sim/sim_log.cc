#include "engines/sim/sim_log.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace narwhal::sim {

void SimLog::Write(absl::string_view level, absl::string_view message) const {
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   level, " narwhal-sim[", engine_id_, "] ", message, "\n");
  // One write per line keeps lines of concurrent requests whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace narwhal::sim
