// Event log of one simulated engine: one line per event on stderr,
// "<UTC time> <LEVEL> narwhal-sim[<engine id>] <message>". Messages never
// carry request contents.
#ifndef NARWHAL_ENGINES_SIM_SIM_LOG_H_
#define NARWHAL_ENGINES_SIM_SIM_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace narwhal::sim {

class SimLog {
 public:
  explicit SimLog(std::string engine_id) : engine_id_(std::move(engine_id)) {}

  void Info(absl::string_view message) const { Write("INFO", message); }
  void Warning(absl::string_view message) const { Write("WARN", message); }
  void Error(absl::string_view message) const { Write("ERROR", message); }

 private:
  void Write(absl::string_view level, absl::string_view message) const;

  std::string engine_id_;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_SIM_LOG_H_
