// RunCommand: runs a command line to its end (for buf curl and other CLI
// clients in end-to-end tests) and returns its exit code and output.
#ifndef NARWHAL_TESTS_FAKES_COMMAND_H_
#define NARWHAL_TESTS_FAKES_COMMAND_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::testing {

struct CommandResult {
  // The exit code, or -1 when it was killed (timeout or signal).
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with `argv` and extra environment `env` (stdin from
// /dev/null; the child dies with the test process); kills it after
// `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(60),
                         const std::map<std::string, std::string>& env = {});

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_COMMAND_H_
