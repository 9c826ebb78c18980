#include "server/config/schema_check.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

#include <nlohmann/json.hpp>

#include "narwhal/config/v1/config.pb.h"
#include "server/config/error_report.h"

namespace narwhal::server::config_file {

namespace pb = ::narwhal::config::v1;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using json = nlohmann::json;

namespace {

class SchemaCheck {
 public:
  explicit SchemaCheck(Errors* errors) : errors_(errors) {}

  // `object` as the message `type` at `path`, without annotations and without
  // every key reported here; `rank` is the rank of the top-level key it is
  // under (its own, for fields of the top level).
  json Object(const json& object, const Descriptor& type, const std::string& path, int rank) {
    json out = json::object();
    for (const auto& item : object.items()) {
      if (IsAnnotation(item.key()) || type.FindFieldByName(item.key()) != nullptr) continue;
      errors_->Add(rank, absl::StrCat(JoinPath(path, item.key()), ": unknown key"));
    }
    for (int i = 0; i < type.field_count(); ++i) {
      const FieldDescriptor& field = *type.field(i);
      const std::string key_path = JoinPath(path, field.name());
      const int key_rank = path.empty() ? i + 1 : rank;
      const auto it = object.find(field.name());
      if (it == object.end()) {
        if (IsRequired(field)) Report(key_rank, key_path, "is required");
        continue;
      }
      if (std::optional<json> value = Value(*it, field, key_path, key_rank)) {
        out[field.name()] = std::move(*value);
      } else {
        reported_.insert(key_path);
      }
    }
    return out;
  }

  // Paths of the keys (and array entries) reported here: the validation pass
  // says nothing more about them and treats them as invalid.
  const std::set<std::string>& reported() const { return reported_; }

 private:
  void Report(int rank, const std::string& path, absl::string_view message) {
    errors_->Add(rank, absl::StrCat(path, " ", message));
    reported_.insert(path);
  }

  std::optional<json> Value(const json& v, const FieldDescriptor& field, const std::string& path,
                            int rank) {
    if (field.is_repeated()) {
      if (!v.is_array()) {
        errors_->Add(rank, absl::StrCat(path, " must be an array (got ", TypeName(v), ")"));
        return std::nullopt;
      }
      json out = json::array();
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string entry_path = absl::StrCat(path, "[", i, "]");
        if (field.cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          if (v[i].is_string()) {
            out.push_back(v[i]);
          } else {
            Report(rank, entry_path, absl::StrCat("must be a string (got ", TypeName(v[i]), ")"));
            out.push_back("");  // keeps the indices of the entries after it
          }
        } else if (!v[i].is_object()) {
          Report(rank, entry_path, absl::StrCat("must be an object (got ", TypeName(v[i]), ")"));
          out.push_back(json::object());  // keeps the indices of the entries after it
        } else {
          out.push_back(Object(v[i], *field.message_type(), entry_path, rank));
        }
      }
      return out;
    }
    std::string wrong;
    switch (field.cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (v.is_object()) return Object(v, *field.message_type(), path, rank);
        wrong = absl::StrCat("must be an object (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        if (v.is_string()) return v;
        wrong = absl::StrCat("must be a string (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        if (v.is_boolean()) return v;
        wrong = absl::StrCat("must be true or false (got ", TypeName(v),
                             v.is_null() ? "" : " " + Show(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        if (v.is_number()) return v;
        wrong = absl::StrCat("must be ", IsDuration(field) ? "a number of seconds" : "a number",
                             " (got ", TypeName(v), ")");
        break;
      case FieldDescriptor::CPPTYPE_INT32: {
        if (!v.is_number_integer()) {
          wrong = absl::StrCat("must be an integer (got ", TypeName(v),
                               v.is_null() ? "" : " " + Show(v), ")");
          break;
        }
        // A value beyond int32 breaks the field's range: said here, with the
        // validation pass's words.
        const bool below = !v.is_number_unsigned() && v.get<long long>() < INT32_MIN;
        const bool above =
            v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX : v.get<long long>() > INT32_MAX;
        if (!below && !above) return v;
        wrong = absl::StrCat(IntRule(IntRangeOf(field), below), " (got ", Show(v), ")");
        break;
      }
      default:
        wrong = "has a type the loader does not read";
        break;
    }
    errors_->Add(rank, absl::StrCat(path, " ", wrong));
    return std::nullopt;
  }

  Errors* errors_;
  std::set<std::string> reported_;
};

}  // namespace

const pb::Doc& DocOf(const FieldDescriptor& f) { return f.options().GetExtension(pb::doc); }

bool IsRequired(const FieldDescriptor& f) { return DocOf(f).default_value() == "required"; }

bool IsDuration(const FieldDescriptor& f) {
  return f.type() == FieldDescriptor::TYPE_DOUBLE && absl::EndsWith(f.name(), "_s");
}


IntRange IntRangeOf(const FieldDescriptor& f) {
  const pb::Doc& doc = DocOf(f);
  IntRange r;
  if (doc.has_min()) r.lo = static_cast<long long>(doc.min());
  if (doc.has_max()) {
    r.hi = static_cast<long long>(doc.max());
    r.hi_is_cap = false;
  }
  return r;
}

std::string IntRule(const IntRange& r, bool below) {
  if (!r.hi_is_cap) return absl::StrCat("must be between ", r.lo, " and ", r.hi);
  return below ? absl::StrCat("must be >= ", r.lo) : absl::StrCat("must be <= ", r.hi);
}

// protobuf's "(serving.max_attempts): invalid value ..." as
// "serving.max_attempts: invalid value ...". The schema check leaves protobuf
// nothing to refuse; this is the fallback.
std::string ProtoJsonError(const std::string& message) {
  const size_t close = message.find("):");
  if (message.empty() || message.front() != '(' || close == std::string::npos) {
    return Printable(message);
  }
  return Printable(absl::StrCat(message.substr(1, close - 1), message.substr(close + 1)));
}

SchemaResult CheckSchema(const json& root, Errors* errors) {
  SchemaCheck schema(errors);
  SchemaResult out;
  out.checked = schema.Object(root, *pb::FleetConfig::descriptor(), "", 0);
  out.reported = schema.reported();
  return out;
}

}  // namespace narwhal::server::config_file
