// Engine settings for tests: engine `iid` in `role` at http://<iid>:8000 (no
// connection is ever made to it unless a test scripts one).
#ifndef NARWHAL_TESTS_FAKES_TEST_ENGINE_H_
#define NARWHAL_TESTS_FAKES_TEST_ENGINE_H_

#include <string>

#include "router/common/settings.h"

namespace narwhal::testing {

inline router::EngineSettings Engine(const std::string& iid, router::Role role) {
  return router::EngineSettings{iid, "http://" + iid + ":8000", role};
}

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_TEST_ENGINE_H_
