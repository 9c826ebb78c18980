#include "engines/sim/fault_rules.h"

#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engines/json_limits.h"

namespace narwhal::sim {

using engines::ParseJson;
namespace {

struct KindInfo {
  FaultKind kind;
  const char* name;
  // Parameter keys the kind accepts besides kind, phase and times.
  std::set<std::string> params;
};

const std::vector<KindInfo>& Kinds() {
  static const auto* const kKinds = new std::vector<KindInfo>{
      {FaultKind::kDropConnection, "drop_connection", {}},
      {FaultKind::kDelayHeaders, "delay_headers", {"ms"}},
      {FaultKind::kHttpStatus, "http_status", {"status", "message", "type"}},
      {FaultKind::kSilentBeforeFirstToken, "silent_before_first_token", {}},
      {FaultKind::kMetadataThenSilence, "metadata_then_silence", {"chunks"}},
      {FaultKind::kStallAfterTokens, "stall_after_tokens", {"tokens"}},
      {FaultKind::kCloseBeforeDone, "close_before_done", {"tokens"}},
      {FaultKind::kDoneBeforeToken, "done_before_token", {}},
      {FaultKind::kErrorInStream, "error_in_stream", {"after_tokens", "code", "message", "type"}},
      {FaultKind::kNoDescriptor, "no_descriptor", {}},
      {FaultKind::kDescriptorWithoutEngineId, "descriptor_without_engine_id", {}},
      {FaultKind::kMalformedBlockIds, "malformed_block_ids", {"block_ids"}},
      {FaultKind::kSlowTokens, "slow_tokens", {"interval_ms"}},
      {FaultKind::kRecompute, "recompute", {}},
      {FaultKind::kInvalidText, "invalid_text", {"at_token", "shape"}},
  };
  return *kKinds;
}

const KindInfo& InfoOf(FaultKind kind) {
  for (const KindInfo& info : Kinds()) {
    if (info.kind == kind) return info;
  }
  return Kinds().front();
}

absl::string_view PhaseFilterName(PhaseFilter phase) {
  switch (phase) {
    case PhaseFilter::kPrefill:
      return "prefill";
    case PhaseFilter::kDecode:
      return "decode";
    case PhaseFilter::kAny:
      break;
  }
  return "any";
}

// Reads an integer field in [lo, hi]; `what` describes the range.
absl::Status ReadInt(const nlohmann::json& rule, const std::string& path, const char* key,
                     int64_t lo, int64_t hi, absl::string_view what, int* out) {
  const nlohmann::json& value = rule.at(key);
  bool ok = value.is_number_integer();
  int64_t n = 0;
  if (ok) {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(hi);
      n = ok ? static_cast<int64_t>(u) : 0;
    } else {
      n = value.get<int64_t>();
    }
    ok = ok && n >= lo && n <= hi;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": must be ", what));
  }
  *out = static_cast<int>(n);
  return absl::OkStatus();
}

absl::Status ReadString(const nlohmann::json& rule, const std::string& path, const char* key,
                        std::string* out) {
  const nlohmann::json& value = rule.at(key);
  if (!value.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": must be a string"));
  }
  *out = value.get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<FaultRule> ParseRule(const nlohmann::json& json, const std::string& path) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": must be an object"));
  }
  if (!json.contains("kind")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".kind: required"));
  }
  if (!json["kind"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".kind: must be a string"));
  }
  const std::string kind_name = json["kind"].get<std::string>();
  const std::optional<FaultKind> kind = ParseFaultKind(kind_name);
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".kind: unknown fault kind ", nlohmann::json(kind_name).dump()));
  }
  const KindInfo& info = InfoOf(*kind);
  for (const auto& [key, value] : json.items()) {
    if (key == "kind" || key == "phase" || key == "times" || key == "remote_engine_id") {
      continue;
    }
    if (info.params.count(key) == 0) {
      const std::string allowed =
          info.params.empty() ? std::string("none") : absl::StrJoin(info.params, ", ");
      return absl::InvalidArgumentError(absl::StrCat(path, ".", key,
                                                     ": unknown parameter for kind \"", kind_name,
                                                     "\" (allowed: ", allowed, ")"));
    }
  }

  FaultRule rule;
  rule.kind = *kind;
  if (json.contains("phase")) {
    const nlohmann::json& phase = json["phase"];
    const std::string name = phase.is_string() ? phase.get<std::string>() : "";
    if (name == "any") {
      rule.phase = PhaseFilter::kAny;
    } else if (name == "prefill") {
      rule.phase = PhaseFilter::kPrefill;
    } else if (name == "decode") {
      rule.phase = PhaseFilter::kDecode;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".phase: must be \"prefill\", \"decode\" or \"any\""));
    }
  }
  if (IsDescriptorKind(rule.kind) && rule.phase == PhaseFilter::kDecode) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".phase: kind \"", kind_name, "\" applies only to the prefill phase"));
  }
  if (rule.kind == FaultKind::kRecompute && rule.phase == PhaseFilter::kPrefill) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".phase: kind \"", kind_name, "\" applies only to the decode phase"));
  }
  if (json.contains("times")) {
    int times = 0;
    absl::Status status =
        ReadInt(json, path, "times", -1, 1000000000, "a positive integer or -1", &times);
    if (!status.ok() || times == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".times: must be a positive integer or -1"));
    }
    rule.times = times;
  }

  if (json.contains("remote_engine_id")) {
    const nlohmann::json& id = json["remote_engine_id"];
    if (!id.is_string() || id.get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".remote_engine_id: must be a non-empty string"));
    }
    if (IsDescriptorKind(rule.kind)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".remote_engine_id: kind \"", kind_name,
                       "\" applies to prefill requests, which carry no "
                       "remote_engine_id"));
    }
    rule.remote_engine_id = id.get<std::string>();
  }

  absl::Status status;
  switch (rule.kind) {
    case FaultKind::kDelayHeaders:
    case FaultKind::kSlowTokens: {
      const char* key = rule.kind == FaultKind::kDelayHeaders ? "ms" : "interval_ms";
      if (!json.contains(key)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": required"));
      }
      status = ReadInt(json, path, key, 0, 3600000, "an integer 0..3600000", &rule.ms);
      break;
    }
    case FaultKind::kHttpStatus:
      if (!json.contains("status")) {
        return absl::InvalidArgumentError(absl::StrCat(path, ".status: required"));
      }
      status = ReadInt(json, path, "status", 100, 599, "an integer 100..599", &rule.status);
      if (status.ok() && json.contains("message")) {
        status = ReadString(json, path, "message", &rule.message);
      }
      if (status.ok() && json.contains("type")) {
        status = ReadString(json, path, "type", &rule.type);
      }
      break;
    case FaultKind::kMetadataThenSilence:
    case FaultKind::kStallAfterTokens:
    case FaultKind::kCloseBeforeDone: {
      const char* key = rule.kind == FaultKind::kMetadataThenSilence ? "chunks" : "tokens";
      rule.count = 1;
      if (json.contains(key)) {
        status = ReadInt(json, path, key, 0, 100000, "an integer 0..100000", &rule.count);
      }
      break;
    }
    case FaultKind::kErrorInStream:
      if (json.contains("after_tokens")) {
        status =
            ReadInt(json, path, "after_tokens", 0, 100000, "an integer 0..100000", &rule.count);
      }
      if (status.ok() && json.contains("code")) {
        const nlohmann::json& code = json["code"];
        if (!code.is_number_integer() && !code.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ".code: must be an integer or a string"));
        }
        rule.code = code;
      }
      if (status.ok() && json.contains("message")) {
        status = ReadString(json, path, "message", &rule.message);
      }
      if (status.ok() && json.contains("type")) {
        status = ReadString(json, path, "type", &rule.type);
      }
      break;
    case FaultKind::kMalformedBlockIds:
      if (json.contains("block_ids")) rule.block_ids = json["block_ids"];
      break;
    case FaultKind::kInvalidText:
      if (json.contains("at_token")) {
        status = ReadInt(json, path, "at_token", 0, 100000, "an integer 0..100000", &rule.count);
      }
      rule.type = "raw_byte";
      if (status.ok() && json.contains("shape")) {
        status = ReadString(json, path, "shape", &rule.type);
        if (status.ok() && rule.type != "raw_byte" && rule.type != "lone_surrogate") {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ".shape: must be \"raw_byte\" or \"lone_surrogate\""));
        }
      }
      break;
    default:
      break;
  }
  if (!status.ok()) return status;
  return rule;
}

}  // namespace

absl::string_view FaultKindName(FaultKind kind) { return InfoOf(kind).name; }

std::optional<FaultKind> ParseFaultKind(absl::string_view name) {
  for (const KindInfo& info : Kinds()) {
    if (name == info.name) return info.kind;
  }
  return std::nullopt;
}

absl::string_view PhaseName(Phase phase) { return phase == Phase::kPrefill ? "prefill" : "decode"; }

bool IsDescriptorKind(FaultKind kind) {
  return kind == FaultKind::kNoDescriptor || kind == FaultKind::kDescriptorWithoutEngineId ||
         kind == FaultKind::kMalformedBlockIds;
}

bool FaultRule::Matches(Phase request_phase, absl::string_view request_remote_engine_id) const {
  if (times == 0) return false;
  if (!remote_engine_id.empty() && request_remote_engine_id != remote_engine_id) {
    return false;
  }
  if (IsDescriptorKind(kind) && request_phase != Phase::kPrefill) return false;
  // A consumer-side fault: only a decode that carries a handoff.
  if (kind == FaultKind::kRecompute &&
      (request_phase != Phase::kDecode || request_remote_engine_id.empty())) {
    return false;
  }
  switch (phase) {
    case PhaseFilter::kPrefill:
      return request_phase == Phase::kPrefill;
    case PhaseFilter::kDecode:
      return request_phase == Phase::kDecode;
    case PhaseFilter::kAny:
      break;
  }
  return true;
}

nlohmann::json FaultRule::ToJson() const {
  nlohmann::json json = {{"kind", std::string(FaultKindName(kind))},
                         {"phase", std::string(PhaseFilterName(phase))},
                         {"times", times},
                         {"fired", fired}};
  if (!remote_engine_id.empty()) json["remote_engine_id"] = remote_engine_id;
  switch (kind) {
    case FaultKind::kDelayHeaders:
      json["ms"] = ms;
      break;
    case FaultKind::kSlowTokens:
      json["interval_ms"] = ms;
      break;
    case FaultKind::kHttpStatus:
      json["status"] = status;
      json["message"] = message.empty() ? nullptr : nlohmann::json(message);
      json["type"] = type.empty() ? nullptr : nlohmann::json(type);
      break;
    case FaultKind::kMetadataThenSilence:
      json["chunks"] = count;
      break;
    case FaultKind::kStallAfterTokens:
    case FaultKind::kCloseBeforeDone:
      json["tokens"] = count;
      break;
    case FaultKind::kErrorInStream:
      json["after_tokens"] = count;
      json["code"] = code;
      json["message"] = message.empty() ? nullptr : nlohmann::json(message);
      json["type"] = type.empty() ? nullptr : nlohmann::json(type);
      break;
    case FaultKind::kMalformedBlockIds:
      json["block_ids"] = block_ids.has_value() ? *block_ids : nullptr;
      break;
    case FaultKind::kInvalidText:
      json["at_token"] = count;
      json["shape"] = type;
      break;
    default:
      break;
  }
  return json;
}

absl::StatusOr<std::vector<FaultRule>> ParseFaultDocument(const nlohmann::json& document) {
  if (!document.is_object()) {
    return absl::InvalidArgumentError("body: must be an object {\"faults\": [...]}");
  }
  for (const auto& [key, value] : document.items()) {
    if (key != "faults") {
      return absl::InvalidArgumentError(absl::StrCat(key, ": unknown key"));
    }
  }
  if (!document.contains("faults") || !document["faults"].is_array()) {
    return absl::InvalidArgumentError("faults: required, must be a list");
  }
  std::vector<FaultRule> rules;
  const nlohmann::json& list = document["faults"];
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<FaultRule> rule = ParseRule(list[i], absl::StrCat("faults[", i, "]"));
    if (!rule.ok()) return rule.status();
    rules.push_back(*std::move(rule));
  }
  return rules;
}

absl::StatusOr<std::vector<FaultRule>> ParseFaultBody(absl::string_view body) {
  nlohmann::json document = ParseJson(std::string_view(body.data(), body.size()));
  if (document.is_discarded()) {
    return absl::InvalidArgumentError("body: invalid JSON");
  }
  return ParseFaultDocument(document);
}

absl::Status FaultBook::Append(std::vector<FaultRule> rules) {
  absl::MutexLock lock(&mu_);
  if (rules_.size() + rules.size() > kMaxRules) {
    return absl::InvalidArgumentError(
        absl::StrCat("faults: at most ", kMaxRules, " rules may be held; DELETE first"));
  }
  for (FaultRule& rule : rules) rules_.push_back(std::move(rule));
  return absl::OkStatus();
}

void FaultBook::Clear() {
  absl::MutexLock lock(&mu_);
  rules_.clear();
}

std::optional<FaultRule> FaultBook::Take(Phase phase, absl::string_view remote_engine_id) {
  absl::MutexLock lock(&mu_);
  for (FaultRule& rule : rules_) {
    if (!rule.Matches(phase, remote_engine_id)) continue;
    if (rule.times > 0) --rule.times;
    ++rule.fired;
    return rule;
  }
  return std::nullopt;
}

nlohmann::json FaultBook::ToJson() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const FaultRule& rule : rules_) list.push_back(rule.ToJson());
  return {{"faults", std::move(list)}};
}

}  // namespace narwhal::sim
