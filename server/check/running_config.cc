#include "server/check/running_config.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "server/config/config_loader.h"
#include "server/grpc/grpc_request.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

constexpr int kMaxAnswerBytes = 4 << 20;
// Doubles hold every integer up to 2^53 exactly.
constexpr double kMaxExactInteger = 9007199254740992.0;

absl::StatusOr<json> ToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue: {
      const double v = value.number_value();
      if (!std::isfinite(v)) return absl::InvalidArgumentError("a number is not finite");
      if (v == std::trunc(v) && std::fabs(v) <= kMaxExactInteger) {
        return json(static_cast<int64_t>(v));
      }
      return json(v);
    }
    case google::protobuf::Value::kStringValue:
      return json(value.string_value());
    case google::protobuf::Value::kBoolValue:
      return json(value.bool_value());
    case google::protobuf::Value::kStructValue: {
      json out = json::object();
      for (const auto& [key, member] : value.struct_value().fields()) {
        absl::StatusOr<json> converted = ToJson(member);
        if (!converted.ok()) return converted.status();
        out[key] = std::move(*converted);
      }
      return out;
    }
    case google::protobuf::Value::kListValue: {
      json out = json::array();
      for (const google::protobuf::Value& entry : value.list_value().values()) {
        absl::StatusOr<json> converted = ToJson(entry);
        if (!converted.ok()) return converted.status();
        out.push_back(std::move(*converted));
      }
      return out;
    }
    default:
      return json(nullptr);
  }
}

}  // namespace

absl::StatusOr<std::string> EffectiveConfigText(const google::protobuf::Struct& config) {
  // Checked before the recursion below.
  if (!StructDepthWithin(config, engines::kMaxJsonDepth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("running config: the answer ", engines::DepthLimitText()));
  }
  google::protobuf::Value root;
  *root.mutable_struct_value() = config;
  absl::StatusOr<json> converted = ToJson(root);
  if (!converted.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("running config: ", converted.status().message()));
  }
  return converted->dump();
}

absl::StatusOr<router::Settings> FetchRunningSettings(const AdminTarget& target) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (target.tls_root_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = target.tls_root_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxAnswerBytes);
  const auto channel = grpc::CreateCustomChannel(target.address, credentials, arguments);
  const auto stub = narwhal::admin::v1::Admin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(target.timeout_s * 1000)));
  if (!target.token.empty()) context.AddMetadata("authorization", "Bearer " + target.token);
  google::protobuf::Struct answer;
  const grpc::Status status =
      stub->GetConfig(&context, narwhal::admin::v1::GetConfigRequest(), &answer);
  if (!status.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("admin ", target.address, ": GetConfig: ",
                     absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                     ": ", status.error_message()));
  }
  absl::StatusOr<std::string> text = EffectiveConfigText(answer);
  if (!text.ok()) return text.status();
  return ParseEffectiveConfig(*text);
}

}  // namespace narwhal::server
