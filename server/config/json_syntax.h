// Step 1 of loading a fleet file, syntax: one JSON document nesting at most
// kMaxJsonDepth levels, with no key repeated within one object. Errors name
// the line and column.
#ifndef NARWHAL_SERVER_CONFIG_JSON_SYNTAX_H_
#define NARWHAL_SERVER_CONFIG_JSON_SYNTAX_H_

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/config/error_report.h"

namespace narwhal::server::config_file {

// The parsed document, or nullopt with the reasons added to *errors.
std::optional<nlohmann::json> ParseJson(std::string_view text, Errors* errors);

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_JSON_SYNTAX_H_
