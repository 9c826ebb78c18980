// Step 3 of loading a fleet file, validation: the reader of one message of
// the parsed config against the schema's options (server/config/validate.cc
// uses it for every section).
#ifndef NARWHAL_SERVER_CONFIG_FIELDS_H_
#define NARWHAL_SERVER_CONFIG_FIELDS_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/config/error_report.h"
#include "server/config/schema_check.h"

namespace narwhal::server::config_file {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
namespace pb = ::narwhal::config::v1;

// The fields of one message of the parsed config at `path`, checked against
// the schema's options. Every reader leaves *out untouched when the key is
// absent and returns false exactly when the value is invalid: reported now,
// or already by the schema check (then nothing more is said).
class Fields {
 public:
  Fields(const Message& message, std::string path, int rank, Errors* errors,
         const std::set<std::string>& reported)
      : message_(message),
        path_(std::move(path)),
        rank_(rank),
        errors_(errors),
        reported_(reported) {}

  const FieldDescriptor& Field(int number) const {
    return *message_.GetDescriptor()->FindFieldByNumber(number);
  }
  std::string PathOf(int number) const { return JoinPath(path_, Field(number).name()); }
  // Top-level fields rank by their position; nested ones by their section's.
  int RankOf(int number) const { return path_.empty() ? Field(number).index() + 1 : rank_; }

  // "<path> <message>".
  void Error(int number, absl::string_view message) const {
    errors_->Add(RankOf(number), absl::StrCat(PathOf(number), " ", message));
  }

  // Present and valid so far.
  bool Present(int number) const {
    return !reported_.count(PathOf(number)) &&
           message_.GetReflection()->HasField(message_, &Field(number));
  }
  // Reported by the schema check.
  bool Reported(int number) const { return reported_.count(PathOf(number)) > 0; }

  template <typename T>
  bool Int(int number, T* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    const long long v = message_.GetReflection()->GetInt32(message_, &Field(number));
    const IntRange r = IntRangeOf(Field(number));
    if (v < r.lo || v > r.hi) {
      Error(number, absl::StrCat(IntRule(r, v < r.lo), " (got ", v, ")"));
      return false;
    }
    *out = static_cast<T>(v);
    return true;
  }

  bool Bool(int number, bool* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    *out = message_.GetReflection()->GetBool(message_, &Field(number));
    return true;
  }

  // A finite number within the (doc) bounds.
  bool Number(int number, double* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    const double v = message_.GetReflection()->GetDouble(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    std::string rule;
    if (!std::isfinite(v)) {
      rule = "must be finite";
    } else if (doc.has_min() && doc.min_exclusive() && !(v > doc.min())) {
      rule = absl::StrCat("must be > ", FormatNumber(doc.min()));
    } else if (doc.has_min() && v < doc.min()) {
      rule = absl::StrCat("must be >= ", FormatNumber(doc.min()));
    } else if (doc.has_max() && v > doc.max()) {
      rule = absl::StrCat("must be <= ", FormatNumber(doc.max()));
    }
    if (!rule.empty()) {
      Error(number, absl::StrCat(rule, " (got ", FormatNumber(v), ")"));
      return false;
    }
    *out = v;
    return true;
  }

  // A string within the (doc) length bounds and, when the schema lists
  // choices, one of them.
  bool String(int number, std::string* out) const {
    if (Reported(number)) return false;
    if (!Present(number)) return true;
    std::string v = message_.GetReflection()->GetString(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    if (doc.has_min() && v.size() < doc.min()) {
      Error(number, doc.min() <= 1 ? std::string("must not be empty")
                                   : absl::StrCat("must be at least ", doc.min(), " characters"));
      return false;
    }
    if (doc.has_max() && v.size() > doc.max()) {
      Error(number, absl::StrCat("must be at most ", FormatNumber(doc.max()), " characters (got ",
                                 v.size(), ")"));
      return false;
    }
    if (doc.choices_size() > 0 &&
        std::find(doc.choices().begin(), doc.choices().end(), v) == doc.choices().end()) {
      std::vector<std::string> quoted;
      for (const std::string& c : doc.choices()) quoted.push_back(absl::StrCat("\"", c, "\""));
      Error(number,
            absl::StrCat("must be one of ", absl::StrJoin(quoted, ", "), " (got ", Quote(v), ")"));
      return false;
    }
    *out = std::move(v);
    return true;
  }

  bool OptionalString(int number, std::optional<std::string>* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    *out = std::move(value);
    return true;
  }

  bool EnvVarName(int number, std::string* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    if (!value.empty() && !IsEnvVarName(value)) {
      Error(number, absl::StrCat("must be empty or an environment variable name matching "
                                 "[A-Za-z_][A-Za-z0-9_]* (got ",
                                 Quote(value), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  bool HostPort(int number, std::string* out) const {
    std::string value;
    if (!Present(number)) return !Reported(number);
    if (!String(number, &value)) return false;
    if (std::optional<std::string> why = HostPortError(value, 0)) {
      Error(number, absl::StrCat("must be HOST:PORT: ", *why, " (got ",
                                 Quote(WithoutUserinfo(value)), ")"));
      return false;
    }
    *out = std::move(value);
    return true;
  }

  // The number of entries of a repeated field within the (doc) bounds.
  bool Entries(int number) const {
    if (Reported(number)) return false;
    const int size = message_.GetReflection()->FieldSize(message_, &Field(number));
    const pb::Doc& doc = DocOf(Field(number));
    if (doc.has_min() && size < doc.min()) {
      Error(number, doc.min() <= 1 ? std::string("must not be empty")
                                   : absl::StrCat("must have at least ", doc.min(), " entries"));
      return false;
    }
    if (doc.has_max() && size > doc.max()) {
      Error(number, absl::StrCat("must have at most ", FormatNumber(doc.max()), " entries (got ",
                                 size, ")"));
      return false;
    }
    return true;
  }

  Errors* errors() const { return errors_; }
  const std::set<std::string>& reported() const { return reported_; }

 private:
  const Message& message_;
  std::string path_;
  int rank_;
  Errors* errors_;
  const std::set<std::string>& reported_;
};

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_FIELDS_H_
