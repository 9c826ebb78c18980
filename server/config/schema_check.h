// Step 2 of loading a fleet file, schema: the document checked against
// proto/narwhal/config/v1/config.proto's descriptor and (doc) options before
// protobuf's JSON parser sees it — what that parser would accept too loosely
// (camelCase names, null, 3.0 or "3" for an integer, "NaN" for a number) or
// report only one at a time. Also the schema options validation reads.
#ifndef NARWHAL_SERVER_CONFIG_SCHEMA_CHECK_H_
#define NARWHAL_SERVER_CONFIG_SCHEMA_CHECK_H_

#include <google/protobuf/descriptor.h>

#include <climits>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "narwhal/config/v1/config.pb.h"
#include "server/config/error_report.h"

namespace narwhal::server::config_file {

const config::v1::Doc& DocOf(const google::protobuf::FieldDescriptor& f);
bool IsRequired(const google::protobuf::FieldDescriptor& f);
bool IsDuration(const google::protobuf::FieldDescriptor& f);

// An int32 field's accepted range. Without a (doc).max the type caps it, and
// a message says "must be >= lo" or "must be <= hi" rather than "between".
struct IntRange {
  long long lo = INT32_MIN;
  long long hi = INT32_MAX;
  bool hi_is_cap = true;
};
IntRange IntRangeOf(const google::protobuf::FieldDescriptor& f);
std::string IntRule(const IntRange& r, bool below);

struct SchemaResult {
  // The document without annotations and without every key reported.
  nlohmann::json checked;
  // Key paths already reported (validation says nothing more about them).
  std::set<std::string> reported;
};
// Checks `root` (a JSON object) as a FleetConfig; violations go to *errors.
SchemaResult CheckSchema(const nlohmann::json& root, Errors* errors);

// protobuf's "(serving.max_attempts): invalid value ..." as
// "serving.max_attempts: invalid value ...": the fallback when protobuf's
// parser refuses what the schema check let through.
std::string ProtoJsonError(const std::string& message);

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_SCHEMA_CHECK_H_
