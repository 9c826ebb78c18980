#include "router/common/settings.h"

namespace narwhal::router {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
    case Role::kBoth:
      return "both";
  }
  return "both";
}

bool CanPrefill(Role role) { return role != Role::kDecode; }
bool CanDecode(Role role) { return role != Role::kPrefill; }

}  // namespace narwhal::router
