#include "server/runtime_tuning.h"

#include <absl/synchronization/mutex.h>

namespace narwhal::server {

void TuneRuntime() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace narwhal::server
