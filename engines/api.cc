#include "engines/api.h"

namespace narwhal::engines {

std::string_view ApiPath(Api api) {
  return api == Api::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

std::string_view ApiLabel(Api api) {
  return api == Api::kCompletions ? "completions" : "chat";
}

}  // namespace narwhal::engines
