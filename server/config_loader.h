// Strict loading of the JSON fleet file (SPEC §3) into router::Settings.
//
// Contract:
//  - The text must be one JSON object. Unknown keys at any level are errors,
//    except annotation keys that start with '_' (ignored at every level).
//    A key that appears twice in one object is an error.
//  - Types are strict: strings are JSON strings, counts are JSON integers
//    (booleans and numbers with a fraction, even 3.0, are rejected), durations
//    and other real values are finite JSON numbers (integer or not).
//    Durations are seconds and at most 1e7 (about 115 days).
//  - `null` is never a valid value; omit a key to get its default.
//  - Limits beyond the SPEC §3 table: serving.retry_budget <= 1e9,
//    serving.max_request_bytes in 1024..1 GiB, serving.max_inflight <= 100000,
//    counts <= INT_MAX, engines[].iid without spaces or control characters,
//    optional engine_contract strings non-empty when given.
//  - Engine URLs are normalised by dropping a trailing "/", so
//    Settings::engines[i].url is always exactly "http://host:port".
//  - Every violation found is reported, section by section in a fixed order,
//    joined by "; " (at most 20, then "(N more errors)"). Each one names the
//    key path it is about, e.g. `serving.max_attempts must be between 1 and 3
//    (got 5)` or `engines[2].iid "p0" is a duplicate of engines[0].iid`.
//    Rules that relate two keys are only checked when both keys are valid.
//  - Failures return absl::InvalidArgumentError whose message starts with
//    "config: " (ParseFleetConfig) or "config PATH: " (LoadFleetConfig).
//    JSON syntax errors read `config: invalid JSON at line L, column C: why`.
#ifndef NARWHAL_SERVER_CONFIG_LOADER_H_
#define NARWHAL_SERVER_CONFIG_LOADER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/settings.h"

namespace narwhal::server {

// Parses and validates a fleet file's text. Errors name the key path.
absl::StatusOr<router::Settings> ParseFleetConfig(std::string_view json_text);

// Reads the file at `path` and parses it as ParseFleetConfig does. A file that
// cannot be read (missing, unreadable, not a regular file, larger than
// 16 MiB) gives a status derived from errno (e.g. NotFound, PermissionDenied)
// or InvalidArgument, with a message "config PATH: cannot read: why".
absl::StatusOr<router::Settings> LoadFleetConfig(const std::string& path);

// The effective configuration as a JSON object: every key with its value,
// defaults filled in. `engine_contract` appears only when pinned, and its
// optional fields only when set. ParseFleetConfig(SettingsToJson(s).dump())
// yields settings equal to `s` for any `s` that ParseFleetConfig produced.
nlohmann::json SettingsToJson(const router::Settings& s);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CONFIG_LOADER_H_
