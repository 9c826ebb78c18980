// Process logging for the front doors and binaries: the router's one log
// (router/common/log.h), under the server namespace.
#ifndef NARWHAL_SERVER_LOG_H_
#define NARWHAL_SERVER_LOG_H_

#include "router/common/log.h"

namespace narwhal::server {

using router::Log;
using router::LogError;
using router::LogInfo;
using router::LogLevel;
using router::LogSeconds;
using router::LogWarning;

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_LOG_H_
