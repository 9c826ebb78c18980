// Loading of the JSON fleet file (SPEC §3) into router::Settings.
//
// The schema is proto/narwhal/config/v1/config.proto: its messages are the
// file's objects, its field names the keys, its (doc) options the defaults,
// bounds and accepted values. A file is read in three steps, each in its own
// file of server/config/ (json_syntax, schema_check, validate with fields and
// address_rules; error_report words every message):
//  1. Syntax: the text must be one JSON object nesting at most 128 levels
//     (engines/json_limits.h); a key that appears twice in one object is an
//     error. JSON syntax errors read `config: invalid JSON at line L,
//     column C: why`.
//  2. Schema, driven by the proto descriptor: keys starting with '_' are
//     annotations and dropped at every level; any other key that is not a
//     field is an error, and so is a missing required key. Types are strict:
//     strings are JSON strings, counts are JSON integers (booleans and
//     numbers with a fraction, even 3.0, are rejected), other numbers are
//     JSON numbers (integer or not); `null` is never a value. What remains is
//     handed to protobuf's JSON parser (unknown fields not ignored).
//  3. Validation, once, from the proto into Settings: every bound of the
//     schema (durations are seconds, at most 1e7; serving.max_inflight
//     <= 100000; at most 1024 engines; ...), the forms of listeners, engine
//     URLs, engine ids ([A-Za-z0-9._-], 1 to 64 characters) and
//     environment-variable names, the known connectors, unique engine ids and
//     URLs, and the rules that relate two keys (checked only when both keys
//     are valid). The TLS files of `tls.*` are read and checked here
//     (server/tls_files.h): a missing, unparsable or mismatched pair is an
//     error like any other.
// Engine URLs are normalised by dropping a trailing "/", so
// Settings::engines[i].url is always exactly "http://host:port"; two URLs
// that name the same host (case-insensitively) and port are duplicates. A URL
// or listener with credentials ("user:password@") is rejected, and no message
// ever shows the credentials.
//
// Every violation found is reported, section by section in schema order
// (syntax and schema errors of a section before its value errors), joined by
// "; " (at most 20, then "(N more errors)"). Each one names the key path it
// is about, e.g. `serving.max_attempts must be between 1 and 3 (got 5)` or
// `engines[2].iid "p0" is a duplicate of engines[0].iid`. Failures return
// absl::InvalidArgumentError whose message starts with "config: "
// (ParseFleetConfig) or "config PATH: " (LoadFleetConfig).
#ifndef NARWHAL_SERVER_CONFIG_CONFIG_LOADER_H_
#define NARWHAL_SERVER_CONFIG_CONFIG_LOADER_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "narwhal/config/v1/config.pb.h"
#include "nlohmann/json.hpp"
#include "router/common/settings.h"

namespace google::protobuf {
class Struct;
}  // namespace google::protobuf

namespace narwhal::server {

// Parses and validates a fleet file's text. Errors name the key path.
absl::StatusOr<router::Settings> ParseFleetConfig(std::string_view json_text);

// Reads the file at `path` and parses it as ParseFleetConfig does. A file that
// cannot be read (missing, unreadable, not a regular file, larger than
// 16 MiB; server/config/bounded_file.h) gives a status derived from errno
// (e.g. NotFound, PermissionDenied) or InvalidArgument, with a message
// "config PATH: cannot read: why". ReadFleetConfigText followed by
// ParseFleetConfigText.
absl::StatusOr<router::Settings> LoadFleetConfig(const std::string& path);

// The two halves of LoadFleetConfig: the bounded read of the file's bytes,
// and the parse of bytes read from `path` (errors labelled "config PATH").
absl::StatusOr<std::string> ReadFleetConfigText(const std::string& path);
absl::StatusOr<router::Settings> ParseFleetConfigText(std::string_view json_text,
                                                      const std::string& path);

// A running router's effective configuration (SettingsToJson's document, as
// the admin GetConfig RPC returns it) read back into settings: parsed and
// validated as a fleet file, except that the `tls.*` files are not read
// (they are the router's, on its host). Errors start with "running config: ".
absl::StatusOr<router::Settings> ParseEffectiveConfig(std::string_view json_text);

// The effective configuration in the schema: every field set, defaults
// filled in; `engine_contract` only when pinned, and its optional fields only
// when set. Meant for settings ParseFleetConfig produced (values outside the
// schema's types are not representable).
config::v1::FleetConfig SettingsToProto(const router::Settings& s);

// SettingsToProto printed by protobuf's JSON printer, as a JSON object with
// the file's key names. ParseFleetConfig(SettingsToJson(s).dump()) yields
// settings equal to `s` for any `s` that ParseFleetConfig produced.
nlohmann::json SettingsToJson(const router::Settings& s);

// The same document as a google.protobuf.Struct (the admin API's GetConfig).
absl::Status SettingsToStruct(const router::Settings& s, google::protobuf::Struct* out);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CONFIG_CONFIG_LOADER_H_
